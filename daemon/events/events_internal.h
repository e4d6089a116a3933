/* SPDX-License-Identifier: MIT */
/* The events room's own: a pool's publisher, its turn's events, what it has announced. */
#ifndef KVPOOLD_EVENTS_INTERNAL_H
#define KVPOOLD_EVENTS_INTERNAL_H

#include "events/encode.h"
#include "events/events.h"
#include "pools/pools.h"

#define EV_END UINT32_MAX
/* A turn's hashes past which the batch goes at the next event's start, not the turn's end. */
#define EV_BATCH_HASHES 8192u

/* An event of the turn, its hashes (and a BlockStored's tokens) in the turn's arrays. */
struct ev_pending {
	enum kvpd_event_type type;
	uint32_t group;
	const char *medium;
	uint32_t first, n;       /* hashes[first, first + n) */
	size_t tok_first;        /* BlockStored: tokens[tok_first, + n * block_size) */
	bool has_parent;
	uint64_t parent;
	uint32_t next_pos;       /* BlockStored: where the next block must sit to join it */
};

/* An announced (group, hash) while the pool has a tier: where it is held, where it came from. */
struct ev_entry {
	struct kvc_hash key;
	uint64_t parent;
	uint32_t group, pos;
	uint32_t hnext;          /* bucket chain, or the free list */
	bool in_pool, in_tier, has_parent;
	bool said_tier;          /* announced with the tier's medium: withdrawn with it too */
};

struct ev_index {
	struct ev_entry *e;      /* cap */
	uint32_t *tokens;        /* cap * block_size: entry i's at i * block_size */
	uint32_t *buckets, mask;
	uint32_t cap, free_head, used;
	uint32_t fresh;          /* entries [fresh, cap) never used */
	uint32_t block_size;
	bool full_logged;
};

/*
 * What this machine announced with medium "REMOTE": the blocks the cluster
 * holds as far as it knows (remote.c). An index of its own, in the order each
 * was learnt or renewed (oldest first), with the time it was.
 */
struct ev_remote {
	struct ev_index *x;
	uint32_t *prev, *next;   /* cap each: the order, EV_END at its ends */
	uint64_t *at_ns;         /* cap: when the cluster's TTL of it began, at the latest */
	uint32_t oldest, newest;
	uint64_t ttl_ns;         /* 0: none */
};

struct ev_publisher;

struct kvpd_events {
	struct kvpd *d;
	struct kvpd_pool *pool;
	enum kvpd_event_format format;
	uint32_t block_size;
	const char *medium;      /* the pool's copies: "GPU" or "CPU" */
	const char *tier_medium; /* its tier's: "CPU" or "DISK" */
	const char *kind[KVP_MAX_GROUPS];
	uint32_t window[KVP_MAX_GROUPS];
	/* The turn's events */
	struct ev_pending *pend;
	uint32_t npend;
	size_t pend_cap;
	uint64_t *hashes;
	uint32_t nhashes;
	size_t hashes_cap;
	uint32_t *tokens;
	size_t ntokens, tokens_cap;
	bool cut;                /* the next block opens a new event */
	bool lost;               /* an array could not grow: the turn's batch is dropped */
	struct ev_index *idx;    /* with a tier; NULL without */
	struct ev_remote *rem;   /* with a cluster tier; NULL without */
	/* Counted on the loop */
	uint64_t batches, events, stored, removed, cleared, unmade;
	struct ev_publisher *pub;
};

/* announce.c */
extern const struct kvc_event_ops kvpd_events_core_ops;
/* The turn's events as one batch, to the publisher. */
void kvpd_events_flush(struct kvpd_events *ev);
/* A (group, key) hittable, with its origin, in the turn's events (chained when it follows). */
void kvpd_ev_stored(struct kvpd_events *ev, uint32_t group, const char *medium, uint32_t pos,
		    const struct kvc_hash *key, const struct kvc_hash *parent,
		    const uint32_t *tokens);
/* An AllBlocksCleared in the turn's events: false when the turn is lost (out of memory). */
bool kvpd_ev_open_cleared(struct kvpd_events *ev);
void kvpd_ev_removed(struct kvpd_events *ev, uint32_t group, const char *medium,
		     const struct kvc_hash *key);
/* Entry @e of @x announced again, with its origin, as @medium's. */
void kvpd_ev_stored_entry(struct kvpd_events *ev, const struct ev_index *x,
			  const struct ev_entry *e, const char *medium);
void kvpd_events_pending_free(struct kvpd_events *ev);

/* index.c: an index of @cap entries at most, each with @block_size tokens. -ENOMEM. */
int kvpd_ev_index_init(struct ev_index **out, uint32_t cap, uint32_t block_size);
void kvpd_ev_index_free(struct ev_index *x);
struct ev_entry *kvpd_ev_index_find(const struct ev_index *x, uint32_t group,
				    const struct kvc_hash *key);
/* A new entry with its origin, in neither place yet; NULL when the index is full. */
struct ev_entry *kvpd_ev_index_add(struct ev_index *x, uint32_t group, uint32_t pos,
				   const struct kvc_hash *key, const struct kvc_hash *parent,
				   const uint32_t *tokens);
void kvpd_ev_index_del(struct ev_index *x, struct ev_entry *e);
const uint32_t *kvpd_ev_index_tokens(const struct ev_index *x, const struct ev_entry *e);
/*
 * Entries @in (n of them, sorted here) into @out, each chain whole and parents
 * first: the blocks of one sequence then join one BlockStored, and a router
 * links each block to a parent it knows. -ENOMEM: @out is @in by (group,
 * position).
 */
int kvpd_ev_index_chain(struct ev_index *x, uint32_t *in, uint32_t n, uint32_t *out);
/* After a reset: the pool holds nothing; the tier's entries, each chain whole, parents first. */
uint32_t kvpd_ev_index_reset(struct ev_index *x, uint32_t *out);

/* remote.c */
void kvpd_ev_remote_free(struct kvpd_events *ev);
/* After a clear: every REMOTE entry announced again, each chain whole, parents first. */
void kvpd_ev_remote_again(struct kvpd_events *ev);

/* publish.c */
struct ev_pub_config {
	const char *endpoint;    /* the PUB socket's */
	const char *replay;      /* the ROUTER's; NULL: none */
	const char *topic;
	uint32_t keep;           /* batches kept for replay */
	uint32_t delay_us;       /* tests: each send waits this long (KVPOOL_EVENTS_DELAY_US) */
	uint32_t queue;          /* tests: batches waiting, at most (KVPOOL_EVENTS_QUEUE); 0: 4096 */
};
int kvpd_ev_pub_start(struct ev_publisher **out, const struct ev_pub_config *cfg, char *why,
		      size_t why_len);
/* Batch @data (@len bytes, malloc'd: the publisher's from here) gets the next sequence number. */
void kvpd_ev_pub_push(struct ev_publisher *p, char *data, size_t len);
/* Its counters into @row's publisher fields. */
void kvpd_ev_pub_counters(struct ev_publisher *p, struct kvp_stats_events *row);
/* Sends what is queued, closes its sockets, joins its thread. */
void kvpd_ev_pub_stop(struct ev_publisher *p);

#endif
