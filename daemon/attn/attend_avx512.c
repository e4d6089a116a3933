/* SPDX-License-Identifier: MIT */
/*
 * AVX-512 attention (F/BW/VL/DQ), and the AVX512_BF16 variant.
 *
 * The keys go by tiles of TK = 16 positions (row pointers from the walk, so a
 * tile may span blocks); the query heads by chunks of G = 8, 4, 2 or 1 heads.
 * For a tile and a chunk:
 *  - QK: 16/G keys x G heads per step, one f32 accumulator per (key, head)
 *    over the whole head_dim, each K vector loaded and converted once for the
 *    G heads; a transpose-and-add tree turns the 16 accumulators into one
 *    vector of scores, lane = G*key + head;
 *  - one online-softmax step for the tile: vector max, exp2 and sums;
 *  - PV: the accumulators of G heads x 16/G vectors of head_dim stay in
 *    registers across the tile's keys, rescaled once per tile.
 * The softmax step is a long dependency chain (reduction trees, exp2), so the
 * loop is software-pipelined: a step does QK + softmax of tile t, then PV of
 * tile t-1, and the out-of-order core runs the PV's FMAs under the chain
 * (weights and rescale factors are double-buffered); from G = 4, QK of t, PV of
 * t-1, then the softmax of t, whose chain runs under the next step's QK.
 *
 * q is prescaled (by scale*log2(e), or scale/softcap) so the exponentials are
 * exp2. Rows are read as f32 vectors: f16 by vcvtph2ps; bf16 by a shift and a
 * mask of one 64-byte load, giving the even and the odd dims of 32 (q and the
 * accumulators are kept in that order, undone at the end). With AVX512_BF16
 * and a bf16 query over bf16 keys, QK is vdpbf16ps on the raw pairs (exact
 * products, f32 sums; PV stays in f32 FMAs: rounding the weights to bf16
 * would cost accuracy); at G = 4 with the keys across the lanes (qk_dp4).
 *
 * Memory: each step prefetches the K rows of the next QK tile into L1 (in QK)
 * and the V rows of the next PV tile (in PV), and both of the tile
 * ATTN_PF_FAR ahead into L2, spread over its work (a line per load step, not
 * a burst at the start: a burst fills the miss buffers and stalls the core),
 * in the rising order of attn_pf_table (attend_internal.h). With one head over
 * rising keys (attn_keys_rising) a step runs PV first and QK row by row, so that
 * the loads themselves rise through memory, and prefetches nothing: the hardware
 * prefetchers do better there (docs/kvdata.md).
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
/*
 * Materialises a pointer in one register: otherwise GCC keeps base and each constant
 * offset apart, in more registers than there are, and spills them to vector registers.
 */
#define OPAQUE(p) __asm__("" : "+r"(p))

#define LOG2E 1.44269504088896341f
#define LN2 0.693147180559945309f
/* Keys per tile: one online-softmax step, one rescale of the accumulators. */
#define TK ATTN_TILE
/* Tile slots: the PV tile, the QK tile, and the tiles up to ATTN_PF_FAR ahead. */
#define RING (ATTN_PF_FAR + 2)

#define PF(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define PF_FAR(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)

enum dt {
	DT_F32,
	DT_F16,
	DT_BF16P, /* bf16, head_dim % 32 == 0: even/odd dims of each 32 */
	DT_BF16N, /* bf16, natural order (vpmovzxwd + shift) */
};

/* Bytes per vector of a row. */
#define VB(dt) ((dt) == DT_F32 ? 64 : 32)

