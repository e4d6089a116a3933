/* SPDX-License-Identifier: MIT */
/*
 * Coming up: an ALLOC whose hit the core found partly in the tier got fresh
 * blocks for those positions, already cached under their keys (so that a
 * second sequence shares them instead of reading them again). Here their KV
 * is copied in, on the tier's lane, which no client's death cancels: a block
 * cached under a key must get that key's KV. The ALLOC completes once its own
 * copies are back and every promotion of another ALLOC whose blocks its hit
 * shares is too; its sequence answers -EBUSY meanwhile.
 */
#include <errno.h>
#include <stdlib.h>

#include "observe/probes.h"
#include "tier/tier_internal.h"

/* The promotions in flight whose blocks @seq's table holds, each once, into @out. */
static uint32_t loaders_of(struct kvpd_tier *t, struct kvc_seq *seq, uint32_t ngroups,
			   const struct kvc_alloc_res *res, struct tier_job **out, uint32_t max)
{
	uint32_t n = 0;

	for (uint32_t g = 0; g < ngroups; g++) {
		uint32_t len;
		const uint32_t *table = kvc_seq_table(seq, g, &len);

		for (uint32_t p = 0; p < len && p < res->first_new[g]; p++) {
			struct tier_job *l = table[p] ? t->loader[table[p]] : NULL;
			uint32_t k = 0;

			while (k < n && out[k] != l)
				k++;
			if (l && k == n && n < max)
				out[n++] = l;
		}
	}
	return n;
}

/* The blocks the ALLOC took for new data, its promotions' among them, are its client's. */
static void owner_blocks(struct kvpd_tier *t, const struct kvpd_client *c, struct kvc_seq *seq,
			 uint32_t ngroups, const struct kvc_alloc_res *res)
{
	uint32_t owner = kvpd_tier_owner_of(t, c);

	for (uint32_t g = 0; g < ngroups; g++) {
		uint32_t len;
		const uint32_t *table = kvc_seq_table(seq, g, &len);

		for (uint32_t p = res->first_new[g]; p < len; p++)
			kvpd_tier_block_owner(t, table[p], owner);
	}
	for (uint32_t i = 0; i < res->promoted; i++)
		kvpd_tier_block_owner(t, res->promotions[i].block, owner);
}

