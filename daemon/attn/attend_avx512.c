/* SPDX-License-Identifier: MIT */
/*
 * AVX-512 attention (F/BW/VL/DQ), and the AVX512_BF16 variant.
 *
 * The keys go by tiles of 16 positions (row pointers from the walk, so a tile
 * may span blocks); the query heads by chunks of G = 8, 4, 2 or 1 heads. For a
 * tile and a chunk:
 *  - QK: 16/G keys x G heads per step, one f32 accumulator per (key, head)
 *    over the whole head_dim, each K vector loaded and converted once for the
 *    G heads; a transpose-and-add tree turns the 16 accumulators into one
 *    vector of scores, lane = G*key + head;
 *  - one online-softmax step for the tile: vector max, exp2 and sums;
 *  - PV: the accumulators of G heads x 16/G vectors of head_dim stay in
 *    registers across the tile's keys, rescaled once per tile.
 * q is prescaled (by scale*log2(e), or scale/softcap) so the exponentials are
 * exp2. Rows are read as f32 vectors: f16 by vcvtph2ps; bf16 by a shift and a
 * mask of one 64-byte load, giving the even and the odd dims of 32 (q and the
 * accumulators are kept in that order, undone at the end). With AVX512_BF16
 * and a bf16 query over bf16 keys, QK is vdpbf16ps on the raw pairs.
 */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attend_internal.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512bf16")))
#define INL static inline __attribute__((always_inline))
#define NOINL static __attribute__((noinline))
#define UNROLL _Pragma("GCC unroll 16")

#define LOG2E 1.44269504088896341f
/* Tiles prefetched ahead of the one being computed. */
/*
 * Prefetch: the rows of the tile PF_TILES ahead, into L2 (T1), a line per step of
 * the computation (K lines during QK, V lines during PV) rather than all at a tile's
 * start: a burst of prefetches fills the miss buffers and stalls the core. Into L1
 * (T0) was slower, and 2-4 tiles ahead about the same (bench_kernel.c).
 */
#ifndef PF_TILES
#define PF_TILES 3
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T1
#endif

enum dt {
	DT_F32,
	DT_F16,
	DT_BF16P, /* bf16, head_dim % 32 == 0: even/odd dims of each 32 */
	DT_BF16N, /* bf16, natural order (vpmovzxwd + shift) */
};

struct k512 {
	__m512 mv[4], lv[4];  /* per head chunk: running max and sum, lane i: head i % G */
	float pb[ATTN_TILE * 8] __attribute__((aligned(64))); /* weights [key][head] */
	float alpha[16];
	float *qs;            /* [heads][nv*16] prescaled q, in vector order */
	float *acc;           /* [heads][nv*16] */
	const uint16_t *qb;   /* dp path: raw bf16 q rows of the walk's heads */
	const uint8_t *const *ahead; /* K rows of the tile PF_TILES ahead, prefetched while computing */
	size_t v_delta;
	unsigned nv, hd;
	float qscale;         /* dp path: applied to the dot products */
	float capv;           /* softcap * log2(e); 0: none */
};

typedef void tile_fn(struct k512 *c, const uint8_t *const *rows, unsigned n, unsigned ci,
		     unsigned h0);

/* ---- primitives ---- */

/* Bytes per vector of a row. */
#define VB(dt) ((dt) == DT_F32 ? 64 : 32)

#define PF(p) _mm_prefetch((const char *)(p), PF_HINT)

/* Vector i of a row from p (p at a 64-byte unit boundary for BF16P). */
INL T512 __m512 ld(const int dt, const uint8_t *p, const int i)
{
	if (dt == DT_F32)
		return _mm512_loadu_ps(p + 64 * i);
	if (dt == DT_F16)
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32 * i)));
	if (dt == DT_BF16P) {
		__m512i x = _mm512_loadu_si512(p + 64 * (i >> 1));

		return _mm512_castsi512_ps((i & 1) ? _mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u))
						   : _mm512_slli_epi32(x, 16));
	}
	return _mm512_castsi512_ps(_mm512_slli_epi32(
		_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 32 * i))), 16));
}

