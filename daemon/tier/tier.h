/* SPDX-License-Identifier: MIT */
/*
 * The tier room: a pool's lower tier (host memory or a file), where blocks the
 * pool is about to evict are kept hittable by (group, chained hash).
 *
 * Going down: a pool's free queue hands its head out first, so the cached
 * blocks nearest the head are copied to the tier ahead of their eviction, by
 * the workers, on the tier's own lane; nothing waits for them. A copy whose
 * block was handed out meanwhile is abandoned: only a block untouched for the
 * whole copy becomes a tier entry. Coming up: the core counts tier entries as
 * hits (kvc_pool_set_tier); an ALLOC that promotes some completes once their
 * KV is in its blocks, and other requests on its sequence get -EBUSY until
 * then. docs/tiers.md has the rules and their reasons.
 *
 * It may use the events, session, pools, tenants, observe, loop and config rooms,
 * attn, the core and the shared headers.
 */
#ifndef KVPOOLD_TIER_H
#define KVPOOLD_TIER_H

#include <stdint.h>

#include "session/session.h"

/* What a tier counts (kvctl stats' TIERS). */
struct kvpd_tier_stats {
	uint32_t kind;           /* KVP_TIER_HOST, KVP_TIER_DISK */
	uint64_t bytes;          /* its memory (slots * slot bytes), or its file's size */
	uint32_t slots;          /* blocks it can hold */
	uint32_t held;           /* blocks it holds, hittable */
	uint32_t queued;         /* copies down in flight */
	uint64_t stored;         /* blocks copied down and kept */
	uint64_t skipped;        /* evicted uncopied: the queue was full, no slot was free, or
				  * the tenant's max_tier_bytes all being filled or read */
	uint64_t abandoned;      /* copied while their block was handed out: dropped */
	uint64_t evicted;        /* entries dropped for room (LRU) */
	uint64_t promoted;       /* blocks copied up into the pool */
	uint64_t read_failures;  /* promotions that could not read their entry */
	uint64_t hit_tokens;     /* ALLOC's hit tokens from the first promoted position on */
	uint64_t bytes_down, bytes_up;
	uint64_t ns_down, ns_up; /* the copies' time, job by job: MB/s = bytes / ns * 1000 */
	uint64_t restored;       /* a disk tier's blocks found at start */
	uint64_t refused;        /* on disk, never hit: a checksum, the file's end, a duplicate */
	uint64_t write_failures; /* copies down the disk refused (it takes none after the first) */
	uint64_t declined;       /* second_sight: blocks kept out, first seen leaving the pool */
	uint64_t unoffered[KVP_TIER_UNOFFERED_MAX]; /* evicted cached blocks it did not hold, why */
};

/*
 * Gives @pool the tier its spec asks for (tier_host_bytes, or tier_disk_bytes:
 * a disk tier's file is made, or found and its blocks hittable at once; none:
 * 0 and nothing made). -errno with the reason in @why.
 */
int kvpd_tier_attach(struct kvpd *d, struct kvpd_pool *pool, char *why, size_t why_len);

/*
 * POOL_PURGE_REMOTE: @pool's keys deleted from its cluster tier; KVPD_LATER
 * (the completion, res the keys deleted, posted then) or -EOPNOTSUPP.
 */
int kvpd_tier_purge_remote(struct kvpd *d, struct kvpd_client *c, struct kvpd_pool *pool,
			   uint64_t user_data);

/* @c's request runs on @pool (NULL: none now): whose tenant the cluster's writes are charged to. */
void kvpd_tier_acting(struct kvpd_pool *pool, const struct kvpd_client *c);

/* SIGHUP: what a pool's tiers read from files (the cluster tier's secrets), read again. */
void kvpd_tier_reload(struct kvpd *d, struct kvpd_pool *pool);

/*
 * The cluster tier's first contact, off the loop while the pool is built: -errno
 * with @why when the cluster refuses the pool's password or the pool refuses
 * its certificate; 0 otherwise, reached or not (remote_access.c).
 */
int kvpd_tier_probe(struct kvpd_pool *pool, char *why, size_t why_len);

/* The loop's turn: each tiered pool whose free queue moved gets its copies down queued. */
void kvpd_tier_turn(struct kvpd *d);

/*
 * The loop, idle, copies a few blocks down for a host tier whose copier has
 * not got to them (64 KiB at most): false when none was waiting.
 */
bool kvpd_tier_help(struct kvpd *d);

/*
 * ALLOC's tail, after kvc_alloc succeeded for @c's request @sqe: 0 when its
 * completion can go now (@cqe as it is), KVPD_LATER when it waits for
 * promotions (its own, or another sequence's of blocks it now shares; @cqe is
 * posted then), or -errno (its sequence's blocks freed then).
 */
int kvpd_tier_alloc_done(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			 const struct kvc_alloc_res *res, const struct kvp_cqe *cqe);

/*
 * A WRITE_KV is about to write blocks @ids of @pool (0s skipped): a copy into
 * the tier of what they held is void unless done before (window.c says why).
 */
