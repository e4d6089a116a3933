/* SPDX-License-Identifier: MIT */
/*
 * What the host side of a cuda ATTEND (attend_plan.c, cuda_attend.c) hands
 * the attention kernels (kv_attend.cu): plain C, read by C, by nvcc and by
 * the CPU emulation of the kernels (gpu/emu/).
 *
 * A request's work is cut into items, one warp each: (sequence, kv head, row
 * tile, part). A row is one query head of one query: rows of a sequence are
 * query-major (row = query * g + head within the kv head's g), and a tile is
 * KVG_MMA_ROWS (tensor-core kernel) or KVG_SIMT_ROWS (the other) consecutive
 * rows. A tile reads the keys its queries see together (at most two ranges,
 * kvpd_mask_union); a part is a share of those keys (split-K), whose partial
 * output and log-sum-exp the merge kernel combines.
 */
#ifndef KVPOOL_GPU_ATTEND_ABI_H
#define KVPOOL_GPU_ATTEND_ABI_H

#include <stdint.h>

#include "../daemon/attn/attend.h"

#define KVG_MMA_ROWS 16   /* rows of an mma.m16n8k16 */
#define KVG_MMA_WARPS 4   /* warps (items) per thread block of the tensor-core kernel */
/*
 * The tensor-core kernel's stages of keys in shared memory, a warp's: each 16
 * keys' K and V rows (64 * head_dim bytes), filled this many - 1 steps ahead.
 * 2 thread blocks a multiprocessor at head_dim 128 (96 KiB each), 3 at 64.
 */
#define KVG_MMA_STAGES(head_dim) ((head_dim) <= 64 ? 4 : 3)
#define KVG_MMA_SMEM(head_dim) (KVG_MMA_WARPS * KVG_MMA_STAGES(head_dim) * 64 * (head_dim))
#define KVG_SIMT_ROWS 4
#define KVG_MERGE_WARPS 4
/* Keys a part starts on a multiple of: the tensor-core kernel's step. */
#define KVG_PART_ALIGN 16
/* Parts of a tile's keys, at most (the merge kernel keeps a weight each). */
#define KVG_SPLIT_MAX 128

/* One sequence's entry, in device memory. */
struct kvg_unit {
	uint32_t item_end;    /* attention items of the units up to this one, itself included */
	uint32_t merge_end;   /* merge items (kv_heads * tiles of each split unit), likewise */
	uint32_t first_pos, count;
	uint32_t tiles;       /* row tiles per kv head */
	uint32_t split;       /* parts of each tile's keys; 1: none (no partials, no merge) */
	uint32_t kind, param, prefix; /* its group's mask (struct kvpd_mask) */
	uint32_t ring_tokens; /* cyclic: position p lives at p % ring_tokens; else 0 */
	uint32_t first_block; /* the block of position first_block * block_size is ids[ids_at] */
	uint32_t ids_at;
	uint64_t q_at, out_at; /* bytes into q and out: [count][q_heads][head_dim] each */
	uint64_t part_at;     /* its first partial row (split units): part[part_at * head_dim],
			       * lse[part_at]; item (h, t, c) holds rows_per_tile rows from
			       * part_at + ((h * tiles + t) * split + c) * rows_per_tile */
};

/* The kernels' one argument, by value. */
struct kvg_attend_args {
	const uint8_t *kv;        /* K of the layer's kv head 0 in block 0: the pool + its offset */
	const struct kvg_unit *units;
	const uint32_t *ids;
	const uint8_t *q;
	uint8_t *out;
	float *part, *lse;
	uint64_t block_stride, token_stride, head_stride, v_delta; /* bytes */
	uint32_t nunits, items;   /* items: the attention kernel's warps that have work */
	uint32_t rows_per_tile;   /* KVG_MMA_ROWS or KVG_SIMT_ROWS */
	uint32_t block_size, head_dim, kv_heads, q_heads, g;
	uint32_t bs_mul, bs_shr;  /* n / block_size as kvg_div(n, bs_mul, bs_shr): kvg_divider() */
	uint32_t g_mul, g_shr;
	uint32_t kv_dtype, q_dtype; /* enum attn_dtype */
	float scale, softcap;
};

