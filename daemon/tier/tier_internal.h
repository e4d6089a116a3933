/* SPDX-License-Identifier: MIT */
/* Internal to the tier room: the tier, its entries and the jobs its copies ride in. */
#ifndef KVPOOLD_TIER_INTERNAL_H
#define KVPOOLD_TIER_INTERNAL_H

#include "tier/tier.h"
#include "events/events.h"
#include "pools/pools.h"
#include "tenants/tenants.h"
#include "tier/disk_format.h"

#define TIER_END UINT32_MAX

enum tier_state {
	TIER_FREE,    /* on the free list */
	TIER_COPYING, /* a copy down is filling it: found, never hit */
	TIER_VALID,   /* holds its block's KV: hittable */
};

/* One slot of the tier; the LRU list's sentinel is entry nslots. */
struct tier_entry {
	struct kvc_hash key;
	uint32_t group;
	uint32_t state;
	uint32_t pins;               /* promotions reading it: not evicted, not in the LRU */
	uint32_t lru_prev, lru_next; /* VALID and unpinned: least recently used first */
	uint32_t own_prev, own_next; /* likewise among its owner's */
	uint32_t hnext;              /* bucket chain, or the free list */
	uint32_t owner;              /* its index in the tier's owners; 0: none */
	uint64_t sum;                /* a disk tier's: XXH3-64 of its KV, checked at each read */
};

/*
 * Whom tier entries are charged to: the tenant whose max_tier_bytes bounds
 * them, that of the client whose ALLOC took the block for new data (its
 * namespace's in a named one, else its uid's). Held (with a reference on the
 * tenant) while an entry or a pool block names it.
 */
struct tier_owner {
	struct kvpd_tenant *tenant;  /* NULL: a free record */
	uint64_t bytes;              /* its entries' slots, being filled or held */
	uint32_t head, tail;         /* its VALID unpinned entries, least recently used first */
	uint32_t names;              /* entries and pool blocks naming it */
};

/* A copy in flight: the workers' job, and what the loop needs back. */
struct tier_job {
	struct kvpd_job job;
	struct kvpd_tier *tier;
	struct tier_job *next_inflight;
	uint64_t seq;                /* order of submission (POOL_SYNC waits by it) */
	uint32_t n;                  /* blocks (tasks) */
	uint32_t *blocks, *slots, *gens;
	/* A disk tier's: each task's checksum, and whether its read or write failed */
	uint64_t *sums;
	uint8_t *failed;
	struct kvtier_record *recs;  /* DOWN's second pass: the records of the blocks kept */
	uint8_t *origins;            /* ...and their origins, origin_stride each (NULL: none) */
	bool commit;                 /* that pass (its tasks' data is on disk) */
	/* UP: the ALLOC it completes */
	struct kvpd_client *client;
	uint64_t handle;
	struct kvp_cqe cqe;
	bool own_done;               /* its own copies are back (or it had none) */
	uint32_t waits;              /* other promotions it shares blocks with, not yet back */
	struct tier_job **waiters;   /* ALLOCs waiting for this one's blocks */
	uint32_t nwaiters, waiters_cap;
	int error;
};

/* A POOL_SYNC waiting for every copy submitted before it. */
struct tier_sync {
	struct tier_sync *next;
	struct kvpd_client *client;
	uint64_t user_data;
	uint64_t upto;               /* done when no job of seq <= upto is in flight */
};

struct kvpd_tier {
	struct kvpd *d;
	struct kvpd_pool *pool;
	size_t slot_bytes;
	uint32_t nslots;
	uint8_t *mem;
	struct tier_entry *e;        /* nslots + 1 */
	uint32_t *buckets, mask;
	uint32_t free_head, nfree;
	/* Down */
	uint32_t queue_cap;          /* copies down in flight, at most */
	uint32_t scan;               /* free-queue positions a walk looks at, at most */
	uint32_t *walk;              /* [scan]: the free queue's head */
	uint64_t popped;             /* the core's count when last walked */
	uint32_t burst;              /* blocks popped between two walks, recently at most (decays) */
	uint32_t *seen;              /* per pool block: its gen + 1 when last walked */
	uint64_t queue_ops;          /* the core's count when last walked */
	uint32_t delay_us;           /* test builds: KVPOOL_TIER_DELAY_US */
	bool idle;                   /* a cyclic group: the pool never hits, so nothing goes down */
	bool write_logged;           /* a disk tier's failed write said in the log */
	/*
	 * second_sight: fingerprints of the blocks seen leaving the pool, direct
	 * mapped (a collision forgets one: at worst a block waits for a third sight).
	 */
	uint64_t *ghost;
	uint32_t ghost_mask;
	/* Up */
	struct tier_job **loader;    /* per pool block: the promotion filling it */
	uint32_t *block_owner;       /* per pool block: whose ALLOC last took it, 0: none */
	struct tier_owner *owners;   /* [0] unused */
	uint32_t nowners;
	struct tier_copier *copier;  /* the thread its copies down run on (copier.c) */
	struct tier_disk *disk;      /* a disk tier's file and threads (NULL: host memory) */
	struct kvpd_lane lane;       /* its promotions' turn on the workers (never cancelled) */
	struct tier_job *inflight;
	uint64_t next_seq;
	struct tier_sync *syncs;
	struct kvpd_tier_stats st;
	bool dirty;                  /* st moved since its stats row was written */
};