void kvpd_tier_writing(struct kvpd_pool *pool, const uint32_t *ids, uint32_t n);

/*
 * Blocks @ids of @pool were taken for @c's window snapshots (its COMMIT's):
 * its tenant's, as an ALLOC's new blocks are, when the tier keeps them.
 */
void kvpd_tier_owned_by(struct kvpd_pool *pool, const struct kvpd_client *c, const uint32_t *ids,
			uint32_t n);

/* KVPD_JOB_TIER_DOWN and _UP back from the workers (kvpd_jobs_complete). */
void kvpd_tier_job_done(struct kvpd *d, struct kvpd_job *job);

/*
 * POOL_SYNC of @pool for @c: 0 when no copy queued before it is in flight,
 * else KVPD_LATER and its completion (user_data @user_data) when they are done.
 */
int kvpd_tier_sync(struct kvpd *d, struct kvpd_client *c, struct kvpd_pool *pool,
		   uint64_t user_data);

/*
 * The cluster tier (tier_remote), coming in: a LOOKUP, or an ALLOC with the
 * cache, of @seq by @c whose local hit ends before the prompt's last full
 * block asks the cluster first. KVPD_LATER: it does (its sequence is busy);
 * once answered, @again runs the request with the answer in place (the core
 * sees the cluster's keys as a tier's, kvpd_remote_mark says which) and its
 * completion is posted, unless @again returned KVPD_LATER. 0: the request
 * goes on now (no cluster tier, nothing to ask, the answer already in place,
 * or the cluster quiet: misses).
 */
typedef int kvpd_again_fn(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			  struct kvp_cqe *cqe);
int kvpd_remote_ask(struct kvpd *d, struct kvpd_client *c, struct kvc_seq *seq,
		    const struct kvp_sqe *sqe, kvpd_again_fn *again);
/*
 * LOOKUP's lists with the answer in place: a position whose id is
 * KVC_TIER_BLOCK and only the cluster holds becomes KVP_BLOCK_REMOTE. @ids
 * are replaced by copies in @buf (n entries: the hit's ids of every group)
 * where one changes; false when nothing did.
 */
bool kvpd_remote_mark(struct kvpd_pool *pool, struct kvc_seq *seq, const struct kvc_hit *hit,
		      const uint32_t **ids, uint32_t *buf);

/*
 * restart.c: a host tier handed to the next run by a planned restart (the
 * handover room writes the state). Its memory and its index (entries and
 * buckets, slots.c) are memfds the next run maps as they are; the state says
 * their shape and counts, the tenants the entries and the pool's blocks are
 * charged to, and where the walk down the pool's free queue was (the same
 * queue in the next run: its window's copies stay the window's).
 */
struct kvpd_tier_head {
	uint32_t nslots, nbuckets, entry_bytes, capacity;
	uint32_t held, regular, nfree, nowners; /* nowners: records, the unused [0] included */
	uint32_t front, ahead;   /* the walk's last block looked at, and how many it keeps */
};
struct kvpd_tier_saved_owner {
	uint32_t kind;           /* KVP_TENANT_UID, KVP_TENANT_NAMESPACE; 0: a record unused */
	uint32_t uid;
	char ns[KVP_NAME_MAX];
	uint64_t bytes;
	uint32_t head, tail, names, pad;
};
/* What the next run's tier attach adopts (struct kvpd_pool.tier_handed). */
struct kvpd_tier_handed {
	struct kvpd_tier_head head;
	int mem_fd, index_fd;
	const struct kvpd_tier_saved_owner *owners; /* head.nowners - 1: records 1.. */
	const uint32_t *block_owner;                /* the pool's num_blocks */
	const uint32_t *walk;                       /* the pool's num_blocks: each block's mark */
	bool taken;              /* adopted: the descriptors are the tier's now */
};
/* @pool's host tier's head and memfds (false without one): what the state keeps of it. */
bool kvpd_tier_save_head(const struct kvpd_pool *pool, struct kvpd_tier_head *head, int *mem_fd,
			 int *index_fd);
/*
 * The state is written and the exec is next: @pool's tier is freed without
 * unmapping its memory and index (the exec's own teardown of the process's
 * memory, off the critical path, does: handover/exec.c).
 */
void kvpd_tier_leave_mapped(struct kvpd_pool *pool);
/* Whether (group, @key) is an entry the next run keeps (hittable, not a window's copy). */
bool kvpd_tier_keeps(const struct kvpd_pool *pool, uint32_t group, const struct kvc_hash *key);
/* The head's owner records (1..), and each pool block's owner and walk mark (num_blocks each). */
void kvpd_tier_save(const struct kvpd_pool *pool, struct kvpd_tier_saved_owner *owners,
		    uint32_t *block_owner, uint32_t *walk);

/* @pool's tier's counters; false when it has none. */
bool kvpd_tier_stats(const struct kvpd_pool *pool, struct kvpd_tier_stats *st);

#endif
