/* SPDX-License-Identifier: MIT */
/*
 * The cuda backend's ATTEND, without a GPU: the plan (gpu/attend_plan.c) and
 * the kernels of gpu/kv_attend.cu run on the CPU emulation (gpu/emu/: fibers
 * for CUDA threads, the tensor-core instruction from the PTX ISA's fragment
 * layouts), over a pool in host memory laid out as a cuda pool's (and as a
 * host pool's), against the host backend's kernel (attn_one) on the same
 * inputs: every mask kind, both kernel families (tensor cores: f16, bf16, bf16
 * with q in f32, head_dim 64/128/256; SIMT: f32, f16 with q in f32, bf16,
 * head_dims that are not), GQA 1 to 32 (tiles of one query, of several, and
 * of part of one), decode and prefill, contexts that end inside a block and on
 * its boundary, split-K with its merge, cyclic rings.
 *
 * Outputs start as NaN; the pool's rows outside what the masks let a query see
 * are NaN too, so a kernel that writes too little, or reads a row it must not,
 * fails. Tolerance, output against the host kernel's: 4e-5 + 1 ulp of the
 * output dtype (each is within 1e-5 + half an ulp of the exact result: both
 * compute in f32 from the same stored values, the tensor-core kernel with P
 * and an f32 q as two 16-bit terms each, which keeps their products exact).
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

#include "../../gpu/attend_plan.h"
#include "../../gpu/emu/attend_emu.h"
#include "../../daemon/attn/attend.h"
#include "attn_values.h"

#define TOL 4e-5
#define SMS 132 /* an H100's and H200's multiprocessors: the splits the device will make */

static double ulp(enum attn_dtype t, double x)
{
	int e;

	if (t == ATTN_F32)
		return 0;
	frexp(x, &e);
	return ldexp(1.0, e - (t == ATTN_F16 ? 11 : 8));
}

/* ---- a pool in host memory, laid out by strides as the daemon lays pools out ---- */

struct pool {
	struct kvpd_kv_layout l;
	uint8_t *mem;
};

static void pool_make(struct pool *p, enum attn_dtype dt, uint32_t kv_heads, uint32_t hd,
		      uint32_t bs, uint32_t blocks, bool layer_layout)
{
	struct kvpd_kv_layout *l = &p->l;
	size_t row = hd * attn_dtype_size(dt);

	memset(l, 0, sizeof(*l));
	l->num_blocks = blocks;
	l->block_size = bs;
	l->layers = 2;
	l->kv_heads = kv_heads;
	l->head_dim = hd;
	l->dtype = dt;
	l->row_bytes = row;
	l->slot_bytes = 2 * 2 * kv_heads * bs * row;
	l->total_bytes = blocks * l->slot_bytes;
	if (layer_layout) { /* per layer K then V, each [blocks][bs][kv_heads][hd] */
		l->token_stride = kv_heads * row;
		l->head_stride = row;
		l->block_stride = bs * kv_heads * row;
		l->v_delta = blocks * l->block_stride;
		l->layer_stride = 2 * l->v_delta;
	} else { /* per block, per layer, K then V, each [kv_heads][bs][hd] */
		l->token_stride = row;
		l->head_stride = bs * row;
		l->block_stride = l->slot_bytes;
		l->v_delta = kv_heads * bs * row;
		l->layer_stride = 2 * l->v_delta;
	}
	p->mem = malloc(l->total_bytes);
	assert_non_null(p->mem);
	/* NaN everywhere but the rows a case fills */
	memset(p->mem, 0xff, l->total_bytes);
}

/* ---- one ATTEND: its sequences, run through the plan and the kernels, and the host kernel ---- */

struct seq_def {
	uint32_t first_pos, count;
};

struct attend_case {
	const char *name;
	enum attn_dtype kv, q;
	uint32_t hd, kv_heads, g, bs;
	bool layer_layout;
	struct kvpd_mask mask;
	uint32_t ring_blocks;  /* cyclic: the ring's blocks */
	float softcap;
	uint32_t nseqs;
	struct seq_def seqs[4];
	uint32_t want_split;   /* the split of the first sequence the plan must choose (0: any) */
	bool want_mma;
};

static uint32_t mask_span(const struct kvpd_mask *m, uint32_t first, uint32_t last, uint32_t *lo,
			  uint32_t *hi)
{
	uint32_t l[2], h[2], n = kvpd_mask_union(m, first, last, l, h);

	*lo = l[0];
	*hi = h[n - 1];
	return n;
}

