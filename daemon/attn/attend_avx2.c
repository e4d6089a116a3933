/* SPDX-License-Identifier: MIT */
/*
 * AVX2 + FMA + F16C attention: the AVX-512 kernel (attend_avx512.c: tiles,
 * head chunks, the pipelined steps, lazy rescaling, prefetching) on 8-lane
 * vectors. QK by 8/G keys x G heads with one accumulator per pair and a
 * transpose-and-add tree to a vector of scores (lane = G*key + head, two
 * vectors per 16 keys and head); PV with G heads x 8/G vectors of
 * accumulators in registers. bf16 rows are read 16 dims at a time as their
 * even and odd dims (a shift and a mask); q and the accumulators are kept in
 * that order.
 */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attend_internal.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
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
#define TK ATTN_TILE
/* Tile slots: the PV tile, the QK tile, and the tiles up to ATTN_PF_FAR ahead. */
#define RING (ATTN_PF_FAR + 2)
#define PF(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define PF_FAR(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
/* Bytes per vector of a row. */
#define VB(dt) ((dt) == DT_F32 ? 32 : 16)

enum dt { DT_F32, DT_F16, DT_BF16P };

struct k2 {
	__m256 mv[4], lv[4];  /* per head chunk: running max and sum, lane i: head i % G */
	/* weights [parity][h0 * TK + key * G + head of the chunk at h0], rescale [parity][head] */
	float pb[2][TK * 16] __attribute__((aligned(32)));
	float al[2][16];
	int rs[2][4];         /* [parity][chunk]: al holds rescale factors */
	float *qs;            /* [heads][hd] prescaled q, in vector order */
	float *acc;           /* [heads][hd] */
	size_t v_delta;
	unsigned nv, hd;
	float capv;           /* softcap * log2(e); 0: none */
	/* this step: QK of kq (nq keys, weights into pb[par]), PV of kp (np keys, pb[par^1]) */
	const uint8_t *const *kq, *const *kp;
	unsigned nq, np, par;
	/* prefetch: line tables of the next QK tile (K) and the next PV tile (V: + v_delta) */
	const uint8_t *const *pfk, *const *pfv;
	const uint8_t *const *pff; /* and of the tile ATTN_PF_FAR ahead (K and V) */
	unsigned pf_lines;    /* lines a row; 0: no prefetch */
};

typedef void tile_fn(struct k2 *c, unsigned ci, unsigned h0);

/* ---- primitives ---- */

/* Vector i of a row from p (p at a 32-byte unit boundary for BF16P). */
INL T2 __m256 ld(const int dt, const uint8_t *p, const int i)
{
	if (dt == DT_F32)
		return _mm256_loadu_ps((const float *)(p + 32 * i));
	if (dt == DT_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * i)));
	{
		__m256i x = _mm256_loadu_si256((const __m256i *)(p + 32 * (i >> 1)));

		return _mm256_castsi256_ps((i & 1) ? _mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u))
						   : _mm256_slli_epi32(x, 16));
	}
}

/* r[i] = sum of the lanes of a[i]. */
INL T2 __m256 hsum8(const __m256 *a)
{
	__m256 t[4], u[2];

	UNROLL for (int i = 0; i < 4; i++)
		t[i] = _mm256_add_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]),
				     _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
	UNROLL for (int i = 0; i < 2; i++) {
		__m256d x = _mm256_castps_pd(t[2 * i]), y = _mm256_castps_pd(t[2 * i + 1]);

		u[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)),
				     _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
	}
	return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20),
			     _mm256_permute2f128_ps(u[0], u[1], 0x31));
}

INL T2 __m256 red_max(const int G, __m256 x)
{
	if (G < 2)
		x = _mm256_max_ps(x, _mm256_permute_ps(x, 0xb1));
	if (G < 4)
		x = _mm256_max_ps(x, _mm256_permute_ps(x, 0x4e));
	if (G < 8)
		x = _mm256_max_ps(x, _mm256_permute2f128_ps(x, x, 0x01));
	return x;
}

INL T2 __m256 red_add(const int G, __m256 x)
{
	if (G < 2)
		x = _mm256_add_ps(x, _mm256_permute_ps(x, 0xb1));
	if (G < 4)
		x = _mm256_add_ps(x, _mm256_permute_ps(x, 0x4e));
	if (G < 8)
		x = _mm256_add_ps(x, _mm256_permute2f128_ps(x, x, 0x01));
	return x;
}

