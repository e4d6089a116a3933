/* SPDX-License-Identifier: MIT */
/*
 * Going down: the copies the walk queued (window.c) run on the tier's copier
 * and come back here, kept only where their block stayed in the free queue
 * the whole time. Also here: the tier's jobs, both ways, their turn at the end
 * of each loop turn, and POOL_SYNC.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "observe/probes.h"
#include "tier/disk.h"

struct tier_job *kvpd_tier_job_new(struct kvpd_tier *t, enum kvpd_job_type type, uint32_t n)
{
	size_t disk = t->disk ? n * (sizeof(uint64_t) + 2) : 0;
	size_t up = type == KVPD_JOB_TIER_UP ? n : 0;
	struct tier_job *tj = calloc(1, sizeof(*tj) + 5 * (size_t)n * sizeof(uint32_t) + disk + up);

	if (!tj)
		return NULL;
	tj->tier = t;
	/* The 64-bit sums first: aligned behind the struct. */
	tj->sums = t->disk ? (uint64_t *)(tj + 1) : NULL;
	tj->blocks = t->disk ? (uint32_t *)(tj->sums + n) : (uint32_t *)(tj + 1);
	tj->slots = tj->blocks + n;
	tj->uses = tj->slots + n;
	tj->gens = tj->uses + n;
	tj->writes = tj->gens + n;
	tj->failed = t->disk ? (uint8_t *)(tj->writes + n) : NULL;
	tj->rmw = t->pages && type == KVPD_JOB_TIER_DOWN ? tj->failed + n : NULL;
	tj->ring = up ? (uint8_t *)(tj->writes + n) + (t->disk ? 2 * (size_t)n : 0) : NULL;
	tj->cap = n;
	tj->job.type = type;
	tj->job.pool = t->pool;
	tj->job.layout = &t->pool->layout;
	tj->job.mem = t->pool->mem;
	tj->job.tier_mem = t->mem;
	tj->job.blocks = tj->blocks;
	tj->job.slots = tj->slots;
	tj->job.delay_us = t->delay_us;
	tj->job.lane = &t->lane;
	tj->job.short_tasks = type == KVPD_JOB_TIER_UP && !t->delay_us;
	return tj;
}

/*
 * A packed disk tier's copies down: each run of tasks in one page says
 * whether the page holds other entries' data (taken before, or of another
 * job), which the lane must read before it writes the page whole.
 */
static void mark_rmw(const struct kvpd_tier *t, struct tier_job *tj)
{
	for (uint32_t i = 0, j; i < tj->n; i = j) {
		uint32_t page = tj->slots[i] / t->pack;

		for (j = i; j < tj->n && tj->slots[j] / t->pack == page; j++)
			;
		for (uint32_t k = i; k < j; k++)
			tj->rmw[k] = t->live[page] > j - i;
	}
}

void kvpd_tier_job_submit(struct kvpd *d, struct tier_job *tj)
{
	struct kvpd_tier *t = tj->tier;

	if (tj->rmw)
		mark_rmw(t, tj);
	tj->job.ntasks = tj->n;
	tj->job.bytes = (uint64_t)tj->n * t->slot_bytes;
	tj->job.start_ns = kvpd_now_ns();
	tj->seq = ++t->next_seq;
	tj->next_inflight = t->inflight;
	t->inflight = tj;
	t->pool->inflight++;
	d->jobs_inflight++;
	if (t->disk) {
		/* Both ways on the disk's own threads: a read holds no worker a client waits for. */
		kvpd_workers_adopt(d->workers, &tj->job);
		kvpd_tier_disk_push(t, tj);
	} else if (tj->job.type == KVPD_JOB_TIER_UP) {
		/* An ALLOC waits for it: the workers', in turns with the clients' tasks. */
		kvpd_workers_submit(d->workers, &tj->job);
	} else {
		kvpd_workers_adopt(d->workers, &tj->job);
		kvpd_tier_copier_push(t->copier, &tj->job, tj->rescue);
	}
}

/* The POOL_SYNCs no job in flight is older than. */
static void syncs_done(struct kvpd *d, struct kvpd_tier *t)
{
	uint64_t oldest = UINT64_MAX;

	for (struct tier_job *j = t->inflight; j; j = j->next_inflight)
		if (j->seq < oldest)
			oldest = j->seq;
	for (struct tier_sync **p = &t->syncs; *p;) {
		struct tier_sync *s = *p;

		if (s->upto >= oldest) {
			p = &s->next;
			continue;
		}
		*p = s->next;
		/* Its client reads the stats next: the tier's as of now, not of the turn's end. */
		if (t->dirty)
			kvpd_tier_publish(d, t);
		/* Then the cluster tier's sends queued before it, if any: it posts the completion. */
		if (kvpd_remote_sync(d, s->client, t->pool, s->user_data, true) < 0) {
			kvpd_client_job_back(s->client, 0);
			if (!s->client->dead)
				kvpd_ring_post(s->client, &(struct kvp_cqe){
						       .user_data = s->user_data, .res = -ENOMEM });
			else if (!s->client->inflight)
				kvpd_client_free(d, s->client);
		}
		free(s);
	}
}

