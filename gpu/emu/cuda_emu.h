// SPDX-License-Identifier: MIT
//
// Just enough CUDA, on the CPU, to run kv_attend.cu's kernels: a thread block
// is a set of fibers (one per CUDA thread) that switch only where a warp
// synchronises (shuffles, __syncwarp, the tensor-core instruction), so a
// kernel runs as its warps would, lane by lane, with every memory access an
// ordinary one that the sanitizers see. The tensor-core instruction follows
// the PTX ISA's fragment layouts for mma.m16n8k16 (section "Matrix Fragments
// for mma.m16n8k16 with floating point type"), written out independently of
// the kernels that use them. Compiled by the host's C++ compiler with KVG_EMU
// (gpu/emu/attend_emu.cc); never by nvcc.
#ifndef KVPOOL_GPU_EMU_CUDA_EMU_H
#define KVPOOL_GPU_EMU_CUDA_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "../../daemon/attn/attend.h"
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define __launch_bounds__(...)

struct emu_dim3 {
	unsigned x, y, z;
};
struct uint4 {
	uint32_t x, y, z, w;
};
struct float4 {
	float x, y, z, w;
};

static inline float4 make_float4(float x, float y, float z, float w)
{
	return float4{ x, y, z, w };
}

const emu_dim3 &emu_thread_idx(void);
const emu_dim3 &emu_block_idx(void);
#define threadIdx (emu_thread_idx())
#define blockIdx (emu_block_idx())

// The running block's dynamic shared memory: the launch's smem bytes, all 0xff at first.
void *emu_dynamic_smem(void);
#define KVG_DYNAMIC_SMEM(type, name) type *name = (type *)emu_dynamic_smem()

// Every lane of the current warp arrives before any goes on.
void emu_warp_sync(void);
// The 8 bytes @v of every lane, exchanged: lane i gets lane @src_of(i)'s.
uint64_t emu_warp_exchange(uint64_t v, unsigned src_lane);
void emu_mma16816(bool bf16, float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
	(void)mask;
	emu_warp_sync();
}

static inline unsigned emu_lane(void)
{
	return threadIdx.x % 32;
}

template <typename T> static inline T __shfl_sync(unsigned mask, T v, unsigned src_lane)
{
	uint64_t in = 0, out;
	T r;

	(void)mask;
	static_assert(sizeof(T) <= 8, "shuffled values are 8 bytes at most");
	memcpy(&in, &v, sizeof(T));
	out = emu_warp_exchange(in, src_lane % 32);
	memcpy(&r, &out, sizeof(T));
	return r;
}

template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, unsigned lane_mask)
{
	return __shfl_sync(mask, v, emu_lane() ^ lane_mask);
}

static inline uint32_t __umulhi(uint32_t a, uint32_t b)
{
	return (uint32_t)(((uint64_t)a * b) >> 32);
}

// Byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x (x the low four).
static inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s)
{
	uint64_t both = (uint64_t)y << 32 | x;
	uint32_t r = 0;

	for (int i = 0; i < 4; i++)
		r |= (uint32_t)((both >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
	return r;
}

// Runs kernel @fn over @grid blocks of @block threads (block a multiple of 32).
struct kvg_attend_args;
typedef void emu_kernel_fn(const struct kvg_attend_args a);
void emu_launch(emu_kernel_fn *fn, unsigned grid, unsigned block, size_t smem,
		const struct kvg_attend_args *args);

#endif
