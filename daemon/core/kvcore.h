/* SPDX-License-Identifier: MIT */
/*
 * kvcore: the KV block allocator of kvpool.
 *
 * A pool of fixed-size blocks shared by one or more groups of layers (each with
 * its own attention kind), a prefix cache of chained block hashes, and the
 * per-sequence block tables. Semantics follow vLLM v1's KV-cache manager; the
 * exact rules are in docs/design.md.
 *
 * The library does no I/O and takes no locks: the caller serialises access to a
 * pool. Every function returns 0 (or a count) on success and a negative errno on
 * failure, and changes nothing when it fails, unless its comment says otherwise.
 *
 * The core room, the daemon's lowest: it uses nothing of the daemon's.
 */
#ifndef KVCORE_H
#define KVCORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVC_MAX_GROUPS 16
#define KVC_MIN_BLOCKS 2u
#define KVC_MAX_BLOCKS (1u << 24)
/* Most tokens one sequence may hold: keeps its arrays, and token counts, small. */
#define KVC_MAX_TOKENS (1u << 30)
#define KVC_NULL_BLOCK 0u

enum kvc_kind {
	KVC_FULL,
	KVC_SWA,     /* param: window W >= 2 */
	KVC_RSWA,    /* param: window W >= 1; keeps the prompt prefix too */
	KVC_CHUNKED, /* param: chunk C >= 1 */
	KVC_CYCLIC,  /* param: window W >= 1; fixed ring of blocks, hit by window snapshots */
	KVC_NUM_KINDS,
};

enum kvc_free_order {
	KVC_FREE_SPLIT,  /* unhashed blocks before the head, hashed at the tail */
	KVC_FREE_APPEND, /* everything at the tail (older vLLM) */
};

enum kvc_publish {
	KVC_PUBLISH_COMMIT, /* hash a block once computed covers it */
	KVC_PUBLISH_ALLOC,  /* hash full blocks at alloc time (vLLM) */
};

struct kvc_group_spec {
	enum kvc_kind kind;
	uint32_t param; /* W or C; ignored for KVC_FULL */
};

struct kvc_pool_config {
	uint32_t num_blocks;      /* N, including the null block 0 */
	uint32_t block_size;      /* tokens per block */
	bool caching;             /* prefix caching on */
	enum kvc_free_order free_order;
	enum kvc_publish publish;
	uint32_t max_len;         /* longest sequence, in tokens */
	uint32_t max_step_tokens; /* S: most tokens one alloc adds (sizes cyclic rings) */
	/*
	 * Cyclic groups: window snapshots at committed block boundaries (the
	 * prompt's end, and every @snapshot_every tokens when not 0), copied
	 * by the caller (kvc_pool_copies); off, a cyclic group never hits.
	 */
	bool snapshots;
	uint32_t snapshot_every;
	uint32_t num_groups;
	struct kvc_group_spec groups[KVC_MAX_GROUPS];
};

struct kvc_pool;
struct kvc_seq;

/* A block's prefix-cache key: the chained hash of its tokens, of every block before them and of the salt. */
struct kvc_hash {
	uint64_t lo, hi;
};

/*
 * The defaults of kvtrace's `pool` line: caching on, split, commit, max_len
 * 2^31-1, S 1, snapshots on, every KVC_SNAPSHOT_EVERY tokens.
 */
#define KVC_SNAPSHOT_EVERY 4096u
void kvc_pool_config_init(struct kvc_pool_config *cfg, uint32_t num_blocks,
			  uint32_t block_size);

/*
 * Checks @cfg (-EINVAL with nothing allocated when a value is out of range) and
 * creates a pool whose free queue is 1..N-1. -ENOMEM when memory is short.
 */
int kvc_pool_create(const struct kvc_pool_config *cfg, struct kvc_pool **out);

/* Destroys the pool and every sequence still attached to it. */
void kvc_pool_destroy(struct kvc_pool *pool);

const struct kvc_pool_config *kvc_pool_config(const struct kvc_pool *pool);

/* Blocks per sequence ring of a cyclic group, R = cdiv(W - 1 + S, bs); 0 otherwise. */
uint32_t kvc_group_ring_blocks(const struct kvc_pool *pool, uint32_t group);

