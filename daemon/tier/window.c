/* SPDX-License-Identifier: MIT */
/*
 * Which blocks go down. The pool's free queue hands out its head first, so the
 * cached blocks nearest the head are the next the pool evicts: the walk keeps
 * the first `want` cached blocks of the queue looked at (copied into the tier,
 * or on their way) while the pool still has them, so that each is in the tier
 * the moment it leaves the pool and the two act as one LRU cache of their
 * summed size. The window has room of its own beside the tier's capacity,
 * and fills it: its copies cost the tier nothing until their blocks leave the
 * pool (kvpd_tier_settle), and a copy made early spares the race with the
 * block's next owner (one ALLOC of a long prompt evicts thousands at once).
 * On a disk a copy a hit takes back was a write for nothing; a window that
 * covered only the largest burst lately wrote 14% less on Mooncake's trace
 * and lost a point to the copies it started too late (bench/README.md).
 *
 * The walk is incremental: hashed blocks only ever join the queue at its tail,
 * so every cached block between the head and the last block looked at (the
 * front) has been looked at since it last entered the queue. The core tells
 * the tier of every block leaving the queue (kvc_tier_ops.leaving), which
 * keeps the count of looked-at blocks exact, settles a window copy whose
 * block was handed out, drops one whose block a hit took back into use (the
 * pool holds it), and counts each cached block handed out that the tier does
 * not hold, by the reason it does not, unless a rescue may still copy it
 * (rescue.c).
 */
#include <stdlib.h>

#include "observe/probes.h"
#include "tier/disk.h"

int kvpd_tier_window_init(struct kvpd_tier *t, uint32_t num_blocks)
{
	t->blk = calloc(num_blocks, sizeof(*t->blk));
	/* The window's room, beside the capacity (kvpd_tier_window_slots). */
	t->want = t->nslots - t->capacity;
	return t->blk ? 0 : -1;
}

/*
 * tier_policy second_sight: a block goes down only the second time it is seen
 * leaving the pool, so a prompt used once never costs the tier a write nor
 * pushes out a block that was reused: Akamai's "cache on second hit" (Maggs
 * and Sitaraman, "Algorithmic Nuggets in Content Delivery", SIGCOMM CCR 2015),
 * which kept three quarters of its objects, the one-hit wonders, off its disks.
 */
static bool second_sight(struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key)
{
	uint64_t fp = (key->lo ^ (key->hi << 17 | key->hi >> 47) ^
		       (uint64_t)group * 0x9e3779b97f4a7c15ull) | 1;
	uint64_t *slot = &t->ghost[(fp ^ fp >> 29) & t->ghost_mask];

	if (*slot == fp)
		return true;
	*slot = fp;
	return false;
}

/* Whether entry @slot still holds (or is filling) the copy of the block @st shows. */
static bool holds(const struct kvpd_tier *t, uint32_t slot, const struct kvc_block_state *st)
{
	const struct tier_entry *e = &t->e[slot];

	return slot < t->nslots && e->state != TIER_FREE && e->group == st->group &&
	       e->key.lo == st->key.lo && e->key.hi == st->key.hi;
}

void kvpd_tier_queue(struct kvpd *d, struct kvpd_tier *t, struct tier_job **tj, uint32_t id,
		     uint32_t slot, uint32_t uses, uint32_t gen, uint32_t writes)
{
	struct tier_job *j = *tj;

	j->blocks[j->n] = id;
	j->slots[j->n] = slot;
	j->uses[j->n] = uses;
	j->gens[j->n] = gen;
	j->writes[j->n++] = writes;
	t->st.queued++;
	if (j->n == j->cap) {
		kvpd_tier_job_submit(d, j);
		*tj = NULL;
	}
}

/*
 * Looks at cached block @id, about to leave the pool: its copy queued into
 * @tj (made on first use, and submitted when full), or found in the tier. 0,
 * or the KVP_TIER_UNOFFERED_* that holds the walk up (it tries again next turn).
 */
static uint32_t look(struct kvpd *d, struct kvpd_tier *t, struct tier_job **tj, uint32_t id,
		     const struct kvc_block_state *st)
{
	uint32_t slot = kvpd_tier_find(t, st->group, &st->key);

	if (slot != TIER_END) {
		/* Leaving the pool now: the tier's most recent, as one LRU cache would have it. */
		if (t->e[slot].state == TIER_VALID && !t->e[slot].pins)
			kvpd_tier_use(t, slot);
	} else if (t->ghost && !second_sight(t, st->group, &st->key)) {
		t->st.declined++;
		slot = TIER_DECLINED;
	} else {
		/* A job as long as the window's gap, the queue's room and a job allow. */
		uint32_t n = t->want - t->ahead;

		if (t->st.queued >= t->queue_cap)
			return KVP_TIER_UNOFFERED_QUEUE_FULL;
		n = n < t->queue_cap - t->st.queued ? n : t->queue_cap - t->st.queued;
		if (!*tj && !(*tj = kvpd_tier_job_new(t, KVPD_JOB_TIER_DOWN,
						      n < t->job_cap ? n : t->job_cap)))
			return KVP_TIER_UNOFFERED_QUEUE_FULL;
		slot = kvpd_tier_take(t, st->group, &st->key, t->block_owner[id], id);
		if (slot == TIER_END)
			return KVP_TIER_UNOFFERED_NO_SLOT;
		if (slot != TIER_OVER_QUOTA)
			kvpd_tier_queue(d, t, tj, id, slot, st->uses, st->gen, t->blk[id].writes);
	}
	t->blk[id].uses1 = st->uses + 1;
	t->blk[id].slot = slot;
	t->ahead++;
	return 0;
}

