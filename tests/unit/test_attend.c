/* SPDX-License-Identifier: MIT */
/*
 * Attention kernels (daemon/attn): attn_one under every ISA level this CPU
 * supports (the C kernel, AVX2, AVX-512, AVX512_BF16; each called directly
 * through attn_level_fn), against a double-precision reference.
 *
 * Each case builds a small pool of block slots (two layers, two kv heads; the
 * keys live in layer 1, head 1) whose logical blocks map to shuffled,
 * non-contiguous block ids. The pool starts as NaN everywhere; only the rows of
 * the query's key positions get values, so a kernel that reads a wrong row (or
 * a masked-out one) produces NaN and fails. The reference reads the same
 * stored, already rounded K, V and q, so the tolerance only covers the
 * kernel's f32 arithmetic (accumulation order, prescaled q, the exp2/tanh
 * approximations) and the rounding of the output to the query dtype:
 *
 *   |out - ref| <= TOL_ACC * mag + TOL_SCORE * mag2 + tol_out(q_dtype) * |ref| + TOL_ABS
 *
 * where mag = sum_j w_j |V_j[d]| (the size of the terms summed; it bounds the f32
 * error of the weighted sum), mag2 = sum_j w_j |V_j[d]| u_j with u_j = scale *
 * sum_d |q_d K_j,d| (the f32 error of score j is a few ulps of u_j, and it moves
 * weight j by as much, relatively: large scores need it), TOL_ACC = 1e-5,
 * TOL_SCORE = 2^-20 (16 ulps), tol_out = half an ulp of the output dtype
 * relative to the value (0 for f32, 2^-11 for f16, 2^-8 for bf16: the final
 * rounding; TOL_ACC covers a near-tie pushed to the other side) and TOL_ABS =
 * 2^-24 (f16 subnormals).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../daemon/attn/attend_internal.h"
#include "attn_values.h"

#define TOL_ACC 1e-5
#define TOL_SCORE 0x1p-20
#define TOL_ABS 0x1p-24

static double tol_out(enum attn_dtype t)
{
	return t == ATTN_F32 ? 0 : t == ATTN_F16 ? 0x1p-11 : 0x1p-8;
}

static const char *dt_name(enum attn_dtype t)
{
	return t == ATTN_F32 ? "f32" : t == ATTN_F16 ? "f16" : "bf16";
}

/* ---- one case ---- */

struct tcase {
	const char *what;
	enum attn_dtype dt, qdt;
	uint32_t g, hd, bs;
	uint32_t nr, lo[2], hi[2];
	uint32_t ring;
	float scale, softcap;
	float ramp; /* != 0: head 0's score grows by ramp per key (forces max updates) */
	bool rising; /* slots of one K and one V block, blocks in order (attn_keys_rising) */
	bool strided; /* the LAYER layout: a K array then a V array, 3 kv heads' rows interleaved */
};

struct tenv {
	uint8_t *pool;
	uint32_t *ids;
	void *q, *out;
	struct attn_keys keys;
	struct attn_query query;
	struct attn_params params;
	double *ref, *mag, *mag2;
};

static uint8_t *row_addr(const struct tenv *e, uint32_t j)
{
	const struct attn_keys *k = &e->keys;
	uint32_t jr = k->ring_tokens ? j % k->ring_tokens : j;
	uint32_t b = k->ids[jr / k->block_size - k->first_block];

	size_t row_stride = k->row_stride ? k->row_stride : k->head_dim * attn_dtype_size(k->dtype);

	return (uint8_t *)k->pool + (size_t)b * k->block_stride + k->k_off +
	       (size_t)(jr % k->block_size) * row_stride;
}

