/* SPDX-License-Identifier: MIT */
/*
 * Reference sliding window: the prompt prefix P and the last W tokens stay;
 * the gap between them is dropped as the sequence grows, so memory is
 * O(P + W). Only blocks wholly inside the prefix are shared, and they are
 * shared as full attention shares them.
 */
#include "core.h"

static void rswa_drop_range(const struct kvc_seq *seq, const struct kvc_group *g,
			    uint32_t n, uint32_t *first, uint32_t *last)
{
	uint32_t bs = seq->pool->cfg.block_size;
	uint32_t window_start = n > g->param ? n - g->param : 0;

	*first = kvc_cdiv(seq->prefix, bs);
	*last = (uint32_t)kvc_max(seq->prefix, window_start) / bs;
}

static bool rswa_publishable(const struct kvc_seq *seq, const struct kvc_group *g,
			     uint32_t pos)
{
	(void)g;
	return (uint64_t)(pos + 1) * seq->pool->cfg.block_size <= seq->prefix;
}

static uint32_t rswa_find_hit(struct kvc_seq *seq, const struct kvc_bundle *b,
			      uint32_t max_tokens)
{
	return kvc_hit_left_to_right(seq, b, 0, max_tokens);
}

const struct kvc_kind_ops kvc_rswa_ops = {
	.name = "rswa",
	.skipped = kvc_skip_none,
	.drop_range = rswa_drop_range,
	.publishable = rswa_publishable,
	.find_hit = rswa_find_hit,
};
