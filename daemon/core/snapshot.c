/* SPDX-License-Identifier: MIT */
/*
 * Window snapshots: how a cyclic group, whose ring is overwritten in place,
 * still hits. When a sequence commits past a chosen block boundary p, the KV
 * a continuation from p needs (the last min(W-1, p) tokens before p) is
 * copied out of its ring into ordinary pool blocks, cached under keys derived
 * from the prefix's chained hash at p. A sequence that hits at p gets fresh
 * ring blocks and the snapshot copied into them at the ring positions of
 * those tokens. The core only chooses blocks and keys: the caller moves the
 * KV (kvc_pool_copies, kvc_copy_done). docs/design.md has the rules.
 */
#include <errno.h>
#include <stdlib.h>
#include <xxhash.h>

#include "core.h"

/* Seeded apart from block and salt hashes: a snapshot's key never equals a prefix's. */
#define SNAP_SEED 0x6b76706f6f6c534eull

uint32_t kvc_snap_blocks(const struct kvc_pool *pool, const struct kvc_group *g, uint32_t p)
{
	return kvc_cdiv(kvc_min((uint64_t)g->param - 1, p), pool->cfg.block_size);
}

/* Snapshot block @j of boundary @p: the tokens of block p/bs - nsnap + j. */
static struct kvc_hash snap_key(const struct kvc_seq *seq, uint32_t p, uint32_t j)
{
	struct {
		struct kvc_hash prefix;
		uint32_t j;
	} in = { seq->hashes[p / seq->pool->cfg.block_size - 1], j };
	XXH128_hash_t h = XXH3_128bits_withSeed(&in, sizeof(in.prefix) + sizeof(in.j), SNAP_SEED);

	return (struct kvc_hash){ h.low64, h.high64 };
}

/* The ring position of block @j of an @n-block snapshot at @p: its absolute block's. */
static uint32_t ring_pos(const struct kvc_pool *pool, const struct kvc_group *g, uint32_t p,
			 uint32_t n, uint32_t j)
{
	return (p / pool->cfg.block_size - n + j) % g->ring_blocks;
}

bool kvc_snap_cached(struct kvc_seq *seq, const struct kvc_bundle *b, uint32_t p)
{
	struct kvc_pool *pool = seq->pool;

	for (uint32_t i = 0; i < b->ngroups; i++) {
		uint32_t g = b->groups[i];
		uint32_t n = kvc_snap_blocks(pool, &pool->groups[g], p);

		for (uint32_t j = 0; j < n; j++) {
			struct kvc_hash key = snap_key(seq, p, j);
			uint32_t id = kvc_cache_get(pool, g, &key);

			if (id == KVC_NULL_BLOCK) {
				if (!pool->tier_ops || !pool->tier_ops->has(pool->tier, g, &key))
					return false;
				id = KVC_TIER_BLOCK;
			}
			pool->hit_ids[g][j] = id;
		}
	}
	return true;
}

int kvc_copies_reserve(struct kvc_pool *pool, uint32_t more)
{
	uint64_t need = (uint64_t)pool->ncopies + more;
	uint64_t cap = pool->copies_cap ? pool->copies_cap : 16;
	struct kvc_copy *c;

	if (need <= pool->copies_cap)
		return 0;
	while (cap < need)
		cap *= 2;
	c = realloc(pool->copies, cap * sizeof(*c));
	if (!c)
		return -ENOMEM;
	pool->copies = c;
	pool->copies_cap = (uint32_t)cap;
	return 0;
}

/* One group's snapshot at @p: the blocks no one has cached yet, each a copy out of the ring. */
static void make_one(struct kvc_seq *seq, uint32_t g, uint32_t p)
{
	struct kvc_pool *pool = seq->pool;
	const struct kvc_table *t = &seq->tables[g];
	uint32_t n = kvc_snap_blocks(pool, &pool->groups[g], p);

	for (uint32_t j = 0; j < n; j++) {
		struct kvc_hash key = snap_key(seq, p, j);
		uint32_t pos = ring_pos(pool, &pool->groups[g], p, n, j), src, dst;

		if (kvc_cache_get(pool, g, &key) != KVC_NULL_BLOCK)
			continue;
		if (pos >= t->len || t->ids[pos] == KVC_NULL_BLOCK)
			continue; /* not reached: a committed boundary's blocks are in the ring */
		if (pool->nfree == 0 || kvc_copies_reserve(pool, 1)) {
			pool->counters.snap_skipped++;
			continue;
		}
		src = t->ids[pos];
		dst = kvc_queue_pop(pool, g);
		pool->blocks[dst].pins++; /* the pop's reference is the pin */
		kvc_pin(pool, &src, 1);
		pool->copies[pool->ncopies++] = (struct kvc_copy){
			.group = g, .src = src, .dst = dst, .boundary = p, .make = true, .key = key,
		};
	}
}

