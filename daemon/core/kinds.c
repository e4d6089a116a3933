/* SPDX-License-Identifier: MIT */
/* The pieces the attention kinds' rules are built from, and the table of kinds. */
#include "core.h"

const struct kvc_kind_ops *kvc_kind(enum kvc_kind kind)
{
	static const struct kvc_kind_ops *const ops[KVC_NUM_KINDS] = {
		[KVC_FULL] = &kvc_full_ops,       [KVC_SWA] = &kvc_swa_ops,
		[KVC_RSWA] = &kvc_rswa_ops,       [KVC_CHUNKED] = &kvc_chunked_ops,
		[KVC_CYCLIC] = &kvc_cyclic_ops,
	};
	return ops[kind];
}

uint32_t kvc_skip_none(const struct kvc_group *g, uint32_t n)
{
	(void)g;
	(void)n;
	return 0;
}

void kvc_drop_none(const struct kvc_seq *seq, const struct kvc_group *g, uint32_t n,
		   uint32_t *first, uint32_t *last)
{
	(void)seq;
	(void)g;
	(void)n;
	*first = *last = 0;
}

void kvc_drop_skipped(const struct kvc_seq *seq, const struct kvc_group *g, uint32_t n,
		      uint32_t *first, uint32_t *last)
{
	*first = 0;
	*last = kvc_kind(g->kind)->skipped(g, n) / seq->pool->cfg.block_size;
}

bool kvc_publish_all(const struct kvc_seq *seq, const struct kvc_group *g, uint32_t pos)
{
	(void)seq;
	(void)g;
	(void)pos;
	return true;
}

/* A position hits a bundle only if every group of it has a cached entry there, in the pool or its tier. */
bool kvc_bundle_hit_at(struct kvc_seq *seq, const struct kvc_bundle *b, uint32_t pos)
{
	struct kvc_pool *pool = seq->pool;

	for (uint32_t i = 0; i < b->ngroups; i++) {
		uint32_t g = b->groups[i];
		uint32_t id = kvc_cache_get(pool, g, &seq->hashes[pos]);

		if (id == KVC_NULL_BLOCK) {
			if (!pool->tier_ops ||
			    !pool->tier_ops->has(pool->tier, g, &seq->hashes[pos]))
				return false;
			id = KVC_TIER_BLOCK;
		}
		pool->hit_ids[g][pos] = id;
	}
	return true;
}

void kvc_bundle_null_below(struct kvc_seq *seq, const struct kvc_bundle *b, uint32_t pos)
{
	for (uint32_t i = 0; i < b->ngroups; i++)
		for (uint32_t p = 0; p < pos; p++)
			seq->pool->hit_ids[b->groups[i]][p] = KVC_NULL_BLOCK;
}

/* Nulls below @from, then hits from @from up to the first miss. */
uint32_t kvc_hit_left_to_right(struct kvc_seq *seq, const struct kvc_bundle *b,
			       uint32_t from, uint32_t max_tokens)
{
	uint32_t max_blocks = max_tokens / seq->pool->cfg.block_size;
	uint32_t n = from;

	kvc_bundle_null_below(seq, b, from);
	while (n < max_blocks && kvc_bundle_hit_at(seq, b, n))
		n++;
	return n;
}
