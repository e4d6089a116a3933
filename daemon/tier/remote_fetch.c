/* SPDX-License-Identifier: MIT */
/*
 * The cluster tier, coming in. Where the local walk of a LOOKUP or an ALLOC
 * with the cache ends (pool, then local tier), the prompt's next full blocks
 * are asked of the cluster in one pipelined round of EXISTS, one per key,
 * under tier_remote_timeout_ms; the request waits for it (its sequence
 * answers -EBUSY meanwhile) and runs again with the answer in place: the
 * core counts a key the cluster holds as a tier's (kvc_tier_ops.has). A
 * LOOKUP is done then (KVP_BLOCK_REMOTE marks those positions). An ALLOC
 * first reads the values its masks need (GET, in chunks whose deadline
 * follows their size), checks each (header, geometry, checksum) and cuts its
 * hit before the first that fails, is missing or late: it then runs with what
 * passed, and the blocks it is given for them are filled from the values on
 * the tier's thread before it completes (KVP_CQE_F_TIER). A local hit alone
 * never asks: nothing is there to extend.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include <hiredis/hiredis.h>

#include "observe/probes.h"
#include "tier/tier_internal.h"

/* What a key's round said (no answer in time: LATE, a miss not held against it), then its read. */
enum { KEY_MISSING, KEY_LATE, KEY_HELD, KEY_WANTED, KEY_READ, KEY_REFUSED };

/* A GET chunk: its keys at most, and its deadline: a floor plus its bytes at this rate. */
#define GET_CHUNK_KEYS 64u
#define GET_FLOOR_MS 20u
#define GET_MB_PER_S 500u
/* After a round no node answered: asks skipped this long (misses), then tried again. */
#define QUIET_NS (200ull * 1000000)

struct remote_ask {
	struct remote_head head;     /* REMOTE_ASK */
	enum { ASK_EXISTS, ASK_GET, ASK_FILL } stage;
	struct kvpd_remote *r;
	struct kvpd_client *c;
	struct kvp_sqe sqe;
	kvpd_again_fn *again;
	uint32_t n;                  /* keys asked, by position then group */
	uint32_t *index, mask;       /* open addressing over them (key i + 1; 0: empty): the
				      * core asks a key a position, a scan would be O(n^2) */
	uint32_t *groups, *pos;
	struct kvc_hash *keys;
	uint8_t *state;              /* KEY_* */
	uint8_t *refused;            /* KEY_REFUSED's KVP_REMOTE_REFUSED_* */
	redisReply **values;         /* KEY_READ's replies, checked (the thread's until filled)... */
	struct remote_arena arena;   /* ...their strings */
	uint32_t nfill, *fill_block, *fill_key;
	struct kvp_cqe cqe;          /* FILL: the ALLOC's completion */
	uint64_t bytes_in;           /* the thread's: what its reads took in */
	uint64_t start_ns;           /* when its request was taken */
	uint64_t round_ns;           /* EXISTS: its time */
	bool late;                   /* EXISTS: some node did not answer in time */
	bool answered;               /* EXISTS: some node answered, or every node was reached */
};

bool kvpd_remote_answered(const struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key)
{
	const struct remote_ask *a = r->answer;

	/*
	 * Before the reads (a LOOKUP, or which reads an ALLOC needs) a key the
	 * round found counts; an ALLOC counts only the values read and checked,
	 * whose KV it is given.
	 */
	for (uint32_t h = a ? (uint32_t)(key->lo ^ group) & a->mask : 0; a && a->index[h];
	     h = (h + 1) & a->mask) {
		uint32_t i = a->index[h] - 1;

		if (a->groups[i] == group && a->keys[i].lo == key->lo && a->keys[i].hi == key->hi)
			return a->stage == ASK_EXISTS ?
			       a->state[i] == KEY_HELD || a->state[i] == KEY_WANTED :
			       a->state[i] == KEY_READ;
	}
	return false;
}

/*
 * An ask's arena for the values it reads: one buffer kept between asks (256
 * MiB at most), already faulted in; taken by the ask thread, given back by
 * the loop.
 */
#define ARENA_KEEP_BYTES (256ull << 20)