static void run_case(const struct attend_case *c)
{
	const uint32_t layer = 1, q_heads = c->kv_heads * c->g;
	const size_t q_row = c->hd * attn_dtype_size(c->q);
	struct kvpd_attend_unit units[4];
	uint32_t *tables[4];
	uint8_t *qs[4], *outs[4], *refs[4];
	struct kvpd_job job;
	struct kvg_plan plan;
	struct pool p;
	uint32_t blocks = 2; /* the null block, and one spare */
	uint8_t *buf;
	double worst = 0;

	for (uint32_t s = 0; s < c->nseqs; s++)
		blocks += c->ring_blocks ? c->ring_blocks :
					   (c->seqs[s].first_pos + c->seqs[s].count + c->bs - 1) / c->bs;
	pool_make(&p, c->kv, c->kv_heads, c->hd, c->bs, blocks, c->layer_layout);

	/* Each sequence's blocks: the pool's ids 1.. shuffled, so no table is in order. */
	uint32_t *ids = malloc(blocks * sizeof(*ids)), next_id = 0;

	assert_non_null(ids);
	for (uint32_t i = 0; i < blocks - 1; i++)
		ids[i] = i + 1;
	for (uint32_t i = blocks - 2; i > 0; i--) {
		uint32_t j = (uint32_t)(rnd() % (i + 1)), t = ids[i];

		ids[i] = ids[j];
		ids[j] = t;
	}
	memset(&job, 0, sizeof(job));
	for (uint32_t s = 0; s < c->nseqs; s++) {
		const struct seq_def *d = &c->seqs[s];
		struct kvpd_attend_unit *u = &units[s];
		uint32_t end = d->first_pos + d->count, ring = c->ring_blocks * c->bs;
		uint32_t nblocks = c->ring_blocks ? c->ring_blocks : (end + c->bs - 1) / c->bs, lo, hi;

		tables[s] = ids + next_id;
		next_id += nblocks;
		memset(u, 0, sizeof(*u));
		u->mask = c->mask;
		u->first_pos = d->first_pos;
		u->count = d->count;
		u->minkeys = UINT32_MAX;
		for (uint32_t i = 0; i < d->count; i++) {
			uint32_t l[2], h[2], n = kvpd_mask_ranges(&c->mask, d->first_pos + i, l, h), k = 0;

			for (uint32_t r = 0; r < n; r++)
				k += h[r] - l[r];
			u->keys += k;
			u->minkeys = k < u->minkeys ? k : u->minkeys;
			u->maxkeys = k > u->maxkeys ? k : u->maxkeys;
			/* the rows this query sees get values: K, V of every kv head, this layer */
			for (uint32_t r = 0; r < n; r++)
				for (uint32_t pos = l[r]; pos < h[r]; pos++) {
					uint32_t pp = ring ? pos % ring : pos;

					for (uint32_t kh = 0; kh < c->kv_heads; kh++) {
						size_t at = tables[s][pp / c->bs] * p.l.block_stride +
							    layer * p.l.layer_stride + kh * p.l.head_stride +
							    pp % c->bs * p.l.token_stride;

						for (uint32_t e = 0; e < c->hd; e++) {
							/* the same values whichever query reaches the row first */
							uint64_t saved = rng_state;

							rng_state = (uint64_t)(s * 7919 + pos) * 1000003 + kh * 131 + e + 1;
							st(p.mem + at, c->kv, e, frand());
							st(p.mem + at + p.l.v_delta, c->kv, e, frand());
							rng_state = saved;
						}
					}
				}
		}
		/* the map as the daemon makes it: the ring whole, or the span the queries read */
		mask_span(&c->mask, d->first_pos, end - 1, &lo, &hi);
		u->map.ring_tokens = ring;
		u->map.first_block = ring ? 0 : lo / c->bs;
		u->map.nblocks = ring ? c->ring_blocks : (hi - 1) / c->bs - lo / c->bs + 1;
		u->map.ids = tables[s] + u->map.first_block;
		qs[s] = malloc(d->count * q_heads * q_row);
		outs[s] = malloc(d->count * q_heads * q_row);
		refs[s] = malloc(d->count * q_heads * q_row);
		assert_true(qs[s] && outs[s] && refs[s]);
		for (size_t i = 0; i < (size_t)d->count * q_heads * c->hd; i++)
			st(qs[s], c->q, i, frand());
		memset(outs[s], 0xff, d->count * q_heads * q_row);
		u->q = qs[s];
		u->out = outs[s];
	}
	job.type = KVPD_JOB_ATTEND;
	job.layout = &p.l;
	job.mem = p.mem;
	job.layer = layer;
	job.q_heads = q_heads;
	job.nunits = c->nseqs;
	job.units = units;
	job.params = (struct attn_params){ .g = c->g, .scale = 1.0f / sqrtf((float)c->hd) * 2.0f,
					   .softcap = c->softcap, .q_dtype = c->q };

	assert_int_equal(kvg_plan_attend(&job, SMS, &plan), 0);
	if ((plan.kernel < KVG_K_kvg_simt_f32_d4) != c->want_mma)
		fail_msg("%s: kernel %s, not the %s kernel", c->name, kvg_kernel_names[plan.kernel],
			 c->want_mma ? "tensor-core" : "SIMT");
	buf = malloc(plan.dev_bytes);
	assert_non_null(buf);
	memset(buf, 0xff, plan.dev_bytes); /* partials the kernels must write before the merge reads */
	kvg_plan_fill(&job, &plan, buf);
	if (c->want_split) {
		const struct kvg_unit *ku = (const struct kvg_unit *)(buf + plan.units_at);

		if (ku[0].split != c->want_split)
			fail_msg("%s: split %u, want %u", c->name, ku[0].split, c->want_split);
		assert_int_not_equal(plan.merge_items, 0);
	}
	kvg_plan_bind(&plan, (uintptr_t)buf, (uintptr_t)p.mem);
	kvg_emu_attend(plan.kernel, plan.grid, plan.block, plan.smem,
		       plan.merge_items ? plan.merge_grid : 0, plan.merge_block, &plan.args);
	kvg_plan_collect(&job, &plan, buf);

	/* the host backend's kernel, a kv head and query at a time (backend_host.c's attend) */
	for (uint32_t s = 0; s < c->nseqs; s++) {
		const struct kvpd_attend_unit *u = &units[s];

		for (uint32_t h = 0; h < c->kv_heads; h++) {
			struct attn_keys keys = {
				.pool = p.mem, .block_stride = p.l.block_stride, .row_stride = p.l.token_stride,
				.k_off = kvpd_k_off(&p.l, layer, h), .v_delta = p.l.v_delta,
				.block_size = c->bs, .head_dim = c->hd, .dtype = c->kv, .ids = u->map.ids,
				.first_block = u->map.first_block, .nblocks = u->map.nblocks,
				.ring_tokens = u->map.ring_tokens,
			};

			for (uint32_t i = 0; i < u->count; i++) {
				size_t off = ((size_t)i * q_heads + (size_t)h * c->g) * q_row;
				struct attn_query q = { .q = qs[s] + off, .out = refs[s] + off };

				q.nranges = kvpd_mask_ranges(&c->mask, u->first_pos + i, q.lo, q.hi);
				attn_one(&keys, &q, &job.params);
			}
		}
		for (size_t i = 0; i < (size_t)u->count * q_heads * c->hd; i++) {
			double got = ld(outs[s], c->q, i), want = ld(refs[s], c->q, i);
			double tol = TOL + ulp(c->q, want), err = fabs(got - want);

			if (!(err <= tol))
				fail_msg("%s: seq %u pos %u q head %zu dim %zu: %.9g, host %.9g (|diff| %.3g > %.3g)",
					 c->name, s, u->first_pos + (uint32_t)(i / c->hd / q_heads),
					 i / c->hd % q_heads, i % c->hd, got, want, err, tol);
			worst = err / tol > worst ? err / tol : worst;
		}
	}
	printf("  %-44s %-22s items %6u merge %4u worst |diff|/tol %.3f\n", c->name,
	       kvg_kernel_names[plan.kernel], plan.args.items, plan.merge_items, worst);
	for (uint32_t s = 0; s < c->nseqs; s++) {
		free(qs[s]);
		free(outs[s]);
		free(refs[s]);
	}
	free(ids);
	free(buf);
	free(p.mem);
}

