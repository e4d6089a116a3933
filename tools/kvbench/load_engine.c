/* SPDX-License-Identifier: MIT */
/*
 * kvbench load: one engine's scheduler, as lib/python/kvpool/engine.py runs
 * it (vLLM's, allocation only): requests arrive, wait, are admitted with the
 * prefix cache, prefilled in chunks and decoded together; a running request
 * the pool cannot grow preempts the newest running one (freed and requeued
 * at the head, re-admitted with the cache). Each step is one batch: the
 * finished requests' COMMIT and SEQ_CLOSE, last step's COMMITs, per running
 * sequence its APPEND and ALLOC, then for each waiting request there is room
 * for the next of its SEQ_OPEN, LOOKUP (sizing its admission) and admission
 * ALLOC with the prefix cache. Only preemption, which needs each answer
 * before the next request, goes one request at a time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"
#include "kvbench.h"

#define VOCAB 128000u

enum req_state {
	REQ_FUTURE,   /* not arrived */
	REQ_ARRIVED,  /* waiting, its sequence not open */
	REQ_WAITING,  /* waiting, open, with no hint */
	REQ_LOOKED,   /* waiting with a fresh hint: its admission goes with the next batch */
	REQ_RUNNING,
	REQ_FINISHED, /* its COMMIT and SEQ_CLOSE go with the next batch */
	REQ_CLOSED,
};

struct ld_req {
	uint32_t id;
	enum req_state state;
	uint32_t *tokens;    /* the prompt, then what it generated */
	uint32_t len, known; /* tokens; those its sequence has */
	uint32_t computed;   /* positions computed: committed, or to be with the next batch */
	uint32_t slots;      /* positions allocated */
	uint32_t end;        /* where this step's span ends */
	uint32_t generated, hint;
	uint64_t handle;
	uint64_t stream;     /* its own token ids */
	uint64_t prefix;     /* the shared prefix's, for the first `shared` tokens */
	bool commit;         /* `computed` goes with the next batch */
	bool is_short;       /* its ALLOC in this step's batch was refused */
};

struct ld_engine {
	const struct ld_workload *w;
	unsigned index;
	struct ld_backend be;
	struct ld_req *reqs;
	struct ld_req **running, **waiting, **finished;
	uint32_t nrunning, nwaiting, nfinished, arrived, closed;
	bool preempted;    /* the last step preempted: no admission in this one */
	struct ld_op *ops;
	uint32_t max_ops;
	struct ld_stats st;
	char why[160];
};

