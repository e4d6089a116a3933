/* SPDX-License-Identifier: MIT */
/*
 * ATTEND through the real daemon against a double-precision reference, for
 * every mask kind (full, swa W, rswa W with the default prefix and explicit
 * ones, chunked C, cyclic W with the sequence several times longer than its
 * ring), every pool dtype (f32, f16, bf16; head_dim a multiple of 16 for the
 * SIMD kernels and not, for the portable one), queries in f32 and in the pool
 * dtype, GQA ratios 1, 2 and 4, softcap on and off, and every query position
 * (so every block boundary) of five sequences advancing in uneven steps. The
 * matrix runs on the best kernel level the CPU has, then again (the pools the
 * SIMD kernels take) with each lower level forced by KVPOOL_ATTN_ISA, each
 * time on a fresh daemon.
 *
 * The reference reads K and V as stored: the test converts its f32 values to
 * the pool dtype itself (round to nearest even, checked against known
 * encodings), READ_KV must return those bits unchanged, and the reference
 * decodes them back. Masks are kvmask.h's definitions, written out here.
 *
 * Tolerances (outputs are convex combinations of V values in [-1, 1]):
 *   f32 output:      |out - ref| <= TOL_F32 = 1e-5 (relative to that unit scale)
 *   f16/bf16 output: |out - ref| <= TOL_F32 + 1 ulp(ref) in the output dtype (the
 *                    kernel works in f32, then rounds once to nearest even: half an
 *                    ulp of the result, at most one ulp of the reference)
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvref.h"


#define KV_HEADS 2
#define LAYERS 2
#define BS 4
#define STEP 4 /* max_step_tokens */
#define MAX_HD 32
#define MAX_G 4
#define MAX_Q_HEADS (KV_HEADS * MAX_G)
#define NGROUPS 8
#define LEN 31 /* tokens per sequence: nearly 4 times the smallest ring */
#define NSEQS 5
#define SOFTCAP 1.25f

static const char GROUPS[] = "groups=full swa:6 swa:9 rswa:5 chunked:8 chunked:6 cyclic:5 cyclic:6";
static const uint32_t group_kind[NGROUPS] = {
	KVP_KIND_FULL,    KVP_KIND_SWA,     KVP_KIND_SWA,    KVP_KIND_RSWA,
	KVP_KIND_CHUNKED, KVP_KIND_CHUNKED, KVP_KIND_CYCLIC, KVP_KIND_CYCLIC,
};
static const uint32_t group_param[NGROUPS] = { 0, 6, 9, 5, 8, 6, 5, 6 };

struct pool_def {
	const char *name;
	uint32_t dtype;
	uint32_t head_dim;
	float scale;
};

static const struct pool_def pools[] = {
	{ "f32", KVP_DTYPE_F32, 16, 0.5f },  { "f32c", KVP_DTYPE_F32, 8, 0.7f },
	{ "f16", KVP_DTYPE_F16, 32, 0.35f }, { "f16c", KVP_DTYPE_F16, 24, 0.4f },
	{ "bf16", KVP_DTYPE_BF16, 16, 0.5f }, { "bf16c", KVP_DTYPE_BF16, 24, 0.4f },
};

/* Each sequence: its prompt, its R-SWA prefix (-1: the prompt length) and its step sizes. */
struct seq_def {
	uint32_t prompt;
	int64_t prefix;
	uint32_t steps[5];
	uint32_t nsteps;
};

static const struct seq_def seq_defs[NSEQS] = {
	{ 7, -1, { 4, 3, 1, 2 }, 4 },      /* default prefix 7 */
	{ LEN, 6, { 3, 4, 2, 1 }, 4 },     /* prefix inside a block */
	{ LEN, 0, { 1, 4, 4, 3, 2 }, 5 },  /* no prefix: rswa is swa */
	{ 3, -1, { 2, 1, 4, 4, 3 }, 5 },   /* default prefix 3 */
	{ 13, 8, { 4, 4, 1, 3, 2 }, 5 },   /* prefix on a block boundary */
};

struct seq {
	uint64_t h;
	uint64_t seed;
	uint32_t index;
	uint32_t ntokens, computed, step;
	struct mask rswa; /* the rswa mask with this sequence's prefix */
};

/* K and V as the pool stores them, decoded: what the reference reads. */
static double kv_table[NSEQS][NGROUPS][LAYERS][LEN][KV_HEADS][2][MAX_HD];