#define FULL { KVC_FULL, 0, 0 }
#define SWA(w) { KVC_SWA, w, 0 }
#define RSWA(w, p) { KVC_RSWA, w, p }
#define CHUNKED(c) { KVC_CHUNKED, c, 0 }
#define CYCLIC(w) { KVC_CYCLIC, w, 0 }

/* Decode (one query) at the end of a block, inside one, and prefill chunks, per mask. */
static const struct attend_case mma_cases[] = {
	{ "bf16 hd64 g4 full, decode and prefill", ATTN_BF16, ATTN_BF16, 64, 2, 4, 16, true, FULL, 0, 0,
	  3, { { 127, 1 }, { 100, 1 }, { 20, 37 } }, 0, true },
	{ "f16 hd64 g4 swa 40", ATTN_F16, ATTN_F16, 64, 2, 4, 16, true, SWA(40), 0, 0,
	  3, { { 200, 1 }, { 63, 1 }, { 90, 21 } }, 0, true },
	{ "bf16 hd64 g4 rswa 24, prefix 10 (a gap)", ATTN_BF16, ATTN_BF16, 64, 2, 4, 16, true,
	  RSWA(24, 10), 0, 0, 2, { { 150, 1 }, { 40, 30 } }, 0, true },
	{ "bf16 hd64 g2 rswa 24, prefix 32 (on a block)", ATTN_BF16, ATTN_BF16, 64, 2, 2, 16, true,
	  RSWA(24, 32), 0, 0, 2, { { 95, 1 }, { 30, 40 } }, 0, true },
	{ "f16 hd64 g8 chunked 32", ATTN_F16, ATTN_F16, 64, 1, 8, 16, true, CHUNKED(32), 0, 0,
	  2, { { 95, 1 }, { 50, 20 } }, 0, true },
	{ "bf16 hd64 g4 cyclic 20 (ring of 3 blocks)", ATTN_BF16, ATTN_BF16, 64, 2, 4, 16, true,
	  CYCLIC(20), 3, 0, 2, { { 130, 1 }, { 100, 9 } }, 0, true },
	{ "bf16 hd64 g1 full, 16 queries a tile", ATTN_BF16, ATTN_BF16, 64, 2, 1, 16, true, FULL, 0, 0,
	  1, { { 7, 40 } }, 0, true },
	{ "f16 hd64 g3 swa 17 (tiles across queries)", ATTN_F16, ATTN_F16, 64, 2, 3, 8, true, SWA(17),
	  0, 0, 1, { { 30, 11 } }, 0, true },
	{ "bf16 hd64 g32 full (tiles of half a query)", ATTN_BF16, ATTN_BF16, 64, 1, 32, 16, true,
	  FULL, 0, 0, 1, { { 70, 2 } }, 0, true },
	{ "bf16 q f32 hd64 g4 rswa 24, prefix 5, softcap", ATTN_BF16, ATTN_F32, 64, 2, 4, 16, true,
	  RSWA(24, 5), 0, 1.5f, 2, { { 77, 1 }, { 30, 12 } }, 0, true },
	{ "f16 hd128 g8 full, split (2000 keys)", ATTN_F16, ATTN_F16, 128, 1, 8, 16, true, FULL, 0, 0,
	  1, { { 1999, 1 } }, 7, true },
	{ "bf16 hd128 g4 block layout, softcap", ATTN_BF16, ATTN_BF16, 128, 2, 4, 16, false, FULL, 0,
	  2.0f, 2, { { 47, 1 }, { 10, 6 } }, 0, true },
	{ "bf16 hd256 g16 swa 30", ATTN_BF16, ATTN_BF16, 256, 1, 16, 16, true, SWA(30), 0, 0,
	  2, { { 80, 1 }, { 20, 3 } }, 0, true },
	{ "bf16 q f32 hd128 g2 chunked 1024, split (700 keys)", ATTN_BF16, ATTN_F32, 128, 2, 2, 16,
	  true, CHUNKED(1024), 0, 0, 1, { { 699, 1 } }, 2, true },
};