static int run_batch(struct ld_engine *e, uint32_t n)
{
	int ret;

	if (!n)
		return 0;
	ret = ld_backend_run(&e->be, e->ops, n, &e->st);
	e->st.n.ops += n;
	if (ret)
		snprintf(e->why, sizeof(e->why), "a batch of %u requests: %s", n, strerror(-ret));
	return ret;
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint32_t token_at(uint64_t seed, uint64_t stream, uint32_t pos)
{
	return (uint32_t)(mix64(mix64(seed ^ mix64(stream)) + pos) % VOCAB);
}

/* Prefix k (0-based) with probability (1/(k+1)) / H(systems): Zipf with exponent 1. */
static uint64_t pick_prefix(const struct ld_workload *w, uint64_t stream)
{
	double u = (double)(mix64(w->seed ^ mix64(stream ^ 0x7a697066ull)) >> 11) * 0x1p-53;
	double h = 0, acc = 0;
	uint32_t k;

	for (k = 0; k < w->systems; k++)
		h += 1.0 / (k + 1);
	for (k = 0; k + 1 < w->systems; k++) {
		acc += 1.0 / (k + 1) / h;
		if (u < acc)
			break;
	}
	return k + 1;
}

static int req_arrive(struct ld_engine *e, struct ld_req *r)
{
	const struct ld_workload *w = e->w;

	r->tokens = malloc(((size_t)w->prompt + w->steps) * sizeof(*r->tokens));
	if (!r->tokens)
		return -ENOMEM;
	r->stream = (uint64_t)(e->index + 1) << 32 | r->id;
	r->prefix = w->systems ? pick_prefix(w, r->stream) : 0;
	for (uint32_t p = 0; p < w->prompt; p++)
		r->tokens[p] = token_at(w->seed, p < w->shared ? r->prefix : r->stream, p);
	r->len = r->known = w->prompt;
	r->state = REQ_ARRIVED;
	return 0;
}

static struct ld_op *add_op(struct ld_engine *e, uint32_t *n, uint8_t opcode, struct ld_req *r,
			    uint32_t len)
{
	struct ld_op *op = &e->ops[(*n)++];

	*op = (struct ld_op){ .opcode = opcode, .req = r, .len = len, .handle = r->handle };
	return op;
}

static uint32_t span_end(const struct ld_engine *e, const struct ld_req *r)
{
	uint64_t end = (uint64_t)r->computed + e->w->chunk;

	return end < r->len ? (uint32_t)end : r->len;
}

/* This step's batch, in the order the file's comment gives. */
static int build(struct ld_engine *e, uint32_t *nops)
{
	uint32_t n = 0, room = e->w->seqs - e->nrunning, i;
	bool admit = !e->preempted;

	for (i = 0; i < e->nfinished; i++) {
		struct ld_req *r = e->finished[i];

		if (r->commit)
			add_op(e, &n, KVP_OP_COMMIT, r, r->computed);
		add_op(e, &n, KVP_OP_SEQ_CLOSE, r, 0);
	}
	/* Commits first: they publish blocks the admissions below may hit. */
	for (i = 0; i < e->nrunning; i++) {
		struct ld_req *r = e->running[i];

		if (r->commit)
			add_op(e, &n, KVP_OP_COMMIT, r, r->computed);
		r->commit = false;
	}
	for (i = 0; i < e->nrunning; i++) {
		struct ld_req *r = e->running[i];

		r->end = span_end(e, r);
		if (r->known < r->end)
			add_op(e, &n, KVP_OP_APPEND_TOKENS, r, r->end - r->known)->tokens =
				r->tokens + r->known;
		add_op(e, &n, KVP_OP_ALLOC, r, r->end - r->computed);
	}
	for (uint32_t a = 0; a < e->w->arrivals && e->arrived < e->w->requests; a++) {
		struct ld_req *r = &e->reqs[e->arrived++];
		int ret = req_arrive(e, r);

		if (ret) {
			snprintf(e->why, sizeof(e->why), "request %u's prompt: %s", r->id, strerror(-ret));
			return ret;
		}
		e->waiting[e->nwaiting++] = r;
	}
	/*
	 * The waiting requests there is room for, in order, each a step further:
	 * SEQ_OPEN, LOOKUP, then the admission's ALLOC. Only a sequence about to
	 * be admitted is open (waiting ones would hold the tenant's token quota).
	 * Admissions stop at the first request not ready, and in a step after a
	 * preemption; they come after the running sequences' ALLOCs.
	 */
	for (i = 0; i < e->nwaiting && room; i++, room--) {
		struct ld_req *r = e->waiting[i];
		uint32_t want = r->len - r->hint < e->w->chunk ? r->len - r->hint : e->w->chunk;

		if (r->state == REQ_LOOKED && admit) {
			add_op(e, &n, KVP_OP_ALLOC, r, want)->use_cache = true;
			continue;
		}
		admit = false;
		if (r->state == REQ_ARRIVED)
			add_op(e, &n, KVP_OP_SEQ_OPEN, r, r->len)->tokens = r->tokens;
		else
			add_op(e, &n, KVP_OP_LOOKUP, r, 0);
	}
	*nops = n;
	return 0;
}

static int refused(struct ld_engine *e, const struct ld_op *op)
{
	snprintf(e->why, sizeof(e->why), "request %u: %s: %s", op->req->id,
		 kvp_opcode_name(op->opcode), strerror(-op->res));
	return op->res;
}

/* The batch's answers; returns how many admissions the pool refused. */
static int take_results(struct ld_engine *e, uint32_t n, uint32_t *refusals)
{
	uint32_t kept = 0;

	*refusals = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct ld_op *op = &e->ops[i];
		struct ld_req *r = op->req;

		if (op->res == -ENOSPC && op->opcode == KVP_OP_ALLOC) {
			e->st.n.nospace++;
			if (r->state == REQ_RUNNING) {
				r->is_short = true;
			} else {
				r->state = REQ_WAITING; /* looked up again before its next try */
				(*refusals)++;
			}
			continue;
		}
		if (op->res < 0)
			return refused(e, op);
		switch (op->opcode) {
		case KVP_OP_SEQ_OPEN:
			r->handle = op->aux;
			r->state = REQ_WAITING;
			break;
		case KVP_OP_SEQ_CLOSE:
			free(r->tokens);
			r->tokens = NULL;
			r->state = REQ_CLOSED;
			e->closed++;
			break;
		case KVP_OP_APPEND_TOKENS:
			r->known += op->len;
			break;
		case KVP_OP_LOOKUP:
			r->hint = (uint32_t)op->res;
			r->state = REQ_LOOKED;
			break;
		case KVP_OP_ALLOC:
			if (r->state == REQ_RUNNING) {
				r->slots = r->end > r->slots ? r->end : r->slots;
				break;
			}
			r->computed = (uint32_t)op->aux;
			r->slots = r->computed + op->len;
			r->state = REQ_RUNNING;
			e->running[e->nrunning++] = r;
			e->st.n.hit_tokens += op->aux;
			e->st.n.query_tokens += r->len;
			break;
		}
	}
	e->nfinished = 0;
	for (uint32_t i = 0; i < e->nwaiting; i++)
		if (e->waiting[i]->state != REQ_RUNNING)
			e->waiting[kept++] = e->waiting[i];
	e->nwaiting = kept;
	return 0;
}

