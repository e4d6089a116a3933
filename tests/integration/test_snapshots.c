/* SPDX-License-Identifier: MIT */
/*
 * Window snapshots through the real daemon (docs/design.md, cyclic groups):
 * a sequence that hits a snapshot at p reads and attends exactly as the
 * sequence that computed the prefix itself, in every pool dtype, for windows
 * of 1, bs-1, bs, bs+1 and 3*bs+5 tokens side by side in one pool with a full
 * group.
 *
 * a computes a 26-token prompt in steps of S = 4, committing each: its commit
 * of 24 (the prompt's end) makes the snapshots. b, the same 24 tokens and 8
 * more, hits at 24: its READ_KV of each window's positions returns a's bits,
 * the positions before the window are absent (-ENODATA), and then a and b go
 * on in lockstep to 32, writing the same KV: every ATTEND of b's queries,
 * every group and layer, equals a's bit for bit. A third sequence that hits
 * after a closed its blocks still finds the snapshots (cached blocks), and
 * every block is free at the end. KVPOOL_TEST_BACKEND=cuda makes the pools
 * cuda pools, their copies the plugin's (tests/gpu/run.sh; 77 without a GPU).
 */
#include <errno.h>
#include <string.h>

#include "cudatest.h"
#include "kvref.h"

#define BS 4
#define STEP 4
#define KV_HEADS 2
#define LAYERS 2
#define HD 16
#define Q_HEADS 4
#define NGROUPS 6
#define PROMPT 26
#define BOUNDARY 24
#define LEN 32
#define SEED 0x5eed

static const char GROUPS[] = "groups=full cyclic:1 cyclic:3 cyclic:4 cyclic:5 cyclic:17";
static const uint32_t window[NGROUPS] = { 0, 1, BS - 1, BS, BS + 1, 3 * BS + 5 };

static struct daemon dmn;
static const char *backend_key = "backend=host";

struct seq {
	uint64_t h;
	uint32_t computed;
};

static void kv_rows(uint32_t dtype, uint32_t g, uint32_t l, uint32_t first, uint32_t n, uint8_t *k,
		    uint8_t *v)
{
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t kh = 0; kh < KV_HEADS; kh++)
			for (uint32_t d = 0; d < HD; d++) {
				size_t i = ((size_t)t * KV_HEADS + kh) * HD + d;

				store_elem(k, dtype, i, val(SEED, WHICH_K, g, l, first + t, kh, d));
				store_elem(v, dtype, i, val(SEED, WHICH_V, g, l, first + t, kh, d));
			}
}

/* The next step of @s: its blocks, the same KV as any sequence of these tokens writes, no commit. */
static void write_step(struct kvp_client *c, uint32_t dtype, struct seq *s, uint32_t n)
{
	static uint8_t k[STEP * KV_HEADS * HD * 4], v[sizeof(k)];

	CHECK_EQ(kvp_alloc(c, s->h, n, 0, false, NULL, NULL, 0), 0);
	for (uint32_t g = 0; g < NGROUPS; g++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			kv_rows(dtype, g, l, s->computed, n, k, v);
			CHECK_EQ(kvp_write_kv(c, s->h, g, l, s->computed, n, k, v), 0);
		}
}

