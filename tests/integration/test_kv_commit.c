/* SPDX-License-Identifier: MIT */
/*
 * COMMIT in a pool that holds KV, and what may be read around it:
 *   - COMMIT n needs KV written at [computed, n) in every layer of every group,
 *     else -ENODATA and nothing changes; an n the core refuses stays -EINVAL;
 *   - so a block handed over from another client is never readable before its
 *     new owner writes it (the old owner's KV never leaks);
 *   - a WRITE_KV still in flight does not count: a COMMIT taken in the same
 *     batch is refused, and succeeds once the write completed;
 *   - KV written past the committed count stops being readable at the next
 *     COMMIT (rejected draft tokens), until written again;
 *   - a pool with KV refuses publish=alloc; ATTEND refuses a non-finite scale
 *     or soft-cap, and takes any GQA ratio (32 query heads on one kv head).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define HD 8 /* head_dim; one kv head, f32 */

static struct daemon dmn;

static void fill(float *x, uint32_t n, float v)
{
	for (uint32_t i = 0; i < n; i++)
		x[i] = v + (float)i / 64;
}

/* K = V = @v-based values at positions [first, first + count) of (group, layer). */
static int write_kv(struct kvp_client *c, uint64_t h, uint32_t g, uint32_t l, uint32_t first,
		    uint32_t count, float v)
{
	float k[8 * HD], vv[8 * HD];

	CHECK(count <= 8);
	fill(k, count * HD, v);
	fill(vv, count * HD, v);
	return kvp_write_kv(c, h, g, l, first, count, k, vv);
}

static uint64_t open_seq(struct kvp_client *c, uint32_t first_token, uint32_t n)
{
	uint32_t tokens[16];
	uint64_t h;

	CHECK(n <= 16);
	for (uint32_t i = 0; i < n; i++)
		tokens[i] = first_token + i;
	CHECK_EQ(kvp_seq_open(c, tokens, n, NULL, 0, -1, &h), 0);
	return h;
}

