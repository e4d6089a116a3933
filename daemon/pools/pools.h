/* SPDX-License-Identifier: MIT */
/*
 * The pools room: the daemon's named pools (pools.c: each wraps one kvcore
 * pool), their KV layouts (pool_layout.c), their rows of the stats page
 * (pool_stats.c), and where their memory is: the backend interface
 * (backend.h, jobs.h: what a backend is given to run), the host backend, the
 * CUDA plugin's loading (plugin.c), and the worker threads that run the jobs'
 * tasks on a pool's backend (workers.c).
 *
 * It may use the tenants, observe, loop and config rooms, attn, the core and
 * the shared headers. It knows nothing of clients: an owner is a client id and
 * a uid, a job's client an opaque pointer.
 */
#ifndef KVPOOLD_POOLS_H
#define KVPOOLD_POOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpoold.h"
#include "core/kvcore.h"
#include "observe/statpage.h"
#include "pools/backend.h"
#include "pools/jobs.h"
#include "pools/plugin.h"

struct kvpd_tier_handed; /* tier/tier.h */

struct kvpd_pool {
	char name[KVP_NAME_MAX];
	struct kvc_pool *core;
	struct kvp_pool_params params;
	uint64_t generation; /* random when built, never 0: kvp_setup_reply.pool_generation */
	uint32_t clients;   /* attached */
	uint32_t sequences; /* open, over all clients */
	struct kvpd_kv_layout layout; /* slot_bytes 0: the pool holds no KV */
	const struct kvpd_backend_ops *backend; /* where its memory is */
	uint32_t device;    /* cuda: the device ordinal */
	char namespace_[KVP_NAME_MAX]; /* "": open to every namespace; else only its clients */
	bool mapped;        /* a client mapped it: COMMIT takes the client's word for its KV */
	void *mem;          /* the backend's pool memory */
	uint32_t inflight;  /* data-path jobs using its blocks */
	unsigned stat_idx;  /* its entry in the stats page */
	struct kvc_pool_counters seen; /* the core's counters when last published */
	bool owned;         /* KVP_POOL_OWNED: attached to only by its creator's uid and root */
	uint32_t owner;     /* KVP_POOL_OWNED: the creating client's id while it is connected */
	uid_t owner_uid;
	bool orphaned;      /* KVP_POOL_OWNED, and its creator is gone: destroy once unused */
	bool frag_dirty;    /* its sequences changed since its fragmentation was counted */
	uint64_t frag_next_ns; /* counting it again before then would cost over 2% (client_stats.c) */
	struct kvpd_pool_spec spec; /* as created: what a reload's [pool.NAME] must equal */
	bool configured;    /* made from the config file (at start or a reload) */
	struct kvpd_pool *next_building; /* in kvpd.pools_building, until installed */
	bool removed;       /* configured, and a reload found it gone: destroy once unused */
	bool leave_mapped;  /* a restart hands its memory on: freed with the process, not unmapped */
	/*
	 * Its tier (the tier room's; NULL: none) and how to free it: the pools
	 * room frees a pool's tier with it, knowing nothing else of tiers. A disk
	 * tier's file stays unless @drop.
	 */
	struct kvpd_tier *tier;
	void (*tier_free)(struct kvpd_tier *tier, bool drop);
	/* At start after a planned restart: what its tier's attach adopts (handover room's). */
	struct kvpd_tier_handed *tier_handed;
	/* Its cluster tier (the tier room's; NULL: none), freed likewise, before the tier. */
	struct kvpd_remote *remote;
	void (*remote_free)(struct kvpd_remote *remote);
	/* Its KV events publisher (the events room's; NULL: none), freed likewise, after the tier. */
	struct kvpd_events *events;
	void (*events_free)(struct kvpd_events *events);
};

/* Who creates a KVP_POOL_OWNED pool: its client's id and uid. */
struct kvpd_pool_owner {
	uint32_t id;
	uid_t uid;
};

/*
 * pools.c. A pool is made in three steps, so that what takes time (the core's
 * tables and the backend's memory: seconds for millions of blocks) can run off
 * the event loop: kvpd_pool_prepare, on the loop, checks all that can be
 * checked at once (parameters, name, count, backend, memory) and holds the
 * name; kvpd_pool_build, on any thread, makes it; then, on the loop,
 * kvpd_pool_install makes it visible, or kvpd_pool_discard forgets it.
 * kvpd_pool_create does all three at once (start-up, tests).
 * @owner: for a KVP_POOL_OWNED pool, else NULL. A refusal's reason goes to
 * @why (why_len bytes; "" when it says nothing more than its errno).
 */
