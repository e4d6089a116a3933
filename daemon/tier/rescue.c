/* SPDX-License-Identifier: MIT */
/*
 * Rescues: a burst of ALLOCs wider than the window hands out cached blocks
 * whose copy was never made. Their KV is still in them until their new owner
 * writes, and in a pool where every write goes through the daemon (WRITE_KV
 * and promotions; not a mapped or a cuda pool) the daemon knows when that is:
 * so each is copied after the hand-out, first in the copy queue, and kept if
 * no write into it was let go before the copy's end (down.c). Nobody waits:
 * the new owner writes when it likes, and a copy that loses the race is
 * abandoned. The window keeps the blocks an owner writes first copied ahead;
 * the ones it writes last, past the window, have the most time to be rescued.
 * A disk tier's lane checks the writes as it copies the block into its stage
 * (the disk's write, later, does not matter); a host tier's copy is checked
 * as it ends.
 */
#include <stdlib.h>

#include "tier/tier_internal.h"

bool kvpd_tier_rescue_note(struct kvpd_tier *t, uint32_t id, const struct kvc_block_state *st)
{
	if (t->nrescues == t->rescues_cap) {
		uint32_t cap = t->rescues_cap ? 2 * t->rescues_cap : 256;
		struct tier_rescue *p = realloc(t->rescues, cap * sizeof(*p));

		if (!p)
			return false;
		t->rescues = p;
		t->rescues_cap = cap;
	}
	t->blk[id].rescue = t->nrescues + 1;
	/* Before the pool forgets the key: KV events keep it hittable, said otherwise if lost. */
	kvpd_events_tier_held(t->pool->events, st->group, &st->key);
	/* As the block will be once handed out: the core counts it after telling the tier. */
	t->rescues[t->nrescues++] = (struct tier_rescue){
		.key = st->key, .block = id, .group = st->group, .owner = t->block_owner[id],
		.uses = TIER_HANDED_OUT, .gen = st->gen + 1, .writes = t->blk[id].writes };
	return true;
}

/* Slot for rescue @r, or why there is none (its KVP_TIER_UNOFFERED_* + nslots). */
static uint32_t slot_for(struct kvpd_tier *t, const struct tier_rescue *r)
{
	uint32_t slot;

	if (t->st.queued >= t->queue_cap)
		return t->nslots + KVP_TIER_UNOFFERED_QUEUE_FULL;
	slot = kvpd_tier_take(t, r->group, &r->key, r->owner, TIER_END);
	if (slot == TIER_END)
		return t->nslots + KVP_TIER_UNOFFERED_NO_SLOT;
	if (slot == TIER_OVER_QUOTA)
		return t->nslots + KVP_TIER_UNOFFERED_QUOTA;
	return slot;
}

void kvpd_tier_rescue(struct kvpd *d, struct kvpd_tier *t)
{
	struct tier_job *tj = NULL;

	kvpd_tier_trim(t); /* for the window's copies the ALLOC settled */
	for (uint32_t i = 0; i < t->nrescues; i++) {
		const struct tier_rescue *r = &t->rescues[i];
		uint32_t slot;

		if (r->block == KVC_NULL_BLOCK)
			continue; /* a promotion into it swaps it into the tier (up.c) */
		t->blk[r->block].rescue = 0;
		if (kvpd_tier_find(t, r->group, &r->key) != TIER_END)
			continue; /* another block's copy is there, or on its way */
		/* A promotion writes into it now: nothing of the old KV would survive. */
		slot = t->blk[r->block].writes != r->writes ?
		       t->nslots + KVP_TIER_UNOFFERED_OVERWRITTEN : slot_for(t, r);
		if (slot < t->nslots && !tj) {
			uint32_t n = t->nrescues - i < t->job_cap ? t->nrescues - i : t->job_cap;

			tj = kvpd_tier_job_new(t, KVPD_JOB_TIER_DOWN, n);
			if (tj) {
				tj->rescue = true;
			} else {
				kvpd_tier_drop(t, slot);
				slot = t->nslots + KVP_TIER_UNOFFERED_QUEUE_FULL;
			}
		}
		if (slot >= t->nslots) {
			kvpd_tier_unoffered(t, slot - t->nslots);
			kvpd_events_tier_gone(t->pool->events, r->group, &r->key);
			continue;
		}
		t->e[slot].promised = true;
		kvpd_tier_queue(d, t, &tj, r->block, slot, r->uses, r->gen, r->writes);
	}
	if (tj && tj->n)
		kvpd_tier_job_submit(d, tj);
	else
		free(tj);
	t->nrescues = 0;
}