/* 2^x (Cephes exp2f polynomial, rel. error ~2e-7), x clamped to [-126, 126]. */
INL T2 __m256 exp2v(__m256 x)
{
	__m256 xi, f, p;
	__m256i e;

	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-126.0f)), _mm256_set1_ps(126.0f));
	xi = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	f = _mm256_sub_ps(x, xi);
	p = _mm256_set1_ps(1.535336188319500e-4f);
	p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
	p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
	p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
	p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
	p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
	p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(xi), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* s = capv * tanh(s) for the score vectors (see attend_avx512.c). */
NOINL T2 void softcap(__m256 *sv, int ns, float capv)
{
	const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);

	for (int i = 0; i < ns; i++) {
		__m256 a = _mm256_min_ps(_mm256_andnot_ps(sign, sv[i]), _mm256_set1_ps(9.0f));
		__m256 e = exp2v(_mm256_mul_ps(a, _mm256_set1_ps(2.0f * LOG2E)));
		__m256 r = _mm256_div_ps(_mm256_sub_ps(e, one), _mm256_add_ps(e, one));

		sv[i] = _mm256_mul_ps(_mm256_set1_ps(capv), _mm256_or_ps(r, _mm256_and_ps(sign, sv[i])));
	}
}

/* ---- one step, one chunk of G heads ---- */

/*
 * Scores of the QK tile: 2G vectors. pf: prefetch the K rows of the next and of
 * the far tile, a line per 64 bytes of a row: line off/64 of keys sub*KB.. takes
 * prefetch slots (sub * lines + off/64) * KB...
 */
INL T2 void qk(struct k2 *c, const int dt, const int G, unsigned h0, int pf, __m256 *sv)
{
	const int KB = 8 / G, U = 32 / VB(dt); /* 32 bytes a step */
	const size_t qstride = c->hd;
	const float *qh = c->qs + h0 * qstride;
	const unsigned n = c->nq, lines = c->pf_lines;

	for (int sub = 0; sub < 2 * G; sub++) {
		const uint8_t *const *r = c->kq + sub * KB;
		__m256 a[8];

		if ((unsigned)(sub * KB) >= n) {
			sv[sub] = _mm256_setzero_ps();
			continue;
		}
		UNROLL for (int i = 0; i < 8; i++)
			a[i] = _mm256_setzero_ps();
		for (unsigned v = 0; v < c->nv; v += U) {
			size_t off = v * VB(dt);
			unsigned s0 = (sub * lines + (unsigned)(off / 64)) * KB;
			/* reload the row pointers each step: hoisted, they would not fit in registers */
			const uint8_t *const *rv = r;

			OPAQUE(rv);
			UNROLL for (int kk = 0; kk < KB; kk++) {
				if (pf && (off & 32) == 0) {
					PF(c->pfk[s0 + kk]);
					PF_FAR(c->pff[s0 + kk]);
				}
				UNROLL for (int u = 0; u < U; u++) {
					__m256 kv = ld(dt, rv[kk] + off, u);

					UNROLL for (int h = 0; h < G; h++)
						a[kk * G + h] = _mm256_fmadd_ps(
							_mm256_loadu_ps(qh + h * qstride + (v + u) * 8), kv,
							a[kk * G + h]);
				}
			}
		}
		sv[sub] = hsum8(a);
	}
}