struct kvc_pool_stats {
	uint32_t free;   /* free-queue length */
	uint32_t used;   /* N - 1 - free */
	uint32_t cached; /* blocks carrying a cache hash, in use or not */
};
void kvc_pool_stats(const struct kvc_pool *pool, struct kvc_pool_stats *st);

/*
 * Copies up to @max free-queue ids, head first, into @ids; returns the queue
 * length (which may exceed @max).
 */
uint32_t kvc_pool_free_queue(const struct kvc_pool *pool, uint32_t *ids, uint32_t max);

/* Counters since the pool was created (for observability; exact). */
struct kvc_pool_counters {
	uint64_t evicted_reuse;  /* cache entries lost because their free block was reused */
	uint64_t evicted_admin;  /* removed by kvc_pool_evict */
	uint64_t evicted_reset;  /* removed by kvc_pool_reset */
	uint64_t queue_ops;      /* free-queue links and unlinks: whether its head may have moved */
	uint64_t popped;         /* blocks handed out by the free queue */
	uint64_t dropped[KVC_MAX_GROUPS];   /* blocks dropped by windows, per group */
	uint32_t in_use[KVC_MAX_GROUPS];    /* blocks in use now, by the group that took them */
	/* Window snapshots (cyclic groups), in blocks. */
	uint32_t snap_held;      /* blocks carrying a snapshot's key now */
	uint64_t snap_made;      /* snapshot blocks cached once their copy was done */
	uint64_t snap_hit;       /* snapshot blocks copied into a hitting sequence's ring */
	uint64_t snap_evicted;   /* snapshot keys lost: block reused, evicted, reset */
	uint64_t snap_skipped;   /* snapshot blocks not made: the free queue was empty */
};
void kvc_pool_counters(const struct kvc_pool *pool, struct kvc_pool_counters *c);

/*
 * Tells the owner of a sequence (kvc_seq_set_owner) each time one of its
 * tables gains (held = true) or loses a block, so that a caller can charge
 * owners for distinct blocks. Called synchronously, from inside core calls.
 */
typedef void (*kvc_hold_fn)(void *owner, uint32_t block, bool held);
void kvc_pool_set_hold_hook(struct kvc_pool *pool, kvc_hold_fn fn);

/*
 * What an allocation is about to add to a sequence's tables, for an admission
 * hook: @popped new blocks off the free queue (no table holds them), and the
 * cache hits it takes, group g's at hit_ids[g][hit_first[g] .. hit_end[g])
 * (null entries skipped). Window drops for the current count have happened.
 */
struct kvc_admit {
	uint32_t popped;
	uint32_t hit_first[KVC_MAX_GROUPS], hit_end[KVC_MAX_GROUPS];
	const uint32_t *hit_ids[KVC_MAX_GROUPS];
};

/*
 * Called by kvc_alloc with the sequence's owner before it checks the free
 * queue: a non-zero return (a quota's -EDQUOT, say) fails the allocation with
 * it, as -ENOSPC would (only the window drop has happened then).
 */
typedef int (*kvc_admit_fn)(void *owner, const struct kvc_admit *admit);
void kvc_pool_set_admit_hook(struct kvc_pool *pool, kvc_admit_fn fn);

/*
 * A lower tier of the prefix cache (host memory, disk): lookups and ALLOC with
 * the cache count a position a hit in a group when the pool has its block or
 * @has says the tier has its key, so vLLM's hit rules apply over both. A tier
 * position's id is KVC_TIER_BLOCK in kvc_lookup's ids and the admission hook's;
 * kvc_alloc gives it a block off the free queue, caches its key at once (so a
 * second sequence shares it rather than reading it again) and lists it in
 * kvc_alloc_res.promotions: the caller fills it from the tier before anyone
 * reads it. @leaving is told of every block about to leave the free queue,
 * while kvc_block_state still shows it as it was: handed out for new data
 * (@handed_out: a hashed one loses its key as the call returns) or taken by a
 * cache hit; so that the tier knows which of the blocks it looked at are still
 * in the queue, and what the pool evicts. Neither may change the pool (reading
 * a block's state is allowed). NULL: no tier.
 */
