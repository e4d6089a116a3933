/* SPDX-License-Identifier: MIT */
/*
 * Split-K ATTEND: one sequence with a long context (9001 tokens), on a daemon
 * with 4 worker threads, so an ATTEND of one sequence has fewer tasks than the
 * threads want and the daemon cuts each query's keys into parts (2048 keys or
 * more each), computes them on several threads and merges them (kvdata.c,
 * backend_host.c). Full, sliding-window and R-SWA groups (the R-SWA query sees
 * a prefix and a window: two ranges, cut across), f32/f16/bf16 pools (head_dim
 * 24: the portable kernel; 32 and 64: the SIMD ones), GQA 1, 2 and 4, queries
 * in f32 and in the pool dtype, softcap on and off; a decode query, and three
 * queries in one entry. Every output must match the double-precision reference,
 * and the same request twice must give the same bytes. The same queries as one
 * of 8 entries (enough tasks: not split) must match the reference too. The
 * matrix runs on the best kernel level, then with avx2 and c forced.
 *
 * Tolerances (outputs are convex combinations of V values in [-1, 1]; 9001 keys
 * summed in f32):
 *   f32 output:      |out - ref| <= TOL_SPLIT = 2e-5
 *   f16/bf16 output: |out - ref| <= TOL_SPLIT + 1 ulp(ref) in the output dtype
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvref.h"

#define TOL_SPLIT 2e-5
#define LEN 9001
#define PREFIX 100
#define BS 16
#define MAX_KV 2
#define MAX_HD 64
#define MAX_QH 4
#define QUERIES 3
#define WRITE_CHUNK 512
#define NGROUPS 3
#define REPEAT 8 /* entries of the unsplit request */

static const uint32_t group_kind[NGROUPS] = { KVP_KIND_FULL, KVP_KIND_SWA, KVP_KIND_RSWA };
static const uint32_t group_param[NGROUPS] = { 0, 5000, 4600 };

struct pool_def {
	const char *name, *dtype_word, *hd_word, *kv_word;
	uint32_t dtype, head_dim, kv_heads, q_heads;
	float scale;
};

static const struct pool_def pools[] = {
	{ "f32c", "dtype=f32", "head_dim=24", "kv_heads=1", KVP_DTYPE_F32, 24, 1, 1, 0.4f },
	{ "f16", "dtype=f16", "head_dim=64", "kv_heads=1", KVP_DTYPE_F16, 64, 1, 4, 0.3f },
	{ "bf16", "dtype=bf16", "head_dim=32", "kv_heads=2", KVP_DTYPE_BF16, 32, 2, 4, 0.5f },
};

/* K and V as stored, decoded: [group][pos][kv head][K, V][dim]. */
static double kv_table[NGROUPS][LEN][MAX_KV][2][MAX_HD];

static struct daemon dmn;
static uint64_t n_values;
static double worst[3];

static void create_pool(const struct pool_def *p)
{
	const char *kv[] = { "blocks=2400", "block_size=16", "groups=full swa:5000 rswa:4600",
			     p->kv_word, p->hd_word, p->dtype_word, "layers_per_group=1", NULL };

	create_pool_or_die(&dmn, p->name, kv);
}

/* KV of positions [lo, hi) in every group, in chunks. */
static void write_range(struct kvp_client *c, const struct pool_def *p, uint64_t h, uint64_t seed,
			uint32_t lo, uint32_t hi)
{
	static uint8_t k[WRITE_CHUNK * MAX_KV * MAX_HD * 4], v[sizeof(k)];
	uint32_t hd = p->head_dim, nkv = p->kv_heads;

	for (uint32_t g = 0; g < NGROUPS; g++) {
		for (uint32_t first = lo; first < hi; first += WRITE_CHUNK) {
			uint32_t n = hi - first < WRITE_CHUNK ? hi - first : WRITE_CHUNK;

			for (uint32_t t = 0; t < n; t++)
				for (uint32_t kh = 0; kh < nkv; kh++)
					for (uint32_t d = 0; d < hd; d++) {
						size_t i = ((size_t)t * nkv + kh) * hd + d;
						uint32_t pos = first + t;
						float kx = val(seed, WHICH_K, g, 0, pos, kh, d);
						float vx = val(seed, WHICH_V, g, 0, pos, kh, d);

						store_elem(k, p->dtype, i, kx);
						store_elem(v, p->dtype, i, vx);
						kv_table[g][pos][kh][WHICH_K][d] = as_stored(p->dtype, kx);
						kv_table[g][pos][kh][WHICH_V][d] = as_stored(p->dtype, vx);
					}
			CHECK_EQ(kvp_write_kv(c, h, g, 0, first, n, k, v), 0);
		}
	}
}

