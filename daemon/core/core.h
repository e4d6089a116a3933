/* SPDX-License-Identifier: MIT */
/* Internal to kvcore: the structures every core file shares. */
#ifndef KVCORE_CORE_H
#define KVCORE_CORE_H

#include "kvcore.h"

#define KVC_BUCKET_END 0u /* block 0 is never hashed, so it can end a chain */

/* 48 bytes: one per block, plus 4 bytes of bucket head per block. */
struct kvc_block {
	struct kvc_hash hash;
	uint32_t ref;                    /* table references + pins */
	uint32_t pins;
	uint32_t q_prev, q_next;         /* free queue; sentinel is index N */
	uint32_t bucket_next;            /* chain of the oldest block of each key */
	uint32_t dup_prev, dup_next;     /* ring of the blocks sharing one key */
	uint32_t gen;                    /* times handed out (kvc_block_state) */
	uint32_t uses;                   /* times it left the free queue: handed out or hit */
	uint16_t group;                  /* group that took the block last (and owns its hash) */
	uint8_t hashed;
	uint8_t queued;
};
_Static_assert(sizeof(struct kvc_block) <= 64, "block metadata must stay within 64 bytes");

struct kvc_group {
	enum kvc_kind kind;
	uint32_t param;
	uint32_t ring_blocks; /* cyclic: R */
	uint32_t bundle;      /* index into pool->bundles */
};

/* Groups of one kind and parameter: a position hits only if it hits in all. */
struct kvc_bundle {
	enum kvc_kind kind;
	uint32_t param;
	uint32_t ngroups;
	uint32_t groups[KVC_MAX_GROUPS];
};

struct kvc_seq_list {
	struct kvc_seq *prev, *next;
};

struct kvc_pool {
	struct kvc_pool_config cfg;
	struct kvc_group groups[KVC_MAX_GROUPS];
	struct kvc_bundle bundles[KVC_MAX_GROUPS]; /* in lookup order */
	uint32_t nbundles;
	bool has_cyclic;

	struct kvc_block *blocks; /* N + 1: the last is the free-queue sentinel */
	uint32_t nfree, ncached;

	uint32_t *buckets;
	uint32_t bucket_mask;

	/* Lookup results, grown only when a longer sequence than any before is looked up. */
	uint32_t *hit_ids[KVC_MAX_GROUPS];
	uint32_t hit_cap;

	uint8_t *hash_buf; /* parent hash + one block of tokens */

	struct kvc_seq_list seqs; /* every live sequence, for kvc_pool_check */
	/* What the last kvc_alloc promoted from the tier, grown like hit_ids. */
	struct kvc_promotion *promotions;
	uint32_t promotions_cap;
	/* The copies the last kvc_alloc or kvc_seq_computed asked for (snapshot.c). */
	struct kvc_copy *copies;
	uint32_t ncopies, copies_cap;

	struct kvc_pool_counters counters;
	const struct kvc_tier_ops *tier_ops;
	void *tier;
	const struct kvc_event_ops *events;
	void *events_ctx;
	kvc_hold_fn hold;
	kvc_admit_fn admit;
	kvc_committed_fn committed;
	void *committed_ctx;
};

struct kvc_table {
	uint32_t *ids;
	uint32_t len, cap;
	uint32_t published; /* positions below this were offered to the cache once */
};

struct kvc_seq {
	struct kvc_pool *pool;
	struct kvc_seq_list link;

	uint32_t *tokens;
	uint32_t ntokens, tokens_cap;
	uint32_t prompt_tokens, prefix;

	struct kvc_hash root; /* parent of block 0: the salt */
	struct kvc_hash *hashes;
	uint32_t nhashes, hashes_cap;

	bool running;
	uint32_t computed, allocated;
	uint32_t held;
	void *owner;
	struct kvc_table tables[];
};

static inline uint32_t kvc_cdiv(uint64_t a, uint32_t b)
{
	return (uint32_t)((a + b - 1) / b);
}