#define KVC_TIER_BLOCK UINT32_MAX
struct kvc_tier_ops {
	bool (*has)(void *tier, uint32_t group, const struct kvc_hash *key);
	void (*leaving)(void *tier, uint32_t id, bool handed_out);
};
void kvc_pool_set_tier(struct kvc_pool *pool, const struct kvc_tier_ops *ops, void *tier);

/*
 * Told of each hashed block a commit completed (kvc_seq_computed, from the
 * previous count to the new one), group by group in position order, before
 * the windows drop any: its group, position, block and key, the block in use
 * by the sequence, its parent's key (NULL at position 0) and its block_size
 * tokens (both valid for the call only). It may pin the block (kvc_pin) and
 * must not change the pool otherwise. Cyclic groups' ring blocks are never
 * hashed: never told. The cluster tier sends these (and the events room says
 * them once the cluster holds them). NULL: none.
 */
typedef void (*kvc_committed_fn)(void *ctx, uint32_t group, uint32_t pos, uint32_t block,
				 const struct kvc_hash *key, const struct kvc_hash *parent,
				 const uint32_t *tokens);
void kvc_pool_set_committed_hook(struct kvc_pool *pool, kvc_committed_fn fn, void *ctx);

/*
 * The block after @id in the free queue (KVC_NULL_BLOCK for @id: its head);
 * KVC_NULL_BLOCK at its end, or when @id is not in the queue.
 */
uint32_t kvc_pool_queue_next(const struct kvc_pool *pool, uint32_t id);

/*
 * What the prefix cache tells a KV events publisher (vLLM's BlockStored,
 * BlockRemoved, AllBlocksCleared): @stored when a key becomes hittable in the
 * pool (its first cached copy: published by COMMIT or ALLOC, or promoted from
 * the tier), with the block's place in its sequence: @pos, its parent's key
 * (NULL for block 0) and its block_size tokens; @removed when its last copy
 * forgets it (the block handed out for new data, EVICT); @cleared on a reset.
 * A publication's blocks come in order, group by group. Called inside the
 * core's operations: they must not call into the pool. NULL: none.
 */
struct kvc_event_ops {
	void (*stored)(void *ctx, uint32_t group, uint32_t pos, const struct kvc_hash *key,
		       const struct kvc_hash *parent, const uint32_t *tokens);
	void (*removed)(void *ctx, uint32_t group, const struct kvc_hash *key);
	void (*cleared)(void *ctx);
};
void kvc_pool_set_events(struct kvc_pool *pool, const struct kvc_event_ops *ops, void *ctx);

/* What the tier needs of one block (kvc_block_state). */
struct kvc_block_state {
	struct kvc_hash key; /* hashed: its cache key */
	uint32_t group;      /* the group that took it last (and owns its key) */
	uint32_t gen;        /* times it was handed out: a copy made at one gen is its data only
			      * while gen has not moved */
	uint32_t uses;       /* times it left the free queue, handed out or hit: a block seen in
			      * the queue at one count has been in it ever since while it holds */
	uint32_t ref;
	bool hashed, queued;
	bool shared;         /* hashed, and another block carries its key too */
};
/* -EINVAL for an id out of range (0 included). */
int kvc_block_state(const struct kvc_pool *pool, uint32_t id, struct kvc_block_state *st);

/*
 * A pool carried across a planned restart (state.c): every block but the
 * null one, in the free queue's order, head first; a cached block's key and
 * its rank among the blocks sharing that key (0: the oldest, which a lookup
 * finds).
 */
struct kvc_saved_block {
	struct kvc_hash hash; /* hashed: its cache key */
	uint32_t id;
	uint32_t rank;
	uint16_t group;       /* the group that took it last (and owns its key) */
	uint8_t hashed;
	uint8_t pad;
};
/*
 * kvc_pool_save - num_blocks - 1 entries into @out; -EBUSY while a block is in
 * use or pinned (a sequence not ended, a copy in flight).
 */