/* Every group and layer: the queries of [first, first + n) of @a and of @b, the same bits out. */
static void attend_same(struct kvp_client *c, uint32_t dtype, const struct seq *a, const struct seq *b,
			uint32_t first, uint32_t n)
{
	static uint8_t q[STEP * Q_HEADS * HD * 4], out[2][sizeof(q)];
	size_t bytes = (size_t)n * Q_HEADS * HD * dtype_size(dtype);

	for (uint32_t g = 0; g < NGROUPS; g++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			struct kvp_attend_req reqs[2] = {
				{ .handle = a->h, .first_pos = first, .count = n, .q = q, .out = out[0] },
				{ .handle = b->h, .first_pos = first, .count = n, .q = q, .out = out[1] },
			};

			for (uint32_t t = 0; t < n; t++)
				for (uint32_t qh = 0; qh < Q_HEADS; qh++)
					for (uint32_t d = 0; d < HD; d++)
						store_elem(q, dtype, ((size_t)t * Q_HEADS + qh) * HD + d,
							   val(SEED, WHICH_Q, g, l, first + t, qh, d));
			memset(out, 0xee, sizeof(out));
			CHECK_EQ(kvp_attend(c, g, l, Q_HEADS, 0.25f, 0.0f, false, reqs, 2), 0);
			if (memcmp(out[0], out[1], bytes)) {
				fprintf(stderr, "group %u (window %u) layer %u: ATTEND of positions %u..%u "
					"differs between the hit and the computed sequence\n",
					g, window[g], l, first, first + n - 1);
				exit(1);
			}
		}
}

/* b's window before the boundary is a's, bit for bit; what lies before it is absent. */
static void check_window(struct kvp_client *c, uint32_t dtype, const struct seq *a, const struct seq *b)
{
	static uint8_t k[2][LEN * KV_HEADS * HD * 4], v[2][sizeof(k[0])];

	for (uint32_t g = 1; g < NGROUPS; g++) {
		uint32_t keep = window[g] - 1 < BOUNDARY ? window[g] - 1 : BOUNDARY;
		uint32_t first = BOUNDARY - keep;
		size_t bytes = (size_t)keep * KV_HEADS * HD * dtype_size(dtype);

		for (uint32_t l = 0; l < LAYERS; l++) {
			if (keep) {
				memset(k, 0xa5, sizeof(k));
				memset(v, 0x5a, sizeof(v));
				CHECK_EQ(kvp_read_kv(c, a->h, g, l, first, keep, k[0], v[0]), 0);
				CHECK_EQ(kvp_read_kv(c, b->h, g, l, first, keep, k[1], v[1]), 0);
				CHECK(memcmp(k[0], k[1], bytes) == 0);
				CHECK(memcmp(v[0], v[1], bytes) == 0);
			}
			if (first)
				CHECK_EQ(kvp_read_kv(c, b->h, g, l, first - 1, 1, k[1], v[1]), -ENODATA);
		}
	}
}

/* The pool's SNAPSHOTS row on the stats page, as kvctl stats shows it. */
static void check_counters(const char *pool, uint32_t held, uint64_t made, uint64_t hit)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .timeout_ms = 10000,
				      .stats_page = true };
	const struct kvp_stats_snapshots *n = NULL;
	struct kvp_stats_view v = { 0 };
	struct kvp_client *c;

	CHECK_EQ(kvp_connect(&o, &c), 0);
	CHECK_EQ(kvp_stats_view_take(c, &v), 0);
	KVP_STATS_FOR_EACH_POOL(&v, p)
		if (!strcmp(p->name, pool))
			n = kvp_stats_snapshots_of(&v, p);
	CHECK(n != NULL);
	CHECK_EQ(n->held, held);
	CHECK_EQ(n->made, made);
	CHECK_EQ(n->hit, hit);
	CHECK_EQ(n->evicted, 0);
	CHECK_EQ(n->skipped, 0);
	kvp_stats_view_release(&v);
	kvp_close(c);
}

