/* SPDX-License-Identifier: MIT */
/*
 * Chunked local attention, chunk C: a token attends only within its own chunk,
 * so every chunk before the current one is skipped, and a hit starts with
 * nulls up to the chunk holding the last token that may hit.
 */
#include "core.h"

static uint32_t chunked_skipped(const struct kvc_group *g, uint32_t n)
{
	return n / g->param * g->param;
}

static uint32_t chunked_find_hit(struct kvc_seq *seq, const struct kvc_bundle *b,
				 uint32_t max_tokens)
{
	uint32_t from = max_tokens / b->param * b->param / seq->pool->cfg.block_size;

	return kvc_hit_left_to_right(seq, b, from, max_tokens);
}

const struct kvc_kind_ops kvc_chunked_ops = {
	.name = "chunked",
	.skipped = chunked_skipped,
	.drop_range = kvc_drop_skipped,
	.publishable = kvc_publish_all,
	.find_hit = chunked_find_hit,
};