/* One request on its own: preemption needs each answer before the next request. */
static int run_one(struct ld_engine *e, uint8_t opcode, struct ld_req *r, uint32_t len)
{
	uint32_t n = 0;
	int ret;

	add_op(e, &n, opcode, r, len);
	ret = run_batch(e, n);
	if (!ret && e->ops[0].res < 0 && e->ops[0].res != -ENOSPC)
		return refused(e, &e->ops[0]);
	return ret ?: e->ops[0].res;
}

/* Preempts the newest running requests until @r has its slots, or is preempted itself. */
static int make_room(struct ld_engine *e, struct ld_req *r)
{
	for (;;) {
		struct ld_req *victim = e->running[--e->nrunning];
		int ret = run_one(e, KVP_OP_FREE, victim, 0);

		if (ret)
			return ret;
		victim->computed = victim->slots = 0;
		victim->commit = victim->is_short = false;
		victim->state = REQ_WAITING;
		memmove(e->waiting + 1, e->waiting, e->nwaiting++ * sizeof(*e->waiting));
		e->waiting[0] = victim;
		e->st.n.preemptions++;
		e->preempted = true;
		if (victim == r)
			return 0;
		ret = run_one(e, KVP_OP_ALLOC, r, r->end - r->computed);
		if (ret == 0) {
			r->slots = r->end;
			return 0;
		}
		if (ret != -ENOSPC)
			return ret;
		e->st.n.nospace++;
	}
}

/* The model's part: each running request computes its span; one that reached its end samples. */
static void forward(struct ld_engine *e)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < e->nrunning; i++) {
		struct ld_req *r = e->running[i];
		uint32_t end = span_end(e, r);

		end = r->slots < end ? r->slots : end;
		if (end > r->computed) {
			r->computed = end;
			r->commit = true;
		}
		e->running[kept++] = r;
		if (r->computed < r->len)
			continue;
		r->tokens[r->len] = token_at(e->w->seed, r->stream, r->len);
		r->len++;
		r->generated++;
		e->st.n.tokens++;
		if (r->generated == e->w->steps) {
			r->state = REQ_FINISHED;
			e->finished[e->nfinished++] = r;
			kept--;
		}
	}
	e->nrunning = kept;
}

int ld_engine_step(struct ld_engine *e)
{
	uint32_t n, refusals;
	int ret;

	ret = build(e, &n) ?: run_batch(e, n) ?: take_results(e, n, &refusals);
	if (ret)
		return ret;
	e->st.n.steps++;
	e->preempted = false;
	for (uint32_t i = 0; i < e->nrunning; i++) {
		struct ld_req *r = e->running[i];

		if (r->is_short) {
			r->is_short = false;
			ret = make_room(e, r);
			if (ret)
				return ret;
		}
	}
	forward(e);
	return refusals && !e->nrunning && !e->nfinished ? 0 : 1;
}

bool ld_engine_done(const struct ld_engine *e)
{
	return e->closed == e->w->requests;
}

uint32_t ld_engine_busy(const struct ld_engine *e)
{
	return e->nrunning + e->nfinished;
}

const char *ld_engine_error(const struct ld_engine *e)
{
	return e->why;
}

struct ld_stats *ld_engine_stats(struct ld_engine *e)
{
	return &e->st;
}

/* The most requests one step's batch holds: see build(). */
static uint32_t max_ops(const struct ld_workload *w)
{
	return 6 * w->seqs;
}

uint32_t ld_sq_entries(const struct ld_workload *w)
{
	uint32_t sq = 64;

	while (sq < max_ops(w) && sq < KVP_MAX_ENTRIES)
		sq *= 2;
	return sq;
}

/* A few prompts and a token per running sequence; a batch that needs more is split. */
uint64_t ld_arena_bytes(const struct ld_workload *w)
{
	return (1ull << 20) + (4ull * w->prompt + w->seqs) * sizeof(uint32_t);
}

int ld_engine_new(const struct ld_workload *w, unsigned index, struct ld_backend be,
		  struct ld_engine **out)
{
	struct ld_engine *e = calloc(1, sizeof(*e));

	if (!e)
		return -ENOMEM;
	e->w = w;
	e->index = index;
	e->be = be;
	e->reqs = calloc(w->requests, sizeof(*e->reqs));
	e->running = calloc(w->seqs, sizeof(*e->running));
	e->finished = calloc(w->seqs, sizeof(*e->finished));
	e->waiting = calloc(w->requests, sizeof(*e->waiting));
	e->max_ops = max_ops(w);
	e->ops = calloc(e->max_ops, sizeof(*e->ops));
	if (!e->reqs || !e->running || !e->finished || !e->waiting || !e->ops) {
		ld_engine_free(e);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < w->requests; i++)
		e->reqs[i].id = i;
	*out = e;
	return 0;
}

void ld_engine_free(struct ld_engine *e)
{
	if (!e)
		return;
	for (uint32_t i = 0; e->reqs && i < e->w->requests; i++)
		free(e->reqs[i].tokens);
	free(e->reqs);
	free(e->running);
	free(e->finished);
	free(e->waiting);
	free(e->ops);
	ld_stats_free(&e->st);
	free(e);
}
