/* SPDX-License-Identifier: MIT */
/* f32 values into the pool dtypes, for the tools that write KV or Q (kvengine, kvbench). */
#include <math.h>
#include <string.h>

#include "../../uapi/kvpool.h"
#include "dtype_store.h"

/* IEEE half, round to nearest even (no _Float16: not every compiler here has it). */
static uint16_t f32_to_f16(float f)
{
	uint32_t u, sign, mag;

	memcpy(&u, &f, sizeof(u));
	sign = u >> 16 & 0x8000;
	mag = u & 0x7fffffff;
	if (mag >= 0x7f800000) /* inf, nan */
		return (uint16_t)(sign | 0x7c00 | (mag > 0x7f800000 ? 0x200 : 0));
	if (mag >= 0x477ff000) /* rounds past the largest half */
		return (uint16_t)(sign | 0x7c00);
	if (mag < 0x38800000) { /* subnormal half: scale into integer units of 2^-24 */
		float a;
		uint32_t q;

		memcpy(&a, &mag, sizeof(a));
		q = (uint32_t)nearbyintf(a * 16777216.0f);
		return (uint16_t)(sign | q);
	}
	mag += 0xc8000fff + (mag >> 13 & 1); /* rebias the exponent, round to nearest even */
	return (uint16_t)(sign | mag >> 13);
}

void dtype_store(void *dst, size_t i, float v, uint32_t dtype)
{
	if (dtype == KVP_DTYPE_F32) {
		((float *)dst)[i] = v;
	} else if (dtype == KVP_DTYPE_F16) {
		((uint16_t *)dst)[i] = f32_to_f16(v);
	} else {
		uint32_t u;

		memcpy(&u, &v, sizeof(u));
		u += 0x7fff + (u >> 16 & 1);
		((uint16_t *)dst)[i] = (uint16_t)(u >> 16);
	}
}

uint32_t dtype_code(const char *name)
{
	return !strcmp(name, "f32") ? KVP_DTYPE_F32 : !strcmp(name, "f16") ? KVP_DTYPE_F16 : KVP_DTYPE_BF16;
}
