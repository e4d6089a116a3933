/* SPDX-License-Identifier: MIT */
/*
 * Running a Batch on the ring level: fill entries while they need nothing in
 * flight, submit once, reap. Called with the client's lock held and the GIL
 * dropped: plain C only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

struct runner {
	struct kvp_client *c;
	struct bop *ops;
	uint8_t *arena;
	uint64_t arena_bytes, used; /* arena bytes the requests in flight hold */
	uint32_t in_flight;
	uint64_t *busy;             /* handles with a data request in flight */
	size_t nbusy;
	int broken;                 /* once the connection failed: every later result */
};

static bool busy(const struct runner *r, uint64_t handle)
{
	for (size_t i = 0; i < r->nbusy; i++)
		if (r->busy[i] == handle)
			return true;
	return false;
}

/* Whether @op must wait for a data request of one of its sequences. */
static bool must_wait(const struct runner *r, const struct bop *op)
{
	if (!r->nbusy)
		return false;
	if (op->kind != BOP_ATTEND)
		return busy(r, op->handle);
	for (uint32_t s = 0; s < op->att.nseqs; s++)
		if (busy(r, op->att.reqs[s].handle))
			return true;
	return false;
}

/* r->busy has room for every handle of the batch's data requests (kvpy_run_batch). */
static void mark_busy(struct runner *r, uint64_t handle)
{
	r->busy[r->nbusy++] = handle;
}

/* ALLOC's new blocks out of the arena before it is reused: 0, -EOVERFLOW or -ENOMEM. */
static int copy_lists(struct runner *r, struct bop *op, uint32_t flags)
{
	const uint8_t *src = r->arena + op->arena_off;
	struct kvp_block_lists head;
	uint64_t bytes = sizeof(head);

	/* The bound the entry was given is enough for any ALLOC (arena_need): never here. */
	if (flags & KVP_CQE_F_OVERFLOW)
		return -EOVERFLOW;
	/* The counts read once: the copy made is the one checked. */
	memcpy(&head, src, sizeof(head));
	for (uint32_t g = 0; g < head.num_groups && g < KVP_MAX_GROUPS; g++)
		bytes += (uint64_t)head.counts[g] * sizeof(uint32_t);
	if (head.num_groups > KVP_MAX_GROUPS || bytes > op->lists_bytes)
		return -EPROTO;
	op->lists = malloc(bytes);
	if (!op->lists)
		return -ENOMEM;
	memcpy(op->lists, &head, sizeof(head));
	memcpy(op->lists->ids, src + sizeof(head), bytes - sizeof(head));
	return 0;
}

/* Submits what was filled and reaps every completion; the arena is free again after. */
static void drain(struct runner *r, size_t upto)
{
	struct kvp_cqe *cqe;
	int ret = r->in_flight ? kvp_submit(r->c) : 0;

	while (ret >= 0 && r->in_flight) {
		struct bop *op;

		ret = kvp_wait_cqe(r->c, &cqe);
		if (ret < 0)
			break;
		if (cqe->user_data >= upto || !r->ops[cqe->user_data].in_flight) {
			kvp_cqe_seen(r->c, cqe);
			ret = -EPROTO;
			break;
		}
		op = &r->ops[cqe->user_data];
		if (!op->failed_here) {
			op->res = cqe->res;
			op->aux = cqe->aux;
		}
		op->in_flight = false;
		if (op->kind == BOP_ALLOC && op->blocks && op->res == 0 && !op->failed_here)
			op->res = copy_lists(r, op, cqe->flags);
		kvp_cqe_seen(r->c, cqe);
		r->in_flight--;
		if (op->kind == BOP_ATTEND && op->res == 0 && !op->failed_here)
			kvp_attend_collect(r->c, op->arena_off, op->att.q_heads, true, op->att.reqs,
					   op->att.nseqs);
	}
	if (ret < 0) {
		/* The connection is unusable (timed out, daemon gone): so is all in flight. */
		r->broken = ret;
		for (size_t i = 0; i < upto; i++)
			if (r->ops[i].in_flight) {
				r->ops[i].res = ret;
				r->ops[i].in_flight = false;
			}
		r->in_flight = 0;
	}
	r->used = 0;
	r->nbusy = 0;
}

/* Arena bytes @op stages: a bound, 8-byte aligned pieces included. */
static uint64_t arena_need(const struct bop *op)
{
	uint64_t bytes = 0;

	if (op->kind == BOP_APPEND)
		bytes = (uint64_t)op->n * sizeof(*op->tokens) + 8;
	if (op->kind == BOP_ALLOC && op->blocks)
		bytes = op->lists_bytes + 8;
	if (op->kind == BOP_WRITE_KV)
		bytes = 2 * kvpy_array_bytes(&op->k) + 16;
	if (op->kind == BOP_ATTEND) {
		bytes = sizeof(struct kvp_attend) + op->att.nseqs * sizeof(struct kvp_attend_seq) + 8;
		for (uint32_t s = 0; s < op->att.nseqs; s++)
			bytes += 2 * kvpy_array_bytes(&op->att.q[s]) + 16;
	}
	return bytes;
}

