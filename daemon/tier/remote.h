/* SPDX-License-Identifier: MIT */
/*
 * Internal to the tier room: the cluster tier (tier_remote), a pool's last
 * tier, on a Redis Cluster or one standalone Redis. remote_link.c talks to
 * the nodes; remote.c is the pool's side: what goes out, and when.
 * docs/tiers.md, "The cluster tier", has the rules.
 */
#ifndef KVPOOLD_TIER_REMOTE_H
#define KVPOOLD_TIER_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

#include "config/config.h"
#include "core/kvcore.h"
#include "pools/jobs.h"

#define REMOTE_SLOTS 16384        /* Redis Cluster's hash slots */
#define REMOTE_NO_NODE UINT16_MAX
#define REMOTE_MAX_NODES 64       /* nodes one link knows: seeds and masters */
/* The hash slot of a key, as Redis Cluster computes it (CRC16 of its {hash tag}, mod 16384). */
uint16_t remote_key_slot(const char *key, size_t len);

#include <hiredis/read.h>

struct redisReply;

/*
 * Where a round puts the values it reads (a top-level bulk string of
 * @min bytes or more): one buffer, bump-allocated, that outlives the round.
 */
struct remote_arena {
	uint8_t *mem;
	size_t cap, used;
	size_t min;
};

struct remote_node {
	struct kvpd_remote_addr addr;
	int fd;                      /* -1: not connected */
	struct redisReader *reader;
	bool answering;              /* its last round answered in time */
	/* This round's: its commands in order, how far they are written and answered */
	uint32_t *cmds, ncmds, cmds_cap;
	uint32_t written;            /* commands written whole */
	size_t off;                  /* bytes of the next one written */
	uint32_t answered;
};

/* One single-key command of a round: @buf is the whole RESP request (redisFormatCommandArgv). */
struct remote_cmd {
	char *buf;
	size_t len;
	uint16_t slot;
	struct redisReply *reply;    /* the answer (the caller frees it), NULL: none in time */
};

struct remote_link {
	struct remote_node nodes[REMOTE_MAX_NODES]; /* the seeds first */
	uint32_t nnodes, nseeds;
	bool cluster;                /* CLUSTER INFO answered: slots route keys */
	bool mapped;                 /* the slot map was read (or a standalone server found) */
	bool stale;                  /* a MOVED came back: read the map again */
	uint16_t slot_node[REMOTE_SLOTS];
	uint32_t timeout_ms;         /* a connection's and the map's deadline */
	uint64_t moved;              /* MOVED replies seen */
	uint32_t unreachable;        /* nodes the last round could not connect to */
	char *rbuf;                  /* what a read takes off a socket at once */
	struct remote_arena *arena;  /* the values' (NULL: each reply its own malloc) */
	redisReplyObjectFunctions fns;      /* its readers': values into @arena... */
	redisReplyObjectFunctions *defaults; /* ...the rest as hiredis makes them */
};

/* @l knows its seeds only; nothing is connected before the first round. */
void remote_link_init(struct remote_link *l, const struct kvpd_remote_addr *seeds, uint32_t n,
		      uint32_t timeout_ms);
void remote_link_close(struct remote_link *l);

/*
 * Runs @n commands, each sent to its slot's node, pipelined per node and all
 * nodes at once, until each is answered or @deadline_ns (CLOCK_MONOTONIC)
 * passes: a node late or failing is disconnected (its commands stay
 * unanswered) and connected again by a later round. Reads the slot map first
 * when it is missing or stale. Returns the commands answered.
 */
uint32_t remote_round(struct remote_link *l, struct remote_cmd *cmds, uint32_t n,
		      uint64_t deadline_ns);

/* Frees a reply of a round (one whose string is in an arena keeps it there). */
void remote_reply_free(struct redisReply *r);

/* Nodes known, and those whose last round answered (the stats). */
void remote_link_nodes(const struct remote_link *l, uint32_t *known, uint32_t *answering);


/*
 * A value: this header, then the block's KV as a tier keeps it (its chunks
 * back to back), little-endian. A value is served only if every field matches
 * what the reading pool expects and its data's checksum holds.
 */
#define REMOTE_VALUE_MAGIC "KVPR"
#define REMOTE_VALUE_VERSION 1u
struct remote_value_head {
	char magic[4];
	uint32_t version;
	uint64_t geometry;           /* XXH3-64 of the pool's struct kvtier_geometry */
	uint64_t sum;                /* XXH3-64 of the data */
	uint64_t bytes;              /* the data's length */
};

/* What the cluster tier counts (kvctl stats' TIERS, its remote row). */
struct kvpd_remote_stats {
	uint64_t hit_tokens, promoted;
	uint64_t rounds, timeouts;
	uint64_t refused[8];
	uint64_t sent;               /* blocks written to the cluster */
	uint64_t skipped;            /* blocks not written: the send queue full, or the node down,
				      * late or refusing */
	uint64_t deduplicated;       /* blocks not sent: the cluster holds them (written or read
				      * lately) */
	uint64_t bytes_out, bytes_in;
	uint32_t queued;             /* blocks in sends not back yet */
	uint32_t nodes_known, nodes_answering; /* the ask link's, else the send link's */
	uint32_t cluster;            /* the link found a cluster (1), or one server (0) */
	uint64_t moved;              /* MOVED replies: the slot map read again (both links) */
	uint64_t moved_sends, moved_asks;
};

