/* SPDX-License-Identifier: MIT */
/*
 * Where a pool's KV lives and how data moves in and out of it. The host backend
 * (backend_host.c) keeps it in a memfd and computes on worker threads; a GPU
 * backend plugs in behind the same operations. A backend knows nothing of
 * prefix caching: it is handed block ids, already checked and pinned.
 */
#ifndef KVPOOLD_BACKEND_H
#define KVPOOLD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attend.h"

/*
 * vLLM's layout: block id b owns slot b of slot_bytes; a slot holds, per layer,
 * K then V, each [kv_heads][block_size][head_dim] in the pool dtype. Every
 * group has the same number of layers, so any group can use any block.
 */
struct kvpd_kv_layout {
	uint32_t num_blocks, block_size, layers, kv_heads, head_dim;
	enum attn_dtype dtype;
	size_t row_bytes;   /* one token of one kv head: head_dim * dtype size */
	size_t head_bytes;  /* one kv head's rows in a block: block_size * row_bytes */
	size_t layer_bytes; /* K and V of one layer: 2 * kv_heads * head_bytes */
	size_t slot_bytes;  /* layers * layer_bytes */
	/* filled by the backend's pool_init: */
	size_t map_bytes;   /* the memory it mapped (num_blocks * slot_bytes, rounded up) */
	size_t page_bytes;  /* the size of its pages (huge pages or not) */
};

static inline size_t kvpd_k_off(const struct kvpd_kv_layout *l, uint32_t layer, uint32_t head)
{
	return layer * l->layer_bytes + head * l->head_bytes;
}

static inline size_t kvpd_v_delta(const struct kvpd_kv_layout *l)
{
	return l->kv_heads * l->head_bytes;
}

/* Token positions mapped to blocks: position p is in ids[p' / bs - first_block], p' = p or p % ring. */
struct kvpd_block_map {
	const uint32_t *ids;
	uint32_t first_block, nblocks;
	uint32_t ring_tokens;
};

static inline uint8_t *kvpd_row(uint8_t *mem, const struct kvpd_kv_layout *l,
				const struct kvpd_block_map *m, uint32_t pos, size_t off)
{
	uint32_t p = m->ring_tokens ? pos % m->ring_tokens : pos;
	uint32_t block = m->ids[p / l->block_size - m->first_block];

	return mem + block * l->slot_bytes + off + (size_t)(p % l->block_size) * l->row_bytes;
}

struct kvpd_job;

struct kvpd_backend_ops {
	const char *name;
	/*
	 * Reserves pool memory for @l (zeroed) and fills l->map_bytes and l->page_bytes;
	 * *mem is what the other calls get.
	 */
	int (*pool_init)(struct kvpd_kv_layout *l, void **mem);
	void (*pool_fini)(const struct kvpd_kv_layout *l, void *mem);
	/* Runs task @task of @job; called on worker threads, tasks of a job in parallel. */
	void (*run_task)(struct kvpd_job *job, uint32_t task);
};

extern const struct kvpd_backend_ops kvpd_host_backend;

#endif