/* A client's KV must not be readable by the next owner of its block. */
static void test_no_leak_across_owners(void)
{
	struct kvp_client *a = connect_or_die(&dmn, "one", "", false);
	struct kvp_client *b = connect_or_die(&dmn, "one", "", false);
	float k[4 * HD], v[4 * HD];
	uint64_t ha = open_seq(a, 1, 4), hb;

	CHECK_EQ(kvp_alloc(a, ha, 4, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(write_kv(a, ha, 0, 0, 0, 4, 42.0f), 0);
	CHECK_EQ(kvp_commit(a, ha, 4), 0);
	CHECK_EQ(kvp_seq_close(a, ha), 0);

	/* Both blocks of the pool: A's cached one is taken too (a reuse). */
	hb = open_seq(b, 100, 8);
	CHECK_EQ(kvp_alloc(b, hb, 8, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_commit(b, hb, 8), -ENODATA);
	CHECK_EQ(kvp_commit(b, hb, 4), -ENODATA);
	CHECK_EQ(kvp_read_kv(b, hb, 0, 0, 0, 4, k, v), -ENODATA);
	CHECK_EQ(kvp_read_kv(b, hb, 0, 0, 4, 4, k, v), -ENODATA);
	/* The core's own refusals keep their errno: past the allocated slots, below computed. */
	CHECK_EQ(kvp_commit(b, hb, 9), -EINVAL);

	CHECK_EQ(write_kv(b, hb, 0, 0, 0, 8, 7.0f), 0);
	CHECK_EQ(kvp_commit(b, hb, 8), 0);
	CHECK_EQ(kvp_commit(b, hb, 7), -EINVAL);
	CHECK_EQ(kvp_read_kv(b, hb, 0, 0, 4, 4, k, v), 0);
	CHECK(k[0] == 7.0f + 32.0f / 64 && v[4 * HD - 1] == 7.0f + (8 * HD - 1) / 64.0f);
	CHECK_EQ(kvp_seq_close(b, hb), 0);
	kvp_close(a);
	kvp_close(b);
}

/* Every layer of every group: one missing (group, layer) is enough to refuse. */
static void test_every_layer_of_every_group(void)
{
	struct kvp_client *c = connect_or_die(&dmn, "two", "", false);
	uint64_t h = open_seq(c, 1, 8);

	CHECK_EQ(kvp_alloc(c, h, 8, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(write_kv(c, h, 0, 0, 0, 8, 1.0f), 0);
	CHECK_EQ(write_kv(c, h, 0, 1, 0, 8, 2.0f), 0);
	CHECK_EQ(write_kv(c, h, 1, 0, 0, 8, 3.0f), 0);
	CHECK_EQ(kvp_commit(c, h, 4), -ENODATA); /* group 1, layer 1 is missing */
	CHECK_EQ(write_kv(c, h, 1, 1, 0, 4, 4.0f), 0);
	CHECK_EQ(kvp_commit(c, h, 4), 0);
	CHECK_EQ(kvp_commit(c, h, 8), -ENODATA); /* group 1, layer 1: 4..7 */
	CHECK_EQ(write_kv(c, h, 1, 1, 4, 4, 4.0f), 0);
	/* The other layers' 4..7 were written before the commit of 4: not since it. */
	CHECK_EQ(kvp_commit(c, h, 8), -ENODATA);
	for (uint32_t g = 0; g < 2; g++)
		for (uint32_t l = 0; l < 2; l++)
			if (g != 1 || l != 1)
				CHECK_EQ(write_kv(c, h, g, l, 4, 4, 5.0f), 0);
	CHECK_EQ(kvp_commit(c, h, 8), 0);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
}

/* WRITE_KV and COMMIT in one submission: the write is still on a worker when COMMIT is taken. */
static void test_commit_past_inflight_write(void)
{
	struct kvp_client *c = connect_or_die(&dmn, "one", "", false);
	uint64_t h = open_seq(c, 1, 4), arena_bytes;
	float *arena = kvp_arena(c, &arena_bytes);
	struct kvp_sqe *w, *m;
	int res[2] = { 1, 1 };

	CHECK_EQ(kvp_alloc(c, h, 4, 0, false, NULL, NULL, 0), 0);
	fill(arena, 2 * 4 * HD, 3.0f); /* K then V of 4 tokens */
	w = kvp_get_sqe(c);
	m = kvp_get_sqe(c);
	CHECK(w && m);
	*w = (struct kvp_sqe){ .opcode = KVP_OP_WRITE_KV, .user_data = 1, .handle = h, .len = 4,
			       .arg1 = 0, .arg2 = KVP_KV_SEL(0, 0), .addr = 0 };
	*m = (struct kvp_sqe){ .opcode = KVP_OP_COMMIT, .user_data = 2, .handle = h, .len = 4 };
	CHECK_EQ(kvp_submit(c), 2);
	for (int i = 0; i < 2; i++) {
		struct kvp_cqe *cqe;

		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		CHECK(cqe->user_data == 1 || cqe->user_data == 2);
		res[cqe->user_data - 1] = cqe->res;
		kvp_cqe_seen(c, cqe);
	}
	CHECK_EQ(res[0], 0);
	CHECK_EQ(res[1], -ENODATA);
	CHECK_EQ(kvp_commit(c, h, 4), 0); /* the write has completed now */
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
}

/* Draft KV past the committed count: readable until the next COMMIT, not after. */
static void test_speculative_kv_expires(void)
{
	struct kvp_client *c = connect_or_die(&dmn, "one", "", false);
	uint64_t h = open_seq(c, 1, 8);
	float k[8 * HD], v[8 * HD];

	CHECK_EQ(kvp_alloc(c, h, 8, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(write_kv(c, h, 0, 0, 0, 8, 1.0f), 0);
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, 5, 3, k, v), 0);
	CHECK_EQ(kvp_commit(c, h, 5), 0);
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, 0, 5, k, v), 0);
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, 5, 1, k, v), -ENODATA);
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, 7, 1, k, v), -ENODATA);
	CHECK_EQ(write_kv(c, h, 0, 0, 5, 3, 9.0f), 0);
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, 5, 3, k, v), 0);
	CHECK(k[0] == 9.0f && v[3 * HD - 1] == 9.0f + (3 * HD - 1) / 64.0f);
	CHECK_EQ(kvp_commit(c, h, 8), 0);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
}

