/* SPDX-License-Identifier: MIT */
/*
 * The cluster tier, going out: every hashed block a COMMIT completes is
 * written through to the cluster (SET, one key a block) so that another
 * machine can hit it once it is computed, not once this machine evicts it.
 * The blocks are pinned on the loop and copied into their commands on the
 * tier's thread, off the loop and the workers; nothing local waits for a send.
 * A block the cluster is known to hold (written or read lately) is not sent
 * again; a full send queue, or a node down, late or refusing, skips a block,
 * counted. docs/tiers.md, "The cluster tier".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include <hiredis/hiredis.h>

#include "observe/probes.h"
#include "tier/tier_internal.h"
#include "tier/remote.h"

/*
 * Blocks in flight at most: 256 MiB, and a sixteenth of the pool, since a
 * block waiting for its send is pinned, out of the LRU (a backlog of the whole
 * pool would leave it only the blocks just sent to evict: on Mooncake's
 * trace a queue as large as the pool cut its hit rate from 0.148 to 0.036);
 * a small pool's, 128 or a quarter of it: 32 blocks of a 512-block pool sent
 * too slowly to keep up with prompts of 300 (0.64 of an LRU's hits on
 * conversations, 128: all). Offers past it wait unpinned (remote_wait.c). A
 * send carries half of that at most, so that sends follow each other.
 */
#define SEND_QUEUE_BYTES (256ull << 20)
#define SEND_QUEUE_POOL_SHIFT 4
#define SEND_QUEUE_SMALL 128u
#define SEND_JOB_MIN 4u
/* A send's deadline: a floor, and its bytes at this rate (MB/s) on top. */
#define SEND_FLOOR_MS 1000u
#define SEND_MB_PER_S 100u
enum { SEND_SKIPPED, SEND_OK, SEND_REFUSED };

struct remote_send {
	struct remote_head head;     /* REMOTE_SEND */
	struct kvpd_remote *r;
	struct remote_send *next_inflight;
	uint64_t seq;
	uint32_t n, cap;
	uint32_t *blocks, *groups;
	uint32_t *charges;           /* each block's tenant charge (remote_charge_take's) */
	struct kvc_hash *keys;
	/*
	 * With REMOTE events: each block's origin (its tokens in @tokens; NULL:
	 * unknown, never announced), said once its SET is back OK. NULL without.
	 */
	struct kvpd_block_origin *origins;
	uint32_t *tokens;
	uint8_t *sent;               /* the thread's answer: SEND_* */
	uint64_t bytes_out;          /* the thread's: what went out */
};

/* A POOL_SYNC waiting for the sends queued before it. */
struct remote_sync {
	struct remote_sync *next;
	struct kvpd_client *client;
	uint64_t user_data;
	uint64_t upto;               /* the sends it waits for: those made up to this seq */
	uint64_t wait_upto;          /* ...once the offers waiting before it have gone to one */
	bool waited;
};

/* A block's key: PREFIX:GEOMETRY:GROUP:HASH, all hex (readable by SCAN and redis-cli). */
int kvpd_remote_key(const struct kvpd_remote *r, uint32_t group, const struct kvc_hash *h,
		    char *buf, size_t len)
{
	return snprintf(buf, len, "%s:%016llx:%u:%016llx%016llx", r->prefix,
			(unsigned long long)r->geometry, group, (unsigned long long)h->hi,
			(unsigned long long)h->lo);
}

static struct remote_send *send_new(struct kvpd_remote *r)
{
	uint32_t cap = r->queue_cap / 2, bs = r->pool->params.block_size;
	bool origins = kvpd_events_remote_on(r->pool->events);
	struct remote_send *s;