struct k512 {
	__m512 mv[4], lv[4];  /* per head chunk: running max and sum, lane i: head i % G */
	/* weights [parity][h0 * TK + key * G + head of the chunk at h0], rescale [parity][head] */
	float pb[2][TK * 16] __attribute__((aligned(64)));
	float al[2][16];
	int rs[2][4];         /* [parity][chunk]: al holds rescale factors */
	float *qs;            /* [heads][nv*16] prescaled q, in vector order */
	float *acc;           /* [heads][nv*16] */
	const uint16_t *qb;   /* dp path: raw bf16 q rows of the walk's heads */
	const uint16_t *qx;   /* dp path, G = 4: per chunk, q for qk_dp4 (hd * 16 values) */
	size_t v_delta;
	unsigned nv, hd;
	float qscale;         /* dp path: applied to the dot products */
	float capv;           /* softcap * log2(e); 0: none */
	/* this step: QK of kq (nq keys, weights into pb[par]), PV of kp (np keys, pb[par^1]) */
	const uint8_t *const *kq, *const *kp;
	unsigned nq, np, par;
	/* prefetch: line tables of the next QK tile (K) and the next PV tile (V: + v_delta) */
	const uint8_t *const *pfk, *const *pfv;
	const uint8_t *const *pff; /* and of the tile ATTN_PF_FAR ahead (K and V) */
	unsigned pf_lines;    /* lines a row; 0: no prefetch */
	int rising;           /* one head over keys in one rising run (attn_keys_rising) */
};

typedef void tile_fn(struct k512 *c, unsigned ci, unsigned h0);

/* ---- primitives ---- */

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

/*
 * Lane 4 * L + i: the sum of the 4 lanes of 128-bit lane L of a[i] (i < 4): the first
 * two levels of hsum16, and all of qk_dp4's.
 */
INL T512 __m512 sum4(const __m512 *a)
{
	__m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
	__m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
	__m512d x = _mm512_castps_pd(t0), y = _mm512_castps_pd(t1);

	return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
			     _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
}

/* r[i] = sum of the lanes of a[i]. */
INL T512 __m512 hsum16(const __m512 *a)
{
	__m512 u[4], v[2];

	UNROLL for (int i = 0; i < 4; i++)
		u[i] = sum4(a + 4 * i);
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

/*
 * s = capv * tanh(s) for the score vectors; tanh(t) = sign(t) (e - 1) / (e + 1),
 * e = exp(2|t|) (|t| capped at 9), absolute error ~1e-7. Out of line: inline, the
 * compiler computes it (a division) whether the cap is on or not.
 */
NOINL T512 void softcap(__m512 *sv, int ns, float capv)
{
	const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);

	for (int i = 0; i < ns; i++) {
		__m512 a = _mm512_min_ps(_mm512_andnot_ps(sign, sv[i]), _mm512_set1_ps(9.0f));
		__m512 e = exp2v(_mm512_mul_ps(a, _mm512_set1_ps(2.0f * LOG2E)));
		__m512 r = _mm512_div_ps(_mm512_sub_ps(e, one), _mm512_add_ps(e, one));

		sv[i] = _mm512_mul_ps(_mm512_set1_ps(capv), _mm512_or_ps(r, _mm512_and_ps(sign, sv[i])));
	}
}

/* ---- one step, one chunk of G heads ---- */

/*
 * The scores of one head (G = 1) over rising keys (c->rising): each K row read
 * whole before the next, so that the loads rise through memory as the PV of the
 * tile before read the V rows just below them; no software prefetch. q stays in
 * registers (head_dim <= 128). Two sums a key halve its chain of FMAs.
 */
INL T512 void qk_rows(struct k512 *c, const int dt, __m512 *sv)
{
	const unsigned nv = c->nv;
	const uint8_t *const *r = c->kq;
	__m512 q[8], a[16];

	UNROLL for (int i = 0; i < 8; i++)
		q[i] = i < (int)nv ? _mm512_loadu_ps(c->qs + 16 * i) : _mm512_setzero_ps();
	UNROLL for (int kk = 0; kk < TK; kk++) {
		__m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();

		UNROLL for (int i = 0; i < 8; i += 2) {
			if (i < (int)nv)
				s0 = _mm512_fmadd_ps(q[i], ld(dt, r[kk], i), s0);
			if (i + 1 < (int)nv)
				s1 = _mm512_fmadd_ps(q[i + 1], ld(dt, r[kk], i + 1), s1);
		}
		a[kk] = _mm512_add_ps(s0, s1);
	}
	sv[0] = hsum16(a);
}

/*
 * Scores of the QK tile (c->kq, n keys): TK*G/16 vectors. pf: prefetch the K rows
 * of the next and of the far tile (the first head chunk only), a line per 64-byte
 * step: step v/U of keys sub*KB.. takes prefetch slots (sub * steps + v/U) * KB...
 */