static struct daemon dmn;
static uint64_t n_attends, n_values;
static double worst[3]; /* per output dtype: the largest |out - ref| / tolerance seen */

static void create_pool(const struct pool_def *p)
{
	char dtype[32], hd[32];
	const char *kv[] = { "blocks=512",    "block_size=4",  GROUPS,    "kv_heads=2", hd,
			     dtype,           "layers_per_group=2", "max_step_tokens=4", NULL };

	snprintf(dtype, sizeof(dtype), "dtype=%s",
		 p->dtype == KVP_DTYPE_F32 ? "f32" : p->dtype == KVP_DTYPE_F16 ? "f16" : "bf16");
	snprintf(hd, sizeof(hd), "head_dim=%u", p->head_dim);
	create_pool_or_die(&dmn, p->name, kv);
}

static void check_info(const struct kvp_pool_info *info, const struct pool_def *p)
{
	CHECK_EQ(info->block_size, BS);
	CHECK_EQ(info->num_groups, NGROUPS);
	for (uint32_t g = 0; g < NGROUPS; g++) {
		CHECK_EQ(info->group_kind[g], group_kind[g]);
		CHECK_EQ(info->group_param[g], group_param[g]);
	}
	CHECK_EQ(info->kv_heads, KV_HEADS);
	CHECK_EQ(info->head_dim, p->head_dim);
	CHECK_EQ(info->dtype, p->dtype);
	CHECK_EQ(info->layers_per_group, LAYERS);
}

static struct mask group_mask(const struct seq *s, uint32_t g)
{
	if (group_kind[g] == KVP_KIND_RSWA)
		return s->rswa;
	return (struct mask){ group_kind[g], group_param[g], 0 };
}

/* WRITE_KV of the step's positions in every group and layer, then READ_KV of them: the same bits. */
static void write_step(struct kvp_client *c, const struct pool_def *p, const struct seq *s)
{
	static uint8_t k[STEP * KV_HEADS * MAX_HD * 4], v[sizeof(k)], rk[sizeof(k)], rv[sizeof(k)];
	uint32_t hd = p->head_dim;
	size_t bytes = (size_t)s->step * KV_HEADS * hd * dtype_size(p->dtype);

	for (uint32_t g = 0; g < NGROUPS; g++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			for (uint32_t t = 0; t < s->step; t++)
				for (uint32_t kh = 0; kh < KV_HEADS; kh++)
					for (uint32_t d = 0; d < hd; d++) {
						size_t i = ((size_t)t * KV_HEADS + kh) * hd + d;
						uint32_t pos = s->computed + t;

						store_elem(k, p->dtype, i, val(s->seed, WHICH_K, g, l, pos, kh, d));
						store_elem(v, p->dtype, i, val(s->seed, WHICH_V, g, l, pos, kh, d));
					}
			CHECK_EQ(kvp_write_kv(c, s->h, g, l, s->computed, s->step, k, v), 0);
			memset(rk, 0xa5, bytes);
			memset(rv, 0x5a, bytes);
			CHECK_EQ(kvp_read_kv(c, s->h, g, l, s->computed, s->step, rk, rv), 0);
			CHECK(memcmp(k, rk, bytes) == 0);
			CHECK(memcmp(v, rv, bytes) == 0);
		}
	}
}

/* softmax(scale q.K^T, capped) V over the positions the mask lets query @i see. */
static void reference(const struct pool_def *p, const struct seq *s, uint32_t g, uint32_t l,
		      uint32_t i, uint32_t kh, const double *q, float softcap, double *out)
{
	const struct mask m = group_mask(s, g);
	const struct ref_kv kv = { &kv_table[s->index][g][l][0][kh][WHICH_K][0],
				   KV_HEADS * 2 * MAX_HD, MAX_HD };

	ref_attend(&m, i, q, p->head_dim, (double)p->scale, softcap, &kv, out);
}