int kvc_pool_save(const struct kvc_pool *pool, struct kvc_saved_block *out);
/*
 * kvc_pool_restore - rebuilds what kvc_pool_save wrote in a new pool of the
 * same configuration: the queue in that order, the keys, each key's copies in
 * their order. -EINVAL unless @in lists every block once with groups in
 * range; -EBUSY for a pool that is not new (a sequence, a cached key).
 */
int kvc_pool_restore(struct kvc_pool *pool, const struct kvc_saved_block *in, uint32_t n);

/* Clears every cache hash if no block is in use: 0, else -EBUSY. */
int kvc_pool_reset(struct kvc_pool *pool);

/*
 * Removes the cache hash of every listed block that carries one, without moving
 * any block in the free queue. -EINVAL (nothing evicted) if an id is 0 or >= N.
 * Returns the number of hashes removed.
 */
int kvc_pool_evict(struct kvc_pool *pool, const uint32_t *ids, uint32_t n);

/*
 * Verifies the pool's invariants (queue <=> ref 0, refs equal table references,
 * null block never handed out, cache map and block hashes agree). O(N). Returns
 * 0 or -EUCLEAN; on failure writes a reason to @why (if non-NULL).
 */
int kvc_pool_check(const struct kvc_pool *pool, char *why, size_t why_len);

/*
 * Creates a sequence with prompt @tokens[0..n). @salt (may be NULL) separates
 * cache namespaces: blocks are shared only between sequences of equal salts.
 * @prefix is the R-SWA prefix length in tokens, or -1 for the prompt length;
 * -EINVAL if it exceeds n. n may be 0.
 */
int kvc_seq_create(struct kvc_pool *pool, const uint32_t *tokens, uint32_t n,
		   const void *salt, size_t salt_len, int64_t prefix,
		   struct kvc_seq **out);

/* The owner passed to the pool's hold hook for this sequence's blocks (default NULL). */
void kvc_seq_set_owner(struct kvc_seq *seq, void *owner);

/* Frees the sequence's blocks (as kvc_seq_free) and forgets it. */
void kvc_seq_destroy(struct kvc_seq *seq);

/*
 * The chained hashes of the blocks a hit of @seq may cover (its full blocks
 * but for its last token), *@n of them; valid until its tokens change.
 */
const struct kvc_hash *kvc_seq_hashes(struct kvc_seq *seq, uint32_t *n);
/* The tokens of @seq, *@n of them; valid until they change. */
const uint32_t *kvc_seq_tokens(const struct kvc_seq *seq, uint32_t *n);

/* Adds generated tokens. -E2BIG past KVC_MAX_TOKENS, -ENOMEM. */
int kvc_seq_append(struct kvc_seq *seq, const uint32_t *tokens, uint32_t n);

struct kvc_hit {
	uint32_t tokens;                   /* hit length, a multiple of block_size */
	uint32_t blocks;                   /* tokens / block_size */
	const uint32_t *ids[KVC_MAX_GROUPS]; /* per group, nids[g] ids; 0 = null */
	uint32_t nids[KVC_MAX_GROUPS];     /* @blocks, or a cyclic group's snapshot blocks */
};

/*
 * Longest prefix-cache hit for the sequence's tokens (at most n - 1 of them).
 * Changes no block. @hit's arrays belong to the pool and stay valid until the
 * next call on it.
 */
int kvc_lookup(struct kvc_seq *seq, struct kvc_hit *hit);

struct kvc_alloc_req {
	uint32_t new_tokens; /* >= 1 */
	uint32_t lookahead;
	bool use_cache;      /* look the prefix cache up first; only when not running */
};

/*
 * A tier position of an allocation's hit and the block it was given, cached
 * under @key; or, @ring, a cyclic group's window snapshot block the tier
 * holds, promoted straight into ring block @block, which the pool does not
 * cache (the tier keeps the key). @pos: the block's index in the sequence.
 */
struct kvc_promotion {
	uint32_t group, pos, block;
	struct kvc_hash key;
	bool ring;
};