static void test_publish_alloc_refused(void)
{
	struct kvp_client *adm = connect_or_die(&dmn, "", "", true);
	struct kvp_pool_params p;

	kvp_pool_params_init(&p, "palloc");
	CHECK_EQ(kvp_pool_params_set(&p, "blocks", "8"), 0);
	CHECK_EQ(kvp_pool_params_set(&p, "block_size", "4"), 0);
	CHECK_EQ(kvp_pool_params_set(&p, "groups", "full"), 0);
	CHECK_EQ(kvp_pool_params_set(&p, "publish", "alloc"), 0);
	CHECK_EQ(kvp_pool_create(adm, &p), 0); /* no KV: allowed */
	CHECK_EQ(kvp_pool_destroy(adm, "palloc"), 0);
	CHECK_EQ(kvp_pool_params_set(&p, "kv_heads", "1"), 0);
	CHECK_EQ(kvp_pool_params_set(&p, "head_dim", "8"), 0);
	CHECK_EQ(kvp_pool_params_set(&p, "layers_per_group", "1"), 0);
	CHECK_EQ(kvp_pool_create(adm, &p), -EINVAL);
	kvp_close(adm);
}

static void test_attend_params(void)
{
	struct kvp_client *c = connect_or_die(&dmn, "one", "", false);
	uint64_t h = open_seq(c, 1, 4);
	float q[32 * HD], out[32 * HD];
	struct kvp_attend_req r = { .handle = h, .first_pos = 0, .count = 1, .q = q, .out = out };

	CHECK_EQ(kvp_alloc(c, h, 4, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(write_kv(c, h, 0, 0, 0, 4, 2.0f), 0);
	fill(q, 32 * HD, -1.0f);
	CHECK_EQ(kvp_attend(c, 0, 0, 1, NAN, 0, true, &r, 1), -EINVAL);
	CHECK_EQ(kvp_attend(c, 0, 0, 1, INFINITY, 0, true, &r, 1), -EINVAL);
	CHECK_EQ(kvp_attend(c, 0, 0, 1, 0.5f, INFINITY, true, &r, 1), -EINVAL);
	CHECK_EQ(kvp_attend(c, 0, 0, 1, 0.5f, NAN, true, &r, 1), -EINVAL);
	CHECK_EQ(kvp_attend(c, 0, 0, 1, 0.5f, -1.0f, true, &r, 1), -EINVAL);
	/* Query 0 sees key 0 alone: every one of 32 heads on the one kv head returns V[0]. */
	CHECK_EQ(kvp_attend(c, 0, 0, 32, -0.25f, 3.0f, true, &r, 1), 0);
	for (uint32_t hq = 0; hq < 32; hq++)
		for (uint32_t d = 0; d < HD; d++)
			CHECK(out[hq * HD + d] == 2.0f + (float)d / 64);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
}

int main(void)
{
	static const char *const one[] = { "blocks=3", "block_size=4", "groups=full", "kv_heads=1",
					   "head_dim=8", "dtype=f32", "layers_per_group=1", NULL };
	static const char *const two[] = { "blocks=32", "block_size=4", "groups=full swa:4",
					   "kv_heads=1", "head_dim=8", "dtype=f32",
					   "layers_per_group=2", NULL };
	struct kvp_pool_stats st;

	watchdog_start("test_kv_commit", 30);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, "one", one);
	create_pool_or_die(&dmn, "two", two);
	test_no_leak_across_owners();
	test_every_layer_of_every_group();
	test_commit_past_inflight_write();
	test_speculative_kv_expires();
	test_publish_alloc_refused();
	test_attend_params();
	check_pool_or_die(&dmn, "one", &st);
	CHECK_EQ(st.blocks_used, 0);
	check_pool_or_die(&dmn, "two", &st);
	CHECK_EQ(st.blocks_used, 0);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
