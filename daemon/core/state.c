/* SPDX-License-Identifier: MIT */
/*
 * A pool's core carried across a planned restart of the daemon. With every
 * sequence ended, what decides each later hit and hand-out is the free
 * queue's order and every cached block's key, the copies of one key in the
 * order they got it (a lookup hits the oldest). kvc_pool_save writes that;
 * kvc_pool_restore rebuilds it in a new pool of the same configuration, after
 * which every lookup and allocation goes as it would have gone in the old one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* Where @id sits in its key's ring: 0 for the oldest copy (the one a lookup finds). */
static uint32_t rank_of(const struct kvc_pool *pool, uint32_t id)
{
	const struct kvc_block *b = &pool->blocks[id];
	uint32_t at = kvc_cache_get(pool, b->group, &b->hash), rank = 0;

	while (at != id && rank < pool->cfg.num_blocks) {
		at = pool->blocks[at].dup_next;
		rank++;
	}
	return rank;
}

int kvc_pool_save(const struct kvc_pool *pool, struct kvc_saved_block *out)
{
	uint32_t s = pool->cfg.num_blocks, n = 0;

	if (pool->nfree != s - 1)
		return -EBUSY; /* a block in use or pinned: its sequence has not ended */
	for (uint32_t id = pool->blocks[s].q_next; id != s; id = pool->blocks[id].q_next) {
		const struct kvc_block *b = &pool->blocks[id];

		out[n++] = (struct kvc_saved_block){ .hash = b->hashed ? b->hash : (struct kvc_hash){ 0 },
						     .id = id, .group = b->group,
						     .hashed = b->hashed,
						     .rank = b->hashed ? rank_of(pool, id) : 0 };
	}
	return 0;
}

/* @in lists every block but the null one once, each group in range: 0, else -EINVAL. */
static int check_saved(const struct kvc_pool *pool, const struct kvc_saved_block *in, uint32_t n)
{
	uint32_t nb = pool->cfg.num_blocks;
	uint8_t *seen;
	int ret = 0;

	if (n != nb - 1)
		return -EINVAL;
	seen = calloc(nb, 1);
	if (!seen)
		return -ENOMEM;
	for (uint32_t i = 0; i < n && !ret; i++) {
		const struct kvc_saved_block *e = &in[i];

		if (e->id == KVC_NULL_BLOCK || e->id >= nb || seen[e->id] ||
		    e->group >= pool->cfg.num_groups || e->hashed > 1 || e->rank >= nb)
			ret = -EINVAL;
		else
			seen[e->id] = 1;
	}
	free(seen);
	return ret;
}

int kvc_pool_restore(struct kvc_pool *pool, const struct kvc_saved_block *in, uint32_t n)
{
	uint32_t *order, *count, max_rank = 0;
	int ret;

	if (pool->seqs.next || pool->ncached || pool->nfree != pool->cfg.num_blocks - 1)
		return -EBUSY;
	ret = check_saved(pool, in, n);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < n; i++)
		if (in[i].hashed && in[i].rank > max_rank)
			max_rank = in[i].rank;
	order = malloc((size_t)n * sizeof(*order));
	count = calloc((size_t)max_rank + 2, sizeof(*count));
	if (!order || !count) {
		ret = -ENOMEM;
		goto free_sort;
	}
	for (uint32_t i = 0; i < n; i++)
		pool->blocks[in[i].id].group = (uint16_t)in[i].group;
	kvc_queue_reorder(pool, in, n);
	/* Keys by rank (a counting sort): each ring rebuilt oldest copy first. */
	for (uint32_t i = 0; i < n; i++)
		if (in[i].hashed)
			count[in[i].rank + 1]++;
	for (uint32_t r = 1; r <= max_rank + 1; r++)
		count[r] += count[r - 1];
	for (uint32_t i = 0; i < n; i++)
		if (in[i].hashed)
			order[count[in[i].rank]++] = i;
	for (uint32_t k = 0; k < count[max_rank]; k++) {
		const struct kvc_saved_block *e = &in[order[k]];

		kvc_cache_insert_key(pool, e->group, &e->hash, e->id);
	}
free_sort:
	free(order);
	free(count);
	return ret;
}