static void arena_take(struct kvpd_remote *r, struct remote_arena *a, size_t bytes)
{
	pthread_mutex_lock(&r->arena_lock);
	if (r->arena_mem && r->arena_bytes >= bytes) {
		a->mem = r->arena_mem;
		a->cap = r->arena_bytes;
		r->arena_mem = NULL;
	}
	pthread_mutex_unlock(&r->arena_lock);
	if (!a->mem) {
		a->mem = malloc(bytes);
		a->cap = a->mem ? bytes : 0;
	}
	a->used = 0;
}

static void arena_give(struct kvpd_remote *r, struct remote_arena *a)
{
	uint8_t *mem = a->mem;

	if (mem && a->cap <= ARENA_KEEP_BYTES) {
		pthread_mutex_lock(&r->arena_lock);
		if (!r->arena_mem || r->arena_bytes < a->cap) {
			uint8_t *old = r->arena_mem;

			r->arena_mem = mem;
			r->arena_bytes = a->cap;
			mem = old;
		}
		pthread_mutex_unlock(&r->arena_lock);
	}
	free(mem);
}

static void ask_free(struct remote_ask *a)
{
	for (uint32_t i = 0; a->values && i < a->n; i++)
		if (a->values[i])
			remote_reply_free(a->values[i]);
	arena_give(a->r, &a->arena);
	free(a);
}

/* The keys of positions [@from, @to) of every group but the cyclic ones (snapshots stay here). */
static struct remote_ask *ask_new(struct kvpd_remote *r, const struct kvc_hash *hashes,
				  uint32_t from, uint32_t to)
{
	const struct kvc_pool_config *cfg = kvc_pool_config(r->pool->core);
	uint32_t ng = 0, groups[KVC_MAX_GROUPS], n;
	struct remote_ask *a;
	uint64_t slots;

	for (uint32_t g = 0; g < cfg->num_groups; g++)
		if (r->pool->params.group_kind[g] != KVP_KIND_CYCLIC)
			groups[ng++] = g;
	n = (to - from) * ng;
	for (slots = 2; slots < 2 * (uint64_t)n; slots *= 2)
		;
	a = calloc(1, sizeof(*a) + n * (sizeof(struct kvc_hash) + sizeof(redisReply *) +
					4 * sizeof(uint32_t) + 2) + slots * sizeof(uint32_t));
	if (!a)
		return NULL;
	a->keys = (struct kvc_hash *)(a + 1);
	a->values = (redisReply **)(a->keys + n);
	a->groups = (uint32_t *)(a->values + n);
	a->pos = a->groups + n;
	a->fill_block = a->pos + n;
	a->fill_key = a->fill_block + n;
	a->index = a->fill_key + n;
	a->mask = (uint32_t)(slots - 1);
	a->state = (uint8_t *)(a->index + slots);
	a->refused = a->state + n;
	for (uint32_t p = from; p < to; p++)
		for (uint32_t k = 0; k < ng; k++) {
			uint32_t h = (uint32_t)(hashes[p].lo ^ groups[k]) & a->mask;

			while (a->index[h])
				h = (h + 1) & a->mask;
			a->index[h] = a->n + 1;
			a->groups[a->n] = groups[k];
			a->pos[a->n] = p;
			a->keys[a->n++] = hashes[p];
		}
	a->r = r;
	a->head.kind = REMOTE_ASK;
	a->head.job.type = KVPD_JOB_REMOTE;
	a->head.job.pool = r->pool;
	a->head.job.ntasks = 1;
	return a;
}

static void submit(struct kvpd *d, struct remote_ask *a)
{
	a->head.job.start_ns = kvpd_now_ns();
	a->r->pool->inflight++;
	d->jobs_inflight++;
	kvpd_workers_adopt(d->workers, &a->head.job);
	kvpd_tier_copier_push(a->r->ask_thread, &a->head.job, false);
}