/* A job is back: out of the in-flight list, its time counted, the syncs it held let go. */
void kvpd_tier_job_retire(struct kvpd *d, struct tier_job *tj)
{
	struct kvpd_tier *t = tj->tier;
	struct tier_job **p = &t->inflight;

	while (*p != tj)
		p = &(*p)->next_inflight;
	*p = tj->next_inflight;
	t->pool->inflight--;
	d->jobs_inflight--;
	if (tj->job.type == KVPD_JOB_TIER_DOWN)
		t->st.ns_down += kvpd_now_ns() - tj->job.start_ns;
	else
		t->st.ns_up += kvpd_now_ns() - tj->job.start_ns;
	syncs_done(d, t);
}

void kvpd_tier_turn(struct kvpd *d)
{
	for (unsigned i = 0; i < d->npools; i++) {
		struct kvpd_tier *t = d->pools[i]->tier;

		if (d->pools[i]->remote)
			kvpd_remote_turn(d, d->pools[i]->remote);
		if (!t)
			continue;
		if (!d->stopping)
			kvpd_tier_walk(d, t);
		if (t->dirty)
			kvpd_tier_publish(d, t);
	}
}

/* What one idle moment of the loop copies down at most: a few microseconds. */
#define TIER_HELP_BYTES (64u << 10)

bool kvpd_tier_help(struct kvpd *d)
{
	for (unsigned i = 0; i < d->npools; i++) {
		struct kvpd_tier *t = d->pools[i]->tier;

		/* Not a test build's slowed copies: the loop would sleep in them. */
		if (t && t->copier && t->st.queued && !t->delay_us &&
		    kvpd_tier_copier_help(t->copier, TIER_HELP_BYTES, t->slot_bytes))
			return true;
	}
	return false;
}

/* A disk that refused a write: said once, with the cause; the tier stores nothing after. */
static void writes_stopped(struct kvpd *d, struct kvpd_tier *t)
{
	int err = kvpd_tier_disk_write_error(t);

	if (!err || t->write_logged)
		return;
	t->write_logged = true;
	kvpd_log(d, KVPD_LOG_ERR, "pool %s: disk tier %s: a write failed (%s): the tier stores "
		 "no more blocks and serves those it holds", t->pool->name, t->disk->path,
		 strerror(-err));
}

/*
 * A disk tier's second pass: the records of the blocks kept go back to the
 * disk's thread, written after their data; the job stays in flight (a
 * POOL_SYNC waits for it) until they are. False when there are none.
 */
static bool commit(struct kvpd *d, struct tier_job *tj, struct kvtier_record *recs,
		   uint8_t *origins, uint32_t kept)
{
	if (!kept || !recs)
		return false;
	tj->recs = recs;
	tj->origins = origins;
	tj->n = kept;
	tj->commit = true;
	tj->job.ntasks = 1;
	kvpd_workers_adopt(d->workers, &tj->job);
	kvpd_tier_disk_push(tj->tier, tj);
	return true;
}

/* Slot @slot's origin into @origins' entry @k, as KV events know it: its checksum, or 0 (none). */
static uint64_t origin_put(struct kvpd_tier *t, uint8_t *origins, uint32_t k, uint32_t slot)
{
	size_t stride = t->disk->origin_stride;
	struct kvtier_origin *x = origins ? (struct kvtier_origin *)(origins + k * stride) : NULL;
	struct kvpd_block_origin o;

	if (!x || !kvpd_events_origin(t->pool->events, t->e[slot].group, &t->e[slot].key, &o))
		return 0;
	x->pos = o.pos;
	x->flags = o.has_parent ? KVTIER_ORIGIN_PARENT : 0;
	x->parent = o.parent;
	memcpy(x->tokens, o.tokens, t->pool->params.block_size * sizeof(*o.tokens));
	return XXH3_64bits_withSeed(x, stride, slot) ?: 1;
}

/*
 * A hit took block @id back into use during its copy, and it is back in the
 * free queue, where the walk found this copy on its way and took it for its
 * window copy again: kept, or the block would leave the pool with none.
 */