/* r[i] = sum of the lanes of a[i]. */
INL T512 __m512 hsum16(const __m512 *a)
{
	__m512 t[8], u[4], v[2];

	UNROLL for (int i = 0; i < 8; i++)
		t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
				     _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
	UNROLL for (int i = 0; i < 4; i++) {
		__m512d x = _mm512_castps_pd(t[2 * i]), y = _mm512_castps_pd(t[2 * i + 1]);

		u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
				     _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
	}
	UNROLL for (int i = 0; i < 2; i++)
		v[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
				     _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xdd));
	return _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88),
			     _mm512_shuffle_f32x4(v[0], v[1], 0xdd));
}

/* Combine the lanes that hold the same head (lane % G), G a power of two. */
INL T512 __m512 red_max(const int G, __m512 x)
{
	if (G < 2)
		x = _mm512_max_ps(x, _mm512_permute_ps(x, 0xb1));
	if (G < 4)
		x = _mm512_max_ps(x, _mm512_permute_ps(x, 0x4e));
	if (G < 8)
		x = _mm512_max_ps(x, _mm512_shuffle_f32x4(x, x, 0xb1));
	return _mm512_max_ps(x, _mm512_shuffle_f32x4(x, x, 0x4e));
}

INL T512 __m512 red_add(const int G, __m512 x)
{
	if (G < 2)
		x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xb1));
	if (G < 4)
		x = _mm512_add_ps(x, _mm512_permute_ps(x, 0x4e));
	if (G < 8)
		x = _mm512_add_ps(x, _mm512_shuffle_f32x4(x, x, 0xb1));
	return _mm512_add_ps(x, _mm512_shuffle_f32x4(x, x, 0x4e));
}

/* 2^x (Cephes exp2f polynomial, rel. error ~2e-7); x below -127 gives ~0. */
INL T512 __m512 exp2v(__m512 x)
{
	__m512 xi, f, p;

	x = _mm512_max_ps(x, _mm512_set1_ps(-127.0f));
	xi = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	f = _mm512_sub_ps(x, xi);
	p = _mm512_set1_ps(1.535336188319500e-4f);
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, xi);
}

/* tanh(t) = sign(t) (e - 1) / (e + 1), e = exp(2|t|) (|t| capped at 9); abs. error ~1e-7. */
INL T512 __m512 tanhv(__m512 t)
{
	__m512 sign = _mm512_set1_ps(-0.0f);
	__m512 a = _mm512_min_ps(_mm512_andnot_ps(sign, t), _mm512_set1_ps(9.0f));
	__m512 e = exp2v(_mm512_mul_ps(a, _mm512_set1_ps(2.0f * LOG2E)));
	__m512 r = _mm512_div_ps(_mm512_sub_ps(e, _mm512_set1_ps(1.0f)),
				 _mm512_add_ps(e, _mm512_set1_ps(1.0f)));

	return _mm512_or_ps(r, _mm512_and_ps(sign, t));
}

/* ---- one tile, one chunk of G heads ---- */

/*
 * Scores of the tile. While at it, prefetches the K rows of the tile ahead (pf: the
 * first head chunk only), a line per step: spread over the work, not in a burst.
 */
INL T512 void qk(struct k512 *c, const int dt, const int G, const uint8_t *const *rows, unsigned n,
		 unsigned h0, int pf, __m512 *sv)
{
	const int KB = 16 / G, U = 64 / VB(dt);
	const size_t qstride = (size_t)c->nv * 16;
	const float *qh = c->qs + h0 * qstride;
	const unsigned nv = c->nv, nfull = nv - nv % U;

	for (int sub = 0; sub < G; sub++) {
		const uint8_t *const *r = rows + sub * KB, *const *pa = c->ahead + sub * KB;
		__m512 a[16];
		unsigned v;

		if ((unsigned)(sub * KB) >= n) {
			sv[sub] = _mm512_setzero_ps();
			continue;
		}
		UNROLL for (int i = 0; i < 16; i++)
			a[i] = _mm512_setzero_ps();
		for (v = 0; v < nfull; v += U) {
			size_t off = v * VB(dt);

			UNROLL for (int kk = 0; kk < KB; kk++) {
				if (pf)
					PF(pa[kk] + off);
				UNROLL for (int u = 0; u < U; u++) {
					__m512 kv = ld(dt, r[kk] + off, u);

					UNROLL for (int h = 0; h < G; h++)
						a[kk * G + h] = _mm512_fmadd_ps(
							_mm512_loadu_ps(qh + h * qstride + (v + u) * 16), kv,
							a[kk * G + h]);
				}
			}
		}
		if (U > 1 && v < nv) { /* an odd vector at the end (head_dim % 32 == 16) */
			size_t off = v * VB(dt);

			UNROLL for (int kk = 0; kk < KB; kk++) {
				__m512 kv = ld(dt == DT_BF16P ? DT_BF16N : dt, r[kk] + off, 0);

				if (pf)
					PF(pa[kk] + off);
				UNROLL for (int h = 0; h < G; h++)
					a[kk * G + h] = _mm512_fmadd_ps(_mm512_loadu_ps(qh + h * qstride + v * 16), kv,
									a[kk * G + h]);
			}
		}
		sv[sub] = hsum16(a);
	}
}