static void build(const struct tcase *t, struct tenv *e)
{
	size_t ds = attn_dtype_size(t->dt), row_bytes = t->hd * ds;
	size_t head_bytes = t->bs * row_bytes, layer_bytes = 2 * 2 * head_bytes;
	size_t slot = t->rising ? 2 * head_bytes : 2 * layer_bytes + 32, words, pool_bytes;
	uint32_t first, last, nblocks, pblocks, *perm;
	uint64_t lo_min = UINT32_MAX, hi_max = 0;
	double q2 = 0;

	for (uint32_t r = 0; r < t->nr; r++) {
		if (t->hi[r] > t->lo[r]) {
			lo_min = t->lo[r] < lo_min ? t->lo[r] : lo_min;
			hi_max = t->hi[r] > hi_max ? t->hi[r] : hi_max;
		}
	}
	if (t->ring) {
		first = 0;
		last = (t->ring - 1) / t->bs;
	} else {
		first = (uint32_t)(lo_min / t->bs);
		last = (uint32_t)((hi_max - 1) / t->bs);
	}
	nblocks = last - first + 1;
	pblocks = nblocks + 5;
	perm = malloc(sizeof(*perm) * pblocks);
	e->ids = malloc(sizeof(*e->ids) * nblocks);
	assert_non_null(perm);
	assert_non_null(e->ids);
	for (uint32_t i = 0; i < pblocks; i++)
		perm[i] = i;
	for (uint32_t i = pblocks - 1; i > 0 && !t->rising; i--) {
		uint32_t j = (uint32_t)(rnd() % (i + 1)), x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
	}
	/* rising: the run starts past block 0, whose slot stays NaN */
	memcpy(e->ids, perm + (t->rising ? 1 : 0), sizeof(*e->ids) * nblocks);
	free(perm);

	if (t->strided)
		slot = 3 * head_bytes; /* [bs][3 heads][hd] */
	pool_bytes = (t->strided ? 2 : 1) * pblocks * slot;
	/* NaN everywhere: a row read that the ranges don't cover poisons the output */
	e->pool = aligned_alloc(64, (pool_bytes + 63) & ~(size_t)63);
	assert_non_null(e->pool);
	words = pool_bytes / ds;
	for (size_t i = 0; i < words; i++) {
		if (t->dt == ATTN_F32)
			((uint32_t *)e->pool)[i] = 0x7fc00000u;
		else
			((uint16_t *)e->pool)[i] = t->dt == ATTN_F16 ? 0x7e00 : 0x7fc0;
	}

	e->keys = (struct attn_keys){
		.pool = e->pool,
		.block_stride = slot,
		.k_off = t->rising ? 0 : layer_bytes + head_bytes, /* layer 1, kv head 1 */
		.v_delta = t->rising ? head_bytes : 2 * head_bytes,
		.block_size = t->bs,
		.head_dim = t->hd,
		.dtype = t->dt,
		.ids = e->ids,
		.first_block = first,
		.nblocks = nblocks,
		.ring_tokens = t->ring,
	};
	if (t->strided) {
		e->keys.row_stride = 3 * row_bytes;
		e->keys.k_off = row_bytes; /* kv head 1 */
		e->keys.v_delta = pblocks * slot;
	}
	e->q = malloc((size_t)t->g * t->hd * attn_dtype_size(t->qdt));
	e->out = malloc((size_t)t->g * t->hd * attn_dtype_size(t->qdt));
	e->ref = calloc((size_t)t->g * t->hd, sizeof(double));
	e->mag = calloc((size_t)t->g * t->hd, sizeof(double));
	e->mag2 = calloc((size_t)t->g * t->hd, sizeof(double));
	assert_non_null(e->q);
	assert_non_null(e->out);
	assert_non_null(e->ref);
	assert_non_null(e->mag);
	assert_non_null(e->mag2);
	for (size_t i = 0; i < (size_t)t->g * t->hd; i++)
		st(e->q, t->qdt, i, frand());
	for (uint32_t d = 0; d < t->hd; d++)
		q2 += ld(e->q, t->qdt, d) * ld(e->q, t->qdt, d);
	for (uint32_t r = 0, i = 0; r < t->nr; r++) {
		for (uint32_t j = t->lo[r]; j < t->hi[r]; j++, i++) {
			uint8_t *row = row_addr(e, j);
			/* K = noise + a multiple of q (head 0) that puts its score at ramp * i */
			double along = t->ramp * i / (t->scale * q2);

			for (uint32_t d = 0; d < t->hd; d++) {
				float x = frand();

				if (t->ramp != 0)
					x = (float)(0.05 * x + along * ld(e->q, t->qdt, d));
				st(row, t->dt, d, x);
				st(row + e->keys.v_delta, t->dt, d, frand());
			}
		}
	}

	e->query = (struct attn_query){ .q = e->q, .out = e->out, .nranges = t->nr };
	for (uint32_t r = 0; r < 2; r++) {
		e->query.lo[r] = t->lo[r];
		e->query.hi[r] = t->hi[r];
	}
	e->params = (struct attn_params){
		.g = t->g, .scale = t->scale, .softcap = t->softcap, .q_dtype = t->qdt,
	};
}

static void destroy(struct tenv *e)
{
	free(e->pool);
	free(e->ids);
	free(e->q);
	free(e->out);
	free(e->ref);
	free(e->mag);
	free(e->mag2);
}

/*
 * The straightforward reference, in double, on the stored values. Also the error
 * scales: mag = sum_j w_j |V_j| and mag2 = sum_j w_j |V_j| u_j, where u_j =
 * scale * sum_d |q_d K_j,d| bounds the f32 rounding of score j (an error e in a
 * score moves its weight by a factor e^e).
 */
