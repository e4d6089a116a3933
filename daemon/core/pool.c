/* SPDX-License-Identifier: MIT */
/* Pool lifetime, configuration, and the pool-wide operations (stats, reset, evict). */
#include <errno.h>
#include <stdlib.h>

#include "core.h"

void kvc_pool_config_init(struct kvc_pool_config *cfg, uint32_t num_blocks,
			  uint32_t block_size)
{
	*cfg = (struct kvc_pool_config){
		.num_blocks = num_blocks,
		.block_size = block_size,
		.caching = true,
		.free_order = KVC_FREE_SPLIT,
		.publish = KVC_PUBLISH_COMMIT,
		.max_len = 2147483647u,
		.max_step_tokens = 1,
		.snapshots = true,
		.snapshot_every = KVC_SNAPSHOT_EVERY,
	};
}

static uint32_t min_param(enum kvc_kind kind)
{
	return kind == KVC_FULL ? 0 : kind == KVC_SWA ? 2 : 1;
}

static int validate_config(const struct kvc_pool_config *cfg)
{
	if (cfg->num_blocks < KVC_MIN_BLOCKS || cfg->num_blocks > KVC_MAX_BLOCKS)
		return -EINVAL;
	if (cfg->block_size == 0 || cfg->block_size > KVC_MAX_TOKENS)
		return -EINVAL;
	if (cfg->free_order != KVC_FREE_SPLIT && cfg->free_order != KVC_FREE_APPEND)
		return -EINVAL;
	if (cfg->publish != KVC_PUBLISH_COMMIT && cfg->publish != KVC_PUBLISH_ALLOC)
		return -EINVAL;
	if (cfg->max_len == 0 || cfg->max_step_tokens == 0 || cfg->max_step_tokens > KVC_MAX_TOKENS)
		return -EINVAL;
	if (cfg->snapshot_every > KVC_MAX_TOKENS)
		return -EINVAL;
	if (cfg->num_groups == 0 || cfg->num_groups > KVC_MAX_GROUPS)
		return -EINVAL;
	for (uint32_t g = 0; g < cfg->num_groups; g++) {
		const struct kvc_group_spec *s = &cfg->groups[g];

		if ((unsigned)s->kind >= KVC_NUM_KINDS || s->param < min_param(s->kind) ||
		    s->param > KVC_MAX_TOKENS)
			return -EINVAL;
	}
	return 0;
}

int kvc_pool_create(const struct kvc_pool_config *cfg, struct kvc_pool **out)
{
	struct kvc_pool *pool;
	int ret;

	ret = validate_config(cfg);
	if (ret)
		return ret;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->cfg = *cfg;
	for (uint32_t g = 0; g < cfg->num_groups; g++) {
		struct kvc_group *grp = &pool->groups[g];

		grp->kind = cfg->groups[g].kind;
		grp->param = grp->kind == KVC_FULL ? 0 : cfg->groups[g].param;
		if (grp->kind == KVC_CYCLIC)
			grp->ring_blocks = kvc_cdiv((uint64_t)grp->param - 1 + cfg->max_step_tokens,
						    cfg->block_size);
	}
	pool->seqs.prev = pool->seqs.next = NULL;

	ret = -ENOMEM;
	pool->blocks = calloc((size_t)cfg->num_blocks + 1, sizeof(*pool->blocks));
	if (!pool->blocks)
		goto err_free_pool;
	pool->hash_buf = malloc(sizeof(struct kvc_hash) + (size_t)cfg->block_size * sizeof(uint32_t));
	if (!pool->hash_buf)
		goto err_free_blocks;
	ret = kvc_cache_init(pool);
	if (ret)
		goto err_free_hash_buf;
	kvc_coordinator_init(pool);
	kvc_queue_init(pool);
	*out = pool;
	return 0;

err_free_hash_buf:
	free(pool->hash_buf);
err_free_blocks:
	free(pool->blocks);
err_free_pool:
	free(pool);
	return ret;
}

void kvc_pool_destroy(struct kvc_pool *pool)
{
	if (!pool)
		return;
	while (pool->seqs.next)
		kvc_seq_destroy(pool->seqs.next);
	for (uint32_t g = 0; g < pool->cfg.num_groups; g++)
		free(pool->hit_ids[g]);
	free(pool->promotions);
	free(pool->copies);
	free(pool->buckets);
	free(pool->hash_buf);
	free(pool->blocks);
	free(pool);
}

const struct kvc_pool_config *kvc_pool_config(const struct kvc_pool *pool)
{
	return &pool->cfg;
}

uint32_t kvc_group_ring_blocks(const struct kvc_pool *pool, uint32_t group)
{
	return group < pool->cfg.num_groups ? pool->groups[group].ring_blocks : 0;
}

