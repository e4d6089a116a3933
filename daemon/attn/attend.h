/* SPDX-License-Identifier: MIT */
/*
 * Decode/prefill attention over paged KV: the inner loops of the host backend.
 *
 * Pool memory is described by strides (the daemon's BLOCK layout keeps the K
 * rows of one kv head inside one block back to back; its LAYER layout puts
 * the other heads' rows between them). attn_keys locates the K rows of one
 * (layer, kv head) of one sequence; the V row of the same token is v_delta
 * bytes after its K row.
 *
 * One call computes, for one query position and the g query heads sharing one
 * kv head (GQA), softmax(scale * q.K^T [soft-capped]) V over the key positions
 * of up to two ranges, accumulating in f32 whatever the storage dtype.
 *
 * The attn room (these kernels, and the masks of kvmask.h that the GPU kernels
 * share) may use the core and nothing else of the daemon.
 */
#ifndef KVPOOL_ATTEND_H
#define KVPOOL_ATTEND_H

#include <stddef.h>
#include <stdint.h>

enum attn_dtype { ATTN_F32, ATTN_F16, ATTN_BF16 };

static inline size_t attn_dtype_size(enum attn_dtype t)
{
	return t == ATTN_F32 ? 4 : 2;
}

struct attn_keys {
	const uint8_t *pool;   /* base of the pool's memory */
	size_t block_stride;   /* bytes from a block's rows to those of the block after it */
	size_t row_stride;     /* bytes from a token's K row to the next token's in a block;
				* 0: head_dim * dtype size (rows back to back) */
	size_t k_off;          /* offset of block 0's K rows of this layer and kv head */
	size_t v_delta;        /* bytes from a K row to the V row of the same token */
	uint32_t block_size;
	uint32_t head_dim;
	enum attn_dtype dtype; /* storage dtype of K and V */
	const uint32_t *ids;   /* block id of logical block first_block + i */
	uint32_t first_block;
	uint32_t nblocks;
	uint32_t ring_tokens;  /* cyclic groups: position p lives at p % ring_tokens; else 0 */
};

struct attn_query {
	const void *q;          /* [g][head_dim] in q_dtype */
	void *out;              /* [g][head_dim] in q_dtype; in f32 when lse is set */
	uint32_t lo[2], hi[2];  /* key positions [lo, hi) of each range, ascending, disjoint */
	uint32_t nranges;       /* 1 or 2 */
	/*
	 * NULL, or [g]: a partial result over part of a query's keys (split-K), to be
	 * merged by attn_merge: out is then kept in f32, unrounded, and lse[h] gets
	 * ln(sum_j exp(s_j)) over these keys, s_j the scaled and soft-capped logits.
	 */
	float *lse;
};

struct attn_params {
	uint32_t g;             /* query heads per kv head, >= 1 (taken in slices of at most 16) */
	float scale;            /* applied to q.k */
	float softcap;          /* > 0: s = softcap * tanh(s / softcap); 0: none */
	enum attn_dtype q_dtype;
};

/*
 * Computes one query position's output. The caller has checked that every key
 * position of the ranges maps to a block in keys->ids, and that the ranges
 * hold at least one position.
 */
void attn_one(const struct attn_keys *keys, const struct attn_query *q,
	      const struct attn_params *p);

/*
 * Merges the partial results of one query over n disjoint parts of its keys
 * (attn_one with lse set), weighting each by exp(lse - max lse), into out
 * ([g][head_dim] in @dt, rounded once). Part c is at part + c * part_stride
 * ([g][head_dim] f32) with its lse at lse + c * lse_stride ([g]); a part whose
 * lse is -INFINITY had no keys and is skipped. The parts are summed in order,
 * so the result does not depend on which thread merges. n <= ATTN_MERGE_MAX.
 */
#define ATTN_MERGE_MAX 256
void attn_merge(const float *part, size_t part_stride, const float *lse, size_t lse_stride,
		uint32_t n, uint32_t g, uint32_t head_dim, void *out, enum attn_dtype dt);

/* The instruction set attn_one dispatches to on this CPU: "avx512bf16", "avx512", "avx2", "c". */
const char *attn_isa(void);

/* Conversions used by the kernels and by tests (round to nearest even). */
float attn_f16_to_f32(uint16_t h);
uint16_t attn_f32_to_f16(float f);
float attn_bf16_to_f32(uint16_t h);
uint16_t attn_f32_to_bf16(float f);

#endif
