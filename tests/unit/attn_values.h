/* SPDX-License-Identifier: MIT */
/*
 * What the attention kernels' tests share: random values (xorshift64*) and
 * elements stored and loaded in the three dtypes (daemon/attn's conversions,
 * round to nearest even).
 */
#ifndef KVPOOL_TEST_ATTN_VALUES_H
#define KVPOOL_TEST_ATTN_VALUES_H

#include <stddef.h>
#include <stdint.h>

#include "../../daemon/attn/attend.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static inline float frand(void) /* [-1, 1) */
{
	return (float)((double)(rnd() >> 11) * 0x1p-52 - 1.0);
}

static inline double ld(const void *base, enum attn_dtype t, size_t i)
{
	if (t == ATTN_F32)
		return ((const float *)base)[i];
	if (t == ATTN_F16)
		return attn_f16_to_f32(((const uint16_t *)base)[i]);
	return attn_bf16_to_f32(((const uint16_t *)base)[i]);
}

static inline void st(void *base, enum attn_dtype t, size_t i, float v)
{
	if (t == ATTN_F32)
		((float *)base)[i] = v;
	else if (t == ATTN_F16)
		((uint16_t *)base)[i] = attn_f32_to_f16(v);
	else
		((uint16_t *)base)[i] = attn_f32_to_bf16(v);
}

#endif