	if (cap < SEND_JOB_MIN)
		cap = SEND_JOB_MIN;
	s = calloc(1, sizeof(*s) + cap * (4 * sizeof(uint32_t) + sizeof(struct kvc_hash)) +
		   (origins ? cap * (sizeof(*s->origins) + bs * sizeof(uint32_t)) : 0));
	if (!s)
		return NULL;
	s->r = r;
	s->cap = cap;
	s->keys = (struct kvc_hash *)(s + 1);
	s->origins = origins ? (struct kvpd_block_origin *)(s->keys + cap) : NULL;
	s->blocks = origins ? (uint32_t *)(s->origins + cap) : (uint32_t *)(s->keys + cap);
	s->groups = s->blocks + cap;
	s->charges = s->groups + cap;
	s->tokens = origins ? s->charges + cap : NULL;
	s->sent = (uint8_t *)(s->charges + cap + (origins ? (size_t)cap * bs : 0));
	s->head.kind = REMOTE_SEND;
	s->head.job.type = KVPD_JOB_REMOTE;
	s->head.job.pool = r->pool;
	s->head.job.layout = &r->pool->layout;
	s->head.job.mem = r->pool->mem;
	s->head.job.ntasks = 1;
	return s;
}

static void send_submit(struct kvpd *d, struct kvpd_remote *r)
{
	struct remote_send *s = r->filling;

	if (!s)
		return;
	r->filling = NULL;
	s->seq = ++r->next_seq;
	s->next_inflight = r->inflight;
	r->inflight = s;
	s->head.job.start_ns = kvpd_now_ns();
	r->pool->inflight++;
	d->jobs_inflight++;
	kvpd_workers_adopt(d->workers, &s->head.job);
	kvpd_tier_copier_push(r->send_thread, &s->head.job, false);
}

/* Block @i of @s came from @o (NULL: unknown): kept to announce it once it is sent. */
static void send_origin(struct remote_send *s, uint32_t i, const struct kvpd_block_origin *o)
{
	uint32_t bs = s->r->pool->params.block_size;

	if (!s->origins)
		return;
	s->origins[i] = o ? *o : (struct kvpd_block_origin){ 0 };
	if (!o)
		return;
	s->origins[i].tokens = s->tokens + (size_t)i * bs;
	memcpy(s->tokens + (size_t)i * bs, o->tokens, bs * sizeof(*o->tokens));
}

bool remote_send_queue(struct kvpd_remote *r, uint32_t group, uint32_t block,
		       const struct kvc_hash *key, uint32_t charge,
		       const struct kvpd_block_origin *o)
{
	struct remote_send *s = r->filling;

	if ((!s && !(s = r->filling = send_new(r))) || kvc_pin(r->pool->core, &block, 1))
		return false;
	s->blocks[s->n] = block;
	s->groups[s->n] = group;
	s->charges[s->n] = charge;
	send_origin(s, s->n, o);
	s->keys[s->n++] = *key;
	r->st.queued++;
	if (s->n == s->cap)
		send_submit(r->d, r);
	return true;
}

void kvpd_remote_offer(struct kvpd_remote *r, const struct kvpd_client *c, uint32_t group,
		       uint32_t block, const struct kvc_hash *key,
		       const struct kvpd_block_origin *o)
{
	uint32_t charge;
	bool taken;

	r->dirty = true;
	if (remote_known(r, group, key)) {
		r->st.deduplicated++;
		return;
	}
	charge = remote_charge_take(r, c, r->data_bytes);
	if (charge == REMOTE_CHARGE_OVER) {
		r->st.skipped++;
		return;
	}
	taken = r->st.queued < r->queue_cap && !r->waiting.n ?
		remote_send_queue(r, group, block, key, charge, o) :
		remote_wait(r, group, block, key, charge, o);
	if (!taken) {
		remote_charge_give(r, charge, r->data_bytes);
		r->st.skipped++;
		return;
	}
	/* Known from now on: a second commit of it while it is on its way sends nothing. */
	kvpd_remote_know(r, group, key);
}

/* The core's committed hook: a block to send, pinned until its send is back. */
static void committed(void *ctx, uint32_t group, uint32_t pos, uint32_t block,
		      const struct kvc_hash *key, const struct kvc_hash *parent,
		      const uint32_t *tokens)
{
	struct kvpd_remote *r = ctx;
	struct kvpd_block_origin o = { .pos = pos, .has_parent = parent != NULL,
				       .parent = parent ? parent->lo : 0, .tokens = tokens };

	kvpd_remote_offer(r, r->acting, group, block, key, &o);
}