void kvpd_tier_walk(struct kvpd *d, struct kvpd_tier *t)
{
	struct kvc_pool *core = t->pool->core;
	struct kvc_pool_counters c;
	struct tier_job *tj = NULL;
	uint32_t id;

	kvpd_tier_rescue(d, t);
	kvc_pool_counters(core, &c);
	if ((c.queue_ops == t->queue_ops && !t->held_up) ||
	    kvpd_tier_disk_write_error(t))
		return;
	t->queue_ops = c.queue_ops;
	t->held_up = 0;
	while (t->ahead < t->want && (id = kvc_pool_queue_next(core, t->front)) != KVC_NULL_BLOCK) {
		struct kvc_block_state st;

		if (kvc_block_state(core, id, &st))
			break;
		/* Unhashed: nothing to keep. Looked at: the walk started again from the head. */
		if (st.hashed && t->blk[id].uses1 != st.uses + 1) {
			t->held_up = look(d, t, &tj, id, &st);
			if (t->held_up)
				break;
		}
		t->front = id;
	}
	if (tj && tj->n)
		kvpd_tier_job_submit(d, tj);
	else
		free(tj);
	t->dirty = true;
}

void kvpd_tier_writing(struct kvpd_pool *pool, const uint32_t *ids, uint32_t n)
{
	struct kvpd_tier *t = pool->tier;

	for (uint32_t i = 0; t && i < n; i++)
		if (ids[i] != KVC_NULL_BLOCK && ids[i] < pool->layout.num_blocks)
			kvpd_tier_written(t, ids[i]);
}

void kvpd_tier_unoffered(struct kvpd_tier *t, uint32_t why)
{
	t->st.unoffered[why]++;
	t->st.skipped += why == KVP_TIER_UNOFFERED_QUEUE_FULL || why == KVP_TIER_UNOFFERED_NO_SLOT ||
			 why == KVP_TIER_UNOFFERED_QUOTA;
	t->dirty = true;
}

/*
 * A cached block handed out for new data, its key's last copy in the pool:
 * kept if the tier holds it or is filling it (the copy's end says whether it
 * holds); else copied after the hand-out where the daemon sees every write
 * (rescue.c), or counted lost, by why.
 */
static void evicted(struct kvpd_tier *t, uint32_t id, const struct kvc_block_state *st,
		    bool looked)
{
	uint32_t slot = looked ? t->blk[id].slot : kvpd_tier_find(t, st->group, &st->key);

	if (slot < t->nslots && (!looked || holds(t, slot, st))) {
		if (t->e[slot].window && t->e[slot].block == id)
			kvpd_tier_settle(t, slot);
		/* Still being filled: KV events keep the block hittable (its copy's end decides). */
		if (t->e[slot].state == TIER_COPYING && !t->e[slot].promised) {
			t->e[slot].promised = true;
			kvpd_events_tier_held(t->pool->events, st->group, &st->key);
		}
		return;
	}
	if (looked && slot == TIER_DECLINED)
		kvpd_tier_unoffered(t, KVP_TIER_UNOFFERED_DECLINED);
	else if (kvpd_tier_disk_write_error(t))
		kvpd_tier_unoffered(t, KVP_TIER_UNOFFERED_WRITE_FAILED);
	else if (t->sees_writes && kvpd_tier_rescue_note(t, id, st))
		return;
	else if (looked)
		kvpd_tier_unoffered(t, slot == TIER_OVER_QUOTA ? KVP_TIER_UNOFFERED_QUOTA :
				    KVP_TIER_UNOFFERED_DROPPED);
	else
		kvpd_tier_unoffered(t, t->held_up ? t->held_up : KVP_TIER_UNOFFERED_WINDOW);
}

void kvpd_tier_leaving(void *tier, uint32_t id, bool handed_out)
{
	struct kvpd_tier *t = tier;
	struct kvc_block_state st;
	uint32_t slot;
	bool looked;

	if (kvc_block_state(t->pool->core, id, &st))
		return;
	/* Its new owner may write it at once, out of the daemon's sight: as good as written. */
	if (handed_out && !t->sees_writes)
		kvpd_tier_written(t, id);
	looked = t->blk[id].uses1 == st.uses + 1;
	slot = looked ? t->blk[id].slot : TIER_END;
	if (looked)
		t->ahead--;
	if (id == t->front)
		t->front = KVC_NULL_BLOCK; /* the walk starts again from the head */
	if (st.hashed && handed_out && !st.shared) {
		evicted(t, id, &st, looked);
		return;
	}
	if (slot >= t->nslots || !t->e[slot].window || t->e[slot].block != id)
		return;
	/*
	 * Its window copy: counted against the tier once the block is handed out
	 * (its key gone from the pool some other way, by EVICT or a reset, or kept
	 * by another block); dropped if a hit takes the block back into use, as
	 * the pool has it (a copy in flight is dropped as it lands, down.c).
	 */
	if (handed_out)
		kvpd_tier_settle(t, slot);
	else if (t->e[slot].state == TIER_VALID && !t->e[slot].pins)
		kvpd_tier_drop(t, slot);
	t->dirty = true;
}
