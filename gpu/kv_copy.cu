// SPDX-License-Identifier: MIT
//
// WRITE_KV and READ_KV on a cuda pool: rows move between a staging buffer in
// device memory ([count][kv_heads][row] of K, then the same of V, as the
// request carries them) and the pool, where row (t, h) of K lies at
// pool + off[t] + h * head_stride and its V v_delta later. The host computes
// off[t] from the block table, so every layout and a cyclic group's ring are
// the same kernel. Built into a fatbin that the plugin loads with the driver
// API (cuModuleLoadData): the plugin links no CUDA runtime.
#include <stdint.h>

template <typename Unit>
__device__ void copy_rows(uint8_t *pool, uint8_t *stage, const uint64_t *off, uint32_t count,
			  uint32_t kv_heads, uint32_t row_bytes, uint64_t head_stride,
			  uint64_t v_delta, bool to_pool)
{
	const uint32_t units = row_bytes / sizeof(Unit);
	const uint64_t rows = (uint64_t)count * kv_heads;
	const uint64_t total = 2 * rows * units; // K, then V

	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < total;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t row = i / units, u = i % units;
		bool is_v = row >= rows;
		uint64_t r = is_v ? row - rows : row;
		uint32_t t = (uint32_t)(r / kv_heads), h = (uint32_t)(r % kv_heads);
		Unit *p = (Unit *)(pool + off[t] + h * head_stride + (is_v ? v_delta : 0)) + u;
		Unit *s = (Unit *)(stage + row * row_bytes) + u;

		if (to_pool)
			*p = *s;
		else
			*s = *p;
	}
}

// One kernel per unit width: 16 bytes where rows allow it, else 4, else 2.
#define KV_COPY(name, Unit)                                                                  \
	extern "C" __global__ void name(uint8_t *pool, uint8_t *stage, const uint64_t *off,  \
					uint32_t count, uint32_t kv_heads, uint32_t row_bytes, \
					uint64_t head_stride, uint64_t v_delta, int to_pool)  \
	{                                                                                    \
		copy_rows<Unit>(pool, stage, off, count, kv_heads, row_bytes, head_stride,   \
				v_delta, to_pool != 0);                                      \
	}

KV_COPY(kvpool_copy16, uint4)
KV_COPY(kvpool_copy4, uint32_t)
KV_COPY(kvpool_copy2, uint16_t)