static const struct attend_case simt_cases[] = {
	{ "f32 hd24 g3 full, block layout", ATTN_F32, ATTN_F32, 24, 2, 3, 4, false, FULL, 0, 0,
	  3, { { 15, 1 }, { 13, 1 }, { 3, 9 } }, 0, false },
	{ "f32 hd8 g1 chunked 6, softcap", ATTN_F32, ATTN_F32, 8, 2, 1, 4, true, CHUNKED(6), 0, 1.25f,
	  2, { { 30, 1 }, { 5, 14 } }, 0, false },
	{ "f16 q f32 hd40 g2 swa 9", ATTN_F16, ATTN_F32, 40, 2, 2, 4, true, SWA(9), 0, 0,
	  2, { { 40, 1 }, { 12, 7 } }, 0, false },
	{ "f16 q f32 hd64 g4 rswa 5, prefix 6", ATTN_F16, ATTN_F32, 64, 2, 4, 4, true, RSWA(5, 6), 0, 0,
	  2, { { 31, 1 }, { 8, 10 } }, 0, false },
	{ "bf16 hd300 g1 cyclic 5 (ring of 2)", ATTN_BF16, ATTN_BF16, 300, 1, 1, 4, true, CYCLIC(5), 2,
	  0, 2, { { 17, 1 }, { 9, 3 } }, 0, false },
	{ "f32 hd128 g2 full, split (1100 keys)", ATTN_F32, ATTN_F32, 128, 1, 2, 16, true, FULL, 0, 0,
	  1, { { 1099, 1 } }, 4, false },
	{ "bf16 hd48 g5 rswa 7, prefix 3", ATTN_BF16, ATTN_BF16, 48, 1, 5, 4, false, RSWA(7, 3), 0, 0,
	  1, { { 6, 12 } }, 0, false },
};