/* One online-softmax step of chunk ci, lazy rescaling (see attend_avx512.c). */
#define RESCALE 8.0f
INL T2 void softmax(struct k2 *c, const int G, __m256 *sv, unsigned ci, float *pb, float *al,
		    int *rs)
{
	const __m256i iota = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
	__m256 tm = _mm256_set1_ps(-INFINITY), ls = _mm256_setzero_ps();
	__m256 km[16];

	if (c->capv != 0)
		softcap(sv, 2 * G, c->capv);
	for (int sub = 0; sub < 2 * G; sub++) {
		km[sub] = _mm256_castsi256_ps(
			_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(G * c->nq) - 8 * sub), iota));
		tm = _mm256_max_ps(tm, _mm256_blendv_ps(tm, sv[sub], km[sub]));
	}
	tm = red_max(G, tm);
	if (_mm256_movemask_ps(_mm256_cmp_ps(tm, _mm256_add_ps(c->mv[ci], _mm256_set1_ps(RESCALE)),
					     _CMP_GT_OQ))) {
		__m256 mn = _mm256_max_ps(c->mv[ci], tm);
		__m256 a = exp2v(_mm256_sub_ps(c->mv[ci], mn));

		c->lv[ci] = _mm256_mul_ps(c->lv[ci], a);
		c->mv[ci] = mn;
		_mm256_maskstore_ps(al, _mm256_cmpgt_epi32(_mm256_set1_epi32(G), iota), a);
		*rs = 1;
	}
	for (int sub = 0; sub < 2 * G; sub++) {
		__m256 pr = _mm256_and_ps(km[sub], exp2v(_mm256_sub_ps(sv[sub], c->mv[ci])));

		_mm256_store_ps(pb + 8 * sub, pr);
		ls = _mm256_add_ps(ls, pr);
	}
	c->lv[ci] = _mm256_add_ps(c->lv[ci], red_add(G, ls));
}

/*
 * PV of the PV tile: accumulators of G heads x CP vectors from vector v0, over its keys;
 * prefetches the V lines of the next PV tile and of the far tile that start in
 * these bytes (slots 16 * (first line) + j * lines + i). PAR: v0 is odd (bf16
 * with CP 1: the odd half of a 16-dim unit).
 */
INL T2 void pv(struct k2 *c, const int dt, const int G, const int CP, const int PAR, unsigned h0,
	       unsigned v0, int pf, const float *pb, const float *al, int rs)
{
	const size_t stride = c->hd, off = c->v_delta + (v0 - PAR) * VB(dt);
	const unsigned l0 = (v0 * VB(dt) + 63) / 64, l1 = ((v0 + CP) * VB(dt) + 63) / 64;
	const uint8_t *const *pl = c->pfv + TK * l0, *const *plf = c->pff + TK * l0;
	float *acc = c->acc + h0 * stride + v0 * 8;
	const unsigned n = c->np;
	__m256 a[8];

	UNROLL for (int h = 0; h < G; h++)
		UNROLL for (int cc = 0; cc < CP; cc++)
			a[h * CP + cc] = _mm256_loadu_ps(acc + h * stride + cc * 8);
	if (rs) {
		UNROLL for (int h = 0; h < G; h++) {
			__m256 s = _mm256_set1_ps(al[h]);

			UNROLL for (int cc = 0; cc < CP; cc++)
				a[h * CP + cc] = _mm256_mul_ps(a[h * CP + cc], s);
		}
	}
	for (unsigned j = 0; j < n; j++) {
		const uint8_t *r = c->kp[j] + off;
		const float *w = pb + j * G;

		OPAQUE(r);
		if (pf)
			for (unsigned l = 0; l < l1 - l0; l++) {
				PF(pl[j * (l1 - l0) + l] + c->v_delta);
				PF_FAR(plf[j * (l1 - l0) + l] + c->v_delta);
			}
		UNROLL for (int cc = 0; cc < CP; cc++) {
			__m256 x = ld(dt, r, PAR + cc);

			UNROLL for (int h = 0; h < G; h++)
				a[h * CP + cc] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + h), x, a[h * CP + cc]);
		}
	}
	UNROLL for (int h = 0; h < G; h++)
		UNROLL for (int cc = 0; cc < CP; cc++)
			_mm256_storeu_ps(acc + h * stride + cc * 8, a[h * CP + cc]);
}

/* PV over all of head_dim: passes of 8/G vectors, then what is left in halving sizes. */
INL T2 void pv_all(struct k2 *c, const int dt, const int G, unsigned h0, int pf, const float *pb,
		   const float *al, int rs)
{
	unsigned v0 = 0;

	if (dt == DT_BF16P && G == 8) { /* one vector a pass: the even, then the odd dims */
		for (; v0 < c->nv; v0 += 2) {
			pv(c, dt, G, 1, 0, h0, v0, pf, pb, al, rs);
			pv(c, dt, G, 1, 1, h0, v0 + 1, pf, pb, al, rs);
		}
		return;
	}
	for (; v0 + 8 / G <= c->nv; v0 += 8 / G)
		pv(c, dt, G, 8 / G, 0, h0, v0, pf, pb, al, rs);
	if (8 / G > 4 && v0 + 4 <= c->nv) {
		pv(c, dt, G, 8 / G > 4 ? 4 : 1, 0, h0, v0, pf, pb, al, rs);
		v0 += 4;
	}
	if (8 / G > 2 && v0 + 2 <= c->nv) {
		pv(c, dt, G, 8 / G > 2 ? 2 : 1, 0, h0, v0, pf, pb, al, rs);
		v0 += 2;
	}
	/* nv = head_dim / 8 is even: nothing is left */
}