int kvpd_remote_ask(struct kvpd *d, struct kvpd_client *c, struct kvc_seq *seq,
		    const struct kvp_sqe *sqe, kvpd_again_fn *again)
{
	struct kvpd_remote *r = c->pool->remote;
	const struct kvc_hash *hashes;
	struct kvc_seq_info info;
	struct remote_ask *a;
	struct kvc_hit hit;
	uint32_t nb;

	if (!r || r->answer || (sqe->opcode == KVP_OP_ALLOC &&
				!(sqe->op_flags & KVP_ALLOC_USE_CACHE)))
		return 0;
	kvc_seq_info(seq, &info);
	if (info.running || kvpd_now_ns() < r->quiet_until || kvc_lookup(seq, &hit))
		return 0; /* the request refuses itself, or the cluster is quiet: misses */
	hashes = kvc_seq_hashes(seq, &nb);
	if (hit.blocks >= nb)
		return 0; /* the local hit is the whole prompt: nothing to ask */
	a = ask_new(r, hashes, hit.blocks, nb);
	if (!a)
		return 0; /* without memory the cluster is only not asked */
	a->c = c;
	a->start_ns = kvpd_now_ns();
	a->sqe = *sqe;
	a->again = again;
	a->head.job.client = c;
	kvpd_seq_slot(c, sqe->handle)->busy = true;
	kvpd_client_job_out(c, 0);
	submit(d, a);
	return KVPD_LATER;
}

/* The thread: one EXISTS a key, in one round under the pool's timeout. */
static void run_exists(struct remote_ask *a)
{
	struct kvpd_remote *r = a->r;
	struct remote_cmd *cmds = calloc(a->n, sizeof(*cmds));
	uint64_t start = kvpd_now_ns();
	uint32_t answered;

	for (uint32_t i = 0; cmds && i < a->n; i++) {
		char key[REMOTE_KEY_MAX];
		int klen = kvpd_remote_key(r, a->groups[i], &a->keys[i], key, sizeof(key));
		const char *argv[] = { "EXISTS", key };
		size_t lens[] = { 6, (size_t)klen };
		int len = redisFormatCommandArgv(&cmds[i].buf, 2, argv, lens);

		cmds[i].len = len > 0 ? (size_t)len : 0;
		cmds[i].slot = remote_key_slot(key, (size_t)klen);
	}
	answered = cmds ? remote_round(&r->ask_link, cmds, a->n,
					     start + r->ask_link.timeout_ms * 1000000ull)
			: 0;
	a->round_ns = kvpd_now_ns() - start;
	a->late = answered < a->n;
	/* A node too slow for a long round is not down: only one nothing reached quiets the tier. */
	a->answered = answered > 0 || !r->ask_link.unreachable;
	for (uint32_t i = 0; cmds && i < a->n; i++) {
		const redisReply *rep = cmds[i].reply;

		a->state[i] = !rep ? KEY_LATE : rep->type == REDIS_REPLY_INTEGER && rep->integer == 1 ?
			      KEY_HELD : KEY_MISSING;
		if (rep)
			remote_reply_free(cmds[i].reply);
		redisFreeCommand(cmds[i].buf);
	}
	free(cmds);
}

