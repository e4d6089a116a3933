/* SPDX-License-Identifier: MIT */
/*
 * The prefix cache: (group, chained block hash) -> block. Several blocks may
 * carry one key (vLLM does not deduplicate, so block tables stay append-only);
 * they form a ring in the order they got it, and only the oldest sits in a
 * bucket chain, so a lookup finds it in O(1) and removals stay O(1).
 */
#include <errno.h>
#include <stdlib.h>

#include "core.h"

static inline uint32_t bucket_of(const struct kvc_pool *pool, uint32_t group,
				 const struct kvc_hash *h)
{
	return (uint32_t)(h->lo ^ (h->hi >> 17) ^ ((uint64_t)group * 0x9e3779b97f4a7c15ull)) &
	       pool->bucket_mask;
}

static inline bool key_equal(const struct kvc_block *b, uint32_t group,
			     const struct kvc_hash *h)
{
	return b->group == group && b->hash.lo == h->lo && b->hash.hi == h->hi;
}

int kvc_cache_init(struct kvc_pool *pool)
{
	uint32_t nb = 2;

	while (nb < pool->cfg.num_blocks)
		nb <<= 1;
	pool->buckets = calloc(nb, sizeof(*pool->buckets));
	if (!pool->buckets)
		return -ENOMEM;
	pool->bucket_mask = nb - 1;
	return 0;
}

uint32_t kvc_cache_get(const struct kvc_pool *pool, uint32_t group, const struct kvc_hash *h)
{
	uint32_t id = pool->buckets[bucket_of(pool, group, h)];

	while (id != KVC_BUCKET_END && !key_equal(&pool->blocks[id], group, h))
		id = pool->blocks[id].bucket_next;
	return id;
}

static bool is_snapshot(const struct kvc_pool *pool, uint32_t group)
{
	return pool->groups[group].kind == KVC_CYCLIC;
}

/* Returns whether @id is the key's first copy. */
static bool insert(struct kvc_pool *pool, uint32_t group, const struct kvc_hash *h, uint32_t id)
{
	struct kvc_block *b = &pool->blocks[id];
	uint32_t oldest = kvc_cache_get(pool, group, h);

	b->hash = *h;
	b->group = (uint16_t)group;
	b->hashed = 1;
	pool->ncached++;
	pool->counters.snap_held += is_snapshot(pool, group);
	if (oldest == KVC_BUCKET_END) {
		uint32_t *head = &pool->buckets[bucket_of(pool, group, h)];

		b->dup_prev = b->dup_next = id;
		b->bucket_next = *head;
		*head = id;
		return true;
	}
	/* Newest goes last in the ring, just before the oldest. */
	struct kvc_block *o = &pool->blocks[oldest];

	b->dup_next = oldest;
	b->dup_prev = o->dup_prev;
	pool->blocks[o->dup_prev].dup_next = id;
	o->dup_prev = id;
	b->bucket_next = KVC_BUCKET_END;
	return false;
}

void kvc_cache_insert(struct kvc_pool *pool, const struct kvc_seq *seq, uint32_t group,
		      uint32_t pos, uint32_t id)
{
	const struct kvc_hash *h = &seq->hashes[pos];

	if (insert(pool, group, h, id) && pool->events)
		pool->events->stored(pool->events_ctx, group, pos, h,
				     pos ? &seq->hashes[pos - 1] : NULL,
				     seq->tokens + (size_t)pos * pool->cfg.block_size);
}

void kvc_cache_insert_key(struct kvc_pool *pool, uint32_t group, const struct kvc_hash *h,
			  uint32_t id)
{
	insert(pool, group, h, id);
}

/* Puts @with in @id's place in its bucket chain (KVC_BUCKET_END: unlinks it). */
static void chain_replace(struct kvc_pool *pool, uint32_t id, uint32_t with)
{
	struct kvc_block *b = &pool->blocks[id];
	uint32_t *link = &pool->buckets[bucket_of(pool, b->group, &b->hash)];

	while (*link != id)
		link = &pool->blocks[*link].bucket_next;
	if (with == KVC_BUCKET_END) {
		*link = b->bucket_next;
	} else {
		pool->blocks[with].bucket_next = b->bucket_next;
		*link = with;
	}
}

/* The block keeps its group: it is also the group that holds it (per-group use counts). */
static void forget_hash(struct kvc_block *b)
{
	b->hashed = 0;
	b->hash = (struct kvc_hash){ 0, 0 };
	b->bucket_next = KVC_BUCKET_END;
	b->dup_prev = b->dup_next = 0;
}

void kvc_cache_remove(struct kvc_pool *pool, uint32_t id)
{
	struct kvc_block *b = &pool->blocks[id];
	bool alone = b->dup_next == id;

	if (kvc_cache_get(pool, b->group, &b->hash) == id)
		chain_replace(pool, id, alone ? KVC_BUCKET_END : b->dup_next);
	if (!alone) {
		pool->blocks[b->dup_prev].dup_next = b->dup_next;
		pool->blocks[b->dup_next].dup_prev = b->dup_prev;
	} else if (pool->events && !is_snapshot(pool, b->group)) {
		/* A snapshot's key was never announced: routers match prefixes, not windows. */
		pool->events->removed(pool->events_ctx, b->group, &b->hash);
	}
	if (is_snapshot(pool, b->group)) {
		pool->counters.snap_held--;
		pool->counters.snap_evicted++;
	}
	forget_hash(b);
	pool->ncached--;
}

void kvc_cache_clear(struct kvc_pool *pool)
{
	for (uint32_t id = 1; id < pool->cfg.num_blocks; id++)
		if (pool->blocks[id].hashed)
			forget_hash(&pool->blocks[id]);
	for (uint32_t i = 0; i <= pool->bucket_mask; i++)
		pool->buckets[i] = KVC_BUCKET_END;
	pool->ncached = 0;
	pool->counters.snap_evicted += pool->counters.snap_held;
	pool->counters.snap_held = 0;
	if (pool->events)
		pool->events->cleared(pool->events_ctx);
}
