/* SPDX-License-Identifier: MIT */
/*
 * Cyclic window: one fixed ring of R blocks per sequence, token t in slot
 * t mod (R * bs). The ring is reused in place, so nothing is dropped and no
 * block ever describes a stable prefix: never hashed, never hit.
 */
#include "core.h"

static bool cyclic_publishable(const struct kvc_seq *seq, const struct kvc_group *g,
			       uint32_t pos)
{
	(void)seq;
	(void)g;
	(void)pos;
	return false;
}

static uint32_t cyclic_find_hit(struct kvc_seq *seq, const struct kvc_bundle *b,
				uint32_t max_tokens)
{
	(void)seq;
	(void)b;
	(void)max_tokens;
	return 0;
}

const struct kvc_kind_ops kvc_cyclic_ops = {
	.name = "cyclic",
	.skipped = kvc_skip_none,
	.drop_range = kvc_drop_none,
	.publishable = cyclic_publishable,
	.find_hit = cyclic_find_hit,
};