static void run_pool(const char *name, uint32_t dtype)
{
	const char *kv[] = { "blocks=256", "block_size=4", GROUPS, "kv_heads=2", "head_dim=16",
			     dtype == KVP_DTYPE_F32 ? "dtype=f32" : dtype == KVP_DTYPE_F16 ? "dtype=f16"
											  : "dtype=bf16",
			     "layers_per_group=2", "max_step_tokens=4", backend_key, NULL };
	struct kvp_client *c;
	struct kvp_pool_stats st;
	struct seq a = { 0 }, b = { 0 }, d = { 0 };
	uint32_t tokens[LEN], hit = 0;

	create_pool_or_die(&dmn, name, kv);
	c = connect_or_die(&dmn, name, "", false);
	for (uint32_t t = 0; t < LEN; t++)
		tokens[t] = 7 * t + 3;
	CHECK_EQ(kvp_seq_open(c, tokens, PROMPT, NULL, 0, -1, &a.h), 0);
	while (a.computed < BOUNDARY) {
		write_step(c, dtype, &a, STEP);
		a.computed += STEP;
		CHECK_EQ(kvp_commit(c, a.h, a.computed), 0);
	}
	/*
	 * Its COMMIT of 24 completed before the copies: this LOOKUP on a waits
	 * for them, and sees the snapshot. At 24, windows 1, 3, 4, 5, 17 keep 0,
	 * 2, 3, 4, 16 tokens: 0+1+1+1+4 = 7 blocks.
	 */
	CHECK_EQ(kvp_lookup(c, a.h, NULL, 0), BOUNDARY);
	check_counters(name, 7, 7, 0);
	CHECK_EQ(kvp_seq_open(c, tokens, LEN, NULL, 0, -1, &b.h), 0);
	CHECK_EQ(kvp_alloc(c, b.h, STEP, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, BOUNDARY);
	check_counters(name, 7, 7, 7);
	b.computed = BOUNDARY;
	check_window(c, dtype, &a, &b);
	/* a's two more prompt tokens and the rest, as b has them: the same KV from here on. */
	CHECK_EQ(kvp_append(c, a.h, tokens + PROMPT, LEN - PROMPT), 0);
	while (a.computed < LEN) {
		write_step(c, dtype, &a, STEP);
		if (b.computed > BOUNDARY)
			CHECK_EQ(kvp_alloc(c, b.h, STEP, 0, false, NULL, NULL, 0), 0);
		for (uint32_t g = 0; g < NGROUPS; g++)
			for (uint32_t l = 0; l < LAYERS; l++) {
				static uint8_t k[STEP * KV_HEADS * HD * 4], v[sizeof(k)];

				kv_rows(dtype, g, l, b.computed, STEP, k, v);
				CHECK_EQ(kvp_write_kv(c, b.h, g, l, b.computed, STEP, k, v), 0);
			}
		attend_same(c, dtype, &a, &b, a.computed, STEP);
		a.computed += STEP;
		b.computed += STEP;
		CHECK_EQ(kvp_commit(c, a.h, a.computed), 0);
		CHECK_EQ(kvp_commit(c, b.h, b.computed), 0);
	}
	CHECK_EQ(kvp_seq_close(c, a.h), 0);
	CHECK_EQ(kvp_seq_close(c, b.h), 0);
	/* With no sequence left, the snapshots wait in the free queue, still hittable. */
	CHECK_EQ(kvp_seq_open(c, tokens, BOUNDARY + 1, NULL, 0, -1, &d.h), 0);
	CHECK_EQ(kvp_alloc(c, d.h, 1, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, BOUNDARY);
	CHECK_EQ(kvp_seq_close(c, d.h), 0);
	/* b's prompt ends at 32: its own 7; d's hit copied 7 more. */
	check_counters(name, 14, 14, 14);
	kvp_close(c);
	check_pool_or_die(&dmn, name, &st);
	CHECK_EQ(st.blocks_used, 0);
	CHECK_EQ(st.blocks_free, 255);
	fprintf(stderr, "pool %s (%s): hit at %u, windows 1..%u exact; %u blocks cached after\n",
		name, backend_key, BOUNDARY, 3 * BS + 5, st.blocks_cached);
}

int main(void)
{
	const char *backend = getenv("KVPOOL_TEST_BACKEND");

	if (backend && !strcmp(backend, "cuda")) {
		cuda_need_gpu("test_snapshots");
		backend_key = "backend=cuda";
	}
	watchdog_start("test_snapshots", 60);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	run_pool("f32", KVP_DTYPE_F32);
	run_pool("f16", KVP_DTYPE_F16);
	run_pool("bf16", KVP_DTYPE_BF16);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
