/* SPDX-License-Identifier: MIT */
/*
 * A cuda pool shared by two engine processes of one namespace through their
 * mappings (map_shared.h's scenario, on the GPU): A writes the KV of its
 * prompt through its mapping with copies of its own and commits; B hits A's
 * prefix, maps the pool, reads the same bytes at the blocks its table names,
 * and its ATTEND through the daemon (the GPU kernels) equals the double
 * reference over that KV; A is SIGKILLed in the middle of its ATTENDs: the
 * daemon serves on, exactly A's blocks come back, B is unaffected. Without a
 * GPU it exits 77 saying why (cudatest.h).
 */
#include "cudatest.h"
#include "map_shared.h"

int main(void)
{
	static const char *const pool_kv[] = {
		"blocks=24", "block_size=4", "groups=full swa:8", "kv_heads=2", "head_dim=8",
		"dtype=f16", "layers_per_group=2", "namespace=ns1", "backend=cuda", NULL };
	static struct daemon dmn;
	struct kvp_client *adm;

	watchdog_start("test_cuda_shared", 60);
	cuda_need_mapping("test_cuda_shared");
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	map_shared_init(&dmn, true);
	create_pool_or_die(&dmn, POOL, pool_kv);
	adm = connect_or_die(&dmn, POOL, NS, true);
	map_expect_stats(adm, NBLOCKS - 1, 0, 0);
	map_shared_prefix(adm);
	map_expect_stats(adm, NBLOCKS - 1, 0, 10);
	kvp_close(adm);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
