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

int kvpd_tier_alloc_done(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			 const struct kvc_alloc_res *res, const struct kvp_cqe *cqe)
{
	struct kvpd_tier *t = c->pool->tier;
	struct kvpd_seq_slot *slot = kvpd_seq_slot(c, sqe->handle);
	uint32_t ngroups = kvc_pool_config(c->pool->core)->num_groups;
	uint32_t bs = kvc_pool_config(c->pool->core)->block_size;
	struct tier_job *loaders[MAX_LOADERS], *tj;
	uint32_t nloaders;

	if (!t)
		return 0;
	owner_blocks(t, c, slot->seq, ngroups, res);
	if (!res->hit_tokens)
		return 0;
	nloaders = loaders_of(t, slot->seq, ngroups, res, loaders, MAX_LOADERS);
	if (!res->promoted && !nloaders)
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
		/* Found: the core asked the tier this very turn, and nothing evicts in between. */
		uint32_t e = kvpd_tier_find(t, p->group, &p->key);

		kvpd_tier_pin(t, e);
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
	tj->cqe.flags |= KVP_CQE_F_TIER;
	tj->job.client = c;
	tj->job.user_data = sqe->user_data;
	t->st.hit_tokens += (uint64_t)(res->hit_tokens / bs - res->promoted_from) * bs;
	t->dirty = true;
	slot->busy = true;
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

		slot->busy = false;
		if (tj->error) {
			/* Blocks whose KV never came: the sequence holds none of them any more. */
			kvc_seq_free(slot->seq);
			slot->epoch++;
			cqe = (struct kvp_cqe){ .user_data = tj->cqe.user_data, .res = tj->error };
		}
		KVPD_PROBE(tier_promote, c->gen, tj->handle, tj->n, ns);
		kvpd_stats_op(d, c, KVP_OP_ALLOC, cqe.res, ns);
		kvpd_stats_client(d, c);
		kvpd_ring_post(c, &cqe);
	} else if (!c->inflight) {
		kvpd_client_free(d, c);
	}
	free(tj->waiters);
	free(tj);
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

		if (err)
			kvc_pool_evict(t->pool->core, &tj->blocks[i], 1);
		else
			KVPD_PROBE(tier_load, t->pool->name, e->group, e->key.lo);
		kvpd_tier_unpin(t, tj->slots[i]);
		/*
		 * Up, not copied: the pool has the block now, and a copy kept here would
		 * take a slot the pool already covers (pool and tier hold as much as one
		 * cache of their summed size only if they never hold a block twice). It
		 * comes down again when the pool is about to evict it. A slot the disk
		 * could not read whole, or whose bytes fail their sum, goes for good.
		 */
		if ((bad || !err) && !e->pins)
			kvpd_tier_drop(t, tj->slots[i]);
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