/* Fills @sqe for @op, staging its data at r->used. */
static int fill(struct runner *r, struct bop *op, struct kvp_sqe *sqe)
{
	uint64_t off = (r->used + 7) & ~7ull;
	int64_t staged;
	size_t bytes;

	switch (op->kind) {
	case BOP_ALLOC:
		kvp_prep_alloc(sqe, op->handle, op->n, op->lookahead, op->use_cache);
		/* With the cache it may complete later (blocks coming up from a tier). */
		if (op->use_cache)
			mark_busy(r, op->handle);
		if (op->blocks) {
			sqe->out_addr = off;
			sqe->out_len = op->lists_bytes;
			op->arena_off = off;
			r->used = off + op->lists_bytes;
		}
		return 0;
	case BOP_COMMIT:
		kvp_prep_handle_op(sqe, KVP_OP_COMMIT, op->handle, op->n);
		return 0;
	case BOP_FREE:
		kvp_prep_handle_op(sqe, KVP_OP_FREE, op->handle, 0);
		return 0;
	case BOP_APPEND:
		/* A control request: done before the daemon takes the next, its tokens read then. */
		bytes = (size_t)op->n * sizeof(*op->tokens);
		memcpy(r->arena + off, op->tokens, bytes);
		kvp_prep_handle_op(sqe, KVP_OP_APPEND_TOKENS, op->handle, op->n);
		sqe->addr = off;
		r->used = off + bytes;
		return 0;
	case BOP_WRITE_KV:
		bytes = kvpy_array_bytes(&op->k);
		memcpy(r->arena + off, op->k.data, bytes);
		memcpy(r->arena + off + bytes, op->v.data, bytes);
		kvp_prep_kv(sqe, KVP_OP_WRITE_KV, op->handle, op->group, op->layer, op->first, op->n,
			    off, 0);
		r->used = off + 2 * bytes;
		mark_busy(r, op->handle);
		return 0;
	case BOP_ATTEND:
		staged = kvp_prep_attend(r->c, sqe, off, op->att.group, op->att.layer,
					 op->att.q_heads, op->att.scale, op->att.softcap, true,
					 op->att.reqs, op->att.nseqs);
		if (staged < 0)
			return (int)staged;
		op->arena_off = off;
		r->used = off + (uint64_t)staged;
		for (uint32_t s = 0; s < op->att.nseqs; s++)
			mark_busy(r, op->att.reqs[s].handle);
		return 0;
	}
	return -EINVAL;
}

int kvpy_run_batch(ClientObject *client, struct bop *ops, size_t nops)
{
	struct runner r = { .c = client->c, .ops = ops };
	size_t handles = 1;

	for (size_t i = 0; i < nops; i++)
		handles += ops[i].kind == BOP_ATTEND ? ops[i].att.nseqs :
			   ops[i].kind == BOP_WRITE_KV || (ops[i].kind == BOP_ALLOC && ops[i].use_cache);
	r.busy = malloc(handles * sizeof(*r.busy));
	if (!r.busy)
		return -ENOMEM;
	r.arena = kvp_arena(r.c, &r.arena_bytes);
	for (size_t i = 0; i < nops; i++) {
		struct bop *op = &ops[i];
		uint64_t need = arena_need(op);
		struct kvp_sqe *sqe;

		if (need > r.arena_bytes) {
			op->res = -E2BIG;
			continue;
		}
		/* In flight stays within the SQ asked for, so the CQ (twice as large) never fills. */
		if (must_wait(&r, op) || need > r.arena_bytes - r.used ||
		    r.in_flight == KVPY_SQ_ENTRIES)
			drain(&r, i);
		if (r.broken) {
			op->res = r.broken;
			continue;
		}
		sqe = kvp_get_sqe(r.c);
		if (!sqe) {
			drain(&r, i);
			sqe = r.broken ? NULL : kvp_get_sqe(r.c);
		}
		if (!sqe) {
			op->res = r.broken ?: -EBUSY;
			continue;
		}
		op->res = fill(&r, op, sqe);
		if (op->res < 0) {
			/* Refused here: the entry got goes as a NOP, its completion ignored. */
			memset(sqe, 0, sizeof(*sqe));
			sqe->opcode = KVP_OP_NOP;
			op->failed_here = true;
		}
		sqe->user_data = i;
		op->in_flight = true;
		r.in_flight++;
	}
	drain(&r, nops);
	free(r.busy);
	return 0;
}
