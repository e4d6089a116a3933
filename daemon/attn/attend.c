/* SPDX-License-Identifier: MIT */
/*
 * Attention kernels: dtype conversions, the CPU dispatch and the portable C
 * kernel (the reference for the SIMD ones and the fallback for shapes they
 * don't take: head_dim not a multiple of 16, or beyond their scratch).
 *
 * The dispatch is chosen once, on first use: the best level the CPU supports,
 * or a lower one named by KVPOOL_ATTN_ISA (c, avx2, avx512, avx512bf16); a name
 * above what the CPU has, or an unknown one, leaves the best level.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "attend_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ATTN_X86 1
#else
#define ATTN_X86 0
#endif

/* ---- conversions (round to nearest even) ---- */

float attn_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
	float f;

	if (e == 0x1f) {
		bits = sign | 0x7f800000 | (m << 13);
	} else if (e) {
		bits = sign | ((e + 112) << 23) | (m << 13);
	} else {
		f = (float)m * 0x1p-24f; /* zero or subnormal: exact */
		return sign ? -f : f;
	}
	memcpy(&f, &bits, sizeof(f));
	return f;
}

uint16_t attn_f32_to_f16(float f)
{
	uint32_t x, sign, e, m, s, q, rem, half;

	memcpy(&x, &f, sizeof(x));
	sign = (x >> 16) & 0x8000;
	x &= 0x7fffffff;
	if (x > 0x7f800000) /* NaN: keep it quiet, keep the top payload bits */
		return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff));
	if (x >= 0x477ff000) /* >= 65520 rounds to infinity */
		return (uint16_t)(sign | 0x7c00);
	if (x >= 0x38800000) { /* normal: rebias, round 23 -> 10 mantissa bits */
		x -= 0x38000000;
		x += 0xfff + ((x >> 13) & 1);
		return (uint16_t)(sign | (x >> 13));
	}
	e = x >> 23;
	if (e < 102) /* below 2^-25: rounds to zero */
		return (uint16_t)sign;
	/* subnormal result: value = m * 2^(e-150), in units of 2^-24 */
	m = (x & 0x7fffff) | 0x800000;
	s = 126 - e; /* 14..24 */
	q = m >> s;
	rem = m & ((1u << s) - 1);
	half = 1u << (s - 1);
	q += rem > half || (rem == half && (q & 1));
	return (uint16_t)(sign | q);
}