/*
 * The whole context in every group; all but the last QUERIES positions committed,
 * those written after the commit (so readable): the windows then keep what the
 * oldest of the last QUERIES queries needs.
 */
static uint64_t fill(struct kvp_client *c, const struct pool_def *p, uint64_t seed)
{
	static uint32_t tokens[LEN];
	uint64_t h;

	for (uint32_t t = 0; t < LEN; t++)
		tokens[t] = (uint32_t)(seed % 1000) * LEN + t + 1;
	CHECK_EQ(kvp_seq_open(c, tokens, LEN, NULL, 0, PREFIX, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, LEN, 0, false, NULL, NULL, 0), 0);
	write_range(c, p, h, seed, 0, LEN - QUERIES);
	CHECK_EQ(kvp_commit(c, h, LEN - QUERIES), 0);
	write_range(c, p, h, seed, LEN - QUERIES, LEN);
	return h;
}

/* softmax(scale q.K^T, capped) V over the positions the group's mask lets query @i see. */
static void reference(const struct pool_def *p, uint32_t g, uint32_t i, uint32_t kh, const double *q,
		      float softcap, double *out)
{
	const struct mask m = { group_kind[g], group_param[g], PREFIX };
	const struct ref_kv kv = { &kv_table[g][0][kh][WHICH_K][0], MAX_KV * 2 * MAX_HD, MAX_HD };

	ref_attend(&m, i, q, p->head_dim, (double)p->scale, softcap, &kv, out);
}

/* Each of the @nouts outputs of the queries in qbuf against the reference. */
static void check_out(const struct pool_def *p, uint32_t g, uint32_t first, uint32_t count,
		      const uint8_t *qbuf, const uint8_t *const *outs, uint32_t nouts, uint32_t qdt,
		      float softcap, const char *what)
{
	uint32_t hd = p->head_dim, qh_n = p->q_heads, ratio = p->q_heads / p->kv_heads;

	for (uint32_t t = 0; t < count; t++) {
		for (uint32_t qh = 0; qh < qh_n; qh++) {
			double q[MAX_HD], ref[MAX_HD];
			size_t row = ((size_t)t * qh_n + qh) * hd;

			for (uint32_t d = 0; d < hd; d++)
				q[d] = load_elem(qbuf, qdt, row + d);
			reference(p, g, first + t, qh / ratio, q, softcap, ref);
			for (uint32_t k = 0; k < nouts; k++) {
				for (uint32_t d = 0; d < hd; d++) {
					double o = load_elem(outs[k], qdt, row + d), err = o - ref[d];
					double tol = TOL_SPLIT + (qdt == KVP_DTYPE_F32 ? 0 : ulp_of(qdt, ref[d]));

					err = err < 0 ? -err : err;
					if (!(err <= tol)) {
						fprintf(stderr,
							"%s: pool %s group %u (kind %u param %u) pos %u q head %u "
							"of %u dim %u q dtype %u softcap %g: out %.9g, reference "
							"%.9g, |diff| %.3g > tolerance %.3g\n",
							what, p->name, g, group_kind[g], group_param[g], first + t,
							qh, qh_n, d, qdt, (double)softcap, o, ref[d], err, tol);
						exit(1);
					}
					if (err / tol > worst[qdt])
						worst[qdt] = err / tol;
					n_values++;
				}
			}
		}
	}
}

/*
 * The queries at [first, first + count) of group g: alone (split), again (the same
 * bytes), and as each of REPEAT entries of one request (not split).
 */