static int add_waiter(struct tier_job *on, struct tier_job *w)
{
	if (on->nwaiters == on->waiters_cap) {
		uint32_t cap = on->waiters_cap ? 2 * on->waiters_cap : 4;
		struct tier_job **p = realloc(on->waiters, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		on->waiters = p;
		on->waiters_cap = cap;
	}
	on->waiters[on->nwaiters++] = w;
	return 0;
}

/* An ALLOC that cannot wait for its promotion: its uncopied blocks forgotten, its sequence freed. */
static int give_up(struct kvpd_client *c, uint64_t handle, const struct kvc_alloc_res *res,
		   int err)
{
	struct kvpd_seq_slot *slot = kvpd_seq_slot(c, handle);

	for (uint32_t i = 0; i < res->promoted; i++)
		kvc_pool_evict(c->pool->core, &res->promotions[i].block, 1);
	kvc_seq_free(slot->seq);
	slot->epoch++;
	return err;
}

#define MAX_LOADERS 64

/*
 * Entry @slot is promoted into pool block @block: the pool holds its key from
 * now on, so the entry counts against the tier no more, as a window's copy
 * (otherwise the tier would make room of as many other blocks, over and above
 * what one LRU cache evicts, until the copy is back).
 */
static void going_up(struct kvpd_tier *t, uint32_t slot, uint32_t block)
{
	struct tier_entry *e = &t->e[slot];

	if (e->window)
		return;
	e->window = true;
	e->block = block;
	t->regular--;
}

/*
 * A promotion landing in a block the same ALLOC evicted uncopied (a rescue
 * noted for it, window.c) swaps the two: the block's old KV goes into the
 * slot the promotion empties, where the slot would have been dropped, so the
 * eviction costs the tier nothing. A host tier's only: a disk's slot is read
 * into staging, not swapped in place. Without memory for it, the rescue is
 * lost as it would have been.
 */
static void swap_in(struct kvpd_tier *t, struct tier_job *tj, uint32_t n, uint32_t block,
		    uint32_t slot)
{
	uint32_t k = t->blk[block].rescue;
	uint8_t *flags;

	if (!k || t->disk || t->e[slot].pins != 1 ||
	    t->rescues[k - 1].writes != t->blk[block].writes)
		return;
	if (!tj->swaps) {
		tj->swaps = calloc(n, sizeof(*tj->swaps) + 1);
		if (!tj->swaps)
			return;
		tj->job.swap = (uint8_t *)(tj->swaps + n);
	}
	flags = (uint8_t *)(tj->swaps + n);
	tj->swaps[tj->n] = t->rescues[k - 1];
	flags[tj->n] = 1;
	t->rescues[k - 1].block = KVC_NULL_BLOCK;
	t->blk[block].rescue = 0;
}

static int promote(struct kvpd *d, struct kvpd_client *c, struct kvpd_tier *t,
		   const struct kvp_sqe *sqe, const struct kvc_alloc_res *res,
		   const struct kvp_cqe *cqe)
{
	struct kvpd_seq_slot *slot = kvpd_seq_slot(c, sqe->handle);
	uint32_t ngroups = kvc_pool_config(c->pool->core)->num_groups;
	uint32_t bs = kvc_pool_config(c->pool->core)->block_size;
	struct tier_job *loaders[MAX_LOADERS], *tj;
	uint32_t nloaders, local = 0, local_from = UINT32_MAX;
	bool ring = false;

	owner_blocks(t, c, slot->seq, ngroups, res);
	if (!res->hit_tokens)
		return 0;
	/* Promotions of keys this tier lacks are the cluster tier's (remote_fetch.c). */
	for (uint32_t i = 0; i < res->promoted; i++)
		if (kvpd_tier_find(t, res->promotions[i].group, &res->promotions[i].key) != TIER_END) {
			local++;
			if (res->promotions[i].pos < local_from)
				local_from = res->promotions[i].pos;
		}
	nloaders = loaders_of(t, slot->seq, ngroups, res, loaders, MAX_LOADERS);
	if (!local && !nloaders)
		return 0;
	tj = kvpd_tier_job_new(t, KVPD_JOB_TIER_UP, res->promoted);
	if (!tj)
		return give_up(c, sqe->handle, res, -ENOMEM);
	for (uint32_t k = 0; k < nloaders; k++) {
		if (add_waiter(loaders[k], tj)) {
			while (k--)
				loaders[k]->nwaiters--;
			free(tj);
			return give_up(c, sqe->handle, res, -ENOMEM);
		}
	}
	tj->waits = nloaders;
	for (uint32_t i = 0; i < res->promoted; i++) {
		const struct kvc_promotion *p = &res->promotions[i];
		/* Found, unless the cluster's: the core asked this very turn, nothing evicts since. */
		uint32_t e = kvpd_tier_find(t, p->group, &p->key);

		if (e == TIER_END)
			continue;
		kvpd_tier_pin(t, e);
		/* Into a ring, the key stays the tier's: the entry neither goes up nor takes a swap. */
		if (p->ring) {
			tj->ring[tj->n] = 1;
			ring = true;
		} else {
			going_up(t, e, p->block);
			swap_in(t, tj, res->promoted, p->block, e);
		}
		kvpd_tier_written(t, p->block); /* what it held is gone once this copy starts */
		if (tj->sums)
			tj->sums[tj->n] = t->e[e].sum;
		tj->blocks[tj->n] = p->block;
		tj->slots[tj->n++] = e;
		t->loader[p->block] = tj;
	}
	tj->client = c;
	tj->handle = sqe->handle;
	tj->cqe = *cqe;
	tj->cqe.user_data = sqe->user_data;
	tj->cqe.flags |= KVP_CQE_F_TIER | (ring ? KVP_CQE_F_SNAPSHOT : 0);
	tj->job.client = c;
	tj->job.user_data = sqe->user_data;
	if (local)
		t->st.hit_tokens += (uint64_t)(res->hit_tokens / bs - local_from) * bs;
	t->dirty = true;
	kvpd_seq_later(slot);
	kvpd_client_job_out(c, 0);
	if (tj->n) {
		/* The blocks stay allocated until filled, whatever the sequence does meanwhile. */
		kvc_pin(c->pool->core, tj->blocks, tj->n);
		kvpd_tier_job_submit(d, tj);
	} else {
		tj->own_done = true;
		tj->job.start_ns = kvpd_now_ns();
	}
	return KVPD_LATER;
}

int kvpd_tier_alloc_done(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			 const struct kvc_alloc_res *res, const struct kvp_cqe *cqe)
{
	struct kvpd_tier *t = c->pool->tier;
	int ret = 0;

	if (t) {
		ret = promote(d, c, t, sqe, res, cqe);
		/* After the promotions' entries are pinned: the rescues' slots must not push them out. */
		kvpd_tier_rescue(d, t);
	}
	/* The cluster's part, unless the ALLOC failed already (its blocks are gone then). */
	if (ret >= 0 && c->pool->remote)
		ret = kvpd_remote_alloc_done(d, c, sqe, res, cqe, ret);
	return ret;
}

/* Its copies and those it waits for are back: the ALLOC completes. */
static void finish(struct kvpd *d, struct tier_job *tj)
{
	struct kvpd_client *c = tj->client;
	uint64_t ns = kvpd_now_ns() - tj->job.start_ns;

	if (!tj->own_done || tj->waits)
		return;
	kvpd_client_job_back(c, 0);
	if (!c->dead) {
		struct kvpd_seq_slot *slot = kvpd_seq_slot(c, tj->handle);
		struct kvp_cqe cqe = tj->cqe;

		if (tj->error) {
			/* Blocks whose KV never came: the sequence holds none of them any more. */
			kvc_seq_free(slot->seq);
			slot->epoch++;
			cqe.res = tj->error;
		}
		KVPD_PROBE(tier_promote, c->gen, tj->handle, tj->n, ns);
		/* The ALLOC's window snapshots may still be on their way (data/snapcopy.c). */
		if (kvpd_seq_later_back(slot, &cqe)) {
			kvpd_stats_op(d, c, KVP_OP_ALLOC, cqe.res, ns);
			kvpd_stats_client(d, c);
			kvpd_ring_post(c, &cqe);
		}
	} else if (!c->inflight) {
		kvpd_client_free(d, c);
	}
	free(tj->waiters);
	free(tj->swaps);
	free(tj);
}

/* Slot @slot got @sw's block's old KV by a swap: an entry under its key, or lost. */
static void swapped(struct kvpd_tier *t, uint32_t slot, const struct tier_rescue *sw)
{
	if (kvpd_tier_rekey(t, slot, sw->group, &sw->key, sw->owner)) {
		t->st.stored++;
		t->st.bytes_down += t->slot_bytes;
		KVPD_PROBE(tier_store, t->pool->name, sw->group, sw->key.lo);
	} else if (kvpd_tier_find(t, sw->group, &sw->key) == TIER_END) {
		kvpd_tier_unoffered(t, KVP_TIER_UNOFFERED_QUOTA);
		kvpd_events_tier_gone(t->pool->events, sw->group, &sw->key);
	}
}

void kvpd_tier_up_done(struct kvpd *d, struct tier_job *tj)
{
	struct kvpd_tier *t = tj->tier;
	struct tier_job **waiters = tj->waiters;
	uint32_t nwaiters = tj->nwaiters;
	int err = __atomic_load_n(&tj->job.error, __ATOMIC_ACQUIRE);

	for (uint32_t i = 0; i < tj->n; i++) {
		struct tier_entry *e = &t->e[tj->slots[i]];
		bool bad = tj->failed && tj->failed[i];
		const struct tier_rescue *sw = tj->swaps && tj->swaps[i].block ? &tj->swaps[i] :
					       NULL;

		if (err)
			kvc_pool_evict(t->pool->core, &tj->blocks[i], 1);
		else
			KVPD_PROBE(tier_load, t->pool->name, e->group, e->key.lo);
		/* Up from this machine's tier: the cluster may lack it (written through as a commit). */
		if (!err && !bad && !tj->ring[i] && t->pool->remote) {
			struct kvpd_block_origin o;

			kvpd_remote_offer(t->pool->remote, tj->client, e->group, tj->blocks[i],
					  &e->key, kvpd_events_origin(t->pool->events, e->group,
								      &e->key, &o) ? &o : NULL);
		}
		kvpd_tier_unpin(t, tj->slots[i]);
		/*
		 * Up, not copied: the pool has the block now, and a copy kept here would
		 * take a slot the pool already covers (pool and tier hold as much as one
		 * cache of their summed size only if they never hold a block twice). It
		 * comes down again when the pool is about to evict it. A slot the disk
		 * could not read whole, or whose bytes fail their sum, goes for good. A
		 * swapped slot holds what its block held before: kept under that key.
		 */
		if (sw && (err || e->pins)) /* not swapped */
			kvpd_events_tier_gone(t->pool->events, sw->group, &sw->key);
		if (tj->ring[i]) {
			/* A snapshot copied into a ring: the tier's still, most recently used. */
			if (bad && !e->pins)
				kvpd_tier_drop(t, tj->slots[i]);
		} else if (sw && !err && !e->pins)
			swapped(t, tj->slots[i], sw);
		else if ((bad || !err || sw) && !e->pins)
			kvpd_tier_drop(t, tj->slots[i]);
		else if (!e->pins)
			kvpd_tier_settle(t, tj->slots[i]); /* not up after all: the tier's again */
		t->st.refused += bad;
		t->loader[tj->blocks[i]] = NULL;
	}
	kvc_unpin(t->pool->core, tj->blocks, tj->n);
	if (err) {
		t->st.read_failures += tj->n;
		tj->error = err;
	} else {
		t->st.promoted += tj->n;
		t->st.bytes_up += (uint64_t)tj->n * t->slot_bytes;
	}
	t->dirty = true;
	kvpd_tier_job_retire(d, tj);
	tj->own_done = true;
	tj->waiters = NULL;
	tj->nwaiters = 0;
	for (uint32_t k = 0; k < nwaiters; k++) {
		struct tier_job *w = waiters[k];

		if (err && !w->error)
			w->error = err;
		w->waits--;
		finish(d, w);
	}
	free(waiters);
	finish(d, tj);
}