INL T512BF void qk_dp(struct k512 *c, const int G, const uint8_t *const *rows, unsigned n,
		      unsigned h0, int pf, __m512 *sv)
{
	const int KB = 16 / G;
	const unsigned hd = c->hd;
	const uint16_t *qh = c->qb + (size_t)h0 * hd;

	for (int sub = 0; sub < G; sub++) {
		const uint8_t *const *r = rows + sub * KB, *const *pa = c->ahead + sub * KB;
		__m512 a[16];

		if ((unsigned)(sub * KB) >= n) {
			sv[sub] = _mm512_setzero_ps();
			continue;
		}
		UNROLL for (int i = 0; i < 16; i++)
			a[i] = _mm512_setzero_ps();
		for (unsigned d = 0; d < hd; d += 32) {
			UNROLL for (int kk = 0; kk < KB; kk++) {
				__m512bh kv = (__m512bh)_mm512_loadu_si512(r[kk] + 2 * d);

				if (pf)
					PF(pa[kk] + 2 * d);
				UNROLL for (int h = 0; h < G; h++)
					a[kk * G + h] = _mm512_dpbf16_ps(
						a[kk * G + h], (__m512bh)_mm512_loadu_si512(qh + h * hd + d), kv);
			}
		}
		sv[sub] = _mm512_mul_ps(hsum16(a), _mm512_set1_ps(c->qscale));
	}
}

INL T512 void softmax(struct k512 *c, const int G, __m512 *sv, unsigned n, unsigned ci)
{
	__m512 tm = _mm512_set1_ps(-INFINITY), mn, a, ls = _mm512_setzero_ps();
	__mmask16 km[8];

	for (int sub = 0; sub < G; sub++) {
		int cnt = (int)(G * n) - 16 * sub;

		cnt = cnt < 0 ? 0 : cnt > 16 ? 16 : cnt;
		km[sub] = (__mmask16)((1u << cnt) - 1);
		if (c->capv != 0)
			sv[sub] = _mm512_mul_ps(_mm512_set1_ps(c->capv), tanhv(sv[sub]));
		tm = _mm512_mask_max_ps(tm, km[sub], tm, sv[sub]);
	}
	tm = red_max(G, tm);
	mn = _mm512_max_ps(c->mv[ci], tm);
	a = exp2v(_mm512_sub_ps(c->mv[ci], mn));
	for (int sub = 0; sub < G; sub++) {
		__m512 pr = _mm512_maskz_mov_ps(km[sub], exp2v(_mm512_sub_ps(sv[sub], mn)));

		_mm512_store_ps(c->pb + 16 * sub, pr);
		ls = _mm512_add_ps(ls, pr);
	}
	ls = red_add(G, ls);
	c->lv[ci] = _mm512_fmadd_ps(c->lv[ci], a, ls);
	c->mv[ci] = mn;
	_mm512_storeu_ps(c->alpha, a);
}

/*
 * Accumulators of G heads x CP vectors from vector v0, over the tile's keys; prefetches
 * the same part of the V rows of the tile ahead.
 */
