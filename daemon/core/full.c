/* SPDX-License-Identifier: MIT */
/* Full attention: every token stays; a hit is the longest run of cached blocks from 0. */
#include "core.h"

static uint32_t full_find_hit(struct kvc_seq *seq, const struct kvc_bundle *b,
			      uint32_t max_tokens)
{
	return kvc_hit_left_to_right(seq, b, 0, max_tokens);
}

const struct kvc_kind_ops kvc_full_ops = {
	.name = "full",
	.skipped = kvc_skip_none,
	.drop_range = kvc_drop_none,
	.publishable = kvc_publish_all,
	.find_hit = full_find_hit,
};
