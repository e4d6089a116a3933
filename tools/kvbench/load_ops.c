/* SPDX-License-Identifier: MIT */
/*
 * kvbench load: where an engine's batches go, and the samples they leave.
 * Through a daemon a batch is one submission on the engine's rings (more
 * only when the SQ or the arena is short); in process it is the same calls
 * on the core allocator, one after the other. Either way an operation's
 * latency runs from the start of the batch to the engine's having its
 * answer: what an engine waits for before its step can go on.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"
#include "kvbench.h"

const char *const ld_kind_names[LD_NKINDS] = {
	"open", "lookup", "append", "alloc", "commit", "close", "free", "step",
};

int ld_sample(struct ld_samples *s, uint64_t v)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 4096;
		uint64_t *nv = realloc(s->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		s->v = nv;
		s->cap = cap;
	}
	s->v[s->n++] = v;
	return 0;
}

int ld_stats_merge(struct ld_stats *into, const struct ld_stats *from)
{
	struct ld_counts *a = &into->n;
	const struct ld_counts *b = &from->n;

	a->ops += b->ops;
	a->steps += b->steps;
	a->tokens += b->tokens;
	a->preemptions += b->preemptions;
	a->nospace += b->nospace;
	a->hit_tokens += b->hit_tokens;
	a->query_tokens += b->query_tokens;
	if (b->start_ns && (!a->start_ns || b->start_ns < a->start_ns))
		a->start_ns = b->start_ns;
	if (b->end_ns > a->end_ns)
		a->end_ns = b->end_ns;
	for (int k = 0; k < LD_NKINDS; k++)
		for (size_t i = 0; i < from->lat[k].n; i++)
			if (ld_sample(&into->lat[k], from->lat[k].v[i]))
				return -ENOMEM;
	return 0;
}

void ld_stats_free(struct ld_stats *st)
{
	for (int k = 0; k < LD_NKINDS; k++)
		free(st->lat[k].v);
	memset(st, 0, sizeof(*st));
}

static enum ld_kind kind_of(uint8_t opcode)
{
	switch (opcode) {
	case KVP_OP_SEQ_OPEN: return LD_OPEN;
	case KVP_OP_LOOKUP: return LD_LOOKUP;
	case KVP_OP_APPEND_TOKENS: return LD_APPEND;
	case KVP_OP_ALLOC: return LD_ALLOC;
	case KVP_OP_COMMIT: return LD_COMMIT;
	case KVP_OP_SEQ_CLOSE: return LD_CLOSE;
	default: return LD_FREE;
	}
}

/* As many requests a submission as the SQ and arena take: all, in batches ld_sq_entries sizes. */
static int ring_batch(struct kvp_client *c, struct ld_op *ops, uint32_t n, struct ld_stats *st)
{
	uint64_t start = bench_now_ns(), bytes;
	uint8_t *arena = kvp_arena(c, &bytes);
	uint32_t i = 0;
	int ret;

	while (i < n) {
		uint32_t first = i;
		uint64_t off = 0;

		for (; i < n; i++) {
			struct ld_op *op = &ops[i];
			uint64_t need = op->tokens ? (uint64_t)op->len * sizeof(uint32_t) : 0;
			struct kvp_sqe *sqe;

			if (off + need > bytes || !(sqe = kvp_get_sqe(c)))
				break;
			kvp_prep_handle_op(sqe, op->opcode, op->handle, op->len);
			sqe->user_data = i;
			if (op->use_cache)
				sqe->op_flags = KVP_ALLOC_USE_CACHE;
			if (need) {
				memcpy(arena + off, op->tokens, need);
				sqe->addr = off;
				off += (need + 7) & ~7ull;
			}
		}
		ret = kvp_submit(c);
		if (ret < 0)
			return ret;
		if (i == first)
			return -E2BIG; /* one request's tokens do not fit in the arena */
		for (uint32_t k = first; k < i; k++) {
			struct kvp_cqe *cqe;
			struct ld_op *op;

			ret = kvp_wait_cqe(c, &cqe);
			if (ret)
				return ret;
			if (cqe->user_data < first || cqe->user_data >= i)
				return -EPROTO;
			op = &ops[cqe->user_data];
			op->res = cqe->res;
			op->aux = cqe->aux;
			kvp_cqe_seen(c, cqe);
			ret = ld_sample(&st->lat[kind_of(op->opcode)], bench_now_ns() - start);
			if (ret)
				return ret;
		}
	}
	return ld_sample(&st->lat[LD_STEP], bench_now_ns() - start);
}

/* What the daemon salts a sequence of the shared namespace with: the same hashing, in process. */
static const uint8_t shared_ns_salt[KVP_NAME_MAX + 1];

static int core_op(struct kvc_pool *pool, struct ld_op *op)
{
	struct kvc_seq *seq = (struct kvc_seq *)(uintptr_t)op->handle;
	struct kvc_alloc_req req = { .new_tokens = op->len, .use_cache = op->use_cache };
	struct kvc_alloc_res res;
	struct kvc_hit hit;
	int ret;

	switch (op->opcode) {
	case KVP_OP_SEQ_OPEN:
		ret = kvc_seq_create(pool, op->tokens, op->len, shared_ns_salt, sizeof(shared_ns_salt),
				     -1, &seq);
		op->aux = (uintptr_t)seq;
		return ret;
	case KVP_OP_SEQ_CLOSE:
		kvc_seq_destroy(seq);
		return 0;
	case KVP_OP_APPEND_TOKENS:
		return kvc_seq_append(seq, op->tokens, op->len);
	case KVP_OP_LOOKUP:
		ret = kvc_lookup(seq, &hit);
		return ret ? ret : (int)hit.tokens;
	case KVP_OP_ALLOC:
		ret = kvc_alloc(seq, &req, &res);
		op->aux = ret ? 0 : res.hit_tokens;
		return ret;
	case KVP_OP_COMMIT:
		return kvc_seq_computed(seq, op->len);
	case KVP_OP_FREE:
		kvc_seq_free(seq);
		return 0;
	}
	return -EINVAL;
}

/* The same batch in process. */
static int core_batch(struct kvc_pool *pool, struct ld_op *ops, uint32_t n, struct ld_stats *st)
{
	uint64_t start = bench_now_ns();
	int ret = 0;

	for (uint32_t i = 0; i < n && !ret; i++) {
		ops[i].res = core_op(pool, &ops[i]);
		ret = ld_sample(&st->lat[kind_of(ops[i].opcode)], bench_now_ns() - start);
	}
	return ret ?: ld_sample(&st->lat[LD_STEP], bench_now_ns() - start);
}

int ld_backend_run(const struct ld_backend *be, struct ld_op *ops, uint32_t n, struct ld_stats *st)
{
	return be->c ? ring_batch(be->c, ops, n, st) : core_batch(be->pool, ops, n, st);
}