INL T512 void pv(struct k512 *c, const int dt, const int G, const int CP,
		 const uint8_t *const *rows, unsigned n, unsigned h0, unsigned v0, int pf)
{
	const size_t stride = (size_t)c->nv * 16, off = c->v_delta + v0 * VB(dt);
	float *acc = c->acc + h0 * stride + v0 * 16;
	__m512 a[16];

	UNROLL for (int h = 0; h < G; h++) {
		__m512 al = _mm512_set1_ps(c->alpha[h]);

		UNROLL for (int cc = 0; cc < CP; cc++)
			a[h * CP + cc] = _mm512_mul_ps(_mm512_loadu_ps(acc + h * stride + cc * 16), al);
	}
	for (unsigned j = 0; j < n; j++) {
		const uint8_t *r = rows[j] + off;
		const float *w = c->pb + j * G;

		if (pf) {
			for (int l = 0; l < (CP * VB(dt) + 63) / 64; l++)
				PF(c->ahead[j] + off + 64 * l);
		}
		UNROLL for (int cc = 0; cc < CP; cc++) {
			__m512 x = ld(dt, r, cc);

			UNROLL for (int h = 0; h < G; h++)
				a[h * CP + cc] = _mm512_fmadd_ps(_mm512_set1_ps(w[h]), x, a[h * CP + cc]);
		}
	}
	UNROLL for (int h = 0; h < G; h++)
		UNROLL for (int cc = 0; cc < CP; cc++)
			_mm512_storeu_ps(acc + h * stride + cc * 16, a[h * CP + cc]);
}

/*
 * PV over all of head_dim: passes of 16/G vectors (16 accumulators), then what is left
 * in passes of halving sizes (head_dim 80, 96, 112...).
 */
INL T512 void pv_all(struct k512 *c, const int dt, const int G, const uint8_t *const *rows,
		     unsigned n, unsigned h0, int pf)
{
	unsigned v0 = 0;

	for (; v0 + 16 / G <= c->nv; v0 += 16 / G)
		pv(c, dt, G, 16 / G, rows, n, h0, v0, pf);
	if (16 / G > 8 && v0 + 8 <= c->nv) {
		pv(c, dt, G, 16 / G > 8 ? 8 : 1, rows, n, h0, v0, pf);
		v0 += 8;
	}
	if (16 / G > 4 && v0 + 4 <= c->nv) {
		pv(c, dt, G, 16 / G > 4 ? 4 : 1, rows, n, h0, v0, pf);
		v0 += 4;
	}
	if (16 / G > 2 && v0 + 2 <= c->nv) {
		pv(c, dt, G, 16 / G > 2 ? 2 : 1, rows, n, h0, v0, pf);
		v0 += 2;
	}
	if (dt != DT_BF16P && v0 < c->nv) /* BF16P: nv is even */
		pv(c, dt, G, 1, rows, n, h0, v0, pf);
}

#define TILE(NAME, TGT, DT, G, QK)                                                        \
	NOINL TGT void NAME(struct k512 *c, const uint8_t *const *rows, unsigned n,        \
			    unsigned ci, unsigned h0)                                     \
	{                                                                                 \
		__m512 sv[G];                                                             \
		int pf = ci == 0;                                                         \
		QK;                                                                       \
		softmax(c, G, sv, n, ci);                                                 \
		pv_all(c, DT, G, rows, n, h0, pf);                                        \
	}
#define TILES(SFX, DT)                                                      \
	TILE(tile_##SFX##_1, T512, DT, 1, qk(c, DT, 1, rows, n, h0, pf, sv))     \
	TILE(tile_##SFX##_2, T512, DT, 2, qk(c, DT, 2, rows, n, h0, pf, sv))     \
	TILE(tile_##SFX##_4, T512, DT, 4, qk(c, DT, 4, rows, n, h0, pf, sv))     \
	TILE(tile_##SFX##_8, T512, DT, 8, qk(c, DT, 8, rows, n, h0, pf, sv))     \
	static tile_fn *const tiles_##SFX[4] = { tile_##SFX##_1, tile_##SFX##_2, \
						 tile_##SFX##_4, tile_##SFX##_8 };

TILES(f32, DT_F32)
TILES(f16, DT_F16)
TILES(bf16p, DT_BF16P)
TILES(bf16n, DT_BF16N)

TILE(tile_dp_1, T512BF, DT_BF16P, 1, qk_dp(c, 1, rows, n, h0, pf, sv))
TILE(tile_dp_2, T512BF, DT_BF16P, 2, qk_dp(c, 2, rows, n, h0, pf, sv))
TILE(tile_dp_4, T512BF, DT_BF16P, 4, qk_dp(c, 4, rows, n, h0, pf, sv))
TILE(tile_dp_8, T512BF, DT_BF16P, 8, qk_dp(c, 8, rows, n, h0, pf, sv))
static tile_fn *const tiles_dp[4] = { tile_dp_1, tile_dp_2, tile_dp_4, tile_dp_8 };

/* ---- setup and the walk ---- */

/* 16 dims of a q row (from element d) as f32. */
INL T512 __m512 ld_q(enum attn_dtype t, const void *q, size_t d)
{
	if (t == ATTN_F32)
		return _mm512_loadu_ps((const float *)q + d);
	if (t == ATTN_F16)
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)q + d)));
	return _mm512_castsi512_ps(_mm512_slli_epi32(
		_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)q + d))), 16));
}

