/* SPDX-License-Identifier: MIT */
/*
 * The KV tests' independent reference: their own dtype conversions (round to
 * nearest even), exp and tanh in double, deterministic KV values, and the
 * masks written from their definitions, not from the daemon's code.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvref.h"

/* ---- dtypes: the test's own conversions (round to nearest even) ---- */

static double pow2i(int e) /* 2^e, -1022 <= e <= 1023 */
{
	uint64_t b = (uint64_t)(e + 1023) << 52;
	double d;

	memcpy(&d, &b, sizeof(d));
	return d;
}

/* x rounded to an integer, ties to even (|x| < 2^51; the default rounding mode). */
static double rne(double x)
{
	volatile double t = (x < 0 ? -x : x) + 0x1p52;

	t -= 0x1p52;
	return x < 0 ? -t : t;
}

static int f32_exponent(float f)
{
	uint32_t b;

	memcpy(&b, &f, sizeof(b));
	return (int)((b >> 23) & 0xff) - 127;
}

static uint16_t sign_of(float f)
{
	uint32_t b;

	memcpy(&b, &f, sizeof(b));
	return (uint16_t)(b >> 16 & 0x8000);
}

uint16_t to_f16(float f)
{
	uint16_t sign = sign_of(f);
	double a = f < 0 ? -(double)f : (double)f, m;
	int e;

	if (a != a)
		return sign | 0x7e00;
	if (a >= 65520.0)
		return sign | 0x7c00;
	if (a < 0x1p-14) /* subnormal: units of 2^-24 (1024 of them is the smallest normal) */
		return sign | (uint16_t)rne(a * 0x1p24);
	e = f32_exponent((float)a);
	m = rne(a * pow2i(10 - e)); /* 1024 .. 2048 */
	if (m == 2048) {
		m = 1024;
		e++;
	}
	if (e > 15)
		return sign | 0x7c00;
	return sign | (uint16_t)((e + 15) << 10) | (uint16_t)(m - 1024);
}

uint16_t to_bf16(float f)
{
	uint16_t sign = sign_of(f);
	double a = f < 0 ? -(double)f : (double)f, m;
	int e;

	if (a != a)
		return sign | 0x7fc0;
	if (a < 0x1p-126) /* f32 subnormal: units of 2^-133 */
		return sign | (uint16_t)rne(a * 0x1p133);
	e = f32_exponent((float)a);
	m = rne(a * pow2i(7 - e)); /* 128 .. 256 */
	if (m == 256) {
		m = 128;
		e++;
	}
	if (e > 127)
		return sign | 0x7f80;
	return sign | (uint16_t)((e + 127) << 7) | (uint16_t)(m - 128);
}

double f16_value(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e == 0 ? m * 0x1p-24 : (1024 + m) * pow2i(e - 25);

	CHECK(e != 0x1f); /* no infinity or NaN is ever stored here */
	return h & 0x8000 ? -v : v;
}

double bf16_value(uint16_t h)
{
	uint32_t b = (uint32_t)h << 16;
	float f;

	memcpy(&f, &b, sizeof(f));
	return f;
}

size_t dtype_size(uint32_t t)
{
	return t == KVP_DTYPE_F32 ? 4 : 2;
}

void store_elem(void *base, uint32_t t, size_t i, float v)
{
	if (t == KVP_DTYPE_F32)
		((float *)base)[i] = v;
	else
		((uint16_t *)base)[i] = t == KVP_DTYPE_F16 ? to_f16(v) : to_bf16(v);
}

double load_elem(const void *base, uint32_t t, size_t i)
{
	if (t == KVP_DTYPE_F32)
		return ((const float *)base)[i];
	if (t == KVP_DTYPE_F16)
		return f16_value(((const uint16_t *)base)[i]);
	return bf16_value(((const uint16_t *)base)[i]);
}

/* The value the pool holds once @v is stored in dtype @t. */
double as_stored(uint32_t t, float v)
{
	uint8_t b[4];

	store_elem(b, t, 0, v);
	return load_elem(b, t, 0);
}

/* One unit in the last place of dtype @t at magnitude |r|. */
double ulp_of(uint32_t t, double r)
{
	int e;

	if (r < 0)
		r = -r;
	e = r >= 0x1p-126 ? f32_exponent((float)r) : -126;
	if (t == KVP_DTYPE_F16)
		return pow2i((e < -14 ? -14 : e) - 10);
	if (t == KVP_DTYPE_BF16)
		return pow2i(e - 7);
	return pow2i(e - 23);
}

/* ---- exp and tanh in double (the integration tests link no libm) ---- */

double ref_exp(double x)
{
	static const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
	double k, r, term = 1, sum = 1;

	if (x < -700)
		return 0;
	k = rne(x / 0.69314718055994530942);
	r = x - k * ln2_hi - k * ln2_lo; /* |r| <= ln2 / 2 */
	for (int n = 1; n <= 17; n++) { /* the remainder is below 2^-70 */
		term *= r / n;
		sum += term;
	}
	return sum * pow2i((int)k);
}

double ref_tanh(double x)
{
	double a = x < 0 ? -x : x, t = ref_exp(-2 * a), y = (1 - t) / (1 + t);

	return x < 0 ? -y : y;
}

bool close_rel(double a, double b, double rel)
{
	double d = a - b;

	return (d < 0 ? -d : d) <= rel * (b < 0 ? -b : b);
}