static void reference(const struct tcase *t, struct tenv *e)
{
	uint32_t n = 0;
	uint32_t *pos;
	double *s, *u;

	for (uint32_t r = 0; r < t->nr; r++)
		n += t->hi[r] - t->lo[r];
	pos = malloc(sizeof(*pos) * n);
	s = malloc(sizeof(*s) * n);
	u = malloc(sizeof(*u) * n);
	assert_non_null(pos);
	assert_non_null(s);
	assert_non_null(u);
	n = 0;
	for (uint32_t r = 0; r < t->nr; r++)
		for (uint32_t j = t->lo[r]; j < t->hi[r]; j++)
			pos[n++] = j;
	for (uint32_t h = 0; h < t->g; h++) {
		double m = -INFINITY, l = 0;

		for (uint32_t i = 0; i < n; i++) {
			const uint8_t *row = row_addr(e, pos[i]);
			double dot = 0, abs = 0;

			for (uint32_t d = 0; d < t->hd; d++) {
				double x = ld(e->q, t->qdt, (size_t)h * t->hd + d) * ld(row, t->dt, d);

				dot += x;
				abs += fabs(x);
			}
			dot *= t->scale;
			u[i] = abs * t->scale;
			if (t->softcap > 0)
				dot = t->softcap * tanh(dot / t->softcap);
			s[i] = dot;
			m = dot > m ? dot : m;
		}
		for (uint32_t i = 0; i < n; i++) {
			s[i] = exp(s[i] - m);
			l += s[i];
		}
		for (uint32_t i = 0; i < n; i++) {
			const uint8_t *v = row_addr(e, pos[i]) + e->keys.v_delta;

			for (uint32_t d = 0; d < t->hd; d++) {
				double x = ld(v, t->dt, d);
				size_t o = (size_t)h * t->hd + d;

				e->ref[o] += s[i] / l * x;
				e->mag[o] += s[i] / l * fabs(x);
				e->mag2[o] += s[i] / l * fabs(x) * u[i];
			}
		}
	}
	free(pos);
	free(s);
	free(u);
}

static enum attn_level max_level(void)
{
	enum attn_level top = attn_cpu_level();
	const char *env = getenv("KVPOOL_ATTN_ISA");

	for (int l = 0; env && l < ATTN_NLEVELS; l++)
		if (strcmp(env, attn_level_name((enum attn_level)l)) == 0 && (enum attn_level)l < top)
			top = (enum attn_level)l;
	return top;
}

static double worst[3]; /* largest error / tolerance seen, per q dtype */

/* Compares the output with the reference; prints the first few misses. */
static int check_out(const struct tcase *t, const struct tenv *e, const char *isa)
{
	int bad = 0;

	for (uint32_t h = 0; h < t->g; h++) {
		for (uint32_t d = 0; d < t->hd; d++) {
			size_t i = (size_t)h * t->hd + d;
			double got = ld(e->out, t->qdt, i), ref = e->ref[i];
			double tol = TOL_ACC * e->mag[i] + TOL_SCORE * e->mag2[i] + tol_out(t->qdt) * fabs(ref) +
				     TOL_ABS;
			double err = fabs(got - ref);

			if (!(err <= tol)) {
				if (bad++ < 5)
					print_error("%s [%s]: %s/%s g=%u hd=%u bs=%u ranges=[%u,%u)%s ring=%u "
						    "softcap=%g: head %u dim %u: got %.9g want %.9g (err %.3g tol %.3g)\n",
						    t->what, isa, dt_name(t->dt), dt_name(t->qdt), t->g, t->hd,
						    t->bs, t->lo[0], t->hi[0], t->nr > 1 ? "+" : "", t->ring,
						    (double)t->softcap, h, d, got, ref, err, tol);
			} else if (err / tol > worst[t->qdt]) {
				worst[t->qdt] = err / tol;
			}
		}
	}
	return bad;
}

static void run_case(const struct tcase *t)
{
	struct tenv e;
	int bad = 0;

	build(t, &e);
	reference(t, &e);
	for (int l = 0; l <= (int)max_level(); l++) {
		attn_fn *fn = attn_level_fn((enum attn_level)l);

		assert_non_null(fn);
		memset(e.out, 0xa5, (size_t)t->g * t->hd * attn_dtype_size(t->qdt));
		fn(&e.keys, &e.query, &e.params);
		bad += check_out(t, &e, attn_level_name((enum attn_level)l));
	}
	destroy(&e);
	if (bad)
		fail_msg("%d output values out of tolerance", bad);
}

/* ---- the grid ---- */

enum shape { SH_MID, SH_ALIGNED, SH_TWO, SH_RING, SH_ONE, SH_N };

static void shape_ranges(struct tcase *t, enum shape sh)
{
	uint32_t bs = t->bs;

	t->nr = 1;
	t->ring = 0;
	t->lo[1] = t->hi[1] = 0;
	switch (sh) {
	case SH_MID: /* starts and ends inside blocks (for bs > 1) */
		t->what = "mid-block range";
		t->lo[0] = 3 * bs + (bs > 1);
		t->hi[0] = t->lo[0] + 41;
		break;
	case SH_ALIGNED: /* block boundaries at both ends */
		t->what = "block-aligned range";
		t->lo[0] = 2 * bs;
		t->hi[0] = t->lo[0] + bs * ((35 + bs - 1) / bs);
		break;
	case SH_TWO: /* a sink and a window */
		t->what = "two ranges";
		t->nr = 2;
		t->lo[0] = 1;
		t->hi[0] = 7;
		t->lo[1] = 5 * bs + 3 > 9 ? 5 * bs + 3 : 9;
		t->hi[1] = t->lo[1] + 30;
		break;
	case SH_RING: /* positions past the ring wrap around to its start */
		t->what = "ring wrap-around";
		t->ring = bs * ((40 + bs - 1) / bs);
		t->lo[0] = 3 * t->ring - 17;
		t->hi[0] = 3 * t->ring + 19;
		break;
	default:
		t->what = "single key";
		t->lo[0] = 5 * bs + (bs > 2 ? 2 : 0);
		t->hi[0] = t->lo[0] + 1;
		break;
	}
}