INL T512 void st_out(enum attn_dtype t, void *out, size_t d, __m512 x)
{
	if (t == ATTN_F32) {
		_mm512_storeu_ps((float *)out + d, x);
	} else if (t == ATTN_F16) {
		_mm256_storeu_si256((__m256i *)((uint16_t *)out + d),
				    _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	} else {
		__m512i b = _mm512_castps_si512(x);
		__m512i r = _mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
				_mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1))));
		__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);

		r = _mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x400000));
		_mm256_storeu_si256((__m256i *)((uint16_t *)out + d),
				    _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
	}
}

NOINL T512 void run512(const struct attn_keys *k, const struct attn_query *q,
		       const struct attn_params *p, int dt, tile_fn *const *tiles, int dp)
{
	float qs[ATTN_SCRATCH] __attribute__((aligned(64)));
	float acc[ATTN_SCRATCH] __attribute__((aligned(64)));
	const uint8_t *rr[PF_TILES + 1][ATTN_TILE];
	unsigned rn[PF_TILES + 1];
	const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
	const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
	const __m512i il = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
	const __m512i ih = _mm512_add_epi32(il, _mm512_set1_epi32(8));
	const unsigned hd = k->head_dim, g = p->g;
	struct k512 c;
	unsigned hw;
	float qscale;

	c.nv = hd / 16;
	c.hd = hd;
	c.v_delta = k->v_delta;
	c.qs = qs;
	c.acc = acc;
	if (p->softcap > 0) {
		qscale = p->scale / p->softcap;
		c.capv = p->softcap * LOG2E;
	} else {
		qscale = p->scale * LOG2E;
		c.capv = 0;
	}
	c.qscale = qscale;
	hw = ATTN_SCRATCH / (c.nv * 16);
	if (hw > 16)
		hw = 16;

	for (unsigned hs = 0; hs < g; hs += hw) {
		unsigned gh = g - hs < hw ? g - hs : hw, nch = 0, cg[4], ch0[4];
		struct attn_walk wk;
		unsigned n;

		/* q of heads hs.., in vector order, prescaled; accumulators zero */
		if (dp) {
			c.qb = (const uint16_t *)q->q + (size_t)hs * hd;
		} else {
			for (unsigned h = 0; h < gh; h++) {
				float *dst = qs + (size_t)h * hd;
				size_t src = (size_t)(hs + h) * hd;
				__m512 sc = _mm512_set1_ps(qscale);

				for (unsigned d = 0; d < hd; d += 32) {
					__m512 lo = _mm512_mul_ps(ld_q(p->q_dtype, q->q, src + d), sc);
					__m512 hi;

					if (d + 16 >= hd) {
						_mm512_store_ps(dst + d, lo);
						break;
					}
					hi = _mm512_mul_ps(ld_q(p->q_dtype, q->q, src + d + 16), sc);
					if (dt == DT_BF16P) {
						__m512 e = _mm512_permutex2var_ps(lo, ev, hi);

						hi = _mm512_permutex2var_ps(lo, od, hi);
						lo = e;
					}
					_mm512_store_ps(dst + d, lo);
					_mm512_store_ps(dst + d + 16, hi);
				}
			}
		}
		memset(acc, 0, sizeof(float) * gh * hd);
		for (unsigned h = 0; h < gh;) {
			unsigned G = gh - h >= 8 ? 8 : gh - h >= 4 ? 4 : gh - h >= 2 ? 2 : 1;

			cg[nch] = G == 8 ? 3 : G == 4 ? 2 : G == 2 ? 1 : 0;
			ch0[nch] = h;
			c.mv[nch] = _mm512_set1_ps(-INFINITY);
			c.lv[nch] = _mm512_setzero_ps();
			nch++;
			h += G;
		}

		/* a ring of tiles: computing tile t while prefetching tile t + PF_TILES */
		attn_walk_init(&wk, k, q);
		for (unsigned t = 0; t < PF_TILES; t++) {
			rn[t] = attn_walk_fill(&wk, rr[t], ATTN_TILE);
			for (unsigned i = rn[t]; i < ATTN_TILE; i++)
				rr[t][i] = rn[t] ? rr[t][0] : rr[0][0];
		}
		for (unsigned t = 0; (n = rn[t % (PF_TILES + 1)]) != 0; t++) {
			const uint8_t **rows = rr[t % (PF_TILES + 1)];
			unsigned a = (t + PF_TILES) % (PF_TILES + 1);

			rn[a] = attn_walk_fill(&wk, rr[a], ATTN_TILE);
			for (unsigned i = rn[a]; i < ATTN_TILE; i++)
				rr[a][i] = rn[a] ? rr[a][0] : rows[0];
			c.ahead = rr[a];
			for (unsigned i = 0; i < nch; i++)
				tiles[cg[i]](&c, rows, n, i, ch0[i]);
		}

		/* out = acc / l, back in dim order */
		for (unsigned i = 0; i < nch; i++) {
			float l[16];
			unsigned G = 1u << cg[i];

			_mm512_storeu_ps(l, c.lv[i]);
			for (unsigned h = 0; h < G; h++) {
				const float *src = acc + (size_t)(ch0[i] + h) * hd;
				size_t dst = (size_t)(hs + ch0[i] + h) * hd;
				__m512 inv = _mm512_set1_ps(1.0f / l[h]);

				for (unsigned d = 0; d < hd; d += 32) {
					__m512 lo = _mm512_mul_ps(_mm512_load_ps(src + d), inv), hi;

					if (d + 16 >= hd) {
						st_out(p->q_dtype, q->out, dst + d, lo);
						break;
					}
					hi = _mm512_mul_ps(_mm512_load_ps(src + d + 16), inv);
					if (dt == DT_BF16P) {
						__m512 e = _mm512_permutex2var_ps(lo, il, hi);

						hi = _mm512_permutex2var_ps(lo, ih, hi);
						lo = e;
					}
					st_out(p->q_dtype, q->out, dst + d, lo);
					st_out(p->q_dtype, q->out, dst + d + 16, hi);
				}
			}
		}
	}
}