INL T512 void qk(struct k512 *c, const int dt, const int G, unsigned h0, int pf, __m512 *sv)
{
	const int KB = 16 / G, U = 64 / VB(dt), NS = TK * G / 16;
	const size_t qstride = (size_t)c->nv * 16;
	const float *qh = c->qs + h0 * qstride;
	const unsigned nv = c->nv, nfull = nv - nv % U, n = c->nq, steps = (nv + U - 1) / U;

	if (G == 1 && c->rising) {
		qk_rows(c, dt, sv);
		return;
	}
	for (int sub = 0; sub < NS; sub++) {
		const uint8_t *const *r = c->kq + sub * KB;
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
			unsigned s0 = (sub * steps + v / U) * KB;
			/* reload the row pointers each step: hoisted, they would not fit in registers */
			const uint8_t *const *rv = r;

			OPAQUE(rv);
			UNROLL for (int kk = 0; kk < KB; kk++) {
				if (pf) {
					PF(c->pfk[s0 + kk]);
					PF_FAR(c->pff[s0 + kk]);
				}
				UNROLL for (int u = 0; u < U; u++) {
					__m512 kv = ld(dt, rv[kk] + off, u);

					UNROLL for (int h = 0; h < G; h++)
						a[kk * G + h] = _mm512_fmadd_ps(
							_mm512_loadu_ps(qh + h * qstride + (v + u) * 16), kv,
							a[kk * G + h]);
				}
			}
		}
		if (U > 1 && v < nv) { /* an odd vector at the end (head_dim % 32 == 16) */
			size_t off = v * VB(dt);
			unsigned s0 = (sub * steps + v / U) * KB;

			UNROLL for (int kk = 0; kk < KB; kk++) {
				__m512 kv = ld(dt == DT_BF16P ? DT_BF16N : dt, r[kk] + off, 0);

				if (pf) {
					PF(c->pfk[s0 + kk]);
					PF_FAR(c->pff[s0 + kk]);
				}
				UNROLL for (int h = 0; h < G; h++)
					a[kk * G + h] = _mm512_fmadd_ps(_mm512_loadu_ps(qh + h * qstride + v * 16), kv,
									a[kk * G + h]);
			}
		}
		sv[sub] = hsum16(a);
	}
}

/*
 * vdpbf16ps QK for G = 4 with the keys across the lanes: a K vector holds 8
 * dims (4 pairs) of each of 4 keys, by a 4 x 4 transpose of the 128-bit lanes of
 * the 4 keys' rows; the q vector, the same 8 dims of one head 4 times (c->qx,
 * [dims / 8][head][4 x 8]). A (key, head) score then sums 4 lanes, not the 16
 * of qk_dp's transpose-and-add trees: 2-7% faster in cache (docs/kvdata.md).
 */
INL T512BF void qk_dp4(struct k512 *c, unsigned h0, int pf, __m512 *sv)
{
	const unsigned lines = c->hd / 32;
	const uint16_t *qx = c->qx + (size_t)h0 * c->hd * 4;
	const uint8_t *const *pk = c->pfk, *const *pff = c->pff, *const *rows = c->kq;
	__m512 a[16];

	UNROLL for (int i = 0; i < 16; i++)
		a[i] = _mm512_setzero_ps();
	for (unsigned l = 0; l < lines; l++) {
		const uint8_t *const *rl = rows;
		const uint16_t *ql = qx + 512 * l;

		OPAQUE(rl);
		UNROLL for (int kg = 0; kg < 4; kg++) {
			__m512i x[4], t[4];

			UNROLL for (int k = 0; k < 4; k++) {
				if (pf) {
					PF(pk[l * TK + 4 * kg + k]);
					PF_FAR(pff[l * TK + 4 * kg + k]);
				}
				x[k] = _mm512_loadu_si512(rl[4 * kg + k] + 64 * l);
			}
			t[0] = _mm512_shuffle_i32x4(x[0], x[1], 0x44);
			t[1] = _mm512_shuffle_i32x4(x[0], x[1], 0xee);
			t[2] = _mm512_shuffle_i32x4(x[2], x[3], 0x44);
			t[3] = _mm512_shuffle_i32x4(x[2], x[3], 0xee);
			x[0] = _mm512_shuffle_i32x4(t[0], t[2], 0x88);
			x[1] = _mm512_shuffle_i32x4(t[0], t[2], 0xdd);
			x[2] = _mm512_shuffle_i32x4(t[1], t[3], 0x88);
			x[3] = _mm512_shuffle_i32x4(t[1], t[3], 0xdd);
			UNROLL for (int i = 0; i < 4; i++)
				UNROLL for (int h = 0; h < 4; h++)
					a[4 * kg + h] = _mm512_dpbf16_ps(
						a[4 * kg + h], (__m512bh)_mm512_load_si512(ql + 128 * i + 32 * h),
						(__m512bh)x[i]);
		}
	}
	/* lane 4 * key + j of a[4 * kg + head] -> lane 4 * key + head of sv[kg] */
	UNROLL for (int kg = 0; kg < 4; kg++)
		sv[kg] = _mm512_mul_ps(sum4(a + 4 * kg), _mm512_set1_ps(c->qscale));
}

