/* SPDX-License-Identifier: MIT */
/*
 * Cyclic window: one fixed ring of R blocks per sequence, token t in slot
 * t mod (R * bs). The ring is reused in place, so nothing is dropped and no
 * ring block ever describes a stable prefix: never hashed. It hits by window
 * snapshots instead (snapshot.c): the largest boundary whose snapshot is
 * cached.
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
	uint32_t bs = seq->pool->cfg.block_size;

	for (uint32_t p = max_tokens / bs * bs; p >= bs; p -= bs)
		if (kvc_snap_cached(seq, b, p))
			return p / bs;
	return 0;
}

const struct kvc_kind_ops kvc_cyclic_ops = {
	.name = "cyclic",
	.skipped = kvc_skip_none,
	.drop_range = kvc_drop_none,
	.publishable = cyclic_publishable,
	.find_hit = cyclic_find_hit,
};
