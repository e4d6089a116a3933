/* SPDX-License-Identifier: MIT */
/*
 * Long requests are cut into tasks of bounded size, and the cut changes no bit.
 * A WRITE_KV of 20000 tokens (f32, 2 kv heads of 64) is three chunks of 8192
 * tokens a kv head (4 MiB of K and V a task): READ_KV gives it back bit for
 * bit, also read in one call. A prefill ATTEND of 1024 queries reads 524,800
 * key positions a kv head (two query heads each), cut into 5 tasks of queries: every query's output
 * matches the double-precision reference, and equals bit for bit the same
 * query asked alone (one task).
 */
#include <errno.h>
#include <string.h>

#include "kvref.h"

#define TOL 2e-5
#define KV_HEADS 2
#define HD 64
#define Q_HEADS 4
#define TOKENS 20000
#define PREFILL 1024
#define SAMPLE 64 /* every SAMPLE-th query is checked alone too */

static struct daemon dmn;
static float kbuf[TOKENS][KV_HEADS][HD], vbuf[TOKENS][KV_HEADS][HD];
static float kback[TOKENS][KV_HEADS][HD], vback[TOKENS][KV_HEADS][HD];
static double ktab[TOKENS][KV_HEADS][2][HD];

static void write_and_read(struct kvp_client *c, uint64_t h)
{
	uint64_t bytes;
	void *arena;

	for (uint32_t t = 0; t < TOKENS; t++)
		for (uint32_t kh = 0; kh < KV_HEADS; kh++)
			for (uint32_t d = 0; d < HD; d++) {
				kbuf[t][kh][d] = val(7, WHICH_K, 0, 0, t, kh, d);
				vbuf[t][kh][d] = val(7, WHICH_V, 0, 0, t, kh, d);
				ktab[t][kh][WHICH_K][d] = kbuf[t][kh][d];
				ktab[t][kh][WHICH_V][d] = vbuf[t][kh][d];
			}
	CHECK_EQ(kvp_write_kv(c, h, 0, 0, 0, TOKENS, kbuf, vbuf), 0);
	/* The read lands where the write was staged: clear it, or a token it skipped would pass. */
	arena = kvp_arena(c, &bytes);
	memset(arena, 0xee, bytes);
	memset(kback, 0xee, sizeof(kback));
	memset(vback, 0xee, sizeof(vback));
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, 0, TOKENS, kback, vback), 0);
	CHECK(memcmp(kbuf, kback, sizeof(kbuf)) == 0);
	CHECK(memcmp(vbuf, vback, sizeof(vbuf)) == 0);
}

static void prefill_attend(struct kvp_client *c, uint64_t h)
{
	static float q[PREFILL][Q_HEADS][HD], out[PREFILL][Q_HEADS][HD], alone[Q_HEADS][HD];
	const struct mask m = { KVP_KIND_FULL, 0, 0 };
	const struct ref_kv kv = { &ktab[0][0][WHICH_K][0], KV_HEADS * 2 * HD, HD };
	struct kvp_attend_req req = { .handle = h, .first_pos = 0, .count = PREFILL, .q = q,
				      .out = out };

	for (uint32_t i = 0; i < PREFILL; i++)
		for (uint32_t qh = 0; qh < Q_HEADS; qh++)
			for (uint32_t d = 0; d < HD; d++)
				q[i][qh][d] = val(7, WHICH_Q, 0, 0, i, qh, d);
	memset(out, 0xee, sizeof(out));
	CHECK_EQ(kvp_attend(c, 0, 0, Q_HEADS, 0.125f, 0, true, &req, 1), 0);
	for (uint32_t i = 0; i < PREFILL; i++) {
		for (uint32_t qh = 0; qh < Q_HEADS; qh++) {
			double qd[HD], ref[HD];

			for (uint32_t d = 0; d < HD; d++)
				qd[d] = q[i][qh][d];
			ref_attend(&m, i, qd, HD, 0.125, 0, &(struct ref_kv){
				kv.k0 + (size_t)(qh / (Q_HEADS / KV_HEADS)) * 2 * HD, kv.pos_stride,
				kv.v_offset }, ref);
			for (uint32_t d = 0; d < HD; d++) {
				double err = out[i][qh][d] - ref[d];

				if (!(err <= TOL && err >= -TOL)) {
					fprintf(stderr, "query %u head %u dim %u: %.9g, reference %.9g\n",
						i, qh, d, (double)out[i][qh][d], ref[d]);
					exit(1);
				}
			}
		}
		if (i % SAMPLE)
			continue;
		/* The same query alone: one task reads its keys; the bytes must not move. */
		req = (struct kvp_attend_req){ .handle = h, .first_pos = i, .count = 1, .q = q[i],
					       .out = alone };
		CHECK_EQ(kvp_attend(c, 0, 0, Q_HEADS, 0.125f, 0, true, &req, 1), 0);
		CHECK(memcmp(alone, out[i], sizeof(alone)) == 0);
	}
}

int main(void)
{
	const char *kv[] = { "blocks=1300", "block_size=16", "groups=full", "kv_heads=2",
			     "head_dim=64", "dtype=f32", "layers_per_group=1", NULL };
	struct kvp_connect_opts o = { .pool = "t", .arena_bytes = 64u << 20 };
	static uint32_t tokens[TOKENS];
	struct kvp_client *c;
	uint64_t h;

	watchdog_start("test_kv_tasks", 120);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, "t", kv);
	o.socket_path = dmn.socket;
	CHECK_EQ(kvp_connect(&o, &c), 0);
	for (uint32_t t = 0; t < TOKENS; t++)
		tokens[t] = t + 1;
	CHECK_EQ(kvp_seq_open(c, tokens, TOKENS, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, TOKENS, 0, false, NULL, NULL, 0), 0);
	write_and_read(c, h);
	prefill_attend(c, h);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