void kvc_pool_stats(const struct kvc_pool *pool, struct kvc_pool_stats *st)
{
	st->free = pool->nfree;
	st->used = pool->cfg.num_blocks - 1 - pool->nfree;
	st->cached = pool->ncached;
}

uint32_t kvc_pool_free_queue(const struct kvc_pool *pool, uint32_t *ids, uint32_t max)
{
	uint32_t s = pool->cfg.num_blocks, n = 0;

	for (uint32_t id = pool->blocks[s].q_next; id != s && n < max; id = pool->blocks[id].q_next)
		ids[n++] = id;
	return pool->nfree;
}

void kvc_pool_counters(const struct kvc_pool *pool, struct kvc_pool_counters *c)
{
	*c = pool->counters;
}

void kvc_pool_set_admit_hook(struct kvc_pool *pool, kvc_admit_fn fn)
{
	pool->admit = fn;
}

uint32_t kvc_pool_queue_next(const struct kvc_pool *pool, uint32_t id)
{
	uint32_t s = pool->cfg.num_blocks, next;

	if (id == KVC_NULL_BLOCK)
		next = pool->blocks[s].q_next;
	else if (id < s && pool->blocks[id].queued)
		next = pool->blocks[id].q_next;
	else
		return KVC_NULL_BLOCK;
	return next == s ? KVC_NULL_BLOCK : next;
}

void kvc_pool_set_tier(struct kvc_pool *pool, const struct kvc_tier_ops *ops, void *tier)
{
	pool->tier_ops = ops;
	pool->tier = tier;
}

void kvc_pool_set_committed_hook(struct kvc_pool *pool, kvc_committed_fn fn, void *ctx)
{
	pool->committed = fn;
	pool->committed_ctx = ctx;
}

void kvc_pool_set_events(struct kvc_pool *pool, const struct kvc_event_ops *ops, void *ctx)
{
	pool->events = ops;
	pool->events_ctx = ctx;
}

int kvc_block_state(const struct kvc_pool *pool, uint32_t id, struct kvc_block_state *st)
{
	const struct kvc_block *b;

	if (id == KVC_NULL_BLOCK || id >= pool->cfg.num_blocks)
		return -EINVAL;
	b = &pool->blocks[id];
	*st = (struct kvc_block_state){ .key = b->hash, .group = b->group, .gen = b->gen,
					.uses = b->uses, .ref = b->ref, .hashed = b->hashed,
					.queued = b->queued,
					.shared = b->hashed && b->dup_next != id };
	return 0;
}

void kvc_pool_set_hold_hook(struct kvc_pool *pool, kvc_hold_fn fn)
{
	pool->hold = fn;
}

int kvc_pool_reset(struct kvc_pool *pool)
{
	if (pool->nfree != pool->cfg.num_blocks - 1)
		return -EBUSY;
	pool->counters.evicted_reset += pool->ncached;
	kvc_cache_clear(pool);
	kvc_debug_check(pool);
	return 0;
}

int kvc_pool_evict(struct kvc_pool *pool, const uint32_t *ids, uint32_t n)
{
	int evicted = 0;

	for (uint32_t i = 0; i < n; i++)
		if (ids[i] == KVC_NULL_BLOCK || ids[i] >= pool->cfg.num_blocks)
			return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (!pool->blocks[ids[i]].hashed)
			continue;
		kvc_cache_remove(pool, ids[i]);
		evicted++;
	}
	pool->counters.evicted_admin += (uint64_t)evicted;
	kvc_debug_check(pool);
	return evicted;
}

int kvc_pin(struct kvc_pool *pool, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] >= pool->cfg.num_blocks ||
		    (ids[i] != KVC_NULL_BLOCK && pool->blocks[ids[i]].ref == 0))
			return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (ids[i] == KVC_NULL_BLOCK)
			continue;
		pool->blocks[ids[i]].ref++;
		pool->blocks[ids[i]].pins++;
	}
	return 0;
}

uint32_t kvc_block_pins(const struct kvc_pool *pool, uint32_t id)
{
	return id < pool->cfg.num_blocks ? pool->blocks[id].pins : 0;
}

void kvc_unpin(struct kvc_pool *pool, const uint32_t *ids, uint32_t n)
{
	struct kvc_release rel;

	kvc_release_begin(pool, &rel);
	for (uint32_t i = 0; i < n; i++) {
		if (ids[i] == KVC_NULL_BLOCK)
			continue;
		pool->blocks[ids[i]].pins--;
		kvc_release_block(pool, &rel, ids[i]);
	}
	kvc_debug_check(pool);
}
