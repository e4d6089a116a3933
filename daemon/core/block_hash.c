/* SPDX-License-Identifier: MIT */
/*
 * Chained block hashes: hash(i) = XXH3-128(hash(i-1) || tokens of block i), with
 * the salt's hash as the parent of block 0. Two blocks at one position share a
 * hash iff their sequences share the salt and every token up to the block's end.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core.h"

void kvc_hash_salt(struct kvc_hash *root, const void *salt, size_t len)
{
	if (!salt) {
		*root = (struct kvc_hash){ 0, 0 };
		return;
	}
	/* Seeded apart from block hashes so a salt can never pose as a parent chain. */
	XXH128_hash_t h = XXH3_128bits_withSeed(salt, len, 0x6b76706f6f6c5341ull);

	*root = (struct kvc_hash){ h.low64, h.high64 };
}

int kvc_seq_reserve_hashes(struct kvc_seq *seq, uint32_t nblocks)
{
	struct kvc_hash *h;
	uint32_t cap;

	if (nblocks <= seq->hashes_cap)
		return 0;
	cap = seq->hashes_cap ? seq->hashes_cap : 16;
	while (cap < nblocks)
		cap *= 2;
	h = realloc(seq->hashes, (size_t)cap * sizeof(*h));
	if (!h)
		return -ENOMEM;
	seq->hashes = h;
	seq->hashes_cap = cap;
	return 0;
}

/* Callers reserve first: the number of full blocks never exceeds the reservation. */
void kvc_seq_hash_upto(struct kvc_seq *seq, uint32_t nblocks)
{
	struct kvc_pool *pool = seq->pool;
	size_t tok_bytes = (size_t)pool->cfg.block_size * sizeof(uint32_t);
	uint8_t *buf = pool->hash_buf;

	for (uint32_t i = seq->nhashes; i < nblocks; i++) {
		const struct kvc_hash *parent = i ? &seq->hashes[i - 1] : &seq->root;
		XXH128_hash_t h;

		memcpy(buf, parent, sizeof(*parent));
		memcpy(buf + sizeof(*parent), seq->tokens + (size_t)i * pool->cfg.block_size,
		       tok_bytes);
		h = XXH3_128bits(buf, sizeof(*parent) + tok_bytes);
		seq->hashes[i] = (struct kvc_hash){ h.low64, h.high64 };
	}
	if (nblocks > seq->nhashes)
		seq->nhashes = nblocks;
}

const struct kvc_hash *kvc_seq_hashes(struct kvc_seq *seq, uint32_t *n)
{
	*n = seq->ntokens ? (seq->ntokens - 1) / seq->pool->cfg.block_size : 0;
	kvc_seq_hash_upto(seq, *n);
	return seq->hashes;
}

const uint32_t *kvc_seq_tokens(const struct kvc_seq *seq, uint32_t *n)
{
	*n = seq->ntokens;
	return seq->tokens;
}