/* The value of block @block: its chunks, copied out of the pool after the header's room. */
static void value_of(const struct kvpd_kv_layout *l, const uint8_t *mem, uint32_t block,
		     uint8_t *out)
{
	size_t chunk = kvpd_block_chunk_bytes(l);
	uint8_t *data = out + sizeof(struct remote_value_head);

	for (uint32_t i = 0; i < 2 * l->layers; i++)
		memcpy(data + i * chunk, mem + kvpd_block_chunk_off(l, block, i), chunk);
}

/* SET KEY VALUE [EX TTL] of block i of @s, formatted into @cmd. */
static void format_set(struct kvpd_remote *r, const struct remote_tag_key *tag,
		       struct remote_send *s, uint32_t i, uint8_t *value, struct remote_cmd *cmd)
{
	char key[REMOTE_KEY_MAX], ttl[16];
	int klen = kvpd_remote_key(r, s->groups[i], &s->keys[i], key, sizeof(key));
	const char *argv[] = { "SET", key, (const char *)value, "EX", ttl };
	size_t lens[] = { 3, (size_t)klen, sizeof(struct remote_value_head) + r->data_bytes, 2, 0 };
	int len;

	lens[4] = (size_t)snprintf(ttl, sizeof(ttl), "%u", r->ttl_s);
	value_of(s->head.job.layout, s->head.job.mem, s->blocks[i], value);
	remote_value_seal(tag, key, (size_t)klen, value, r->geometry, r->data_bytes);
	len = redisFormatCommandArgv(&cmd->buf, r->ttl_s ? 5 : 3, argv, lens);
	cmd->len = len > 0 ? (size_t)len : 0;
	cmd->slot = remote_key_slot(key, (size_t)klen);
}

/* The tier's thread: a send's SETs, pipelined over the nodes, in one round. */
static void run_send(struct kvpd_remote *r, struct remote_send *s)
{
	size_t value_len = sizeof(struct remote_value_head) + r->data_bytes;
	struct remote_cmd *cmds = calloc(s->n, sizeof(*cmds));
	uint8_t *value = malloc(value_len);
	struct remote_tag_key tag;
	uint64_t bytes = 0;

	remote_access_tag(&r->access, &tag);
	for (uint32_t i = 0; cmds && value && i < s->n; i++) {
		format_set(r, &tag, s, i, value, &cmds[i]);
		bytes += cmds[i].len;
	}
	explicit_bzero(&tag, sizeof(tag));
	free(value);
	if (cmds) {
		/* Commands not formatted (no memory) go to no node: their blocks count skipped. */
		for (uint32_t i = 0; i < s->n; i++)
			if (!cmds[i].buf)
				cmds[i].slot = 0, cmds[i].len = 0;
		remote_round(&r->send_link, cmds, s->n, kvpd_now_ns() + (SEND_FLOOR_MS + bytes /
			     (SEND_MB_PER_S * 1000ull)) * 1000000ull);
		for (uint32_t i = 0; i < s->n; i++) {
			const redisReply *rep = cmds[i].reply;

			s->sent[i] = cmds[i].buf && rep && rep->type == REDIS_REPLY_STATUS &&
				     !strcmp(rep->str, "OK") ? SEND_OK :
				     rep && rep->type == REDIS_REPLY_ERROR &&
				     !remote_error_transient(rep->str) ?
				     SEND_REFUSED : SEND_SKIPPED;
			if (s->sent[i] == SEND_REFUSED)
				remote_tell_refusal(r, &r->send_link, cmds[i].slot, false, rep->str);
			s->bytes_out += s->sent[i] == SEND_OK ? cmds[i].len : 0;
			if (rep)
				remote_reply_free(cmds[i].reply);
			redisFreeCommand(cmds[i].buf);
		}
	}
	free(cmds);
	remote_link_nodes(&r->send_link, &s->head.nodes_known, &s->head.nodes_answering);
	s->head.moved = r->send_link.moved;
	s->head.asked = r->send_link.asked;
	s->head.cluster = r->send_link.cluster;
	s->head.job.task_done(&s->head.job);
}

static void remote_run(void *arg, struct kvpd_job *job)
{
	if (((struct remote_head *)job)->kind == REMOTE_ASK)
		kvpd_remote_run_ask(job);
	else if (((struct remote_head *)job)->kind == REMOTE_PURGE)
		kvpd_remote_run_purge(job);
	else
		run_send(arg, (struct remote_send *)job);
}