int kvpd_pool_create(struct kvpd *d, const struct kvpd_pool_spec *spec,
		     const struct kvpd_pool_owner *owner, char *why, size_t why_len);
int kvpd_pool_prepare(struct kvpd *d, const struct kvpd_pool_spec *spec,
		      const struct kvpd_pool_owner *owner, struct kvpd_pool **out, char *why,
		      size_t why_len);
int kvpd_pool_build(struct kvpd_pool *pool, char *why, size_t why_len);
void kvpd_pool_install(struct kvpd *d, struct kvpd_pool *pool);
void kvpd_pool_discard(struct kvpd *d, struct kvpd_pool *pool);
/* The pool of that name being built (prepared, not yet installed), or NULL. */
struct kvpd_pool *kvpd_pool_building(struct kvpd *d, const char *name);
/*
 * In use: a sequence open, a job in flight, or more clients attached than
 * @own_attachments (the destroyer's own attachment, which it drops first).
 */
bool kvpd_pool_busy(const struct kvpd_pool *pool, uint32_t own_attachments);
/* -EBUSY while kvpd_pool_busy(pool, 0). @drop_tier: its disk tier's file goes too. */
int kvpd_pool_destroy(struct kvpd *d, const char *name, bool drop_tier);
struct kvpd_pool *kvpd_pool_find(struct kvpd *d, const char *name);
void kvpd_pools_release(struct kvpd *d);
/* Client @owner is gone: its owned pools are destroyed now, or once unused (kvpd_pools_reap). */
void kvpd_pools_owner_gone(struct kvpd *d, uint32_t owner);
void kvpd_pools_reap(struct kvpd *d);
/*
 * A host tier's memory beside its tier_host_bytes, in slots of @slot_bytes
 * (a block's K and V of every layer) for a tier of @slots: its window, where
 * the blocks the pool is about to evict are copied ahead of it while the pool
 * still has them (tier/window.c): 64 MiB, at most a quarter of the tier, at
 * least 16 slots. Counted in max_host_bytes with the tier.
 */
#define KVPD_TIER_WINDOW_BYTES (64ull << 20)
static inline uint64_t kvpd_tier_window_slots(uint64_t slots, uint64_t slot_bytes)
{
	uint64_t room = KVPD_TIER_WINDOW_BYTES / (slot_bytes ? slot_bytes : 1);

	if (room > slots / 4)
		room = slots / 4;
	return room < 16 ? 16 : room;
}

/*
 * A planned restart's next run (the handover room): @pool, a host pool just
 * built, takes the last run's KV memory, memfd @fd (checked: sealed, of the
 * size it maps), in place of its own. -errno with @why, @fd not taken.
 */
int kvpd_pool_adopt_kv(struct kvpd_pool *pool, int fd, char *why, size_t why_len);
/* backend_host.c: that, for the host backend. */
int kvpd_host_pool_adopt(struct kvpd_kv_layout *l, void **mem, int fd, char *why, size_t why_len);

/* pool_layout.c: POOL_LAYOUT's output; its bytes, or -EOVERFLOW with *needed what it takes. */
int kvpd_pool_layout(const struct kvpd_pool *pool, void *out, uint32_t out_len, __u64 *needed);

/* pool_stats.c */
/* A pool's entry in the full page, to be written (its views follow at the bracket's end). */
static inline struct kvp_stats_pool *kvpd_stats_pool_entry(struct kvpd *d,
							   const struct kvpd_pool *pool)
{
	kvpd_stats_dirty(&d->stats->pools_dirty, pool->stat_idx);
	return &d->stats->pools[pool->stat_idx];
}
/* Copies the core's view of @pool into its entry; probes what changed, charged to client @client (0: none). */
void kvpd_stats_pool(struct kvpd *d, struct kvpd_pool *pool, uint32_t client);
void kvpd_stats_pool_add(struct kvpd *d, struct kvpd_pool *pool);
void kvpd_stats_pool_remove(struct kvpd *d, struct kvpd_pool *pool);

#endif