/* A step for the chunk ci of G heads from h0: QK + softmax of c->kq, then PV of c->kp. */
#define TILE(NAME, DT, G)                                                                \
	NOINL T2 void NAME(struct k2 *c, unsigned ci, unsigned h0)                        \
	{                                                                                \
		const int pf = ci == 0 && c->pf_lines;                                   \
		if (c->nq) {                                                             \
			__m256 sv[2 * G];                                                \
			qk(c, DT, G, h0, pf, sv);                                        \
			c->rs[c->par][ci] = 0;                                           \
			softmax(c, G, sv, ci, c->pb[c->par] + h0 * TK, c->al[c->par] + h0, \
				&c->rs[c->par][ci]);                                     \
		}                                                                        \
		if (c->np)                                                               \
			pv_all(c, DT, G, h0, pf, c->pb[c->par ^ 1] + h0 * TK,            \
			       c->al[c->par ^ 1] + h0, c->rs[c->par ^ 1][ci]);           \
	}
#define TILES(SFX, DT)                                                             \
	TILE(tile_##SFX##_1, DT, 1)                                                 \
	TILE(tile_##SFX##_2, DT, 2)                                                 \
	TILE(tile_##SFX##_4, DT, 4)                                                 \
	TILE(tile_##SFX##_8, DT, 8)                                                 \
	static tile_fn *const tiles_##SFX[4] = { tile_##SFX##_1, tile_##SFX##_2,    \
						 tile_##SFX##_4, tile_##SFX##_8 };

TILES(f32, DT_F32)
TILES(f16, DT_F16)
TILES(bf16p, DT_BF16P)

/* ---- setup and the walk ---- */

/* 8 dims of a q row (from element d) as f32. */
INL T2 __m256 ld_q(enum attn_dtype t, const void *q, size_t d)
{
	if (t == ATTN_F32)
		return _mm256_loadu_ps((const float *)q + d);
	if (t == ATTN_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)q + d)));
	return _mm256_castsi256_ps(_mm256_slli_epi32(
		_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)q + d))), 16));
}

INL T2 void st_out(enum attn_dtype t, void *out, size_t d, __m256 x)
{
	if (t == ATTN_F32) {
		_mm256_storeu_ps((float *)out + d, x);
	} else if (t == ATTN_F16) {
		_mm_storeu_si128((__m128i *)((uint16_t *)out + d),
				 _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	} else {
		__m256i b = _mm256_castps_si256(x);
		__m256i r = _mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
				_mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1))));
		__m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));

		r = _mm256_blendv_epi8(r, _mm256_or_si256(b, _mm256_set1_epi32(0x400000)), nan);
		r = _mm256_srli_epi32(r, 16);
		/* packus works per 128-bit lane: [r0..3 r0..3 | r4..7 r4..7] -> take qwords 0, 2 */
		r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
		_mm_storeu_si128((__m128i *)((uint16_t *)out + d), _mm256_castsi256_si128(r));
	}
}

/* Position of dim d in vector order. */
static inline unsigned vpos(int dt, unsigned d)
{
	return dt == DT_BF16P ? (d & ~15u) + ((d & 1) << 3) + ((d & 15) >> 1) : d;
}

