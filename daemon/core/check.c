/* SPDX-License-Identifier: MIT */
/*
 * The pool's invariants, verified from scratch: tests run it after every
 * operation (debug builds call it from inside the core), and the daemon's
 * CHECK admin operation runs it on demand.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core.h"

static int fail(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why && len) {
		va_start(ap, fmt);
		vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return -EUCLEAN;
}

static int check_refs(const struct kvc_pool *pool, uint32_t *refs, char *why, size_t len)
{
	uint32_t n = pool->cfg.num_blocks;

	for (const struct kvc_seq *s = pool->seqs.next; s; s = s->link.next) {
		uint32_t held = 0;

		for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
			const struct kvc_table *t = &s->tables[g];

			for (uint32_t p = 0; p < t->len; p++) {
				if (t->ids[p] >= n)
					return fail(why, len, "table holds block %u >= N", t->ids[p]);
				if (t->ids[p] != KVC_NULL_BLOCK) {
					refs[t->ids[p]]++;
					held++;
				}
			}
		}
		if (held != s->held)
			return fail(why, len, "sequence counts %u blocks held, tables hold %u",
				    s->held, held);
	}
	uint32_t in_use[KVC_MAX_GROUPS] = { 0 };

	for (uint32_t id = 1; id < n; id++) {
		const struct kvc_block *b = &pool->blocks[id];

		if (b->group >= pool->cfg.num_groups)
			return fail(why, len, "block %u taken by group %u", id, b->group);
		in_use[b->group] += !b->queued;
		if (b->ref != refs[id] + b->pins)
			return fail(why, len, "block %u: ref %u, referenced %u times, pinned %u", id,
				    b->ref, refs[id], b->pins);
		if (!!b->queued != (b->ref == 0))
			return fail(why, len, "block %u: ref %u but %s the free queue", id, b->ref,
				    b->queued ? "in" : "not in");
	}
	for (uint32_t g = 0; g < pool->cfg.num_groups; g++)
		if (in_use[g] != pool->counters.in_use[g])
			return fail(why, len, "group %u: %u blocks in use, counted %u", g, in_use[g],
				    pool->counters.in_use[g]);
	return 0;
}

static int check_queue(const struct kvc_pool *pool, char *why, size_t len)
{
	uint32_t s = pool->cfg.num_blocks, count = 0, prev = s;

	for (uint32_t id = pool->blocks[s].q_next; id != s; id = pool->blocks[id].q_next) {
		if (id == KVC_NULL_BLOCK || id > s)
			return fail(why, len, "free queue holds block %u", id);
		if (pool->blocks[id].q_prev != prev)
			return fail(why, len, "free queue: block %u has a wrong prev link", id);
		if (!pool->blocks[id].queued || ++count > pool->nfree)
			return fail(why, len, "free queue longer than its count %u", pool->nfree);
		prev = id;
	}
	if (count != pool->nfree || pool->blocks[s].q_prev != prev)
		return fail(why, len, "free queue walks %u blocks, counts %u", count, pool->nfree);
	return 0;
}

static int check_cache(const struct kvc_pool *pool, char *why, size_t len)
{
	uint32_t hashed = 0, in_map = 0, snapshots = 0;

	for (uint32_t id = 1; id < pool->cfg.num_blocks; id++) {
		const struct kvc_block *b = &pool->blocks[id];
		uint32_t oldest;

		if (!b->hashed)
			continue;
		hashed++;
		if (b->group >= pool->cfg.num_groups)
			return fail(why, len, "block %u hashed for group %u", id, b->group);
		snapshots += pool->groups[b->group].kind == KVC_CYCLIC;
		oldest = kvc_cache_get(pool, b->group, &b->hash);
		if (oldest == KVC_NULL_BLOCK)
			return fail(why, len, "block %u carries a hash the cache cannot find", id);
		/* The block must be in the ring of its key's oldest block. */
		uint32_t r = oldest, steps = 0;

		while (r != id && ++steps < pool->cfg.num_blocks)
			r = pool->blocks[r].dup_next;
		if (r != id)
			return fail(why, len, "block %u missing from its key's ring", id);
	}
	for (uint32_t i = 0; i <= pool->bucket_mask; i++) {
		for (uint32_t id = pool->buckets[i]; id != KVC_BUCKET_END;
		     id = pool->blocks[id].bucket_next) {
			uint32_t r = id;

			if (!pool->blocks[id].hashed)
				return fail(why, len, "bucket chain holds unhashed block %u", id);
			do {
				if (++in_map > hashed)
					return fail(why, len, "cache map holds more entries than hashed blocks");
				r = pool->blocks[r].dup_next;
			} while (r != id);
		}
	}
	if (hashed != pool->ncached || in_map != hashed)
		return fail(why, len, "%u hashed blocks, %u in the map, counted %u", hashed, in_map,
			    pool->ncached);
	if (snapshots != pool->counters.snap_held)
		return fail(why, len, "%u blocks carry a snapshot's key, counted %u", snapshots,
			    pool->counters.snap_held);
	return 0;
}

int kvc_pool_check(const struct kvc_pool *pool, char *why, size_t len)
{
	const struct kvc_block *null = &pool->blocks[KVC_NULL_BLOCK];
	uint32_t *refs;
	int ret;

	if (null->ref || null->queued || null->hashed)
		return fail(why, len, "null block: ref %u queued %u hashed %u", null->ref,
			    null->queued, null->hashed);
	refs = calloc(pool->cfg.num_blocks, sizeof(*refs));
	if (!refs)
		return -ENOMEM;
	ret = check_refs(pool, refs, why, len);
	free(refs);
	if (!ret)
		ret = check_queue(pool, why, len);
	if (!ret)
		ret = check_cache(pool, why, len);
	return ret;
}

#ifdef KVCORE_DEBUG
void kvc_debug_check(const struct kvc_pool *pool)
{
	char why[256];

	if (kvc_pool_check(pool, why, sizeof(why)) == 0)
		return;
	fprintf(stderr, "kvcore: invariant broken: %s\n", why);
	abort();
}
#endif