static inline uint64_t kvc_min(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static inline uint64_t kvc_max(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* free_queue.c */
void kvc_queue_init(struct kvc_pool *pool);
/* Takes the head block for @group (its stale cache entry, if any, is evicted). */
uint32_t kvc_queue_pop(struct kvc_pool *pool, uint32_t group);
void kvc_queue_remove(struct kvc_pool *pool, uint32_t id);
/* Every block but the null one into the queue in @in's order (a fresh pool's: state.c). */
void kvc_queue_reorder(struct kvc_pool *pool, const struct kvc_saved_block *in, uint32_t n);

/* One call lowering the refs of a list of blocks (vLLM's free_blocks). */
struct kvc_release {
	uint32_t cursor; /* where the next unhashed block goes in split order */
};
void kvc_release_begin(struct kvc_pool *pool, struct kvc_release *rel);
void kvc_release_block(struct kvc_pool *pool, struct kvc_release *rel, uint32_t id);
void kvc_touch(struct kvc_pool *pool, uint32_t id);

/* prefix_cache.c */
int kvc_cache_init(struct kvc_pool *pool);
uint32_t kvc_cache_get(const struct kvc_pool *pool, uint32_t group, const struct kvc_hash *h);
/* Caches block @id of @seq's position @pos under its hash (announced if the first copy). */
void kvc_cache_insert(struct kvc_pool *pool, const struct kvc_seq *seq, uint32_t group,
		      uint32_t pos, uint32_t id);
/* Caches block @id under @h with no event: a window snapshot's key (snapshot.c). */
void kvc_cache_insert_key(struct kvc_pool *pool, uint32_t group, const struct kvc_hash *h,
			  uint32_t id);
void kvc_cache_remove(struct kvc_pool *pool, uint32_t id);
void kvc_cache_clear(struct kvc_pool *pool);

/* block_hash.c */
void kvc_hash_salt(struct kvc_hash *root, const void *salt, size_t len);
/* Makes the chained hashes of the first @nblocks full blocks available. */
void kvc_seq_hash_upto(struct kvc_seq *seq, uint32_t nblocks);
int kvc_seq_reserve_hashes(struct kvc_seq *seq, uint32_t nblocks);

/* One file per attention kind: full.c swa.c rswa.c chunked.c cyclic.c */
struct kvc_kind_ops {
	const char *name;
	/* Leading tokens whose KV is not needed once @n are computed. */
	uint32_t (*skipped)(const struct kvc_group *g, uint32_t n);
	/* Table positions [*first, *last) to drop once @n are computed. */
	void (*drop_range)(const struct kvc_seq *seq, const struct kvc_group *g,
			   uint32_t n, uint32_t *first, uint32_t *last);
	/* Whether table position @pos may ever carry a cache hash. */
	bool (*publishable)(const struct kvc_seq *seq, const struct kvc_group *g, uint32_t pos);
	/*
	 * Longest hit of @b for at most @max_tokens tokens, in blocks; writes the
	 * ids of positions below the result into pool->hit_ids of its groups.
	 */
	uint32_t (*find_hit)(struct kvc_seq *seq, const struct kvc_bundle *b,
			     uint32_t max_tokens);
};
extern const struct kvc_kind_ops kvc_full_ops, kvc_swa_ops, kvc_rswa_ops,
	kvc_chunked_ops, kvc_cyclic_ops;
const struct kvc_kind_ops *kvc_kind(enum kvc_kind kind);

/* Shared building blocks of the kinds' rules. */
uint32_t kvc_skip_none(const struct kvc_group *g, uint32_t n);
void kvc_drop_skipped(const struct kvc_seq *seq, const struct kvc_group *g, uint32_t n,
		      uint32_t *first, uint32_t *last);
void kvc_drop_none(const struct kvc_seq *seq, const struct kvc_group *g, uint32_t n,
		   uint32_t *first, uint32_t *last);
bool kvc_publish_all(const struct kvc_seq *seq, const struct kvc_group *g, uint32_t pos);
bool kvc_bundle_hit_at(struct kvc_seq *seq, const struct kvc_bundle *b, uint32_t pos);
void kvc_bundle_null_below(struct kvc_seq *seq, const struct kvc_bundle *b, uint32_t pos);
uint32_t kvc_hit_left_to_right(struct kvc_seq *seq, const struct kvc_bundle *b,
			       uint32_t from, uint32_t max_tokens);

/* snapshot.c: cyclic groups' window snapshots */
/* Blocks a snapshot at boundary @p holds: cdiv(min(W-1, p), bs). */
uint32_t kvc_snap_blocks(const struct kvc_pool *pool, const struct kvc_group *g, uint32_t p);
/*
 * Whether every group of @b has @p's snapshot cached, in the pool or its tier;
 * writes its ids into pool->hit_ids (KVC_TIER_BLOCK: the tier's).
 */
bool kvc_snap_cached(struct kvc_seq *seq, const struct kvc_bundle *b, uint32_t p);
/* Snapshots for the boundaries a commit from @from to @to crossed (copies to make). */
void kvc_snap_make(struct kvc_seq *seq, uint32_t from, uint32_t to);
/*
 * A hit at @p: pins group @g's snapshot blocks before any pop, then copies
 * them into the ring, or lists the tier's as promotions into it in @res.
 */
void kvc_snap_take(struct kvc_seq *seq, uint32_t g, uint32_t p);
void kvc_snap_fill(struct kvc_seq *seq, uint32_t g, uint32_t p, struct kvc_alloc_res *res);
int kvc_copies_reserve(struct kvc_pool *pool, uint32_t more);

/* coordinator.c */
int kvc_coordinator_init(struct kvc_pool *pool);
/* Hybrid lookup into pool->hit_ids; returns the hit length in blocks. */
int kvc_find_hit(struct kvc_seq *seq, uint32_t *blocks);

#ifdef KVCORE_DEBUG
void kvc_debug_check(const struct kvc_pool *pool);
#else
static inline void kvc_debug_check(const struct kvc_pool *pool)
{
	(void)pool;
}
#endif

#endif
