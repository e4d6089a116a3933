/* SPDX-License-Identifier: MIT */
/*
 * What the cluster is known to hold, so that a block is not sent again:
 * 4-way buckets of fingerprints, most recent first, 16 a pool block, 2^21
 * (16 MiB) to 2^24: the cluster keeps far more than the pool, and a
 * forgotten block is sent again (Mooncake's trace: 1.33 M blocks, sent 1.77
 * times each with a direct-mapped set of 4 a pool block). Each entry keeps
 * when it was learnt: past tier_remote_ttl_s the cluster has dropped the key,
 * so the block is sent again. Runs on the loop.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tier/remote.h"

#define KNOWN_PER_BLOCK 16u
#define KNOWN_MIN (1u << 21)
#define KNOWN_MAX (1u << 24)  /* 128 MiB */
#define KNOWN_WAYS 4u
/*
 * An entry: a 48-bit fingerprint over a 16-bit stamp, the time learnt in
 * units of a 1024th of the TTL (a second at least): the entry is stale once
 * the TTL, less a unit, has passed. An entry 2^16 units old reads as new
 * again: a block then not sent that the cluster lost is a miss, and a miss
 * forgets it.
 */
#define STAMP_BITS 16
#define STAMP_MASK ((1ull << STAMP_BITS) - 1)
#define TTL_UNITS 1024u

int remote_known_init(struct kvpd_remote *r, uint32_t pool_blocks, uint32_t ttl_s)
{
	uint64_t n;

	for (n = KNOWN_MIN; n < (uint64_t)pool_blocks * KNOWN_PER_BLOCK && n < KNOWN_MAX; n *= 2)
		;
	r->known = calloc(n, sizeof(*r->known));
	r->known_mask = (uint32_t)(n - 1);
	r->ttl_s = ttl_s;
	r->stamp_s = ttl_s ? (ttl_s + TTL_UNITS - 1) / TTL_UNITS : 1;
	return r->known ? 0 : -ENOMEM;
}

static uint64_t fingerprint(uint32_t group, const struct kvc_hash *key)
{
	/* The group spread over the high bits: the stamp's low bits would hide it. */
	uint64_t f = key->lo ^ key->hi * 0x9e3779b97f4a7c15ull ^ (group + 1ull) * 0xff51afd7ed558ccdull;

	/* Never 0 above the stamp: an empty entry is 0. */
	return (f & ~STAMP_MASK) ? f & ~STAMP_MASK : 1ull << STAMP_BITS;
}

static uint64_t stamp_now(const struct kvpd_remote *r)
{
	return (kvpd_now_ns() / 1000000000ull / r->stamp_s) & STAMP_MASK;
}

/* An entry still true: no TTL, or learnt less than the TTL (less a unit) ago. */
static bool fresh(const struct kvpd_remote *r, uint64_t e, uint64_t now)
{
	uint64_t age = (now - (e & STAMP_MASK)) & STAMP_MASK;

	return !r->ttl_s || age + 1 < r->ttl_s / r->stamp_s;
}

/* Fingerprint @f's bucket, and its way there (KNOWN_WAYS: not there). */
static uint64_t *bucket(const struct kvpd_remote *r, uint64_t f, unsigned *way)
{
	uint64_t *b = &r->known[(f >> STAMP_BITS & r->known_mask) & ~(uint64_t)(KNOWN_WAYS - 1)];

	for (*way = 0; *way < KNOWN_WAYS && (b[*way] & ~STAMP_MASK) != f; (*way)++)
		;
	return b;
}

static void drop_way(uint64_t *b, unsigned way)
{
	memmove(b + way, b + way + 1, (KNOWN_WAYS - 1 - way) * sizeof(*b));
	b[KNOWN_WAYS - 1] = 0;
}

bool remote_known(struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key)
{
	unsigned way;
	uint64_t *b = bucket(r, fingerprint(group, key), &way);

	if (way == KNOWN_WAYS)
		return false;
	if (fresh(r, b[way], stamp_now(r)))
		return true;
	drop_way(b, way);
	return false;
}

void kvpd_remote_know(struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key)
{
	uint64_t f = fingerprint(group, key);
	unsigned way;
	uint64_t *b = bucket(r, f, &way);

	/* Most recent first: the bucket's oldest falls out. */
	memmove(b + 1, b, (way < KNOWN_WAYS ? way : KNOWN_WAYS - 1) * sizeof(*b));
	b[0] = f | stamp_now(r);
}

void kvpd_remote_forget(struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key)
{
	unsigned way;
	uint64_t *b = bucket(r, fingerprint(group, key), &way);

	if (way < KNOWN_WAYS)
		drop_way(b, way);
}

void remote_known_clear(struct kvpd_remote *r)
{
	memset(r->known, 0, ((size_t)r->known_mask + 1) * sizeof(*r->known));
}