void kvpd_remote_head_done(struct kvpd_remote *r, const struct remote_head *h)
{
	/* The asks' link says whether hits are served; the sends' until it has asked. */
	if (h->asks || !r->st.rounds) {
		r->st.nodes_known = h->nodes_known;
		r->st.nodes_answering = h->nodes_answering;
		r->st.cluster = h->cluster;
	}
	*(h->asks ? &r->st.moved_asks : &r->st.moved_sends) = h->moved;
	r->st.moved = r->st.moved_asks + r->st.moved_sends;
	*(h->asks ? &r->st.asked_asks : &r->st.asked_sends) = h->asked;
	r->st.asked = r->st.asked_asks + r->st.asked_sends;
	r->dirty = true;
}

void kvpd_remote_round_time(struct kvpd_remote *r, uint64_t ns)
{
	r->round_hist[ns ? 63 - __builtin_clzll(ns) : 0]++;
}

/* The upper bound of the bucket holding the @q quantile of the rounds' times, ns. */
static uint64_t round_quantile(const struct kvpd_remote *r, double q)
{
	uint64_t seen = 0, want = (uint64_t)(q * (double)r->st.rounds + 0.999999);

	for (unsigned b = 0; b < REMOTE_ROUND_BUCKETS && r->st.rounds; b++) {
		seen += r->round_hist[b];
		if (seen >= want)
			return b < 63 ? 2ull << b : UINT64_MAX;
	}
	return 0;
}

static void sync_post(struct kvpd *d, struct remote_sync *s)
{
	kvpd_client_job_back(s->client, 0);
	if (!s->client->dead)
		kvpd_ring_post(s->client, &(struct kvp_cqe){ .user_data = s->user_data });
	else if (!s->client->inflight)
		kvpd_client_free(d, s->client);
}

/* The syncs no send queued before them holds any more. */
static void syncs_done(struct kvpd *d, struct kvpd_remote *r)
{
	uint64_t oldest = UINT64_MAX;

	for (struct remote_send *j = r->inflight; j; j = j->next_inflight)
		if (j->seq < oldest)
			oldest = j->seq;
	for (struct remote_sync **p = &r->syncs; *p;) {
		struct remote_sync *s = *p;

		if (!s->waited && r->waiting.taken >= s->wait_upto) {
			s->waited = true;
			s->upto = r->next_seq; /* the sends they went to */
		}
		if (!s->waited || s->upto >= oldest) {
			p = &s->next;
			continue;
		}
		*p = s->next;
		kvpd_remote_publish(d, r);
		sync_post(d, s);
		free(s);
	}
}

void kvpd_remote_job_done(struct kvpd *d, struct kvpd_job *job)
{
	struct remote_send *s = (struct remote_send *)job, **p;
	struct kvpd_remote *r = s->r;

	if (((struct remote_head *)job)->kind == REMOTE_ASK)
		return kvpd_remote_ask_done(d, job);
	if (((struct remote_head *)job)->kind == REMOTE_PURGE)
		return kvpd_remote_purge_done(d, job);

	/* The send's blocks the cluster holds now: one event, as the commit's were. */
	if (s->origins)
		kvpd_events_cut(r->pool->events);
	for (uint32_t i = 0; i < s->n; i++) {
		if (s->sent[i] == SEND_OK) {
			KVPD_PROBE(remote_send, r->pool->name, s->groups[i], s->keys[i].lo);
			/* Submitted before its SET ran: no later than the key's TTL began. */
			kvpd_events_remote_held(r->pool->events, s->groups[i], &s->keys[i],
						s->origins && s->origins[i].tokens ?
						&s->origins[i] : NULL, s->head.job.start_ns);
		} else {
			kvpd_remote_forget(r, s->groups[i], &s->keys[i]);
			remote_charge_give(r, s->charges[i], r->data_bytes);
		}
		r->st.sent += s->sent[i] == SEND_OK;
		r->st.skipped += s->sent[i] == SEND_SKIPPED;
		r->st.send_errors += s->sent[i] == SEND_REFUSED;
	}
	r->st.bytes_out += s->bytes_out;
	r->st.queued -= s->n;
	kvpd_remote_head_done(r, &s->head);
	kvc_unpin(r->pool->core, s->blocks, s->n);
	remote_wait_drain(r);
	send_submit(d, r); /* what the drain queued: a POOL_SYNC may wait for it */
	for (p = &r->inflight; *p != s; p = &(*p)->next_inflight)
		;
	*p = s->next_inflight;
	r->pool->inflight--;
	d->jobs_inflight--;
	r->dirty = true;
	free(s);
	syncs_done(d, r);
}