/* The same with vdpbf16ps: raw bf16 q and K pairs, f32 sums; scaled afterwards. */
INL T512BF void qk_dp(struct k512 *c, const int G, unsigned h0, int pf, __m512 *sv)
{
	const int KB = 16 / G, NS = TK * G / 16;
	const unsigned hd = c->hd, n = c->nq, steps = hd / 32;
	const uint16_t *qh = c->qb + (size_t)h0 * hd;

	for (int sub = 0; sub < NS; sub++) {
		const uint8_t *const *r = c->kq + sub * KB;
		__m512 a[16];

		if ((unsigned)(sub * KB) >= n) {
			sv[sub] = _mm512_setzero_ps();
			continue;
		}
		UNROLL for (int i = 0; i < 16; i++)
			a[i] = _mm512_setzero_ps();
		for (unsigned d = 0; d < hd; d += 32) {
			const uint8_t *const *rv = r;
			unsigned s0 = (sub * steps + d / 32) * KB;

			OPAQUE(rv);
			UNROLL for (int kk = 0; kk < KB; kk++) {
				__m512bh kv = (__m512bh)_mm512_loadu_si512(rv[kk] + 2 * d);

				if (pf) {
					PF(c->pfk[s0 + kk]);
					PF_FAR(c->pff[s0 + kk]);
				}
				UNROLL for (int h = 0; h < G; h++)
					a[kk * G + h] = _mm512_dpbf16_ps(
						a[kk * G + h], (__m512bh)_mm512_loadu_si512(qh + h * hd + d), kv);
			}
		}
		sv[sub] = _mm512_mul_ps(hsum16(a), _mm512_set1_ps(c->qscale));
	}
}

/*
 * One online-softmax step of chunk ci: weights into pb, and the rescale factors into al
 * (*rs = 0 when there are none). The running max only moves when a score passes it by
 * more than RESCALE (log2 units: weights up to 2^8): the weights hang on it and a
 * predicted branch, not on this tile's max, so the reduction trees are off the critical
 * path, and most steps leave the accumulators as they are.
 */
#define RESCALE 8.0f
INL T512 void softmax(struct k512 *c, const int G, __m512 *sv, unsigned ci, float *pb, float *al,
		      int *rs)
{
	const int NS = TK * G / 16;
	__m512 tm = _mm512_set1_ps(-INFINITY), ls = _mm512_setzero_ps();
	__mmask16 km[TK / 2];

	if (c->capv != 0)
		softcap(sv, NS, c->capv);
	for (int sub = 0; sub < NS; sub++) {
		int cnt = (int)(G * c->nq) - 16 * sub;

		cnt = cnt < 0 ? 0 : cnt > 16 ? 16 : cnt;
		km[sub] = (__mmask16)((1u << cnt) - 1);
		tm = _mm512_mask_max_ps(tm, km[sub], tm, sv[sub]);
	}
	tm = red_max(G, tm);
	if (_mm512_cmp_ps_mask(tm, _mm512_add_ps(c->mv[ci], _mm512_set1_ps(RESCALE)), _CMP_GT_OQ)) {
		__m512 mn = _mm512_max_ps(c->mv[ci], tm);
		__m512 a = exp2v(_mm512_sub_ps(c->mv[ci], mn));

		c->lv[ci] = _mm512_mul_ps(c->lv[ci], a);
		c->mv[ci] = mn;
		_mm512_mask_storeu_ps(al, (__mmask16)((1u << G) - 1), a);
		*rs = 1;
	}
	for (int sub = 0; sub < NS; sub++) {
		__m512 pr = _mm512_maskz_mov_ps(km[sub], exp2v(_mm512_sub_ps(sv[sub], c->mv[ci])));

		_mm512_store_ps(pb + 16 * sub, pr);
		ls = _mm512_add_ps(ls, pr);
	}
	c->lv[ci] = _mm512_add_ps(c->lv[ci], red_add(G, ls));
}

