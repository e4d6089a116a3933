/* SPDX-License-Identifier: MIT */
/* Internal to the tier room: the tier, its entries and the jobs its copies ride in. */
#ifndef KVPOOLD_TIER_INTERNAL_H
#define KVPOOLD_TIER_INTERNAL_H

#include "tier/tier.h"
#include "events/events.h"
#include "pools/pools.h"
#include "tenants/tenants.h"
#include "tier/disk_format.h"
#include "tier/remote.h"

#define TIER_END UINT32_MAX

enum tier_state {
	TIER_FREE,    /* on the free list */
	TIER_COPYING, /* a copy down is filling it: found, never hit */
	TIER_VALID,   /* holds its block's KV: hittable */
};

/*
 * One slot of the tier; the LRU list's sentinel is entry nslots. A window's
 * entry is a copy of a block the pool still has in its free queue, made ahead
 * of its eviction (window.c): it takes the tier's window room, not its
 * capacity, until the pool hands the block out (kvpd_tier_settle).
 */
struct tier_entry {
	struct kvc_hash key;
	uint32_t group;
	uint32_t state;
	uint32_t pins;               /* promotions reading it: not evicted, not in the LRU */
	uint32_t lru_prev, lru_next; /* VALID and unpinned: least recently used first */
	uint32_t own_prev, own_next; /* likewise among its owner's */
	uint32_t hnext;              /* bucket chain, or the free list */
	uint32_t owner;              /* its index in the tier's owners; 0: none */
	uint32_t block;              /* a window's: the pool block it copies; else TIER_END */
	bool window;
	bool promised;               /* COPYING, its block gone from the pool: KV events were told
				      * the tier holds it (they are told otherwise if it fails) */
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

/*
 * What the tier knows of a pool block. What the walk did with it while it
 * waits in the free queue is current while uses1 is the block's
 * kvc_block_state.uses + 1 (the block has not left the queue since). writes
 * counts the writes into it the daemon let go (WRITE_KV, promotions; every
 * hand-out, where the pool's writers are out of sight): a copy of the block
 * is its KV only if none came between the copy's start and its end.
 */
#define TIER_DECLINED (TIER_END - 1) /* second_sight kept it out */
#define TIER_OVER_QUOTA (TIER_END - 2) /* its tenant's max_tier_bytes is all being filled or read */
struct tier_block {
	uint32_t uses1;
	uint32_t slot;               /* the tier entry holding (or filling) its copy, or
				      * TIER_DECLINED, TIER_OVER_QUOTA */
	uint32_t writes;
	uint32_t rescue;             /* its entry in the tier's rescues + 1, while one is noted */
};

/* A cached block handed out before its copy was made: copied after, unless written first. */
#define TIER_HANDED_OUT UINT32_MAX   /* its copy's uses: the block was handed out before */
struct tier_rescue {
	struct kvc_hash key;
	uint32_t block, group, owner;
	uint32_t uses, gen, writes;  /* TIER_HANDED_OUT; the block's gen once handed out; writes */
};

#define TIER_WRITE_FAILED 1 /* a disk task's read or write failed */
#define TIER_OVERWRITTEN 2  /* a disk copy down met a write into its block as it copied */

/* A copy in flight: the workers' job, and what the loop needs back. */
struct tier_job {
	struct kvpd_job job;
	struct kvpd_tier *tier;
	struct tier_job *next_inflight;
	uint64_t seq;                /* order of submission (POOL_SYNC waits by it) */
	uint32_t n, cap;             /* blocks (tasks), and room for */
	uint32_t *blocks, *slots;
	uint8_t *rmw;                /* DOWN, a packed disk tier's: the task's page holds other
				      * entries' data, read before it is written */
	uint32_t *uses, *gens;       /* DOWN: each block's kvc_block_state as it was queued... */
	uint32_t *writes;            /* ...and its tier_block.writes */
	/* A disk tier's: each task's checksum, and whether its read or write failed */
	uint64_t *sums;
	uint8_t *failed;             /* 0, TIER_WRITE_FAILED, TIER_OVERWRITTEN */
	struct kvtier_record *recs;  /* DOWN's second pass: the records of the blocks kept */
	uint8_t *origins;            /* ...and their origins, origin_stride each (NULL: none) */
	bool commit;                 /* that pass (its tasks' data is on disk) */
	bool rescue;                 /* DOWN: copies of blocks handed out already (rescue.c) */
	uint8_t *ring;               /* UP: the task fills a cyclic ring's block from a window
				      * snapshot's entry, which the tier keeps (the pool does not
				      * cache the key) */
	/* UP: the blocks whose old KV its tasks swap into the slots they empty (block 0: none) */
	struct tier_rescue *swaps;
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
	uint32_t nslots;             /* its entries: its capacity, and a host tier's window room */
	uint32_t capacity;           /* blocks it keeps (its size: kvctl's SLOTS) */
	uint32_t regular;            /* entries that count against it: all but the window's */
	uint8_t *mem;
	int mem_fd;                  /* a host tier's memory: a memfd, for a restart to hand on */
	struct tier_entry *e;        /* nslots + 2: the LRU's sentinel, the free slots' */
	uint32_t *buckets, mask;
	int index_fd;                /* e and buckets, in a memfd a restart hands on (slots.c) */
	size_t index_bytes;
	bool leave_mapped;           /* freed for a restart's exec: mem and index stay mapped */
	uint32_t nfree;
	/* A packed disk tier's pages (slots.c): pack slots a page; 0 pages: not packed */
	uint32_t pack, pages;
	uint16_t *live;              /* per page: its entries being filled or held */
	uint32_t *empty, nempty;     /* pages no entry holds, taken first (a stack) */
	uint8_t *in_empty;
	uint32_t current;            /* the page new entries fill now; TIER_END: none */
	/* Down: the window (window.c) */
	uint32_t queue_cap;          /* copies down in flight, at most */
	uint32_t job_cap;            /* blocks a copy-down job carries, at most */
	struct tier_block *blk;      /* per pool block */
	bool sees_writes;            /* every write into the pool goes through the daemon */
	struct tier_rescue *rescues; /* handed out by the ALLOC at hand, to copy once it is done */
	uint32_t nrescues, rescues_cap;
	uint32_t front;              /* the last free-queue block the walk looked at (0: none) */
	uint32_t ahead;              /* blocks in the free queue the walk looked at */
	uint32_t want;               /* ...and how many it keeps looked at: the window's room */
	uint64_t queue_ops;          /* the core's count when last walked */
	uint32_t held_up;            /* 0, or why the last walk stopped short
				      * (KVP_TIER_UNOFFERED_*) */
	uint32_t delay_us;           /* test builds: KVPOOL_TIER_DELAY_US */
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
 * A write into pool block @id let go (WRITE_KV, a promotion; a hand-out where
 * the pool's writers are out of sight). The loop alone writes the count; a
 * disk tier's lane reads it once it has copied the block (disk_io.c).
 */
static inline void kvpd_tier_written(struct kvpd_tier *t, uint32_t id)
{
	__atomic_store_n(&t->blk[id].writes, t->blk[id].writes + 1, __ATOMIC_RELEASE);
}

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
/*
 * @background: SCHED_BATCH at nice 10 (copies down), else as the daemon
 * (promotions). @run NULL: the pool's backend runs each task, as the workers
 * would, and an idle event loop may take some (kvpd_tier_copier_help).
 */
int kvpd_tier_copier_start(struct tier_copier **out, const char *name, bool background,
			   tier_run_fn *run, void *arg);
/*
 * The event loop, idle, runs tasks of the job @cp is running, about @bytes of
 * them at @task_bytes each: a background copier on a busy machine may wait
 * milliseconds for a core, and the blocks it copies are the pool's next to go.
 * False when there were none to take.
 */
bool kvpd_tier_copier_help(struct tier_copier *cp, size_t bytes, size_t task_bytes);
/* Only once no job of it is in flight. */
void kvpd_tier_copier_stop(struct tier_copier *cp);
/*
 * @job adopted by the workers (kvpd_workers_adopt): it comes back through
 * them. @first: before the jobs queued (a rescue races its block's writer).
 */
void kvpd_tier_copier_push(struct tier_copier *cp, struct kvpd_job *job, bool first);

/*
 * slots.c: which free slot a new entry takes (a packed disk tier's by page).
 * Entries start free and unlisted: kvpd_tier_slots_rest lists the free ones
 * (at start, after a disk tier's restore).
 */
int kvpd_tier_slots_init(struct kvpd_tier *t);
/* A host tier's slots in a memfd (t->mem_fd), mapped; NULL (errno) when it cannot be had. */
uint8_t *kvpd_tier_host_memory(struct kvpd_tier *t);
/* The index's memfd: its size for @nbuckets; mapped (@fd -1: a new one); unmapped. */
size_t kvpd_tier_index_bytes(const struct kvpd_tier *t, uint32_t nbuckets);
int kvpd_tier_index_map(struct kvpd_tier *t, uint32_t nbuckets, int fd);
void kvpd_tier_index_unmap(struct kvpd_tier *t);
/*
 * restart.c: whether what the last run handed over fits this new host tier
 * (its sizes, its counts), and the rest of it taken once the index and the
 * memory are: the owner records, the pool blocks' owners, the window's
 * copies dropped. 0, or -errno (the tier then starts empty).
 */
bool kvpd_tier_adoptable(const struct kvpd_tier *t, const struct kvpd_tier_handed *h,
			 uint32_t nbuckets);
uint8_t *kvpd_tier_memory_adopt(struct kvpd_tier *t, int fd);
int kvpd_tier_adopted(struct kvpd_tier *t, struct kvpd_tier_handed *h);
void kvpd_tier_slots_rest(struct kvpd_tier *t);
/* A free slot taken (TIER_END: none), or @i's (which is free). */
uint32_t kvpd_tier_slot_take(struct kvpd_tier *t);
void kvpd_tier_slot_take_at(struct kvpd_tier *t, uint32_t i);
/* Entry @i holds a block (restored from disk), or is free again. */
void kvpd_tier_slot_held(struct kvpd_tier *t, uint32_t i);
void kvpd_tier_slot_free(struct kvpd_tier *t, uint32_t i);

/* store.c: the index, the slots, the LRU. */
uint32_t kvpd_tier_find(const struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key);
/* Whether @t (NULL: none) holds (group, key), hittable. */
bool kvpd_tier_holds(const struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key);
/* @pool's geometry as a tier keeps it (what must match for a block's KV to be read back). */
void kvpd_tier_geometry(const struct kvpd_pool *pool, struct kvtier_geometry *g);
/*
 * A slot for a new entry (COPYING) of @owner's, evicting the least recently
 * used (first @owner's own, when it would go past its max_tier_bytes); a
 * window's copy of pool block @window_of (TIER_END: none, the entry counts
 * against the capacity at once). TIER_END when every slot is being filled or
 * read, TIER_OVER_QUOTA when all of @owner's are.
 */
uint32_t kvpd_tier_take(struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key,
			uint32_t owner, uint32_t window_of);
/*
 * Window entry @i's block left the pool: the entry counts against the
 * capacity from now on; kvpd_tier_trim makes the room, once no ALLOC is
 * between asking the tier and pinning what it promotes.
 */
void kvpd_tier_settle(struct kvpd_tier *t, uint32_t i);
void kvpd_tier_trim(struct kvpd_tier *t);
/* The owner record of @c's charged tenant (made on first use), or 0 when memory is short. */
uint32_t kvpd_tier_owner_of(struct kvpd_tier *t, const struct kvpd_client *c);
/* Pool block @block was taken for new data by @owner's client. */
void kvpd_tier_block_owner(struct kvpd_tier *t, uint32_t block, uint32_t owner);
/* Drops entry @i (its slot goes back to the free list). */
void kvpd_tier_drop(struct kvpd_tier *t, uint32_t i);
/*
 * Entry @i, VALID and unpinned, holds @key's KV now (a promotion swapped it
 * in): found by that key, @owner's, the most recently used. False (and the
 * entry dropped) where @key has an entry already or @owner is at its
 * max_tier_bytes.
 */
bool kvpd_tier_rekey(struct kvpd_tier *t, uint32_t i, uint32_t group, const struct kvc_hash *key,
		     uint32_t owner);
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

/*
 * window.c: which blocks go down. The core's hooks (kvc_tier_ops.leaving), the
 * walk of the free queue's head a turn (and a POOL_SYNC) makes, and the
 * accounting of the cached blocks the pool evicts that the tier does not hold.
 */
void kvpd_tier_leaving(void *tier, uint32_t id, bool handed_out);
void kvpd_tier_walk(struct kvpd *d, struct kvpd_tier *t);
/* The window's state for a tier of @t->nslots over a pool of @num_blocks; -ENOMEM. */
int kvpd_tier_window_init(struct kvpd_tier *t, uint32_t num_blocks);
/* An evicted cached block the tier does not hold, for reason @why (KVP_TIER_UNOFFERED_*). */
void kvpd_tier_unoffered(struct kvpd_tier *t, uint32_t why);
/*
 * Queues a copy of block @id (its kvc_block_state's @uses and @gen, its
 * tier_block.writes @writes) into entry @slot, as a task of @tj, which is
 * submitted (and *@tj cleared) once full.
 */
void kvpd_tier_queue(struct kvpd *d, struct kvpd_tier *t, struct tier_job **tj, uint32_t id,
		     uint32_t slot, uint32_t uses, uint32_t gen, uint32_t writes);

/*
 * rescue.c: cached blocks an ALLOC handed out before their copy was made.
 * Noted as the core hands them out (false: no memory), copied once the ALLOC
 * is through (its promotions' entries pinned first), by kvpd_tier_rescue.
 */
bool kvpd_tier_rescue_note(struct kvpd_tier *t, uint32_t id, const struct kvc_block_state *st);
void kvpd_tier_rescue(struct kvpd *d, struct kvpd_tier *t);

/* down.c: a job's submission and its end, shared by both ways. */
struct tier_job *kvpd_tier_job_new(struct kvpd_tier *t, enum kvpd_job_type type, uint32_t n);
void kvpd_tier_job_submit(struct kvpd *d, struct tier_job *tj);
void kvpd_tier_job_retire(struct kvpd *d, struct tier_job *tj);
/* up.c */
void kvpd_tier_up_done(struct kvpd *d, struct tier_job *tj);

#endif
