/* SPDX-License-Identifier: MIT */
/*
 * Where a pool's KV lives and how data moves in and out of it. The host backend
 * (backend_host.c) keeps it in a memfd and computes on worker threads; a GPU
 * backend plugs in behind the same operations. A backend knows nothing of
 * prefix caching: it is handed block ids, already checked and pinned.
 */
#ifndef KVPOOLD_BACKEND_H
#define KVPOOLD_BACKEND_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "refuse.h"
#include "attn/attend.h"

/*
 * Where K and V lie, by strides, as KVP_OP_POOL_LAYOUT tells clients. Element
 * (layer l, block b, token t, kv head h) of K starts at
 * kvpd_k_off(l, h) + b * block_stride + t * token_stride, its V v_delta later.
 *   BLOCK (host default): a slot of slot_bytes per block; in it, per layer, K
 *     then V, each [kv_heads][block_size][head_dim].
 *   LAYER (cuda default): per layer a K array then a V array, each
 *     [num_blocks][block_size][kv_heads][head_dim].
 * Every group has the same number of layers, so any group can use any block.
 */
struct kvpd_kv_layout {
	uint32_t num_blocks, block_size, layers, kv_heads, head_dim;
	enum attn_dtype dtype;
	uint32_t kind;       /* KVP_LAYOUT_BLOCK or KVP_LAYOUT_LAYER */
	size_t row_bytes;    /* one token of one kv head: head_dim * dtype size */
	size_t slot_bytes;   /* K and V of every layer of one block; 0: the pool holds no KV */
	size_t block_stride; /* block b to b + 1, same layer and head */
	size_t token_stride; /* token t to t + 1 of a block */
	size_t head_stride;  /* kv head h to h + 1 */
	size_t layer_stride; /* layer l's K to layer l + 1's */
	size_t v_delta;      /* a K row to the V row of the same element */
	size_t total_bytes;  /* num_blocks * slot_bytes */
	/* filled by the backend's pool_init: */
	size_t map_bytes;    /* the memory it mapped (total_bytes, rounded up) */
	size_t page_bytes;   /* the size of its pages (huge pages or not) */
	uint32_t num_pieces; /* the memory's pieces, back to back, each piece_bytes but the
			      * last (the rest of map_bytes): what POOL_MAP exports */
	size_t piece_bytes;
	int mem_fd;          /* host: the memfd, kept for POOL_MAP; -1 otherwise */
};

static inline size_t kvpd_k_off(const struct kvpd_kv_layout *l, uint32_t layer, uint32_t head)
{
	return layer * l->layer_stride + head * l->head_stride;
}

/* Token positions mapped to blocks: position p is in ids[p' / bs - first_block], p' = p or p % ring. */
struct kvpd_block_map {
	const uint32_t *ids;
	uint32_t first_block, nblocks;
	uint32_t ring_tokens;
};

/* Where position @pos's row lies, @off into its token's place: bytes from the pool's start. */
static inline size_t kvpd_row_off(const struct kvpd_kv_layout *l, const struct kvpd_block_map *m,
				  uint32_t pos, size_t off)
{
	uint32_t p = m->ring_tokens ? pos % m->ring_tokens : pos;
	uint32_t block = m->ids[p / l->block_size - m->first_block];

	return block * l->block_stride + off + (size_t)(p % l->block_size) * l->token_stride;
}

static inline uint8_t *kvpd_row(uint8_t *mem, const struct kvpd_kv_layout *l,
				const struct kvpd_block_map *m, uint32_t pos, size_t off)
{
	return mem + kvpd_row_off(l, m, pos, off);
}

/*
 * A block's KV as 2 * layers chunks, each contiguous in either layout: chunk i is
 * layer i / 2's K (i even) or V, kvpd_block_chunk_bytes long. A tier keeps a
 * block as its chunks back to back.
 */
static inline size_t kvpd_block_chunk_bytes(const struct kvpd_kv_layout *l)
{
	return (size_t)l->block_size * l->kv_heads * l->row_bytes;
}

static inline size_t kvpd_block_chunk_off(const struct kvpd_kv_layout *l, uint32_t block,
					  uint32_t i)
{
	return kvpd_k_off(l, i / 2, 0) + (size_t)block * l->block_stride + (i % 2 ? l->v_delta : 0);
}

struct kvpd_job;

/* Version of struct kvpd_backend_ops a plugin must be built against (5: block copies). */
#define KVPD_BACKEND_ABI 5

struct kvpd_backend_ops {
	const char *name;
	/*
	 * Reserves pool memory for @l (zeroed) on @device and fills l->map_bytes
	 * and l->page_bytes; *mem is what the other calls get. A refusal returns
	 * -errno with its reason in @why (why_len bytes, NUL-terminated).
	 */
	int (*pool_init)(struct kvpd_kv_layout *l, uint32_t device, void **mem, char *why,
			 size_t why_len);
	void (*pool_fini)(const struct kvpd_kv_layout *l, void *mem);
	/*
	 * The descriptors a mapping client needs, one per piece of the memory, in
	 * order: at most @max into @fds, new ones the caller closes. Returns how
	 * many, or -errno. NULL: the backend's pools cannot be mapped.
	 */
	int (*export_fds)(const struct kvpd_kv_layout *l, void *mem, int *fds, unsigned max);
	/* The memory's pieces (KVP_MEM_*, their count and sizes) as POOL_LAYOUT reports them. */
	uint32_t mem_kind;
	/*
	 * ATTEND comes as one task that the backend plans itself (a GPU's launch
	 * covers the whole request); false: the daemon's tasks, a (sequence,
	 * kv head) or a split part of one each, as the host backend runs them.
	 */
	bool whole_attend;
	/*
	 * Runs task @task of @job (WRITE, READ, ATTEND, TIER_DOWN, TIER_UP, COPY);
	 * called on worker threads, tasks of a job in
	 * parallel. Returns 0 when done, or KVPD_TASK_LATER when the work
	 * finishes later (a kernel on a stream): the backend then calls
	 * job->task_done(job) once it has (jobs.h). A task that fails (a device
	 * error) sets job->error, if still 0, to its -errno: the request's result.
	 */
	int (*run_task)(struct kvpd_job *job, uint32_t task);
};

/*
 * What a backend plugin exports under this name: its ops when built for
 * @abi (KVPD_BACKEND_ABI), else NULL. It must not touch the device yet (the
 * daemon loads it before any pool asks for one).
 */
typedef const struct kvpd_backend_ops *kvpd_backend_entry_fn(uint32_t abi);
#define KVPD_CUDA_PLUGIN_ENTRY "kvpool_cuda_backend"

extern const struct kvpd_backend_ops kvpd_host_backend;

#endif