int kvpd_remote_sync(struct kvpd *d, struct kvpd_client *c, struct kvpd_pool *pool,
		     uint64_t user_data, bool post)
{
	struct kvpd_remote *r = pool->remote;
	struct remote_sync *s;

	if (r)
		send_submit(d, r);
	if (!r || (!r->inflight && !r->waiting.n)) {
		if (r)
			kvpd_remote_publish(d, r);
		if (post)
			sync_post(d, &(struct remote_sync){ .client = c, .user_data = user_data });
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	*s = (struct remote_sync){ .next = r->syncs, .client = c, .user_data = user_data,
				   .upto = r->next_seq, .wait_upto = r->waiting.added,
				   .waited = !r->waiting.n };
	r->syncs = s;
	if (!post)
		kvpd_client_job_out(c, 0);
	return KVPD_LATER;
}

void kvpd_remote_publish(struct kvpd *d, struct kvpd_remote *r)
{
	const struct kvpd_remote_stats *st = &r->st;

	kvpd_stats_begin(d);
	kvpd_stats_dirty(&d->stats->pools_dirty, r->pool->stat_idx);
	d->stats->remote[r->pool->stat_idx] = (struct kvp_stats_remote){
		.in_use = 1, .cluster = st->cluster, .nodes_known = st->nodes_known,
		.nodes_answering = st->nodes_answering, .queued = st->queued, .sent = st->sent,
		.skipped = st->skipped, .deduplicated = st->deduplicated,
		.hit_tokens = st->hit_tokens, .promoted = st->promoted,
		.bytes_out = st->bytes_out, .bytes_in = st->bytes_in, .rounds = st->rounds,
		.timeouts = st->timeouts, .round_p50_ns = round_quantile(r, 0.5),
		.round_p99_ns = round_quantile(r, 0.99), .moved = st->moved,
		.send_errors = st->send_errors, .asked = st->asked, .outages = st->outages,
		.nodes_down = st->nodes_down,
	};
	_Static_assert(sizeof(st->refused) == sizeof(d->stats->remote[0].refused), "refused");
	memcpy(d->stats->remote[r->pool->stat_idx].refused, st->refused, sizeof(st->refused));
	kvpd_stats_end(d);
	r->dirty = false;
}

void kvpd_remote_turn(struct kvpd *d, struct kvpd_remote *r)
{
	send_submit(d, r);
	remote_events_collect(r);
	if (r->dirty)
		kvpd_remote_publish(d, r);
}

static void remote_free(struct kvpd_remote *r)
{
	if (r->send_thread)
		kvpd_tier_copier_stop(r->send_thread);
	if (r->ask_thread)
		kvpd_tier_copier_stop(r->ask_thread);
	remote_link_close(&r->send_link);
	remote_link_close(&r->ask_link);
	remote_access_free(&r->access);
	remote_charges_free(r);
	pthread_mutex_destroy(&r->events_lock);
	pthread_mutex_destroy(&r->arena_lock);
	free(r->arena_mem);
	free(r->filling);
	free(r->known);
	remote_wait_free(r);
	free(r);
}

/* A link of @r's: its seeds, deadline, access and events. */
static void link_init(struct kvpd_remote *r, struct remote_link *l,
		      const struct kvpd_remote_addr *seeds, uint32_t n, uint32_t timeout_ms)
{
	remote_link_init(l, seeds, n, timeout_ms, &r->access);
	l->event = remote_event;
	l->event_arg = r;
}

int kvpd_remote_attach(struct kvpd *d, struct kvpd_pool *pool, char *why, size_t why_len)
{
	const struct kvpd_pool_spec *spec = &pool->spec;
	const struct kvpd_kv_layout *l = &pool->layout;
	struct kvpd_remote_addr seeds[KVPD_REMOTE_MAX_SEEDS];
	struct kvtier_geometry geo;
	struct kvpd_remote *r;
	uint32_t timeout, pool_cap;
	bool tls;
	int n, ret;

	if (!*spec->tier_remote)
		return 0;
	n = kvpd_remote_url_parse(spec->tier_remote, seeds, &tls, why, why_len);
	if (n < 0)
		return n;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->d = d;
	r->pool = pool;
	pthread_mutex_init(&r->arena_lock, NULL);
	pthread_mutex_init(&r->events_lock, NULL);
	ret = remote_access_init(&r->access, spec, why, why_len);
	if (ret) {
		pthread_mutex_init(&r->access.lock, NULL); /* remote_free's to destroy */
		remote_free(r);
		return ret;
	}
	strcpy(r->prefix, *spec->tier_remote_prefix ? spec->tier_remote_prefix : KVPD_REMOTE_PREFIX);
	kvpd_tier_geometry(pool, &geo);
	r->geometry = XXH3_64bits(&geo, sizeof(geo));
	r->data_bytes = 2 * l->layers * kvpd_block_chunk_bytes(l);
	r->queue_cap = (uint32_t)(SEND_QUEUE_BYTES / r->data_bytes);
	pool_cap = l->num_blocks >> SEND_QUEUE_POOL_SHIFT;
	if (pool_cap < SEND_QUEUE_SMALL && pool_cap < l->num_blocks / 4)
		pool_cap = SEND_QUEUE_SMALL < l->num_blocks / 4 ? SEND_QUEUE_SMALL : l->num_blocks / 4;
	if (r->queue_cap > pool_cap)
		r->queue_cap = pool_cap;
	if (r->queue_cap < 4 * SEND_JOB_MIN)
		r->queue_cap = 4 * SEND_JOB_MIN;
	timeout = spec->tier_remote_timeout_ms ? spec->tier_remote_timeout_ms :
						  KVPD_REMOTE_TIMEOUT_MS;
	link_init(r, &r->send_link, seeds, (uint32_t)n, timeout);
	link_init(r, &r->ask_link, seeds, (uint32_t)n, timeout);
	ret = remote_known_init(r, l->num_blocks, spec->tier_remote_ttl_set ?
			       spec->tier_remote_ttl_s : KVPD_REMOTE_TTL_S) ?:
	      remote_wait_init(r, l->num_blocks, kvpd_events_remote_on(pool->events)) ?:
	      kvpd_tier_copier_start(&r->send_thread, "kvpool-send", true, remote_run, r) ?:
	      kvpd_tier_copier_start(&r->ask_thread, "kvpool-ask", false, remote_run, r) ?:
	      kvpd_events_remote_start(pool->events, l->num_blocks, r->ttl_s);
	if (ret) {
		remote_free(r);
		return kvpd_refuse(why, why_len, ret, "tier_remote: %s", ret == -ENOMEM ?
				   "no memory for its known set" : "its thread could not start");
	}
	pool->remote = r;
	pool->remote_free = remote_free;
	kvc_pool_set_committed_hook(pool->core, committed, r);
	r->dirty = true;
	kvpd_log(d, KVPD_LOG_INFO, "pool %s: cluster tier %s, keys %s:%016llx:*, ttl %u s%s%s%s",
		 pool->name, spec->tier_remote, r->prefix, (unsigned long long)r->geometry,
		 r->ttl_s, tls ? ", TLS" : "", *r->access.pass ? ", AUTH" : "",
		 r->access.tag.len ? ", tagged values" : "");
	return 0;
}

void kvpd_remote_reload(struct kvpd *d, struct kvpd_pool *pool)
{
	char why[KVP_REASON_MAX];
	uint32_t generation = pool->remote->access.generation;

	if (remote_access_reload(&pool->remote->access, &pool->spec, why, sizeof(why)))
		kvpd_log(d, KVPD_LOG_ERR, "reload: pool %s: %s: the secrets read before are kept",
			 pool->name, why);
	else if (generation != pool->remote->access.generation)
		kvpd_log(d, KVPD_LOG_NOTICE, "reload: pool %s: the cluster tier's password changed: "
			 "its connections are made again", pool->name);
}