static void grid(enum attn_dtype dt, enum attn_dtype qdt)
{
	static const uint32_t gs[] = { 1, 2, 4, 8 }, hds[] = { 64, 128 }, bss[] = { 1, 4, 16 };

	for (size_t gi = 0; gi < 4; gi++)
		for (size_t hi = 0; hi < 2; hi++)
			for (size_t bi = 0; bi < 3; bi++)
				for (int sh = 0; sh < SH_N; sh++)
					for (int cap = 0; cap < 2; cap++) {
						struct tcase t = {
							.dt = dt, .qdt = qdt, .g = gs[gi], .hd = hds[hi],
							.bs = bss[bi],
							/* scores of a few units; with the cap, beyond it */
							.scale = (cap ? 12.0f : 4.0f) / sqrtf((float)hds[hi]),
							.softcap = cap ? 5.0f : 0.0f,
						};

						shape_ranges(&t, (enum shape)sh);
						run_case(&t);
					}
}

static void test_f32(void **state)
{
	(void)state;
	grid(ATTN_F32, ATTN_F32);
}

static void test_f16_f32q(void **state)
{
	(void)state;
	grid(ATTN_F16, ATTN_F32);
}

static void test_f16_f16q(void **state)
{
	(void)state;
	grid(ATTN_F16, ATTN_F16);
}

static void test_bf16_f32q(void **state)
{
	(void)state;
	grid(ATTN_BF16, ATTN_F32);
}

static void test_bf16_bf16q(void **state)
{
	(void)state;
	grid(ATTN_BF16, ATTN_BF16);
}