/*
 * The attention kernels, X(name, kv dtype, q dtype, n). Tensor-core kernels
 * (mma.m16n8k16): K and V in f16 or bf16 with q in the same dtype, or bf16
 * with q in f32, head_dim n; their rows 16-byte aligned. The others (SIMT):
 * any dtypes, head_dim up to 32 * n.
 */
#define KVG_MMA_KERNELS(X)                                                                    \
	X(kvg_mma_f16_hd64, ATTN_F16, ATTN_F16, 64)                                          \
	X(kvg_mma_f16_hd128, ATTN_F16, ATTN_F16, 128)                                        \
	X(kvg_mma_f16_hd256, ATTN_F16, ATTN_F16, 256)                                        \
	X(kvg_mma_bf16_hd64, ATTN_BF16, ATTN_BF16, 64)                                       \
	X(kvg_mma_bf16_hd128, ATTN_BF16, ATTN_BF16, 128)                                     \
	X(kvg_mma_bf16_hd256, ATTN_BF16, ATTN_BF16, 256)                                     \
	X(kvg_mma_bf16q32_hd64, ATTN_BF16, ATTN_F32, 64)                                     \
	X(kvg_mma_bf16q32_hd128, ATTN_BF16, ATTN_F32, 128)                                   \
	X(kvg_mma_bf16q32_hd256, ATTN_BF16, ATTN_F32, 256)
#define KVG_SIMT_KERNELS(X)                                                                   \
	X(kvg_simt_f32_d4, ATTN_F32, ATTN_F32, 4)                                            \
	X(kvg_simt_f32_d8, ATTN_F32, ATTN_F32, 8)                                            \
	X(kvg_simt_f32_d32, ATTN_F32, ATTN_F32, 32)                                          \
	X(kvg_simt_f16_d4, ATTN_F16, ATTN_F16, 4)                                            \
	X(kvg_simt_f16_d8, ATTN_F16, ATTN_F16, 8)                                            \
	X(kvg_simt_f16_d32, ATTN_F16, ATTN_F16, 32)                                          \
	X(kvg_simt_f16q32_d4, ATTN_F16, ATTN_F32, 4)                                         \
	X(kvg_simt_f16q32_d8, ATTN_F16, ATTN_F32, 8)                                         \
	X(kvg_simt_f16q32_d32, ATTN_F16, ATTN_F32, 32)                                       \
	X(kvg_simt_bf16_d4, ATTN_BF16, ATTN_BF16, 4)                                         \
	X(kvg_simt_bf16_d8, ATTN_BF16, ATTN_BF16, 8)                                         \
	X(kvg_simt_bf16_d32, ATTN_BF16, ATTN_BF16, 32)                                       \
	X(kvg_simt_bf16q32_d4, ATTN_BF16, ATTN_F32, 4)                                       \
	X(kvg_simt_bf16q32_d8, ATTN_BF16, ATTN_F32, 8)                                       \
	X(kvg_simt_bf16q32_d32, ATTN_BF16, ATTN_F32, 32)
/* Split units' partials into their outputs: one kernel, any dtype. */
#define KVG_MERGE_KERNEL kvg_merge

/*
 * Division by an invariant d >= 1 of n < 2^31 (positions, rows) as a multiply
 * and a shift: q = umulhi(n, mul) >> shr, mul = ceil(2^(31 + l) / d) with
 * l = ceil(log2 d) and shr = l - 1; d = 1 is mul 0 (q = n).
 */
static inline void kvg_divider(uint32_t d, uint32_t *mul, uint32_t *shr)
{
	uint32_t l = 0;

	while ((1ull << l) < d)
		l++;
	if (d <= 1) {
		*mul = 0;
		*shr = 0;
		return;
	}
	*mul = (uint32_t)(((1ull << (31 + l)) + d - 1) / d);
	*shr = l - 1;
}

#endif