static void test_mma_kernels(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(mma_cases) / sizeof(mma_cases[0]); i++)
		run_case(&mma_cases[i]);
}

static void test_simt_kernels(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(simt_cases) / sizeof(simt_cases[0]); i++)
		run_case(&simt_cases[i]);
}

/* The kernels' division: every block size and g a request can carry, any position. */
static void test_divider(void **state)
{
	(void)state;
	for (uint32_t d = 1; d < 5000; d++) {
		uint32_t mul, shr;

		kvg_divider(d, &mul, &shr);
		for (int k = 0; k < 200; k++) {
			uint32_t n = k < 4 ? (uint32_t[]){ 0, d - 1, d, (1u << 30) - 1 }[k] :
					     (uint32_t)(rnd() % (1u << 30));
			uint32_t q = mul ? (uint32_t)(((uint64_t)n * mul) >> 32) >> shr : n;

			if (q != n / d)
				fail_msg("%u / %u: %u, not %u", n, d, q, n / d);
		}
	}
	for (uint32_t d = 1u << 30; d > 1; d = d / 3 * 2) {
		uint32_t mul, shr, n = (1u << 30) + (1u << 29);
		uint32_t q;

		kvg_divider(d, &mul, &shr);
		q = (uint32_t)(((uint64_t)n * mul) >> 32) >> shr;
		assert_int_equal(q, n / d);
	}
}

/* Which kernel each pool takes, and the tensor-core ones only on 16-byte rows. */
static void test_kernel_choice(void **state)
{
	static const struct {
		enum attn_dtype kv, q;
		uint32_t hd;
		const char *want;
	} rows[] = {
		{ ATTN_BF16, ATTN_BF16, 128, "kvg_mma_bf16_hd128" },
		{ ATTN_BF16, ATTN_F32, 64, "kvg_mma_bf16q32_hd64" },
		{ ATTN_F16, ATTN_F16, 256, "kvg_mma_f16_hd256" },
		{ ATTN_F16, ATTN_F32, 128, "kvg_simt_f16q32_d4" },
		{ ATTN_F32, ATTN_F32, 128, "kvg_simt_f32_d4" },
		{ ATTN_BF16, ATTN_BF16, 96, "kvg_simt_bf16_d4" },
		{ ATTN_BF16, ATTN_BF16, 200, "kvg_simt_bf16_d8" },
		{ ATTN_F16, ATTN_F16, 1024, "kvg_simt_f16_d32" },
	};
	uint32_t ids[1] = { 1 };
	struct kvpd_attend_unit u = { .map = { .ids = ids, .nblocks = 1 }, .count = 1, .minkeys = 1 };
	struct kvpd_job job = { .layer = 0, .q_heads = 2, .nunits = 1, .units = &u };
	struct kvg_plan plan;

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct pool p;

		pool_make(&p, rows[i].kv, 1, rows[i].hd, 16, 4, true);
		job.layout = &p.l;
		job.params = (struct attn_params){ .g = 2, .scale = 1, .q_dtype = rows[i].q };
		assert_int_equal(kvg_plan_attend(&job, SMS, &plan), 0);
		assert_string_equal(kvg_kernel_names[plan.kernel], rows[i].want);
		/* a tensor-core block's rings: 4 warps, 3 stages (4 at 64) of 16 keys' K and V */
		if (!strncmp(rows[i].want, "kvg_mma", 7))
			assert_int_equal(plan.smem, 4 * (rows[i].hd <= 64 ? 4 : 3) * 16 * 2 * rows[i].hd * 2);
		if (rows[i].hd == 128 && rows[i].kv == ATTN_BF16) {
			/* a row stride off 16 bytes: the SIMT kernel */
			p.l.token_stride += 2;
			assert_int_equal(kvg_plan_attend(&job, SMS, &plan), 0);
			assert_string_equal(kvg_kernel_names[plan.kernel], "kvg_simt_bf16_d4");
		}
		free(p.mem);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_divider),
		cmocka_unit_test(test_kernel_choice),
		cmocka_unit_test(test_mma_kernels),
		cmocka_unit_test(test_simt_kernels),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