static void attend_case(struct kvp_client *c, const struct pool_def *p, uint64_t h, uint64_t seed,
			uint32_t g, uint32_t first, uint32_t count, bool q_f32, float softcap)
{
	static uint8_t qbuf[QUERIES * MAX_QH * MAX_HD * 4], out1[sizeof(qbuf)], out2[sizeof(qbuf)];
	static uint8_t outs[REPEAT][sizeof(qbuf)];
	uint32_t qdt = q_f32 ? KVP_DTYPE_F32 : p->dtype, hd = p->head_dim, qh_n = p->q_heads;
	size_t bytes = (size_t)count * qh_n * hd * dtype_size(qdt);
	struct kvp_attend_req req = { .handle = h, .first_pos = first, .count = count, .q = qbuf };
	struct kvp_attend_req reqs[REPEAT];
	const uint8_t *optr[REPEAT];

	for (uint32_t t = 0; t < count; t++)
		for (uint32_t qh = 0; qh < qh_n; qh++)
			for (uint32_t d = 0; d < hd; d++)
				store_elem(qbuf, qdt, ((size_t)t * qh_n + qh) * hd + d,
					   val(seed, WHICH_Q, g, 0, first + t, qh, d));

	memset(out1, 0xee, sizeof(out1));
	req.out = out1;
	CHECK_EQ(kvp_attend(c, g, 0, qh_n, p->scale, softcap, q_f32, &req, 1), 0);
	check_out(p, g, first, count, qbuf, (const uint8_t *const[]){ out1 }, 1, qdt, softcap, "split");
	memset(out2, 0x11, sizeof(out2));
	req.out = out2;
	CHECK_EQ(kvp_attend(c, g, 0, qh_n, p->scale, softcap, q_f32, &req, 1), 0);
	CHECK(memcmp(out1, out2, bytes) == 0);

	for (uint32_t r = 0; r < REPEAT; r++) {
		reqs[r] = req;
		reqs[r].out = outs[r];
		memset(outs[r], 0xee, bytes);
	}
	CHECK_EQ(kvp_attend(c, g, 0, qh_n, p->scale, softcap, q_f32, reqs, REPEAT), 0);
	for (uint32_t r = 0; r < REPEAT; r++) {
		optr[r] = outs[r];
		CHECK(memcmp(outs[0], outs[r], bytes) == 0);
	}
	check_out(p, g, first, count, qbuf, optr, REPEAT, qdt, softcap, "unsplit");
}

static void run_pool(const struct pool_def *p, uint64_t seed)
{
	struct kvp_client *c = connect_or_die(&dmn, p->name, "", false);
	struct kvp_pool_stats st;
	uint64_t h = fill(c, p, seed);
	uint32_t combo = 0;

	for (uint32_t g = 0; g < NGROUPS; g++) {
		for (uint32_t n = 1; n <= QUERIES; n += QUERIES - 1) {
			for (uint32_t k = 0; k < 2; k++, combo++)
				attend_case(c, p, h, seed, g, LEN - n, n, combo % 2, (combo / 2) % 2 ? 30.0f : 0);
		}
	}
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
	check_pool_or_die(&dmn, p->name, &st);
	CHECK_EQ(st.blocks_used, 0);
}

int main(void)
{
	/* NULL: the best level the CPU has; then lower levels forced (or the best, if absent). */
	static const char *const isas[] = { NULL, "avx2", "c" };
	static const char *const args[] = { "--threads", "4", NULL };

	watchdog_start("test_kv_split", 120);
	self_check();

	for (uint32_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		if (isas[i])
			CHECK_EQ(setenv("KVPOOL_ATTN_ISA", isas[i], 1), 0);
		else
			CHECK_EQ(unsetenv("KVPOOL_ATTN_ISA"), 0);
		CHECK_EQ(daemon_start(&dmn, args), 0);
		watchdog_watch(&dmn);
		for (uint32_t pi = 0; pi < sizeof(pools) / sizeof(pools[0]); pi++)
			create_pool(&pools[pi]);
		for (uint32_t pi = 0; pi < sizeof(pools) / sizeof(pools[0]); pi++)
			if (!isas[i] || pools[pi].head_dim % 16 == 0)
				run_pool(&pools[pi], 1000 * i + pi);
		watchdog_watch(NULL);
		CHECK_EQ(daemon_stop(&dmn), 0);
	}
	printf("test_kv_split: %llu values checked; worst |error| / tolerance: f32 %.3f, f16 %.3f, "
	       "bf16 %.3f\n", (unsigned long long)n_values, worst[KVP_DTYPE_F32],
	       worst[KVP_DTYPE_F16], worst[KVP_DTYPE_BF16]);
	return 0;
}