/* The thread: the wanted values, chunk by chunk, each checked; none read past a failure. */
static void run_get(struct remote_ask *a)
{
	struct kvpd_remote *r = a->r;
	struct remote_cmd cmds[GET_CHUNK_KEYS];
	uint32_t which[GET_CHUNK_KEYS], wanted = 0;
	size_t value = sizeof(struct remote_value_head) + r->data_bytes;
	struct remote_tag_key tag;
	bool failed = false;
	char ttl[16];

	remote_access_tag(&r->access, &tag);
	snprintf(ttl, sizeof(ttl), "%u", r->ttl_s);
	for (uint32_t i = 0; i < a->n; i++)
		wanted += a->state[i] == KEY_WANTED;
	/* Each value's place, 64-byte aligned; without it, values are replies of their own. */
	arena_take(r, &a->arena, wanted * ((value + 64) & ~(size_t)63));
	a->arena.min = value;
	r->ask_link.arena = a->arena.mem ? &a->arena : NULL;

	for (uint32_t i = 0; i < a->n && !failed;) {
		uint32_t n = 0;
		uint64_t bytes;

		for (; i < a->n && n < GET_CHUNK_KEYS; i++) {
			char key[REMOTE_KEY_MAX];
			int klen, len;

			if (a->state[i] != KEY_WANTED)
				continue;
			klen = kvpd_remote_key(r, a->groups[i], &a->keys[i], key, sizeof(key));
			/* A value read lives its TTL again: what is hit stays, as in an LRU. */
			len = r->ttl_s ?
			      redisFormatCommandArgv(&cmds[n].buf, 4,
						     (const char *[]){ "GETEX", key, "EX", ttl },
						     (size_t[]){ 5, (size_t)klen, 2, strlen(ttl) }) :
			      redisFormatCommandArgv(&cmds[n].buf, 2, (const char *[]){ "GET", key },
						     (size_t[]){ 3, (size_t)klen });
			cmds[n].len = len > 0 ? (size_t)len : 0;
			cmds[n].slot = remote_key_slot(key, (size_t)klen);
			which[n++] = i;
		}
		bytes = (uint64_t)n * (sizeof(struct remote_value_head) + r->data_bytes);
		remote_round(&r->ask_link, cmds, n, kvpd_now_ns() + (GET_FLOOR_MS + bytes /
			     (GET_MB_PER_S * 1000ull)) * 1000000ull);
		for (uint32_t k = 0; k < n; k++) {
			char key[REMOTE_KEY_MAX];
			int klen = kvpd_remote_key(r, a->groups[which[k]], &a->keys[which[k]], key,
						   sizeof(key));
			int why = remote_value_check(&tag, key, (size_t)klen, cmds[k].reply,
						     r->geometry, r->data_bytes);

			if (cmds[k].reply && cmds[k].reply->type == REDIS_REPLY_ERROR &&
			    !remote_error_transient(cmds[k].reply->str))
				remote_tell_refusal(r, &r->ask_link, cmds[k].slot, true,
						    cmds[k].reply->str);

			a->bytes_in += cmds[k].reply && cmds[k].reply->type == REDIS_REPLY_STRING ?
				       cmds[k].reply->len : 0;
			if (why != REMOTE_SOUND || failed) {
				/* Past a failure a value is not wanted: the hit ends before it. */
				a->state[which[k]] = why != REMOTE_SOUND ? KEY_REFUSED : KEY_MISSING;
				a->refused[which[k]] = (uint8_t)(why != REMOTE_SOUND ? why : 0);
				failed |= why != REMOTE_SOUND;
				if (cmds[k].reply)
					remote_reply_free(cmds[k].reply);
			} else {
				a->state[which[k]] = KEY_READ;
				a->values[which[k]] = cmds[k].reply;
			}
			redisFreeCommand(cmds[k].buf);
		}
	}
	r->ask_link.arena = NULL;
	explicit_bzero(&tag, sizeof(tag));
}

/* The thread: each filled block gets its value's KV, chunk by chunk, as the pool lays it out. */
static void run_fill(struct remote_ask *a)
{
	const struct kvpd_kv_layout *l = &a->r->pool->layout;
	size_t chunk = kvpd_block_chunk_bytes(l);
	uint8_t *mem = a->r->pool->mem;

	for (uint32_t f = 0; f < a->nfill; f++) {
		const char *data = a->values[a->fill_key[f]]->str + sizeof(struct remote_value_head);

		for (uint32_t i = 0; i < 2 * l->layers; i++)
			memcpy(mem + kvpd_block_chunk_off(l, a->fill_block[f], i), data + i * chunk,
			       chunk);
	}
}

void kvpd_remote_run_ask(struct kvpd_job *job)
{
	struct remote_ask *a = (struct remote_ask *)job;

	if (a->stage == ASK_EXISTS)
		run_exists(a);
	else if (a->stage == ASK_GET)
		run_get(a);
	else
		run_fill(a);
	remote_link_nodes(&a->r->ask_link, &a->head.nodes_known, &a->head.nodes_answering);
	a->head.moved = a->r->ask_link.moved;
	a->head.asked = a->r->ask_link.asked;
	a->head.cluster = a->r->ask_link.cluster;
	a->head.asks = true;
	job->task_done(job);
}

/* Posts a completion the tier room owes @c (as the ring would have). */
static void post(struct kvpd *d, struct kvpd_client *c, uint8_t opcode, struct kvp_cqe *cqe,
		 uint64_t start_ns)
{
	kvpd_stats_op(d, c, opcode, cqe->res, kvpd_now_ns() - start_ns);
	kvpd_stats_client(d, c);
	kvpd_ring_post(c, cqe);
}

/* The request runs again with the answer in place; the ask is freed unless a fill took it. */
static void resume(struct kvpd *d, struct remote_ask *a)
{
	struct kvpd_remote *r = a->r;
	struct kvp_cqe cqe = { .user_data = a->sqe.user_data };
	int ret;

	kvpd_seq_slot(a->c, a->sqe.handle)->busy = false;
	r->answer = a;
	ret = a->again(d, a->c, &a->sqe, &cqe);
	r->answer = NULL;
	if (ret != KVPD_LATER) {
		cqe.res = ret;
		post(d, a->c, a->sqe.opcode, &cqe, a->start_ns);
	}
	kvpd_client_job_back(a->c, 0);
	if (a->stage != ASK_FILL)
		ask_free(a);
}

