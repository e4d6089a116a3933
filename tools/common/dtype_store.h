/* SPDX-License-Identifier: MIT */
#ifndef KVPOOL_TOOLS_DTYPE_STORE_H
#define KVPOOL_TOOLS_DTYPE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "../../uapi/kvpool.h"

/*
 * Element @i of @dst, an array of @dtype (KVP_DTYPE_*), set to @v: f32 as is,
 * f16 and bf16 rounded to nearest even, as the daemon rounds its outputs.
 */
void dtype_store(void *dst, size_t i, float v, uint32_t dtype);

/* KVP_DTYPE_* of "f32", "f16" or "bf16" (anything else: bf16). */
uint32_t dtype_code(const char *name);

static inline size_t dtype_size(uint32_t dtype)
{
	return dtype == KVP_DTYPE_F32 ? 4 : 2;
}

#endif