float attn_bf16_to_f32(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

uint16_t attn_f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

/* ---- the portable kernel ---- */

static inline float ld_elem(const void *base, enum attn_dtype t, size_t i)
{
	switch (t) {
	case ATTN_F32:
		return ((const float *)base)[i];
	case ATTN_F16:
		return attn_f16_to_f32(((const uint16_t *)base)[i]);
	default:
		return attn_bf16_to_f32(((const uint16_t *)base)[i]);
	}
}

static inline void st_elem(void *base, enum attn_dtype t, size_t i, float v)
{
	switch (t) {
	case ATTN_F32:
		((float *)base)[i] = v;
		break;
	case ATTN_F16:
		((uint16_t *)base)[i] = attn_f32_to_f16(v);
		break;
	default:
		((uint16_t *)base)[i] = attn_f32_to_bf16(v);
		break;
	}
}

/* Heads [h0, h0+nh) (nh <= 16), output dims [d0, d0+nd): one walk over the keys. */
static void c_pass(const struct attn_keys *k, const struct attn_query *q,
		   const struct attn_params *p, uint32_t h0, uint32_t nh, uint32_t d0,
		   uint32_t nd, float *acc)
{
	const uint8_t *rows[ATTN_TILE];
	float m[16], l[16], s[ATTN_TILE][16];
	uint32_t hd = k->head_dim;
	struct attn_walk w;
	unsigned n;

	for (uint32_t h = 0; h < nh; h++) {
		m[h] = -INFINITY;
		l[h] = 0;
	}
	memset(acc, 0, sizeof(float) * nh * nd);
	attn_walk_init(&w, k, q);
	while ((n = attn_walk_fill(&w, rows, ATTN_TILE)) != 0) {
		for (unsigned j = 0; j < n; j++) {
			for (uint32_t h = 0; h < nh; h++) {
				size_t qo = (size_t)(h0 + h) * hd;
				float sum = 0;

				for (uint32_t d = 0; d < hd; d++)
					sum += ld_elem(q->q, p->q_dtype, qo + d) * ld_elem(rows[j], k->dtype, d);
				sum *= p->scale;
				if (p->softcap > 0)
					sum = p->softcap * tanhf(sum / p->softcap);
				s[j][h] = sum;
			}
		}
		for (uint32_t h = 0; h < nh; h++) {
			float mn = m[h], a;

			for (unsigned j = 0; j < n; j++)
				mn = s[j][h] > mn ? s[j][h] : mn;
			a = expf(m[h] - mn);
			l[h] *= a;
			for (uint32_t d = 0; d < nd; d++)
				acc[h * nd + d] *= a;
			for (unsigned j = 0; j < n; j++) {
				s[j][h] = expf(s[j][h] - mn);
				l[h] += s[j][h];
			}
			m[h] = mn;
		}
		for (unsigned j = 0; j < n; j++) {
			const uint8_t *v = rows[j] + k->v_delta;

			for (uint32_t d = 0; d < nd; d++) {
				float x = ld_elem(v, k->dtype, d0 + d);

				for (uint32_t h = 0; h < nh; h++)
					acc[h * nd + d] += s[j][h] * x;
			}
		}
	}
	for (uint32_t h = 0; h < nh; h++) {
		float inv = 1.0f / l[h];

		if (q->lse)
			q->lse[h0 + h] = m[h] + logf(l[h]);
		for (uint32_t d = 0; d < nd; d++)
			st_elem(q->out, q->lse ? ATTN_F32 : p->q_dtype, (size_t)(h0 + h) * hd + d0 + d,
				acc[h * nd + d] * inv);
	}
}

void attn_one_c(const struct attn_keys *k, const struct attn_query *q, const struct attn_params *p)
{
	float acc[ATTN_SCRATCH];
	uint32_t hd = k->head_dim, dn, gh;

	if (hd == 0 || p->g == 0)
		return;
	dn = hd < ATTN_SCRATCH ? hd : ATTN_SCRATCH;
	gh = ATTN_SCRATCH / dn;
	if (gh > 16)
		gh = 16;
	for (uint32_t h0 = 0; h0 < p->g; h0 += gh) {
		uint32_t nh = p->g - h0 < gh ? p->g - h0 : gh;

		for (uint32_t d0 = 0; d0 < hd; d0 += dn)
			c_pass(k, q, p, h0, nh, d0, hd - d0 < dn ? hd - d0 : dn, acc);
	}
}

void attn_merge(const float *part, size_t part_stride, const float *lse, size_t lse_stride,
		uint32_t n, uint32_t g, uint32_t head_dim, void *out, enum attn_dtype dt)
{
	if (n > ATTN_MERGE_MAX)
		n = ATTN_MERGE_MAX;
	for (uint32_t h = 0; h < g; h++) {
		float mx = -INFINITY, w[ATTN_MERGE_MAX], sum = 0, inv;

		for (uint32_t c = 0; c < n; c++)
			mx = lse[c * lse_stride + h] > mx ? lse[c * lse_stride + h] : mx;
		for (uint32_t c = 0; c < n; c++) {
			float x = lse[c * lse_stride + h];

			/* an empty part's output was never written: its weight must not touch it */
			w[c] = x == -INFINITY ? 0 : expf(x - mx);
			sum += w[c];
		}
		inv = 1.0f / sum;
		for (uint32_t d = 0; d < head_dim; d++) {
			float acc = 0;

			for (uint32_t c = 0; c < n; c++)
				if (w[c] != 0)
					acc += w[c] * part[c * part_stride + (size_t)h * head_dim + d];
			st_elem(out, dt, (size_t)h * head_dim + d, acc * inv);
		}
	}
}

/* ---- dispatch ---- */

static const char *const level_names[ATTN_NLEVELS] = { "c", "avx2", "avx512", "avx512bf16" };

const char *attn_level_name(enum attn_level l)
{
	return (unsigned)l < ATTN_NLEVELS ? level_names[l] : NULL;
}

enum attn_level attn_cpu_level(void)
{
#if ATTN_X86
	unsigned a, b, c, d;

	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
	    !__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 29))) /* F16C */
		return ATTN_LEVEL_C;
	if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
	    !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
		return ATTN_LEVEL_AVX2;
	if (!__builtin_cpu_supports("avx512bf16"))
		return ATTN_LEVEL_AVX512;
	return ATTN_LEVEL_AVX512BF16;
#else
	return ATTN_LEVEL_C;
#endif
}

attn_fn *attn_level_fn(enum attn_level l)
{
	if ((unsigned)l >= ATTN_NLEVELS || l > attn_cpu_level())
		return NULL;
	switch (l) {
#if ATTN_X86
	case ATTN_LEVEL_AVX2:
		return attn_one_avx2;
	case ATTN_LEVEL_AVX512:
		return attn_one_avx512;
	case ATTN_LEVEL_AVX512BF16:
		return attn_one_avx512bf16;
#endif
	default:
		return attn_one_c;
	}
}

static pthread_once_t attn_once = PTHREAD_ONCE_INIT;
static attn_fn *attn_impl;
static enum attn_level attn_chosen;

static void attn_choose(void)
{
	enum attn_level l = attn_cpu_level();
	const char *e = getenv("KVPOOL_ATTN_ISA");

	if (e) {
		for (int i = 0; i < ATTN_NLEVELS; i++) {
			if (strcmp(e, level_names[i]) == 0 && (enum attn_level)i < l)
				l = (enum attn_level)i;
		}
	}
	attn_chosen = l;
	attn_impl = attn_level_fn(l);
}

void attn_one(const struct attn_keys *keys, const struct attn_query *q, const struct attn_params *p)
{
	pthread_once(&attn_once, attn_choose);
	attn_impl(keys, q, p);
}

const char *attn_isa(void)
{
	pthread_once(&attn_once, attn_choose);
	return level_names[attn_chosen];
}