/* The round's answer: the keys the cluster lacks forgotten as held; the ALLOC's reads chosen. */
static void exists_done(struct kvpd *d, struct remote_ask *a)
{
	struct kvpd_remote *r = a->r;
	struct kvc_seq *seq = kvpd_seq_get(a->c, a->sqe.handle);
	uint32_t wanted = 0;
	struct kvc_hit hit;

	r->st.rounds++;
	r->st.timeouts += a->late;
	kvpd_remote_round_time(r, a->round_ns);
	KVPD_PROBE(remote_round, a->c->gen, a->sqe.handle, a->n, a->round_ns);
	if (!a->answered)
		r->quiet_until = kvpd_now_ns() + QUIET_NS;
	/* The misses of one round are one BlockRemoved a group. */
	if (kvpd_events_remote_on(r->pool->events))
		kvpd_events_cut(r->pool->events);
	for (uint32_t i = 0; i < a->n; i++)
		if (a->state[i] == KEY_MISSING) {
			kvpd_remote_forget(r, a->groups[i], &a->keys[i]);
			kvpd_events_remote_lost(r->pool->events, a->groups[i], &a->keys[i]);
		}
	if (kvpd_events_remote_on(r->pool->events))
		kvpd_events_cut(r->pool->events);
	if (a->sqe.opcode == KVP_OP_ALLOC && seq) {
		/* Which of the held keys the hit's masks read: the lookup's tier positions. */
		r->answer = a;
		if (!kvc_lookup(seq, &hit))
			for (uint32_t i = 0; i < a->n; i++) {
				uint32_t g = a->groups[i], p = a->pos[i];

				if (a->state[i] == KEY_HELD && p < hit.blocks &&
				    hit.ids[g][p] == KVC_TIER_BLOCK &&
				    !kvpd_tier_holds(r->pool->tier, g, &a->keys[i])) {
					a->state[i] = KEY_WANTED;
					wanted++;
				}
			}
		r->answer = NULL;
	}
	if (a->sqe.opcode == KVP_OP_ALLOC)
		a->stage = ASK_GET; /* from now on only what was read counts */
	if (!wanted)
		return resume(d, a);
	submit(d, a);
}

/* The values read whole, group by group so that chains join: their TTL renewed by the read. */
static void read_held(struct remote_ask *a)
{
	struct kvpd_events *ev = a->r->pool->events;
	struct kvc_seq *seq = kvpd_seq_get(a->c, a->sqe.handle);

	if (!kvpd_events_remote_on(ev) || !seq)
		return;
	kvpd_events_cut(ev);
	for (uint32_t g = 0; g < a->r->pool->params.num_groups; g++)
		for (uint32_t i = 0; i < a->n; i++)
			if (a->groups[i] == g && a->state[i] == KEY_READ)
				kvpd_events_remote_read(ev, seq, g, a->pos[i], a->head.job.start_ns);
	kvpd_events_cut(ev);
}

/* The reads' end: the hit is cut before the first position a read failed at. */
static void get_done(struct kvpd *d, struct remote_ask *a)
{
	struct kvpd_remote *r = a->r;
	uint32_t cut = UINT32_MAX;

	r->st.bytes_in += a->bytes_in;
	for (uint32_t i = 0; i < a->n; i++)
		if (a->state[i] == KEY_REFUSED) {
			if (a->pos[i] < cut)
				cut = a->pos[i];
			r->st.refused[a->refused[i]]++;
			kvpd_remote_forget(r, a->groups[i], &a->keys[i]);
			kvpd_events_remote_lost(r->pool->events, a->groups[i], &a->keys[i]);
		}
	for (uint32_t i = 0; i < a->n; i++) {
		if (a->pos[i] >= cut && a->state[i] != KEY_REFUSED)
			a->state[i] = KEY_MISSING;
		else if (a->state[i] == KEY_READ)
			kvpd_remote_know(r, a->groups[i], &a->keys[i]);
	}
	read_held(a);
	resume(d, a);
}