struct tier_copier;
struct remote_ask;

/* Every job of the tier's thread starts so: what it is, and the link as it left it. */
enum remote_kind { REMOTE_SEND, REMOTE_ASK };
struct remote_head {
	struct kvpd_job job;         /* type KVPD_JOB_REMOTE */
	enum remote_kind kind;
	uint32_t nodes_known, nodes_answering;
	uint64_t moved;
	bool cluster;
	bool asks;                   /* the ask link's (else the send link's) */
};

#define REMOTE_KEY_MAX 128
#define REMOTE_ROUND_BUCKETS 64      /* rounds' latency, log2 ns */

/* A pool's cluster tier. */
struct kvpd_remote {
	struct kvpd *d;
	struct kvpd_pool *pool;
	char prefix[KVPD_REMOTE_PREFIX_MAX];
	uint64_t geometry;
	size_t data_bytes;           /* a block's KV, as a value holds it */
	/*
	 * Two threads, a link each: the sends in the background (SCHED_BATCH,
	 * nice 10: nothing waits for them), the asks as the daemon (a client
	 * waits: on a busy machine a background thread missed half its 5 ms
	 * deadlines on Mooncake's trace).
	 */
	struct remote_link send_link, ask_link;
	struct tier_copier *send_thread, *ask_thread;
	/* The loop's */
	struct remote_send *filling; /* this turn's blocks, sent at its end */
	struct remote_send *inflight;
	uint64_t next_seq;
	uint32_t queue_cap;          /* blocks in flight at most */
	uint64_t *known;             /* fingerprints of (group, key) the cluster holds, direct
				      * mapped: a collision forgets one, sent again at worst */
	uint32_t known_mask;
	struct remote_sync *syncs;
	/* The ask whose answer the request running again sees (kvc_tier_ops.has); NULL: none */
	struct remote_ask *answer;
	uint64_t quiet_until;        /* CLOCK_MONOTONIC: no node answered the last round */
	uint64_t round_hist[REMOTE_ROUND_BUCKETS];
	/* An arena for the values an ask reads, kept between asks (remote_fetch.c) */
	pthread_mutex_t arena_lock;
	uint8_t *arena_mem;
	size_t arena_bytes;
	struct kvpd_remote_stats st;
	bool dirty;
};

struct kvpd;
struct kvpd_pool;
struct kvpd_client;
struct kvpd_job;

/* remote.c: @pool's cluster tier, if its spec has tier_remote: 0, or -errno with @why. */
int kvpd_remote_attach(struct kvpd *d, struct kvpd_pool *pool, char *why, size_t why_len);
/* The loop's turn: this turn's blocks sent, the stats row written if it moved. */
void kvpd_remote_turn(struct kvpd *d, struct kvpd_remote *r);
void kvpd_remote_job_done(struct kvpd *d, struct kvpd_job *job);
void kvpd_remote_publish(struct kvpd *d, struct kvpd_remote *r);
/*
 * POOL_SYNC's part for the cluster tier: 0 when no send queued before it is
 * in flight (@post: its completion posted now), KVPD_LATER when they are (the
 * completion posted then), -ENOMEM.
 */
int kvpd_remote_sync(struct kvpd *d, struct kvpd_client *c, struct kvpd_pool *pool,
		     uint64_t user_data, bool post);
/*
 * Block @block, in use, cached under (@group, @key), goes to the cluster
 * unless it is known to hold it (committed blocks; those promoted from the
 * local tier): pinned until its send is back.
 */
void kvpd_remote_offer(struct kvpd_remote *r, uint32_t group, uint32_t block,
		       const struct kvc_hash *key);
/* Block (group, @h)'s key into @buf: its length. */
int kvpd_remote_key(const struct kvpd_remote *r, uint32_t group, const struct kvc_hash *h,
		    char *buf, size_t len);
/* The cluster holds (group, key), as far as this daemon knows: not sent again; or no more. */
void kvpd_remote_know(struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key);
void kvpd_remote_forget(struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key);
/* A round's time, into the p50/p99 the stats row shows. */
void kvpd_remote_round_time(struct kvpd_remote *r, uint64_t ns);
/* A job back from the thread: the link's state it saw, into the stats. */
void kvpd_remote_head_done(struct kvpd_remote *r, const struct remote_head *h);

/* remote_fetch.c: coming in (its comment says how). */
bool kvpd_remote_answered(const struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key);
/*
 * ALLOC's tail, after the local tier's part returned @ret (0 or KVPD_LATER):
 * the blocks of its hit the cluster gave are filled before it completes.
 */
int kvpd_remote_alloc_done(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			   const struct kvc_alloc_res *res, const struct kvp_cqe *cqe, int ret);
void kvpd_remote_run_ask(struct kvpd_job *job);
void kvpd_remote_ask_done(struct kvpd *d, struct kvpd_job *job);

#endif
