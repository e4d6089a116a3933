/* SPDX-License-Identifier: MIT */
/*
 * The free queue: an intrusive doubly-linked list through the block array, with
 * the sentinel at index N. Allocation pops the head; cached blocks wait in it
 * (hittable) until they are popped, which is when they lose their hash.
 */
#include <string.h>

#include "core.h"

static inline uint32_t sentinel(const struct kvc_pool *pool)
{
	return pool->cfg.num_blocks;
}

static void link_after(struct kvc_pool *pool, uint32_t after, uint32_t id)
{
	struct kvc_block *b = &pool->blocks[id];
	uint32_t next = pool->blocks[after].q_next;

	b->q_prev = after;
	b->q_next = next;
	pool->blocks[next].q_prev = id;
	pool->blocks[after].q_next = id;
	b->queued = 1;
	pool->nfree++;
	pool->counters.queue_ops++;
	pool->counters.in_use[b->group]--;
}

void kvc_queue_remove(struct kvc_pool *pool, uint32_t id)
{
	struct kvc_block *b = &pool->blocks[id];

	b->uses++;
	pool->blocks[b->q_prev].q_next = b->q_next;
	pool->blocks[b->q_next].q_prev = b->q_prev;
	b->queued = 0;
	pool->nfree--;
	pool->counters.queue_ops++;
	pool->counters.in_use[b->group]++;
}

void kvc_queue_init(struct kvc_pool *pool)
{
	uint32_t s = sentinel(pool);

	pool->blocks[s].q_prev = pool->blocks[s].q_next = s;
	pool->nfree = 0;
	for (uint32_t id = 1; id < s; id++)
		link_after(pool, pool->blocks[s].q_prev, id);
	pool->counters.in_use[0] = 0; /* the blocks were never in use */
}

uint32_t kvc_queue_pop(struct kvc_pool *pool, uint32_t group)
{
	uint32_t id = pool->blocks[sentinel(pool)].q_next;

	/* The tier sees the block as it was: its key, and whether another block keeps it. */
	if (pool->tier_ops)
		pool->tier_ops->leaving(pool->tier, id, true);
	/* The entry is found through its old group: evict before the block changes hands. */
	if (pool->blocks[id].hashed) {
		kvc_cache_remove(pool, id);
		pool->counters.evicted_reuse++;
	}
	pool->blocks[id].group = (uint16_t)group;
	pool->blocks[id].gen++;
	pool->counters.popped++;
	kvc_queue_remove(pool, id);
	pool->blocks[id].ref = 1;
	return id;
}

void kvc_touch(struct kvc_pool *pool, uint32_t id)
{
	if (pool->blocks[id].ref == 0) {
		if (pool->tier_ops)
			pool->tier_ops->leaving(pool->tier, id, false);
		kvc_queue_remove(pool, id);
	}
	pool->blocks[id].ref++;
}

void kvc_release_begin(struct kvc_pool *pool, struct kvc_release *rel)
{
	rel->cursor = sentinel(pool);
}

/*
 * Split order keeps reusable (hashed) blocks at the tail, where they survive
 * longest, and hands the unhashed ones out first, in the order they were
 * released; append order is the older vLLM behaviour.
 */
void kvc_release_block(struct kvc_pool *pool, struct kvc_release *rel, uint32_t id)
{
	struct kvc_block *b = &pool->blocks[id];

	if (--b->ref)
		return;
	if (pool->cfg.free_order == KVC_FREE_APPEND || b->hashed) {
		link_after(pool, pool->blocks[sentinel(pool)].q_prev, id);
		return;
	}
	link_after(pool, rel->cursor, id);
	rel->cursor = id;
}

void kvc_queue_reorder(struct kvc_pool *pool, const struct kvc_saved_block *in, uint32_t n)
{
	uint32_t s = sentinel(pool);

	pool->blocks[s].q_prev = pool->blocks[s].q_next = s;
	pool->nfree = 0;
	for (uint32_t i = 0; i < n; i++)
		link_after(pool, pool->blocks[s].q_prev, in[i].id);
	/* Every block was free before and is after: none is in use. */
	memset(pool->counters.in_use, 0, sizeof(pool->counters.in_use));
}
