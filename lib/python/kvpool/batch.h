/* SPDX-License-Identifier: MIT */
/* A Batch's operations, shared by the type (batch.c) and what runs them (batch_run.c). */
#ifndef KVPOOL_PY_BATCH_H
#define KVPOOL_PY_BATCH_H

#include "kvpool_py.h"

enum bop_kind { BOP_ALLOC, BOP_COMMIT, BOP_FREE, BOP_APPEND, BOP_WRITE_KV, BOP_ATTEND };

struct bop {
	enum bop_kind kind;
	bool use_cache, single, in_flight, failed_here, blocks;
	uint16_t group, layer;
	uint32_t n, lookahead, first;
	uint64_t handle;
	struct kvpy_array k, v;      /* WRITE_KV */
	uint32_t *tokens;            /* APPEND: n of them, PyMem */
	struct kvpy_attend_call att; /* ATTEND; single: Sequence-style, its result one array */
	uint64_t arena_off;
	int res;
	uint64_t aux;
	/* ALLOC with blocks: the new blocks' lists, copied out of the arena at completion. */
	struct kvp_block_lists *lists; /* malloc */
	uint32_t lists_bytes;
};

/*
 * Runs @ops on the client's connection (its lock held, the GIL dropped: no Python here),
 * each one's cqe res and aux into it. 0, or -ENOMEM.
 */
int kvpy_run_batch(ClientObject *client, struct bop *ops, size_t nops);

#endif