NOINL T2 void run2(const struct attn_keys *k, const struct attn_query *q,
		   const struct attn_params *p, int dt, tile_fn *const *tiles)
{
	float qs[ATTN_SCRATCH] __attribute__((aligned(32)));
	float acc[ATTN_SCRATCH] __attribute__((aligned(32)));
	float tmp[16] __attribute__((aligned(32)));
	const uint8_t *rr[RING][TK];
	const uint8_t *pft[RING][TK * ATTN_PF_LINES]; /* the line tables of rr */
	unsigned rn[RING];
	const unsigned hd = k->head_dim, g = p->g;
	const size_t row_bytes = (size_t)hd * attn_dtype_size(k->dtype);
	const enum attn_dtype odt = q->lse ? ATTN_F32 : p->q_dtype;
	struct k2 c;
	unsigned hw;
	float qscale;

	c.nv = hd / 8;
	c.hd = hd;
	c.v_delta = k->v_delta;
	c.qs = qs;
	c.acc = acc;
	c.pf_lines = attn_pf_lines(row_bytes);
	if (p->softcap > 0) {
		qscale = p->scale / p->softcap;
		c.capv = p->softcap * LOG2E;
	} else {
		qscale = p->scale * LOG2E;
		c.capv = 0;
	}
	hw = ATTN_SCRATCH / hd;
	if (hw > 16)
		hw = 16;

	for (unsigned hs = 0; hs < g; hs += hw) {
		unsigned gh = g - hs < hw ? g - hs : hw, nch = 0, cg[4], ch0[4];
		struct attn_walk wk;
		const uint8_t *any;

		for (unsigned h = 0; h < gh; h++) {
			float *dst = qs + (size_t)h * hd;
			size_t src = (size_t)(hs + h) * hd;

			for (unsigned d = 0; d < hd; d += 16) {
				_mm256_store_ps(tmp, _mm256_mul_ps(ld_q(p->q_dtype, q->q, src + d),
								   _mm256_set1_ps(qscale)));
				_mm256_store_ps(tmp + 8, _mm256_mul_ps(ld_q(p->q_dtype, q->q, src + d + 8),
								       _mm256_set1_ps(qscale)));
				for (unsigned i = 0; i < 16; i++)
					dst[vpos(dt, d + i)] = tmp[i];
			}
		}
		memset(acc, 0, sizeof(float) * gh * hd);
		for (unsigned h = 0; h < gh;) {
			unsigned G = gh - h >= 8 ? 8 : gh - h >= 4 ? 4 : gh - h >= 2 ? 2 : 1;

			cg[nch] = G == 8 ? 3 : G == 4 ? 2 : G == 2 ? 1 : 0;
			ch0[nch] = h;
			c.mv[nch] = _mm256_set1_ps(-INFINITY);
			c.lv[nch] = _mm256_setzero_ps();
			nch++;
			h += G;
		}

		/* step t: QK of tile t, PV of tile t-1, prefetches (see attend_avx512.c) */
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

		for (unsigned i = 0; i < nch; i++) {
			float l[8], m[8];
			unsigned G = 1u << cg[i];

			_mm256_storeu_ps(l, c.lv[i]);
			_mm256_storeu_ps(m, c.mv[i]);
			for (unsigned h = 0; h < G; h++) {
				const float *src = acc + (size_t)(ch0[i] + h) * hd;
				size_t dst = (size_t)(hs + ch0[i] + h) * hd;
				__m256 inv = _mm256_set1_ps(1.0f / l[h]);

				/* m and l are in log2 units (q prescaled by log2 e): back to natural */
				if (q->lse)
					q->lse[hs + ch0[i] + h] = (m[h] + log2f(l[h])) * LN2;
				for (unsigned d = 0; d < hd; d += 16) {
					for (unsigned j = 0; j < 16; j++)
						tmp[j] = src[vpos(dt, d + j)];
					st_out(odt, q->out, dst + d, _mm256_mul_ps(_mm256_load_ps(tmp), inv));
					st_out(odt, q->out, dst + d + 8, _mm256_mul_ps(_mm256_load_ps(tmp + 8), inv));
				}
			}
		}
	}
}

void attn_one_avx2(const struct attn_keys *k, const struct attn_query *q,
		   const struct attn_params *p)
{
	if (k->head_dim % 16 != 0 || k->head_dim > ATTN_SCRATCH) {
		attn_one_c(k, q, p);
		return;
	}
	if (k->dtype == ATTN_F32)
		run2(k, q, p, DT_F32, tiles_f32);
	else if (k->dtype == ATTN_F16)
		run2(k, q, p, DT_F16, tiles_f16);
	else
		run2(k, q, p, DT_BF16P, tiles_bf16p);
}

#endif
