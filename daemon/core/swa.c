/* SPDX-License-Identifier: MIT */
/*
 * Sliding window W: token n-1 attends to the last W tokens, so once n are
 * computed the first n-W+1 are no longer needed. A hit needs only the window's
 * blocks, so it is found by scanning down from the longest possible hit.
 */
#include "core.h"

static uint32_t swa_skipped(const struct kvc_group *g, uint32_t n)
{
	return n + 1 > g->param ? n + 1 - g->param : 0;
}

static uint32_t swa_find_hit(struct kvc_seq *seq, const struct kvc_bundle *b,
			     uint32_t max_tokens)
{
	uint32_t bs = seq->pool->cfg.block_size;
	uint32_t need = kvc_cdiv(b->param - 1, bs);
	uint32_t run = 0;

	for (uint32_t i = max_tokens / bs; i-- > 0;) {
		if (!kvc_bundle_hit_at(seq, b, i)) {
			run = 0;
			continue;
		}
		if (++run >= need) {
			kvc_bundle_null_below(seq, b, i);
			return i + run;
		}
	}
	/* No full window anywhere: a run reaching block 0 still counts. */
	return run;
}

const struct kvc_kind_ops kvc_swa_ops = {
	.name = "swa",
	.skipped = swa_skipped,
	.drop_range = kvc_drop_skipped,
	.publishable = kvc_publish_all,
	.find_hit = swa_find_hit,
};