struct kvc_alloc_res {
	uint32_t hit_tokens;                 /* h, 0 without use_cache; promoted positions included */
	uint32_t taken;                      /* blocks that left the free queue: popped or hit */
	uint32_t first_new[KVC_MAX_GROUPS];  /* table index of the first new block */
	uint32_t promoted;                   /* entries of promotions (a tier's part of the hit) */
	uint32_t promoted_from;              /* the lowest position promoted (hit blocks if none) */
	const struct kvc_promotion *promotions; /* the pool's, valid until its next call */
};

/*
 * vLLM's allocate_slots. -EINVAL for a refused request (nothing changes),
 * what the admission hook returns (checked first), -ENOSPC when the pool is
 * short and -ENOMEM when a table cannot grow (only the window drop for the
 * current count has happened then). On success the new blocks of group g are the table entries
 * from res->first_new[g] to the end.
 */
int kvc_alloc(struct kvc_seq *seq, const struct kvc_alloc_req *req,
	      struct kvc_alloc_res *res);

/*
 * Blocks kvc_alloc would take from the free queue for @req, without changing
 * anything: -EINVAL as kvc_alloc, else the count.
 */
int64_t kvc_alloc_cost(struct kvc_seq *seq, const struct kvc_alloc_req *req);

/*
 * Sets the computed-token count to @n (current count <= n <= min(tokens,
 * allocated slots), else -EINVAL). With publish=commit, hashes the blocks it
 * completes and then drops what the windows no longer need.
 */
int kvc_seq_computed(struct kvc_seq *seq, uint32_t n);

/* Releases every block; keeps tokens, salt and prefix (a preemption). */
void kvc_seq_free(struct kvc_seq *seq);

/*
 * A whole-block KV copy the core asks of its caller (cyclic groups' window
 * snapshots, docs/design.md): @make, ring block @src of a sequence that
 * committed past @boundary into @dst, a new snapshot block cached under @key
 * once done; else snapshot block @src into @dst of a hitting sequence's
 * ring. Both blocks stay pinned until kvc_copy_done.
 */
struct kvc_copy {
	uint32_t group;
	uint32_t src, dst;
	uint32_t boundary; /* tokens: the snapshot's position */
	bool make;
	struct kvc_hash key;
};

/*
 * The copies the last kvc_alloc or kvc_seq_computed asked for (the pool's
 * array, valid until the next of those calls): the caller copies them out,
 * does each and reports it to kvc_copy_done.
 */
uint32_t kvc_pool_copies(const struct kvc_pool *pool, const struct kvc_copy **copies);

/*
 * Ends copy @c: unpins both blocks; a made snapshot's block is cached under
 * its key first when @ok, so that it is hittable only with its KV in place.
 * A hit's copy that failed leaves its ring without that KV: the caller frees
 * the sequence.
 */
void kvc_copy_done(struct kvc_pool *pool, const struct kvc_copy *c, bool ok);

/*
 * Pins keep blocks alive while data moves in or out of them outside the
 * core's control (a worker thread writing KV, say): kvc_pin adds one reference
 * to each listed block, which must be in use; kvc_unpin drops them again as
 * one release, so a block its sequence let go of meanwhile returns to the free
 * queue then. Null ids are skipped. kvc_pin returns -EINVAL (nothing pinned)
 * for an id out of range or a block not in use.
 */
int kvc_pin(struct kvc_pool *pool, const uint32_t *ids, uint32_t n);
void kvc_unpin(struct kvc_pool *pool, const uint32_t *ids, uint32_t n);
/* How many pins block @id has (0 for an id out of range). */
uint32_t kvc_block_pins(const struct kvc_pool *pool, uint32_t id);

struct kvc_seq_info {
	uint32_t tokens;
	uint32_t prompt_tokens;
	uint32_t prefix;
	uint32_t computed;
	uint32_t allocated_slots;
	uint32_t blocks_held; /* non-null table entries over all groups */
	bool running;
};
void kvc_seq_info(const struct kvc_seq *seq, struct kvc_seq_info *info);

/* Group @group's table (0 = null position); valid until the next mutating call. */
const uint32_t *kvc_seq_table(const struct kvc_seq *seq, uint32_t group, uint32_t *len);

#endif