/* One ATTEND of the step's queries of every active sequence, checked against the reference. */
static void attend_step(struct kvp_client *c, const struct pool_def *p, struct seq *seqs,
			uint32_t g, uint32_t l, uint32_t ratio, bool q_f32, float softcap,
			uint32_t rot)
{
	static uint8_t qbuf[NSEQS][STEP * MAX_Q_HEADS * MAX_HD * 4];
	static uint8_t obuf[NSEQS][STEP * MAX_Q_HEADS * MAX_HD * 4];
	struct kvp_attend_req reqs[NSEQS];
	uint32_t hd = p->head_dim, qh_n = KV_HEADS * ratio, n = 0, order[NSEQS];
	uint32_t qdt = q_f32 ? KVP_DTYPE_F32 : p->dtype;

	/* The sequences in a rotating order: each entry must get its own sequence's answer. */
	for (uint32_t k = 0; k < NSEQS; k++) {
		uint32_t si = (k + rot) % NSEQS;
		struct seq *s = &seqs[si];

		if (!s->step)
			continue;
		for (uint32_t t = 0; t < s->step; t++)
			for (uint32_t qh = 0; qh < qh_n; qh++)
				for (uint32_t d = 0; d < hd; d++)
					store_elem(qbuf[si], qdt, ((size_t)t * qh_n + qh) * hd + d,
						   val(s->seed, WHICH_Q, g, l, s->computed + t, qh, d));
		memset(obuf[si], 0xee, sizeof(obuf[si]));
		reqs[n] = (struct kvp_attend_req){ .handle = s->h, .first_pos = s->computed,
						   .count = s->step, .q = qbuf[si], .out = obuf[si] };
		order[n++] = si;
	}
	if (n == 0)
		return;
	CHECK_EQ(kvp_attend(c, g, l, qh_n, p->scale, softcap, q_f32, reqs, n), 0);
	n_attends++;

	for (uint32_t k = 0; k < n; k++) {
		uint32_t si = order[k];
		const struct seq *s = &seqs[si];

		for (uint32_t t = 0; t < s->step; t++) {
			for (uint32_t qh = 0; qh < qh_n; qh++) {
				double q[MAX_HD], ref[MAX_HD];
				size_t row = ((size_t)t * qh_n + qh) * hd;

				for (uint32_t d = 0; d < hd; d++)
					q[d] = load_elem(qbuf[si], qdt, row + d);
				reference(p, s, g, l, s->computed + t, qh / ratio, q, softcap, ref);
				for (uint32_t d = 0; d < hd; d++) {
					double o = load_elem(obuf[si], qdt, row + d), err = o - ref[d];
					double tol = TOL_F32 + (qdt == KVP_DTYPE_F32 ? 0 : ulp_of(qdt, ref[d]));

					err = err < 0 ? -err : err;
					if (!(err <= tol)) {
						fprintf(stderr,
							"pool %s group %u (kind %u param %u prefix %u) layer %u seq %u "
							"pos %u q head %u of %u dim %u q_f32 %d softcap %g: "
							"out %.9g, reference %.9g, |diff| %.3g > tolerance %.3g\n",
							p->name, g, group_kind[g], group_param[g], s->rswa.prefix, l,
							si, s->computed + t, qh, qh_n, d, q_f32, (double)softcap, o,
							ref[d], err, tol);
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

static void run_pool(const struct pool_def *p, uint64_t seed)
{
	struct kvp_client *c = connect_or_die(&dmn, p->name, "", false);
	struct seq seqs[NSEQS];
	struct kvp_pool_stats st;
	uint32_t round = 0, active = NSEQS;

	check_info(kvp_pool_info(c), p);
	for (uint32_t si = 0; si < NSEQS; si++) {
		const struct seq_def *sd = &seq_defs[si];
		uint32_t tokens[LEN];

		for (uint32_t t = 0; t < LEN; t++)
			tokens[t] = 1000 * si + t + 1;
		seqs[si] = (struct seq){ .seed = mix(seed + si), .index = si, .ntokens = sd->prompt };
		for (uint32_t g = 0; g < NGROUPS; g++)
			for (uint32_t l = 0; l < LAYERS; l++)
				for (uint32_t pos = 0; pos < LEN; pos++)
					for (uint32_t kh = 0; kh < KV_HEADS; kh++)
						for (uint32_t w = WHICH_K; w <= WHICH_V; w++)
							for (uint32_t d = 0; d < p->head_dim; d++)
								kv_table[si][g][l][pos][kh][w][d] = as_stored(
									p->dtype, val(seqs[si].seed, w, g, l, pos, kh, d));
		CHECK_EQ(kvp_seq_open(c, tokens, sd->prompt, NULL, 0, sd->prefix, &seqs[si].h), 0);
		seqs[si].rswa = (struct mask){ KVP_KIND_RSWA, group_param[3],
					       sd->prefix < 0 ? sd->prompt : (uint32_t)sd->prefix };
	}
	while (active) {
		/* Allocate and write the next step of every sequence not done. */
		for (uint32_t si = 0; si < NSEQS; si++) {
			struct seq *s = &seqs[si];
			const struct seq_def *sd = &seq_defs[si];
			uint32_t step = sd->steps[round % sd->nsteps];

			if (s->computed + step > LEN)
				step = LEN - s->computed;
			s->step = step;
			if (!step)
				continue;
			if (s->computed + step > s->ntokens) { /* decode: the tokens come first */
				uint32_t tokens[STEP];
				uint32_t add = s->computed + step - s->ntokens;

				for (uint32_t t = 0; t < add; t++)
					tokens[t] = 1000 * si + s->ntokens + t + 1;
				CHECK_EQ(kvp_append(c, s->h, tokens, add), 0);
				s->ntokens += add;
			}
			CHECK_EQ(kvp_alloc(c, s->h, step, 0, false, NULL, NULL, 0), 0);
			write_step(c, p, s);
		}
		/*
		 * Every group and layer, each with 2 of the 12 combinations of GQA ratio,
		 * query dtype and softcap, rotating so that each meets all 12 (every 6 rounds).
		 */
		for (uint32_t g = 0; g < NGROUPS; g++) {
			for (uint32_t l = 0; l < LAYERS; l++) {
				for (uint32_t k = 0; k < 2; k++) {
					uint32_t combo = (round * 2 + k + g + 5 * l) % 12;
					static const uint32_t ratios[3] = { 1, 2, 4 };

					attend_step(c, p, seqs, g, l, ratios[combo % 3], combo / 3 % 2,
						    combo / 6 ? SOFTCAP : 0.0f, round + g);
				}
			}
		}
		active = 0;
		for (uint32_t si = 0; si < NSEQS; si++) {
			struct seq *s = &seqs[si];

			if (!s->step)
				continue;
			s->computed += s->step;
			CHECK_EQ(kvp_commit(c, s->h, s->computed), 0);
			active += s->computed < LEN;
		}
		round++;
	}
	for (uint32_t si = 0; si < NSEQS; si++)
		CHECK_EQ(kvp_seq_close(c, seqs[si].h), 0);
	kvp_close(c);
	check_pool_or_die(&dmn, p->name, &st);
	CHECK_EQ(st.blocks_used, 0);
	CHECK_EQ(st.blocks_free, 511);
}

int main(void)
{
	/* NULL: the best level the CPU has; then each lower level forced (or the best, if absent). */
	static const char *const isas[] = { NULL, "avx512", "avx2", "c" };

	watchdog_start("test_kv_masks", 60);
	self_check();

	for (uint32_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		if (isas[i])
			CHECK_EQ(setenv("KVPOOL_ATTN_ISA", isas[i], 1), 0);
		else
			CHECK_EQ(unsetenv("KVPOOL_ATTN_ISA"), 0);
		CHECK_EQ(daemon_start(&dmn, NULL), 0);
		watchdog_watch(&dmn);
		for (uint32_t pi = 0; pi < sizeof(pools) / sizeof(pools[0]); pi++)
			create_pool(&pools[pi]);
		/*
		 * Forced levels: only the pools whose head_dim the SIMD kernels take (the
		 * others get the portable kernel at any level); avx512 differs from
		 * avx512bf16 only for bf16 queries over bf16 keys.
		 */
		for (uint32_t pi = 0; pi < sizeof(pools) / sizeof(pools[0]); pi++)
			if (!isas[i] || (pools[pi].head_dim % 16 == 0 &&
					 (strcmp(isas[i], "avx512") || pools[pi].dtype == KVP_DTYPE_BF16)))
				run_pool(&pools[pi], 1000 * i + pi);
		watchdog_watch(NULL);
		CHECK_EQ(daemon_stop(&dmn), 0);
	}
	printf("test_kv_masks: %llu attends, %llu values checked; worst |error| / tolerance: "
	       "f32 %.3f, f16 %.3f, bf16 %.3f\n", (unsigned long long)n_attends,
	       (unsigned long long)n_values, worst[KVP_DTYPE_F32], worst[KVP_DTYPE_F16],
	       worst[KVP_DTYPE_BF16]);
	return 0;
}