static int simd_ok(const struct attn_keys *k)
{
	return k->head_dim % 16 == 0 && k->head_dim <= ATTN_SCRATCH;
}

static int pick(const struct attn_keys *k, tile_fn *const **tiles)
{
	if (k->dtype == ATTN_F32) {
		*tiles = tiles_f32;
		return DT_F32;
	}
	if (k->dtype == ATTN_F16) {
		*tiles = tiles_f16;
		return DT_F16;
	}
	if (k->head_dim % 32 == 0) {
		*tiles = tiles_bf16p;
		return DT_BF16P;
	}
	*tiles = tiles_bf16n;
	return DT_BF16N;
}

void attn_one_avx512(const struct attn_keys *k, const struct attn_query *q,
		     const struct attn_params *p)
{
	tile_fn *const *tiles;
	int dt;

	if (!simd_ok(k)) {
		attn_one_c(k, q, p);
		return;
	}
	dt = pick(k, &tiles);
	run512(k, q, p, dt, tiles, 0);
}

void attn_one_avx512bf16(const struct attn_keys *k, const struct attn_query *q,
			 const struct attn_params *p)
{
	tile_fn *const *tiles;
	int dt;

	if (!simd_ok(k)) {
		attn_one_c(k, q, p);
		return;
	}
	dt = pick(k, &tiles);
	if (dt == DT_BF16P && p->q_dtype == ATTN_BF16)
		run512(k, q, p, dt, tiles_dp, 1);
	else
		run512(k, q, p, dt, tiles, 0);
}

#endif
