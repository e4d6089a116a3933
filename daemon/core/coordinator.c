/* SPDX-License-Identifier: MIT */
/*
 * Hybrid lookup: the hit of a pool whose groups have different kinds is the
 * longest length every bundle accepts. Bundles are visited full first, then
 * R-SWA, then the rest, each bundle shrinking the candidate length, until a
 * pass changes nothing (vLLM's HybridKVCacheCoordinator).
 */
#include <errno.h>
#include <stdlib.h>

#include "core.h"

static int lookup_rank(enum kvc_kind kind)
{
	return kind == KVC_FULL ? 0 : kind == KVC_RSWA ? 1 : 2;
}

int kvc_coordinator_init(struct kvc_pool *pool)
{
	struct kvc_bundle found[KVC_MAX_GROUPS];
	uint32_t nfound = 0;

	for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
		const struct kvc_group *grp = &pool->groups[g];
		uint32_t i = 0;

		while (i < nfound && !(found[i].kind == grp->kind && found[i].param == grp->param))
			i++;
		if (i == nfound)
			found[nfound++] = (struct kvc_bundle){ .kind = grp->kind, .param = grp->param };
		found[i].groups[found[i].ngroups++] = g;
		pool->has_cyclic |= grp->kind == KVC_CYCLIC;
	}
	/* Groups are visited in id order, so each rank keeps lowest-group-id order. */
	pool->nbundles = 0;
	for (int rank = 0; rank <= 2; rank++)
		for (uint32_t i = 0; i < nfound; i++)
			if (lookup_rank(found[i].kind) == rank)
				pool->bundles[pool->nbundles++] = found[i];
	for (uint32_t b = 0; b < pool->nbundles; b++)
		for (uint32_t i = 0; i < pool->bundles[b].ngroups; i++)
			pool->groups[pool->bundles[b].groups[i]].bundle = b;
	return 0;
}

static int reserve_hit_ids(struct kvc_pool *pool, uint32_t nblocks)
{
	uint32_t cap = pool->hit_cap ? pool->hit_cap : 64;

	if (nblocks <= pool->hit_cap)
		return 0;
	while (cap < nblocks)
		cap *= 2;
	for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
		uint32_t *ids = realloc(pool->hit_ids[g], (size_t)cap * sizeof(*ids));

		if (!ids)
			return -ENOMEM;
		pool->hit_ids[g] = ids;
	}
	pool->hit_cap = cap;
	return 0;
}

static bool keeps_first_pass(enum kvc_kind kind)
{
	/* A full or R-SWA hit is downward closed: any shorter prefix of it is a hit too. */
	return kind == KVC_FULL || kind == KVC_RSWA;
}

int kvc_find_hit(struct kvc_seq *seq, uint32_t *blocks)
{
	struct kvc_pool *pool = seq->pool;
	uint32_t bs = pool->cfg.block_size;
	uint32_t len, max_blocks;
	bool simple;
	int ret;

	*blocks = 0;
	if (!pool->cfg.caching || (pool->has_cyclic && !pool->cfg.snapshots) || seq->ntokens == 0)
		return 0;
	len = seq->ntokens - 1;
	max_blocks = len / bs;
	ret = reserve_hit_ids(pool, max_blocks);
	if (ret)
		return ret;
	kvc_seq_hash_upto(seq, max_blocks);

	simple = pool->nbundles == 1 ||
		 (pool->nbundles == 2 && keeps_first_pass(pool->bundles[0].kind));
	for (bool first_pass = true;; first_pass = false) {
		uint32_t pass_len = len;

		for (uint32_t b = 0; b < pool->nbundles; b++) {
			const struct kvc_bundle *bundle = &pool->bundles[b];

			if (!first_pass && keeps_first_pass(bundle->kind))
				pass_len = pass_len / bs * bs;
			else
				pass_len = kvc_kind(bundle->kind)->find_hit(seq, bundle, pass_len) * bs;
		}
		if (pass_len == len)
			break;
		len = pass_len;
		if (simple)
			break;
	}
	*blocks = len / bs;
	return 0;
}