/* Head groups that split into several chunks (8+4+2+1...), up to 48 heads (MQA). */
static void test_odd_g(void **state)
{
	/* Past 16 the kernels take the heads in slices: 17, 32 and 48 (MQA, StarCoder) cross them. */
	static const uint32_t gs[] = { 3, 5, 6, 7, 12, 15, 16, 17, 32, 48 };
	static const enum attn_dtype dts[][2] = {
		{ ATTN_F32, ATTN_F32 }, { ATTN_F16, ATTN_F16 }, { ATTN_BF16, ATTN_BF16 }, { ATTN_BF16, ATTN_F32 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++)
		for (size_t d = 0; d < 4; d++)
			for (int sh = 0; sh < SH_N; sh += 2) {
				struct tcase t = {
					.dt = dts[d][0], .qdt = dts[d][1], .g = gs[i], .hd = 128, .bs = 16,
					.scale = 0.35f, .softcap = sh == SH_RING ? 5.0f : 0.0f,
				};

				shape_ranges(&t, (enum shape)sh);
				run_case(&t);
			}
}

/* head_dim 80 and 96 (bf16 rows not in whole 32s), 256, and 40 (no SIMD: the C kernel). */
static void test_other_head_dims(void **state)
{
	static const uint32_t hds[] = { 16, 40, 80, 96, 256 };
	static const enum attn_dtype dts[][2] = {
		{ ATTN_F32, ATTN_F32 }, { ATTN_F16, ATTN_F16 }, { ATTN_BF16, ATTN_BF16 }, { ATTN_BF16, ATTN_F32 },
	};

	(void)state;
	for (size_t i = 0; i < 5; i++)
		for (size_t d = 0; d < 4; d++)
			for (uint32_t g = 1; g <= 8; g *= 2)
				for (int sh = 0; sh < SH_N; sh++) {
					struct tcase t = {
						.dt = dts[d][0], .qdt = dts[d][1], .g = g, .hd = hds[i], .bs = 4,
						.scale = 4.0f / sqrtf((float)hds[i]), .softcap = g == 4 ? 5.0f : 0.0f,
					};

					shape_ranges(&t, (enum shape)sh);
					run_case(&t);
				}
}

/* Runs t over 2996 keys from 5, then over a sink of 4 and a window of 1500 (soft-capped). */
static void long_ranges(struct tcase *t)
{
	t->what = "long range";
	t->hd = 128;
	t->bs = 16;
	t->nr = 1;
	t->lo[0] = 5;
	t->hi[0] = 3001;
	t->scale = 0.5f;
	run_case(t);
	t->what = "long, sink + window";
	t->nr = 2;
	t->lo[0] = 0;
	t->hi[0] = 4;
	t->lo[1] = 1000;
	t->hi[1] = 2500;
	t->softcap = 8.0f;
	run_case(t);
}

/* Long contexts: many tiles, many rescales; a ring that is not a multiple of the block size. */
static void test_long(void **state)
{
	static const enum attn_dtype dts[][2] = {
		{ ATTN_F32, ATTN_F32 }, { ATTN_F16, ATTN_F16 }, { ATTN_BF16, ATTN_BF16 },
		{ ATTN_F16, ATTN_F32 }, { ATTN_BF16, ATTN_F32 },
	};

	(void)state;
	for (size_t d = 0; d < 5; d++) {
		for (uint32_t g = 1; g <= 4; g *= 4) {
			struct tcase t = { .dt = dts[d][0], .qdt = dts[d][1], .g = g };

			long_ranges(&t);
			t.what = "ring of 45 (bs 4)";
			t.bs = 4;
			t.nr = 1;
			t.ring = 45;
			t.lo[0] = 100;
			t.hi[0] = 140;
			t.softcap = 0;
			run_case(&t);
		}
	}
}

/*
 * Keys in one rising run of memory (a slot per K and V block of one head, blocks in
 * order), which the SIMD kernels read with one head in another order and without
 * software prefetch; the other layout never takes that path.
 */
static void test_rising(void **state)
{
	static const uint32_t hds[] = { 16, 64, 80, 128, 256 }, bss[] = { 1, 4, 16 };
	static const enum attn_dtype dts[][2] = {
		{ ATTN_F32, ATTN_F32 }, { ATTN_F16, ATTN_F16 }, { ATTN_F16, ATTN_F32 },
		{ ATTN_BF16, ATTN_BF16 }, { ATTN_BF16, ATTN_F32 },
	};

	(void)state;
	for (size_t d = 0; d < 5; d++)
		for (size_t hi = 0; hi < 5; hi++)
			for (size_t bi = 0; bi < 3; bi++)
				for (uint32_t g = 1; g <= 4; g *= 2)
					for (int sh = 0; sh < SH_N; sh++) {
						struct tcase t = {
							.dt = dts[d][0], .qdt = dts[d][1], .g = g, .hd = hds[hi],
							.bs = bss[bi], .scale = 4.0f / sqrtf((float)hds[hi]),
							.softcap = g == 2 ? 5.0f : 0.0f, .rising = true,
						};
						struct tenv e;

						shape_ranges(&t, (enum shape)sh);
						build(&t, &e);
						assert_int_equal(attn_keys_rising(&e.keys), sh != SH_RING);
						destroy(&e);
						run_case(&t);
						t.rising = false;
						build(&t, &e);
						assert_int_equal(attn_keys_rising(&e.keys), 0);
						destroy(&e);
					}
	for (size_t d = 0; d < 5; d++) {
		struct tcase t = { .dt = dts[d][0], .qdt = dts[d][1], .g = 1, .rising = true };

		long_ranges(&t);
		t = (struct tcase){ .what = "long rising, climbing scores", .dt = dts[d][0],
				    .qdt = dts[d][1], .g = 1, .hd = 128, .bs = 16, .nr = 1, .hi = { 900 },
				    .scale = 0.5f, .ramp = 0.4f, .rising = true };
		run_case(&t);
	}
}

/*
 * The LAYER layout: a token's K row is kv_heads rows from the next token's
 * (row_stride), V a whole array away. Every kernel walks it as it walks the
 * BLOCK layout, and none takes it for a rising run.
 */
static void test_strided(void **state)
{
	static const uint32_t hds[] = { 64, 128 }, bss[] = { 1, 16 };
	static const enum attn_dtype dts[][2] = {
		{ ATTN_F32, ATTN_F32 }, { ATTN_F16, ATTN_F16 }, { ATTN_BF16, ATTN_BF16 },
		{ ATTN_BF16, ATTN_F32 },
	};

	(void)state;
	for (size_t d = 0; d < 4; d++)
		for (size_t hi = 0; hi < 2; hi++)
			for (size_t bi = 0; bi < 2; bi++)
				for (uint32_t g = 1; g <= 4; g *= 4)
					for (int sh = 0; sh < SH_N; sh++) {
						struct tcase t = {
							.what = "layer layout", .dt = dts[d][0],
							.qdt = dts[d][1], .g = g, .hd = hds[hi],
							.bs = bss[bi], .scale = 4.0f / sqrtf((float)hds[hi]),
							.strided = true,
						};
						struct tenv e;

						shape_ranges(&t, (enum shape)sh);
						build(&t, &e);
						assert_int_equal(attn_keys_rising(&e.keys), 0);
						destroy(&e);
						run_case(&t);
					}
}

/*
 * Scores that keep climbing (and, with g > 1, large ones on the other heads): the
 * running max moves often, by small and by large steps, so the accumulators are
 * rescaled at many tiles; early weights underflow to zero.
 */
static void test_rescale(void **state)
{
	static const enum attn_dtype dts[][2] = {
		{ ATTN_F32, ATTN_F32 }, { ATTN_F16, ATTN_F16 }, { ATTN_BF16, ATTN_BF16 }, { ATTN_BF16, ATTN_F32 },
	};
	static const float ramps[] = { 0.4f, 3.0f, -0.5f };

	(void)state;
	for (size_t d = 0; d < 4; d++)
		for (uint32_t g = 1; g <= 8; g *= 2)
			for (size_t r = 0; r < 3; r++)
				for (int cap = 0; cap < 2; cap++) {
					struct tcase t = {
						.what = "climbing scores", .dt = dts[d][0], .qdt = dts[d][1], .g = g,
						.hd = 128, .bs = 16, .nr = 1, .lo = { 7 }, .hi = { 107 },
						.scale = 0.09f, .softcap = cap ? 20.0f : 0.0f, .ramp = ramps[r],
					};

					run_case(&t);
				}
}

/* ---- split-K: partial results over parts of the keys, merged ---- */

/* The keys [k0, k1) of the query's ranges (counted in order) as ranges of q. */
static void part_ranges(const struct tcase *t, struct attn_query *q, uint32_t k0, uint32_t k1)
{
	uint32_t seen = 0;

	q->nranges = 0;
	for (uint32_t r = 0; r < t->nr; r++) {
		uint32_t len = t->hi[r] - t->lo[r];
		uint32_t a = k0 > seen ? k0 - seen : 0, b = k1 > seen ? k1 - seen : 0;

		b = b < len ? b : len;
		if (a < b) {
			q->lo[q->nranges] = t->lo[r] + a;
			q->hi[q->nranges] = t->lo[r] + b;
			q->nranges++;
		}
		seen += len;
	}
}

/*
 * ln sum_j exp(s_j) over the keys [k0, k1) of head h, in double, on the stored values;
 * *umax: the largest u_j there (see reference()), for the tolerance.
 */
static double ref_lse(const struct tcase *t, const struct tenv *e, uint32_t h, uint32_t k0,
		      uint32_t k1, double *umax)
{
	double m = -INFINITY, l = 0, *s = malloc(sizeof(*s) * (k1 - k0));
	uint32_t i = 0, n = 0;

	assert_non_null(s);
	*umax = 0;
	for (uint32_t r = 0; r < t->nr; r++) {
		for (uint32_t j = t->lo[r]; j < t->hi[r]; j++, i++) {
			const uint8_t *row = row_addr(e, j);
			double dot = 0, abs = 0;

			if (i < k0 || i >= k1)
				continue;
			for (uint32_t d = 0; d < t->hd; d++) {
				double x = ld(e->q, t->qdt, (size_t)h * t->hd + d) * ld(row, t->dt, d);

				dot += x;
				abs += fabs(x);
			}
			dot *= t->scale;
			*umax = abs * t->scale > *umax ? abs * t->scale : *umax;
			if (t->softcap > 0)
				dot = t->softcap * tanh(dot / t->softcap);
			s[n++] = dot;
			m = dot > m ? dot : m;
		}
	}
	for (i = 0; i < n; i++)
		l += exp(s[i] - m);
	free(s);
	return m + log(l);
}

static double worst_lse;

/*
 * Each level computes the query over parts of its keys (lse set: f32 partials and
 * their log-sum-exp), the partials are merged with attn_merge, and the merged
 * output must match the reference over all the keys with the tolerances of the
 * unsplit kernel; each part's lse must match its own reference:
 *
 *   |lse - ref| <= TOL_LSE + TOL_SCORE * (max u_j + |ref|) + TOL_LSE * softcap
 *
 * (the f32 error of the largest scores, the exp2/log2 approximations, the tanh
 * approximation scaled by the cap). The parts are cut unevenly: a single key, an
 * empty part (skipped, its lse -INFINITY and its output never written: NaN here),
 * a cut inside a block and one between the two ranges of a sink + window query.
 */
#define TOL_LSE 2e-6
static void run_split(const struct tcase *t)
{
	uint32_t n = 0, cuts[8], ncuts = 0, parts;
	size_t gq = (size_t)t->g * t->hd;
	float *part, *lse;
	struct tenv e;
	int bad = 0;

	for (uint32_t r = 0; r < t->nr; r++)
		n += t->hi[r] - t->lo[r];
	assert_true(n >= 30 && (t->nr < 2 || t->hi[0] - t->lo[0] <= n / 3));
	cuts[ncuts++] = 0;
	cuts[ncuts++] = 1;
	if (t->nr == 2)
		cuts[ncuts++] = t->hi[0] - t->lo[0]; /* between the ranges */
	cuts[ncuts++] = n / 3;
	cuts[ncuts++] = n / 3; /* an empty part */
	cuts[ncuts++] = n - n / 5;
	cuts[ncuts++] = n;
	parts = ncuts - 1;

	build(t, &e);
	reference(t, &e);
	part = malloc(sizeof(float) * gq * parts);
	lse = malloc(sizeof(float) * t->g * parts);
	assert_non_null(part);
	assert_non_null(lse);
	for (int l = 0; l <= (int)max_level(); l++) {
		attn_fn *fn = attn_level_fn((enum attn_level)l);
		const char *isa = attn_level_name((enum attn_level)l);

		for (size_t i = 0; i < gq * parts; i++)
			part[i] = NAN;
		for (uint32_t c = 0; c < parts; c++) {
			struct attn_query q = { .q = e.q, .out = part + c * gq, .lse = lse + c * t->g };

			part_ranges(t, &q, cuts[c], cuts[c + 1]);
			if (!q.nranges) {
				for (uint32_t h = 0; h < t->g; h++)
					lse[c * t->g + h] = -INFINITY;
				continue;
			}
			fn(&e.keys, &q, &e.params);
			for (uint32_t h = 0; h < t->g; h++) {
				double umax, want = ref_lse(t, &e, h, cuts[c], cuts[c + 1], &umax);
				double err = fabs(lse[c * t->g + h] - want);
				double tol = TOL_LSE + TOL_SCORE * (umax + fabs(want)) + TOL_LSE * t->softcap;

				if (!(err <= tol)) {
					if (bad++ < 5)
						print_error("%s [%s]: %s/%s g=%u keys [%u,%u) of %u: head %u lse %.9g "
							    "want %.9g (err %.3g tol %.3g)\n", t->what, isa,
							    dt_name(t->dt), dt_name(t->qdt), t->g, cuts[c],
							    cuts[c + 1], n, h, (double)lse[c * t->g + h], want, err,
							    tol);
				} else if (err / tol > worst_lse) {
					worst_lse = err / tol;
				}
			}
		}
		memset(e.out, 0xa5, gq * attn_dtype_size(t->qdt));
		attn_merge(part, gq, lse, t->g, parts, t->g, t->hd, e.out, t->qdt);
		bad += check_out(t, &e, isa);
	}
	free(part);
	free(lse);
	destroy(&e);
	if (bad)
		fail_msg("%d values out of tolerance (split into %u parts)", bad, parts);
}

static void test_split(void **state)
{
	static const enum attn_dtype dts[][2] = {
		{ ATTN_F32, ATTN_F32 }, { ATTN_F16, ATTN_F16 }, { ATTN_BF16, ATTN_BF16 },
		{ ATTN_F16, ATTN_F32 }, { ATTN_BF16, ATTN_F32 },
	};
	static const uint32_t gs[] = { 1, 3, 4, 8, 17 };

	(void)state;
	for (size_t d = 0; d < 5; d++) {
		for (size_t gi = 0; gi < 5; gi++) {
			for (int cap = 0; cap < 2; cap++) {
				struct tcase t = {
					.what = "split long range", .dt = dts[d][0], .qdt = dts[d][1],
					.g = gs[gi], .hd = 128, .bs = 16, .nr = 1, .lo = { 5 }, .hi = { 3001 },
					.scale = cap ? 1.0f : 0.3f, .softcap = cap ? 8.0f : 0.0f,
				};

				run_split(&t);
				t.what = "split sink + window";
				t.nr = 2;
				t.lo[0] = 0;
				t.hi[0] = 4;
				t.lo[1] = 1000;
				t.hi[1] = 2500;
				run_split(&t);
				t.what = "split ring (hd 80, bs 4)";
				t.hd = 80;
				t.bs = 4;
				t.nr = 1;
				t.ring = 64;
				t.lo[0] = 100;
				t.hi[0] = 163;
				run_split(&t);
				t.what = "split climbing scores";
				t.hd = 128;
				t.bs = 16;
				t.ring = 0;
				t.lo[0] = 7;
				t.hi[0] = 307;
				t.scale = 0.09f;
				t.ramp = 0.4f;
				run_split(&t);
			}
		}
	}
}

/* ---- conversions ---- */

/* r is the nearest value to f (ties to the even one) among the finite values of its format. */
static void check_nearest(float f, uint16_t r, uint16_t inf, float (*to_f32)(uint16_t))
{
	uint16_t m = r & 0x7fff, sign = r & 0x8000;
	double x = f, err = fabs(x - to_f32(r));

	if (m >= inf) { /* overflow: beyond the largest finite value plus half a step */
		double big = to_f32((uint16_t)(inf - 1)), step = big - to_f32((uint16_t)(inf - 2));

		assert_true(fabs(x) >= big + step / 2);
		return;
	}
	for (int dir = -1; dir <= 1; dir += 2) {
		double nb;

		if ((dir < 0 && m == 0) || (dir > 0 && m + 1 >= inf))
			continue;
		nb = fabs(x - to_f32((uint16_t)(sign | (m + dir))));
		if (!(err < nb || (err == nb && (r & 1) == 0)))
			fail_msg("%.9g -> 0x%04x: err %.3g, neighbour %+d err %.3g", x, r, err, dir, nb);
	}
}

static void test_f16_conversions(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = attn_f16_to_f32((uint16_t)h);

		if (isnan(f))
			assert_true(isnan(attn_f16_to_f32(attn_f32_to_f16(f))));
		else
			assert_int_equal(attn_f32_to_f16(f), h);
	}
	/* round to nearest even at the midpoints, subnormals, overflow */
	assert_int_equal(attn_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);             /* tie -> even */
	assert_int_equal(attn_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);         /* tie -> even (up) */
	assert_int_equal(attn_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  /* above the tie */
	assert_int_equal(attn_f32_to_f16(0x1p-25f), 0x0000);                    /* tie -> 0 */
	assert_int_equal(attn_f32_to_f16(0x1p-25f * 1.5f), 0x0001);
	assert_int_equal(attn_f32_to_f16(3 * 0x1p-25f), 0x0002);                /* tie -> even */
	assert_int_equal(attn_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);         /* rounds up to normal */
	assert_int_equal(attn_f32_to_f16(65504.0f), 0x7bff);
	assert_int_equal(attn_f32_to_f16(65519.0f), 0x7bff);
	assert_int_equal(attn_f32_to_f16(65520.0f), 0x7c00);
	assert_int_equal(attn_f32_to_f16(-INFINITY), 0xfc00);
	assert_int_equal(attn_f32_to_f16(-0.0f), 0x8000);
	/* nearest, ties to even, against the neighbours, for random floats ~2^-31 .. 2^17 */
	for (int i = 0; i < 1000000; i++) {
		uint32_t bits = (uint32_t)rnd();
		float f;

		bits = (bits & 0x80000000u) | (0x30000000u + bits % 0x18000000u);
		memcpy(&f, &bits, sizeof(f));
		check_nearest(f, attn_f32_to_f16(f), 0x7c00, attn_f16_to_f32);
	}
}

static void test_bf16_conversions(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = attn_bf16_to_f32((uint16_t)h);

		if (isnan(f))
			assert_true(isnan(attn_bf16_to_f32(attn_f32_to_bf16(f))));
		else
			assert_int_equal(attn_f32_to_bf16(f), h);
	}
	assert_int_equal(attn_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie -> even */
	assert_int_equal(attn_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even (up) */
	assert_int_equal(attn_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
	assert_int_equal(attn_f32_to_bf16(3.4e38f), 0x7f80);            /* rounds to infinity */
	for (int i = 0; i < 1000000; i++) {
		uint32_t bits = (uint32_t)rnd() & 0xbfffffffu; /* finite */
		float f;

		memcpy(&f, &bits, sizeof(f));
		check_nearest(f, attn_f32_to_bf16(f), 0x7f80, attn_bf16_to_f32);
	}
}

/* ---- the dispatch: KVPOOL_ATTN_ISA, in a child (the choice is made once per process) ---- */

static int child_isa(const char *env, const char *want)
{
	struct tcase t = {
		.what = "env dispatch", .dt = ATTN_BF16, .qdt = ATTN_BF16, .g = 4, .hd = 128, .bs = 16,
		.nr = 1, .lo = { 3 }, .hi = { 100 }, .scale = 0.3f,
	};
	struct tenv e;
	int bad;

	if (env)
		setenv("KVPOOL_ATTN_ISA", env, 1);
	else
		unsetenv("KVPOOL_ATTN_ISA");
	if (strcmp(attn_isa(), want) != 0) {
		fprintf(stderr, "KVPOOL_ATTN_ISA=%s: attn_isa() = %s, want %s\n", env ? env : "(unset)",
			attn_isa(), want);
		return 1;
	}
	build(&t, &e);
	reference(&t, &e);
	attn_one(&e.keys, &e.query, &e.params);
	bad = check_out(&t, &e, attn_isa());
	destroy(&e);
	return bad != 0;
}

static void test_env_isa(void **state)
{
	const char *best = attn_level_name(attn_cpu_level());
	struct {
		const char *env, *want;
	} cases[ATTN_NLEVELS + 3];
	int n = 0;

	(void)state;
	for (int l = 0; l < ATTN_NLEVELS; l++) {
		cases[n].env = attn_level_name((enum attn_level)l);
		/* a level above the CPU's leaves the best one */
		cases[n].want = l <= (int)attn_cpu_level() ? cases[n].env : best;
		n++;
	}
	cases[n].env = NULL;
	cases[n++].want = best;
	cases[n].env = "sse9";
	cases[n++].want = best;
	cases[n].env = "";
	cases[n++].want = best;
	for (int i = 0; i < n; i++) {
		int status;
		pid_t pid;

		fflush(NULL);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			_exit(child_isa(cases[i].env, cases[i].want));
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
}

static void test_report(void **state)
{
	(void)state;
	printf("levels run: c..%s; worst error/tolerance: f32 %.3f, f16 %.3f, bf16 %.3f; "
	       "split lse %.3f\n", attn_level_name(max_level()), worst[ATTN_F32], worst[ATTN_F16],
	       worst[ATTN_BF16], worst_lse);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16_conversions),
		cmocka_unit_test(test_bf16_conversions),
		cmocka_unit_test(test_f32),
		cmocka_unit_test(test_f16_f32q),
		cmocka_unit_test(test_f16_f16q),
		cmocka_unit_test(test_bf16_f32q),
		cmocka_unit_test(test_bf16_bf16q),
		cmocka_unit_test(test_odd_g),
		cmocka_unit_test(test_other_head_dims),
		cmocka_unit_test(test_long),
		cmocka_unit_test(test_rescale),
		cmocka_unit_test(test_rising),
		cmocka_unit_test(test_strided),
		cmocka_unit_test(test_split),
		cmocka_unit_test(test_env_isa),
		cmocka_unit_test(test_report),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