int kvpd_remote_alloc_done(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			   const struct kvc_alloc_res *res, const struct kvp_cqe *cqe, int ret)
{
	struct kvpd_remote *r = c->pool->remote;
	struct remote_ask *a = r->answer;
	uint32_t bs = kvc_pool_config(c->pool->core)->block_size, from = UINT32_MAX;

	if (!a)
		return ret;
	for (uint32_t i = 0; i < res->promoted; i++) {
		const struct kvc_promotion *p = &res->promotions[i];

		if (kvpd_tier_holds(c->pool->tier, p->group, &p->key))
			continue; /* the local tier's */
		for (uint32_t k = 0; k < a->n; k++)
			if (a->state[k] == KEY_READ && a->groups[k] == p->group &&
			    a->keys[k].lo == p->key.lo && a->keys[k].hi == p->key.hi) {
				a->fill_block[a->nfill] = p->block;
				a->fill_key[a->nfill++] = k;
				from = p->pos < from ? p->pos : from;
				break;
			}
	}
	if (!a->nfill)
		return ret;
	/* The blocks stay allocated until filled, whatever the sequence does meanwhile. */
	kvc_pin(c->pool->core, a->fill_block, a->nfill);
	r->st.promoted += a->nfill;
	r->st.hit_tokens += (uint64_t)(res->hit_tokens / bs - from) * bs;
	r->dirty = true;
	a->cqe = *cqe;
	a->cqe.user_data = sqe->user_data;
	a->cqe.flags |= KVP_CQE_F_TIER;
	a->stage = ASK_FILL;
	kvpd_seq_later(kvpd_seq_slot(c, sqe->handle));
	kvpd_client_job_out(c, 0);
	submit(d, a);
	return KVPD_LATER;
}

static void fill_done(struct kvpd *d, struct remote_ask *a)
{
	struct kvpd_client *c = a->c;

	kvc_unpin(a->r->pool->core, a->fill_block, a->nfill);
	kvpd_client_job_back(c, 0);
	if (!c->dead) {
		struct kvp_cqe cqe = a->cqe;

		KVPD_PROBE(remote_fill, c->gen, a->sqe.handle, a->nfill,
			   kvpd_now_ns() - a->start_ns);
		if (kvpd_seq_later_back(kvpd_seq_slot(c, a->sqe.handle), &cqe))
			post(d, c, KVP_OP_ALLOC, &cqe, a->start_ns);
	} else if (!c->inflight) {
		kvpd_client_free(d, c);
	}
	ask_free(a);
}

void kvpd_remote_ask_done(struct kvpd *d, struct kvpd_job *job)
{
	struct remote_ask *a = (struct remote_ask *)job;

	a->r->pool->inflight--;
	d->jobs_inflight--;
	kvpd_remote_head_done(a->r, &a->head);
	if (a->stage == ASK_FILL)
		return fill_done(d, a);
	if (a->c->dead) {
		kvpd_client_job_back(a->c, 0);
		if (!a->c->inflight)
			kvpd_client_free(d, a->c);
		ask_free(a);
		return;
	}
	if (a->stage == ASK_EXISTS)
		exists_done(d, a);
	else
		get_done(d, a);
}

bool kvpd_remote_mark(struct kvpd_pool *pool, struct kvc_seq *seq, const struct kvc_hit *hit,
		      const uint32_t **ids, uint32_t *buf)
{
	const struct kvpd_remote *r = pool->remote;
	const struct kvc_hash *hashes;
	uint32_t nb, at = 0;
	bool marked = false;

	if (!r || !r->answer)
		return false;
	hashes = kvc_seq_hashes(seq, &nb);
	for (uint32_t g = 0; g < pool->params.num_groups; g++) {
		bool mine = false;

		for (uint32_t p = 0; p < hit->nids[g] && p < nb; p++)
			mine |= ids[g][p] == KVC_TIER_BLOCK &&
				!kvpd_tier_holds(pool->tier, g, &hashes[p]) &&
				pool->params.group_kind[g] != KVP_KIND_CYCLIC;
		if (!mine)
			continue;
		for (uint32_t p = 0; p < hit->nids[g]; p++)
			buf[at + p] = ids[g][p] == KVC_TIER_BLOCK && p < nb &&
				      !kvpd_tier_holds(pool->tier, g, &hashes[p]) ?
				      KVP_BLOCK_REMOTE : ids[g][p];
		ids[g] = buf + at;
		at += hit->nids[g];
		marked = true;
	}
	return marked;
}
