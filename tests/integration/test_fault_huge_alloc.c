/* SPDX-License-Identifier: MIT */
/*
 * An ALLOC the pool cannot satisfy must cost the daemon nothing: it fails with
 * -ENOSPC "with nothing else changed" (kvcore.h), so a client choosing
 * len = 2^32 - 1 must not make the daemon reserve memory in proportion.
 * Checked through the daemon's address space (VmSize), since untouched
 * reservations do not show in its RSS.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static long vm_size_kib(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	return proc_field(path, "VmSize: %ld kB");
}

int main(void)
{
	static const char *const pool_kv[] = { "blocks=32", "block_size=4", "groups=full", NULL };
	static const uint32_t prompt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct daemon d;
	struct kvp_client *c;
	struct kvp_pool_stats st;
	uint64_t h;
	long vm0, vm1;

	watchdog_start("test_fault_huge_alloc", 30);

	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	create_pool_or_die(&d, "p", pool_kv);
	c = connect_or_die(&d, "p", "", false);
	CHECK_EQ(kvp_seq_open(c, prompt, 8, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, 8, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_commit(c, h, 8), 0);
	vm0 = vm_size_kib(d.pid);
	CHECK(vm0 > 0);

	/* 2^32 - 1 new tokens: ~2^29 blocks of a 31-block pool. */
	CHECK_EQ(kvp_alloc(c, h, UINT32_MAX, 0, false, NULL, NULL, 0), -ENOSPC);
	CHECK_EQ(kvp_pool_stats(c, &st), 0);
	CHECK_EQ(st.blocks_used, 2);
	CHECK_EQ(st.blocks_free, 29);
	vm1 = vm_size_kib(d.pid);
	fprintf(stderr, "daemon VmSize %ld KiB -> %ld KiB after one refused ALLOC\n", vm0, vm1);
	CHECK(vm1 - vm0 < 64 * 1024);

	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