/* The boundaries in (@from, @to] that get a snapshot: the prompt's end, every E tokens. */
void kvc_snap_make(struct kvc_seq *seq, uint32_t from, uint32_t to)
{
	struct kvc_pool *pool = seq->pool;
	uint32_t bs = pool->cfg.block_size;
	uint64_t prompt_end, every, next_every;
	bool want_prompt;

	/* Every COMMIT comes here: a pool without a cyclic group leaves at once. */
	if (!pool->has_cyclic || !pool->cfg.caching || !pool->cfg.snapshots || to <= from)
		return;
	prompt_end = seq->prompt_tokens / bs * bs;
	every = pool->cfg.snapshot_every ? (uint64_t)kvc_cdiv(pool->cfg.snapshot_every, bs) * bs : 0;
	next_every = every ? (from / every + 1) * every : UINT64_MAX;
	want_prompt = prompt_end > from && prompt_end <= to;
	kvc_seq_hash_upto(seq, to / bs);
	for (;;) {
		uint64_t p;

		if (want_prompt && prompt_end <= next_every) {
			p = prompt_end;
			want_prompt = false;
			if (p == next_every)
				next_every += every;
		} else {
			p = next_every;
			next_every += every;
		}
		if (p > to)
			break;
		for (uint32_t g = 0; g < pool->cfg.num_groups; g++)
			if (pool->groups[g].kind == KVC_CYCLIC)
				make_one(seq, g, (uint32_t)p);
	}
}

void kvc_snap_take(struct kvc_seq *seq, uint32_t g, uint32_t p)
{
	struct kvc_pool *pool = seq->pool;
	uint32_t n = kvc_snap_blocks(pool, &pool->groups[g], p);

	for (uint32_t j = 0; j < n; j++) {
		if (pool->hit_ids[g][j] == KVC_TIER_BLOCK)
			continue;
		kvc_touch(pool, pool->hit_ids[g][j]);
		pool->blocks[pool->hit_ids[g][j]].pins++; /* the touch's reference is the pin */
	}
}

/*
 * After the ring's blocks are popped: each taken snapshot block copied to its
 * place. One the tier holds is promoted straight into its ring block, not
 * into a block of its own cached under its key: one copy instead of two, and
 * no second copy to order after the first. Its key stays the tier's.
 */
void kvc_snap_fill(struct kvc_seq *seq, uint32_t g, uint32_t p, struct kvc_alloc_res *res)
{
	struct kvc_pool *pool = seq->pool;
	uint32_t bs = pool->cfg.block_size;
	uint32_t n = kvc_snap_blocks(pool, &pool->groups[g], p);

	for (uint32_t j = 0; j < n; j++) {
		uint32_t dst = seq->tables[g].ids[ring_pos(pool, &pool->groups[g], p, n, j)];

		if (pool->hit_ids[g][j] == KVC_TIER_BLOCK) {
			uint32_t pos = p / bs - n + j;

			pool->promotions[res->promoted++] = (struct kvc_promotion){
				.group = g, .pos = pos, .block = dst, .key = snap_key(seq, p, j),
				.ring = true,
			};
			if (pos < res->promoted_from)
				res->promoted_from = pos;
			continue;
		}
		kvc_pin(pool, &dst, 1);
		pool->copies[pool->ncopies++] = (struct kvc_copy){
			.group = g, .src = pool->hit_ids[g][j], .dst = dst, .boundary = p,
		};
	}
	pool->counters.snap_hit += n;
}

uint32_t kvc_pool_copies(const struct kvc_pool *pool, const struct kvc_copy **copies)
{
	*copies = pool->copies;
	return pool->ncopies;
}

void kvc_copy_done(struct kvc_pool *pool, const struct kvc_copy *c, bool ok)
{
	uint32_t ids[2] = { c->src, c->dst };

	if (c->make && ok) {
		kvc_cache_insert_key(pool, c->group, &c->key, c->dst);
		pool->counters.snap_made++;
	}
	kvc_unpin(pool, ids, 2);
	kvc_debug_check(pool);
}