/* The reference's own pieces against known values. */
void self_check(void)
{
	CHECK_EQ(to_f16(1.0f / 3), 0x3555);
	CHECK_EQ(to_f16(0.1f), 0x2e66);
	CHECK_EQ(to_f16(-2.0f), 0xc000);
	CHECK_EQ(to_f16(65504.0f), 0x7bff);
	CHECK_EQ(to_f16(65520.0f), 0x7c00);
	CHECK_EQ(to_f16(2049.0f), 0x6800); /* tie: to the even 2048 */
	CHECK_EQ(to_f16(2051.0f), 0x6802); /* tie: to the even 2052 */
	CHECK_EQ(to_f16(0x1p-24f), 0x0001);
	CHECK_EQ(to_f16(0x1.8p-24f), 0x0002); /* tie between subnormals 1 and 2 */
	CHECK_EQ(to_f16(0x1p-25f), 0x0000);   /* tie: to the even 0 */
	CHECK_EQ(to_f16(0x1.ffcp-15f), 0x0400); /* rounds up into the normals */
	CHECK_EQ(to_bf16(1.0f / 3), 0x3eab);
	CHECK_EQ(to_bf16(1.00390625f), 0x3f80);   /* tie: to the even 1.0 */
	CHECK_EQ(to_bf16(1.01171875f), 0x3f82);   /* tie: to the even 1 + 2^-6 */
	CHECK_EQ(to_bf16(-0.5f), 0xbf00);
	CHECK_EQ(to_bf16(0x1.ffp127f), 0x7f80);
	CHECK(f16_value(0x3555) == 0x1.554p-2);
	CHECK(f16_value(0x0001) == 0x1p-24);
	CHECK(bf16_value(0x3eab) == 0x1.56p-2);
	CHECK(ulp_of(KVP_DTYPE_F16, 1.0) == 0x1p-10 && ulp_of(KVP_DTYPE_F16, 0.75) == 0x1p-11);
	CHECK(ulp_of(KVP_DTYPE_BF16, -0.3) == 0x1p-9 && ulp_of(KVP_DTYPE_F16, 1e-6) == 0x1p-24);
	CHECK(close_rel(ref_exp(1), 2.718281828459045, 1e-15));
	CHECK(close_rel(ref_exp(-10), 4.5399929762484854e-05, 1e-14));
	CHECK(close_rel(ref_exp(-0.1), 0.9048374180359595, 1e-15));
	CHECK(close_rel(ref_tanh(0.5), 0.46211715726000974, 1e-15));
	CHECK(close_rel(ref_tanh(-3), -0.99505475368673046, 1e-15));
}

/* ---- deterministic K, V and Q ---- */

uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A multiple of 2^-23 in [-1, 1): exact in f32. */
float unit(uint64_t h)
{
	return (float)((int32_t)(h >> 40) - (1 << 23)) * 0x1p-23f;
}

float val(uint64_t seed, uint32_t which, uint32_t group, uint32_t layer, uint32_t pos,
	  uint32_t head, uint32_t d)
{
	uint64_t h = mix(seed);

	h = mix(h ^ ((uint64_t)which << 48 | (uint64_t)group << 32 | layer));
	h = mix(h ^ ((uint64_t)pos << 32 | (uint64_t)head << 16 | d));
	return unit(h);
}

/* ---- the masks (kvmask.h) ---- */

bool sees(const struct mask *m, uint32_t i, uint32_t j)
{
	if (j > i)
		return false;
	switch (m->kind) {
	case KVP_KIND_FULL:
		return true;
	case KVP_KIND_SWA:
	case KVP_KIND_CYCLIC:
		return (uint64_t)j + m->param > i;
	case KVP_KIND_RSWA:
		return j < m->prefix || (uint64_t)j + m->param > i;
	case KVP_KIND_CHUNKED:
		return j / m->param == i / m->param;
	}
	CHECK(!"unknown kind");
	return false;
}

/* ---- the pools ---- */

void ref_attend(const struct mask *m, uint32_t i, const double *q, uint32_t hd, double scale,
		double softcap, const struct ref_kv *kv, double *out)
{
	double *logit = malloc(((size_t)i + 1) * sizeof(*logit)), mx = -1e300, sum = 0;
	uint32_t seen = 0;

	CHECK(logit != NULL);
	for (uint32_t j = 0; j <= i; j++) {
		const double *k = kv->k0 + j * kv->pos_stride;
		double x = 0;

		if (!sees(m, i, j))
			continue;
		for (uint32_t d = 0; d < hd; d++)
			x += q[d] * k[d];
		x *= scale;
		if (softcap > 0)
			x = softcap * ref_tanh(x / softcap);
		logit[j] = x;
		mx = x > mx ? x : mx;
		seen++;
	}
	CHECK(seen > 0);
	for (uint32_t d = 0; d < hd; d++)
		out[d] = 0;
	for (uint32_t j = 0; j <= i; j++) {
		const double *v = kv->k0 + j * kv->pos_stride + kv->v_offset;
		double w;

		if (!sees(m, i, j))
			continue;
		w = ref_exp(logit[j] - mx);
		sum += w;
		for (uint32_t d = 0; d < hd; d++)
			out[d] += w * v[d];
	}
	for (uint32_t d = 0; d < hd; d++)
		out[d] /= sum;
	free(logit);
}