static bool rewalked(const struct kvpd_tier *t, uint32_t id, uint32_t slot,
		     const struct kvc_block_state *st)
{
	return st->queued && t->blk[id].uses1 == st->uses + 1 && t->blk[id].slot == slot;
}

/*
 * Kept only where no write into the block was let go during the copy (it may
 * hold anything then: abandoned, and lost if the block was handed out), and
 * where the block is not the pool's again: taken back into use by a hit, a
 * copy would hold it twice (it goes down again as it nears the queue's head).
 */
static void down_done(struct kvpd *d, struct tier_job *tj)
{
	struct kvpd_tier *t = tj->tier;
	struct kvtier_record *recs = NULL;
	uint8_t *origins = NULL;
	uint32_t kept = 0, n = tj->n;

	if (tj->commit) {
		writes_stopped(d, t);
		kvpd_tier_job_retire(d, tj);
		free(tj->recs);
		free(tj->origins);
		free(tj);
		return;
	}
	if (t->disk)
		recs = malloc((size_t)n * sizeof(*recs)); /* none: kept, but not durable */
	/* What KV events will say of them after a restart (none: not announced then). */
	if (recs && t->pool->events)
		origins = calloc(n, t->disk->origin_stride);
	for (uint32_t i = 0; i < n; i++) {
		struct kvc_block_state st;
		uint32_t slot = tj->slots[i];
		bool state = !kvc_block_state(t->pool->core, tj->blocks[i], &st);

		if (tj->failed && tj->failed[i] == TIER_WRITE_FAILED) {
			kvpd_tier_drop(t, slot);
			t->st.write_failures++;
		} else if (!state || tj->job.error ||
			   /* a disk lane checks as it copies; the disk's write may come later */
			   (tj->failed ? tj->failed[i] == TIER_OVERWRITTEN :
			    t->blk[tj->blocks[i]].writes != tj->writes[i])) {
			kvpd_tier_drop(t, slot);
			t->st.abandoned++;
			if (!state || st.gen != tj->gens[i] || tj->uses[i] == TIER_HANDED_OUT)
				kvpd_tier_unoffered(t, KVP_TIER_UNOFFERED_OVERWRITTEN);
		} else if (st.gen == tj->gens[i] && st.uses != tj->uses[i] &&
			   tj->uses[i] != TIER_HANDED_OUT && !rewalked(t, tj->blocks[i], slot, &st)) {
			kvpd_tier_drop(t, slot);
		} else {
			kvpd_tier_use(t, slot);
			t->st.stored++;
			t->st.bytes_down += t->slot_bytes;
			KVPD_PROBE(tier_store, t->pool->name, t->e[slot].group, t->e[slot].key.lo);
			if (!t->disk)
				continue;
			t->e[slot].sum = tj->sums[i];
			if (recs)
				recs[kept] = (struct kvtier_record){
					.valid = KVTIER_RECORD_VALID, .group = t->e[slot].group,
					.key_lo = t->e[slot].key.lo, .key_hi = t->e[slot].key.hi,
					.sum = tj->sums[i], .geometry = t->disk->geometry,
					.origin_sum = origin_put(t, origins, kept, slot) };
			tj->slots[kept++] = slot;
		}
	}
	t->st.queued -= n;
	t->dirty = true;
	writes_stopped(d, t);
	if (commit(d, tj, recs, origins, kept))
		return;
	free(recs);
	free(origins);
	kvpd_tier_job_retire(d, tj);
	free(tj);
}

void kvpd_tier_job_done(struct kvpd *d, struct kvpd_job *job)
{
	struct tier_job *tj = (struct tier_job *)job;

	if (job->type == KVPD_JOB_REMOTE)
		kvpd_remote_job_done(d, job);
	else if (job->type == KVPD_JOB_TIER_DOWN)
		down_done(d, tj);
	else
		kvpd_tier_up_done(d, tj);
}

int kvpd_tier_sync(struct kvpd *d, struct kvpd_client *c, struct kvpd_pool *pool,
		   uint64_t user_data)
{
	struct kvpd_tier *t = pool->tier;
	struct tier_sync *s;

	if (!t)
		return kvpd_remote_sync(d, c, pool, user_data, false);
	/* What the queue's head holds now goes first: the sync waits for it too. */
	kvpd_tier_walk(d, t);
	if (!t->inflight) {
		if (t->dirty)
			kvpd_tier_publish(d, t);
		return kvpd_remote_sync(d, c, pool, user_data, false);
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	*s = (struct tier_sync){ .next = t->syncs, .client = c, .user_data = user_data,
				 .upto = t->next_seq };
	t->syncs = s;
	kvpd_client_job_out(c, 0);
	return KVPD_LATER;
}