/*
 * PV of the PV tile (c->kp): accumulators of G heads x CP vectors from vector v0,
 * over its keys. pf: prefetch the V lines of the next PV tile and of the far tile
 * that start in these bytes, LP a key: slots 16 * (v0 * VB / 64) + j * LP...
 */
INL T512 void pv(struct k512 *c, const int dt, const int G, const int CP, unsigned h0,
		 unsigned v0, int pf, const float *pb, const float *al, int rs)
{
	const int LP = (CP * VB(dt) + 63) / 64;
	const size_t stride = (size_t)c->nv * 16, off = c->v_delta + v0 * VB(dt);
	const uint8_t *const *pl = c->pfv + TK * (v0 * VB(dt) / 64);
	const uint8_t *const *plf = c->pff + TK * (v0 * VB(dt) / 64);
	float *acc = c->acc + h0 * stride + v0 * 16;
	const unsigned n = c->np;
	__m512 a[16];

	UNROLL for (int h = 0; h < G; h++)
		UNROLL for (int cc = 0; cc < CP; cc++)
			a[h * CP + cc] = _mm512_loadu_ps(acc + h * stride + cc * 16);
	if (rs) {
		UNROLL for (int h = 0; h < G; h++) {
			__m512 s = _mm512_set1_ps(al[h]);

			UNROLL for (int cc = 0; cc < CP; cc++)
				a[h * CP + cc] = _mm512_mul_ps(a[h * CP + cc], s);
		}
	}
	for (unsigned j = 0; j < n; j++) {
		const uint8_t *r = c->kp[j] + off;
		const float *w = pb + j * G;

		OPAQUE(r);
		if (pf)
			UNROLL for (int l = 0; l < LP; l++) {
				PF(pl[j * LP + l] + c->v_delta);
				PF_FAR(plf[j * LP + l] + c->v_delta);
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
INL T512 void pv_all(struct k512 *c, const int dt, const int G, unsigned h0, int pf,
		     const float *pb, const float *al, int rs)
{
	unsigned v0 = 0;

	for (; v0 + 16 / G <= c->nv; v0 += 16 / G)
		pv(c, dt, G, 16 / G, h0, v0, pf, pb, al, rs);
	if (16 / G > 8 && v0 + 8 <= c->nv) {
		pv(c, dt, G, 16 / G > 8 ? 8 : 1, h0, v0, pf, pb, al, rs);
		v0 += 8;
	}
	if (16 / G > 4 && v0 + 4 <= c->nv) {
		pv(c, dt, G, 16 / G > 4 ? 4 : 1, h0, v0, pf, pb, al, rs);
		v0 += 4;
	}
	if (16 / G > 2 && v0 + 2 <= c->nv) {
		pv(c, dt, G, 16 / G > 2 ? 2 : 1, h0, v0, pf, pb, al, rs);
		v0 += 2;
	}
	if (dt != DT_BF16P && v0 < c->nv) /* BF16P: nv is even */
		pv(c, dt, G, 1, h0, v0, pf, pb, al, rs);
}

/*
 * A step for the chunk ci of G heads from h0: QK + softmax of c->kq, then PV of c->kp.
 * Over rising keys (one head), PV first: V of the tile before lies just below K of this
 * one, so the reads rise through memory; the softmax of the tile before is long done.
 * From G = 4 the softmax waits until after the PV: its chain (reduction trees, exp2)
 * then runs under the next step's QK, whose FMAs do not depend on it, instead of
 * holding scheduler entries while the PV's FMAs queue for the same pipes (in cache,
 * f16 G = 4: 63.6 -> 62.5 TSC cycles a key, G = 8: 126 -> 121).
 */
#define TILE(NAME, TGT, DT, G, QK)                                                          \
	NOINL TGT void NAME(struct k512 *c, unsigned ci, unsigned h0)                        \
	{                                                                                   \
		const int pf = ci == 0 && c->pf_lines, rising = G == 1 && c->rising;         \
		const int late = G >= 4;                                                    \
		__m512 sv[TK * G / 16];                                                     \
		if (rising && c->np)                                                        \
			pv_all(c, DT, G, h0, 0, c->pb[c->par ^ 1] + h0 * TK,                \
			       c->al[c->par ^ 1] + h0, c->rs[c->par ^ 1][ci]);              \
		if (c->nq) {                                                                \
			QK;                                                                 \
			c->rs[c->par][ci] = 0;                                              \
			if (!late)                                                          \
				softmax(c, G, sv, ci, c->pb[c->par] + h0 * TK,              \
					c->al[c->par] + h0, &c->rs[c->par][ci]);            \
		}                                                                           \
		if (!rising && c->np)                                                       \
			pv_all(c, DT, G, h0, pf, c->pb[c->par ^ 1] + h0 * TK,               \
			       c->al[c->par ^ 1] + h0, c->rs[c->par ^ 1][ci]);              \
		if (late && c->nq)                                                          \
			softmax(c, G, sv, ci, c->pb[c->par] + h0 * TK, c->al[c->par] + h0,  \
				&c->rs[c->par][ci]);                                        \
	}
#define TILES(SFX, DT)                                                         \
	TILE(tile_##SFX##_1, T512, DT, 1, qk(c, DT, 1, h0, pf, sv))             \
	TILE(tile_##SFX##_2, T512, DT, 2, qk(c, DT, 2, h0, pf, sv))             \
	TILE(tile_##SFX##_4, T512, DT, 4, qk(c, DT, 4, h0, pf, sv))             \
	TILE(tile_##SFX##_8, T512, DT, 8, qk(c, DT, 8, h0, pf, sv))             \
	static tile_fn *const tiles_##SFX[4] = { tile_##SFX##_1, tile_##SFX##_2, \
						 tile_##SFX##_4, tile_##SFX##_8 };

TILES(f32, DT_F32)
TILES(f16, DT_F16)
TILES(bf16p, DT_BF16P)
TILES(bf16n, DT_BF16N)

TILE(tile_dp_1, T512BF, DT_BF16P, 1, qk_dp(c, 1, h0, pf, sv))
TILE(tile_dp_2, T512BF, DT_BF16P, 2, qk_dp(c, 2, h0, pf, sv))
TILE(tile_dp_4, T512BF, DT_BF16P, 4, qk_dp4(c, h0, pf, sv))
TILE(tile_dp_8, T512BF, DT_BF16P, 8, qk_dp(c, 8, h0, pf, sv))
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

/* 16 dims of an output row, rounded to nearest even. */
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

/* qk_rows' case: one head over keys in one rising run, q kept in registers (head_dim <= 128). */
static int one_head_rising(const struct attn_keys *k, unsigned g)
{
	return g == 1 && k->head_dim <= 128 && attn_keys_rising(k);
}

NOINL T512 void run512(const struct attn_keys *k, const struct attn_query *q,
		       const struct attn_params *p, int dt, tile_fn *const *tiles, int dp)
{
	float qs[ATTN_SCRATCH] __attribute__((aligned(64)));
	float acc[ATTN_SCRATCH] __attribute__((aligned(64)));
	uint16_t qx[4 * ATTN_SCRATCH] __attribute__((aligned(64)));
	const uint8_t *rr[RING][TK];
	const uint8_t *pft[RING][TK * ATTN_PF_LINES]; /* the line tables of rr */
	unsigned rn[RING];
	const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
	const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
	const __m512i il = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
	const __m512i ih = _mm512_add_epi32(il, _mm512_set1_epi32(8));
	const unsigned hd = k->head_dim, g = p->g;
	const size_t row_bytes = (size_t)hd * attn_dtype_size(k->dtype);
	const enum attn_dtype odt = q->lse ? ATTN_F32 : p->q_dtype;
	struct k512 c;
	unsigned hw;
	float qscale;

	c.nv = hd / 16;
	c.hd = hd;
	c.v_delta = k->v_delta;
	c.qs = qs;
	c.acc = acc;
	c.qx = qx;
	/* qk_dp has no row-by-row form (attn_one_avx512bf16 keeps such calls off it) */
	c.rising = !dp && one_head_rising(k, g);
	c.pf_lines = c.rising ? 0 : attn_pf_lines(row_bytes);
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
		const uint8_t *any;

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
			if (dp && G == 4) /* qk_dp4's q: each 8 dims of each head, 4 times */
				for (unsigned d = 0; d < hd; d += 8)
					for (unsigned j = 0; j < 4; j++)
						for (unsigned r = 0; r < 4; r++)
							memcpy(qx + (size_t)h * hd * 4 + (d / 8 * 4 + j) * 32 + 8 * r,
							       c.qb + (size_t)(h + j) * hd + d, 16);
			nch++;
			h += G;
		}

		/*
		 * Step t: QK of tile t, PV of tile t-1, tile t+1 prefetched into L1, tile
		 * t+ATTN_PF_FAR walked and prefetched into L2. Empty tiles past the end:
		 * n 0, rows `any`.
		 */
		attn_walk_init(&wk, k, q);
		rn[0] = attn_next_tile(&wk, rr[0], pft[0], c.pf_lines, row_bytes, NULL);
		any = rr[0][0];
		for (unsigned i = 1; i < ATTN_PF_FAR; i++)
			rn[i] = attn_next_tile(&wk, rr[i], pft[i], c.pf_lines, row_bytes, any);
		for (unsigned t = 0;; t++) {
			unsigned sq = t % RING, sp = (t + RING - 1) % RING, sn = (t + 1) % RING;
			unsigned sf = (t + ATTN_PF_FAR) % RING;

			c.nq = rn[sq];
			c.np = t ? rn[sp] : 0;
			if (!c.nq && !c.np)
				break;
			rn[sf] = attn_next_tile(&wk, rr[sf], pft[sf], c.pf_lines, row_bytes, any);
			c.kq = rr[sq];
			c.kp = rr[sp];
			c.pfk = pft[sn];
			c.pfv = pft[sq];
			c.pff = pft[sf];
			c.par = t & 1;
			for (unsigned i = 0; i < nch; i++)
				tiles[cg[i]](&c, i, ch0[i]);
		}

		/* out = acc / l, back in dim order */
		for (unsigned i = 0; i < nch; i++) {
			float l[16], m[16];
			unsigned G = 1u << cg[i];

			_mm512_storeu_ps(l, c.lv[i]);
			_mm512_storeu_ps(m, c.mv[i]);
			for (unsigned h = 0; h < G; h++) {
				const float *src = acc + (size_t)(ch0[i] + h) * hd;
				size_t dst = (size_t)(hs + ch0[i] + h) * hd;
				__m512 inv = _mm512_set1_ps(1.0f / l[h]);

				/* m and l are in log2 units (q prescaled by log2 e): back to natural */
				if (q->lse)
					q->lse[hs + ch0[i] + h] = (m[h] + log2f(l[h])) * LN2;

				for (unsigned d = 0; d < hd; d += 32) {
					__m512 lo = _mm512_mul_ps(_mm512_load_ps(src + d), inv), hi;

					if (d + 16 >= hd) {
						st_out(odt, q->out, dst + d, lo);
						break;
					}
					hi = _mm512_mul_ps(_mm512_load_ps(src + d + 16), inv);
					if (dt == DT_BF16P) {
						__m512 e = _mm512_permutex2var_ps(lo, il, hi);

						hi = _mm512_permutex2var_ps(lo, ih, hi);
						lo = e;
					}
					st_out(odt, q->out, dst + d, lo);
					st_out(odt, q->out, dst + d + 16, hi);
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
	/*
	 * One head over rising keys reads faster through qk_rows in f32 (q widened exactly)
	 * than through vdpbf16ps with prefetches: 0.78-0.83 of the bandwidth against
	 * 0.89-0.93 (kvbench attend, bf16 GQA 1, two cores); from G = 2 the QK arithmetic
	 * counts, and vdpbf16ps halves it.
	 */
	if (dt == DT_BF16P && p->q_dtype == ATTN_BF16 && !one_head_rising(k, p->g))
		run512(k, q, p, dt, tiles_dp, 1);
	else
		run512(k, q, p, dt, tiles, 0);
}

#endif