/*
 * copier.c: a thread of the tier's own runs its copies down, at a low priority:
 * nothing waits for them, so a slow copy (a disk, a busy bus) holds no worker
 * a client's task waits for, and takes little of a core a client could use.
 * Promotions, which an ALLOC waits for, run on the workers in the tier's own
 * lane, which no client's death cancels (a block cached under a key must get
 * that key's KV).
 */
struct tier_copier;
/* How a copier runs a job it took: every task, each ending with job->task_done. */
typedef void tier_run_fn(void *arg, struct kvpd_job *job);
/* @background: SCHED_BATCH at nice 10 (copies down), else as the daemon (promotions). */
int kvpd_tier_copier_start(struct tier_copier **out, const char *name, bool background,
			   tier_run_fn *run, void *arg);
/* The pool's backend runs each task, as the workers would. */
tier_run_fn kvpd_tier_run_tasks;
/* Only once no job of it is in flight. */
void kvpd_tier_copier_stop(struct tier_copier *cp);
/* @job adopted by the workers (kvpd_workers_adopt): it comes back through them. */
void kvpd_tier_copier_push(struct tier_copier *cp, struct kvpd_job *job);

/* store.c: the index, the slots, the LRU. */
uint32_t kvpd_tier_find(const struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key);
/*
 * A slot for a new entry (COPYING) of @owner's, evicting the least recently
 * used (first @owner's own, when it would go past its max_tier_bytes);
 * TIER_END: none.
 */
uint32_t kvpd_tier_take(struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key,
			uint32_t owner);
/* The owner record of @c's charged tenant (made on first use), or 0 when memory is short. */
uint32_t kvpd_tier_owner_of(struct kvpd_tier *t, const struct kvpd_client *c);
/* Pool block @block was taken for new data by @owner's client. */
void kvpd_tier_block_owner(struct kvpd_tier *t, uint32_t block, uint32_t owner);
/* Drops entry @i (its slot goes back to the free list). */
void kvpd_tier_drop(struct kvpd_tier *t, uint32_t i);
/* VALID and most recently used: stored, or back from a promotion. */
void kvpd_tier_use(struct kvpd_tier *t, uint32_t i);
void kvpd_tier_pin(struct kvpd_tier *t, uint32_t i);
void kvpd_tier_unpin(struct kvpd_tier *t, uint32_t i);

/*
 * A block found on disk at start: entry @slot, VALID, owned by no tenant; its
 * @origin (NULL: none kept) for the pool's KV events.
 */
void kvpd_tier_restore(struct kvpd_tier *t, uint32_t slot, uint32_t group,
		       const struct kvc_hash *key, uint64_t sum,
		       const struct kvpd_block_origin *origin);
/* After the restores: the slots left are the free list. */
void kvpd_tier_free_rest(struct kvpd_tier *t);

/*
 * disk_file.c: a disk tier's file. Opens (or makes) DIR/NAME.kvtier for @t,
 * locked, and sets t->nslots; -errno with the reason in @why.
 */
int kvpd_tier_disk_open(struct kvpd_tier *t, char *why, size_t why_len);
/* Its records read back into @t's index (after tier_alloc): blocks hittable at once. */
int kvpd_tier_disk_restore(struct kvpd_tier *t, char *why, size_t why_len);
/* Its threads stopped (their queues done), the file synced and closed; removed when @drop. */
void kvpd_tier_disk_close(struct kvpd_tier *t, bool drop);
/* disk_io.c: its two threads (down at a low priority, up as the daemon), each with a ring. */
int kvpd_tier_disk_start(struct kvpd_tier *t);
void kvpd_tier_disk_stop(struct kvpd_tier *t);
void kvpd_tier_disk_push(struct kvpd_tier *t, struct tier_job *tj);
/* How its lanes read and write, for the log. */
const char *kvpd_tier_disk_io(const struct kvpd_tier *t);
/* The first write the disk refused (-errno), after which it takes none; 0: none yet. */
int kvpd_tier_disk_write_error(const struct kvpd_tier *t);

/* The stats row, written at the loop's turn when st moved. */
void kvpd_tier_publish(struct kvpd *d, struct kvpd_tier *t);

/* down.c: a job's submission and its end, shared by both ways. */
struct tier_job *kvpd_tier_job_new(struct kvpd_tier *t, enum kvpd_job_type type, uint32_t n);
void kvpd_tier_job_submit(struct kvpd *d, struct tier_job *tj);
void kvpd_tier_job_retire(struct kvpd *d, struct tier_job *tj);
/* up.c */
void kvpd_tier_up_done(struct kvpd *d, struct tier_job *tj);

#endif
