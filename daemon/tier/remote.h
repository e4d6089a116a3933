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
#include <sys/types.h>

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
typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

#define REMOTE_CRED_MAX 256          /* a user's or password's bytes, NUL included */
#define REMOTE_KEY_MIN 32u           /* a tag key's bytes: SHA-256's strength and more */
#define REMOTE_KEY_MAX_BYTES 64u

/* A pool's tag key; len 0: none (values untagged, tags not checked). */
struct remote_tag_key {
	uint8_t bytes[REMOTE_KEY_MAX_BYTES];
	uint32_t len;
};
#define REMOTE_WHY_MAX 120           /* why a node could not be reached: a log line's part */

/*
 * How a pool's connections are made, shared by its two links: TLS, and who
 * to be (AUTH). A rotation (SIGHUP) bumps @generation: each link then makes
 * its connections again, with the new secrets.
 */
struct remote_access {
	pthread_mutex_t lock;
	SSL_CTX *tls;                /* rediss://; NULL: plain TCP */
	char user[REMOTE_CRED_MAX];  /* "": the default user */
	char pass[REMOTE_CRED_MAX];  /* "": no AUTH */
	struct remote_tag_key tag;   /* the values' */
	uint32_t generation;
};

/*
 * remote_access.c: @a as @spec says (TLS's context, the secrets' files
 * read): 0, or -errno with the reason in @why.
 */
int remote_access_init(struct remote_access *a, const struct kvpd_pool_spec *spec, char *why,
		       size_t why_len);
/* The secrets read again (SIGHUP): 0, changed or not, or -errno with @why (the old ones kept). */
int remote_access_reload(struct remote_access *a, const struct kvpd_pool_spec *spec, char *why,
			 size_t why_len);
void remote_access_free(struct remote_access *a);
/* The tag key now, for a thread's job. */
void remote_access_tag(struct remote_access *a, struct remote_tag_key *out);

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
	SSL *ssl;                    /* over @fd, rediss://'s */
	struct redisReader *reader;
	uint32_t generation;         /* the access's it connected with */
	bool answering;              /* its last round answered in time */
	/* Down: its connection failed; tried again at @retry_ns, the wait doubling meanwhile */
	bool down;
	uint64_t retry_ns;
	uint32_t backoff_ms;
	uint32_t timeouts;           /* connections timed out in a row */
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

/* What a link tells its pool (remote.c logs it once a pool, whichever link saw it first). */
enum remote_event {
	REMOTE_NODE_DOWN,            /* @why: the cause */
	REMOTE_NODE_BACK,
	REMOTE_NODE_REPLACED,        /* its slots are @other's now (a failover) */
	REMOTE_NODE_REFUSED_SET,     /* @why: the error it answered */
	REMOTE_NODE_REFUSED_READ,    /* likewise, a read (GET, GETEX) */
};
typedef void remote_event_fn(void *arg, enum remote_event ev, const struct kvpd_remote_addr *node,
			     const struct kvpd_remote_addr *other, const char *why);

struct remote_link {
	struct remote_node nodes[REMOTE_MAX_NODES]; /* the seeds first */
	struct remote_access *access;
	remote_event_fn *event;
	void *event_arg;
	char why[REMOTE_WHY_MAX];    /* the last connection's failure */
	uint64_t map_due_ns;         /* a node down: the map read again from then (a failover) */
	uint64_t asked;              /* ASK redirects followed */
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
		      uint32_t timeout_ms, struct remote_access *access);

/*
 * remote_conn.c: node @nd connected by @deadline_ns (TCP, then TLS, then
 * AUTH, as @l's access says): 0, or -errno with the cause in l->why
 * (-EACCES: AUTH refused; -EPROTO: TLS failed).
 */
int remote_conn_open(struct remote_link *l, struct remote_node *nd, uint64_t deadline_ns);
void remote_conn_close(struct remote_node *nd);
/* What the connection took or gave: bytes, -EAGAIN (poll, then again), or -errno. */
ssize_t remote_conn_send(struct remote_node *nd, const void *buf, size_t len);
ssize_t remote_conn_recv(struct remote_node *nd, void *buf, size_t len);
/* rediss://'s context from the pool's CA and client certificate: 0, or -errno with @why. */
int remote_tls_context(const struct kvpd_pool_spec *spec, SSL_CTX **out, char *why,
		       size_t why_len);
void remote_tls_free(SSL_CTX *ctx);
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

/* The masters the slot map routes to (read first if missing or stale), into @out: how many. */
uint32_t remote_link_masters(struct remote_link *l, uint16_t *out, uint64_t deadline_ns);
/* A round of @n commands all to node @k, whatever their slots (SCAN, and what it found). */
uint32_t remote_link_node_round(struct remote_link *l, uint16_t k, struct remote_cmd *cmds,
				uint32_t n, uint64_t deadline_ns);
/* Node @k connected (TCP, TLS, AUTH) and dropped: 0, or -errno with the cause in l->why. */
int remote_link_probe(struct remote_link *l, uint32_t k, uint64_t deadline_ns);

/* Frees a reply of a round (one whose string is in an arena keeps it there). */
void remote_reply_free(struct redisReply *r);

/* Nodes known, and those whose last round answered (the stats). */
void remote_link_nodes(const struct remote_link *l, uint32_t *known, uint32_t *answering);


/*
 * A value: this header, then the block's KV as a tier keeps it (its chunks
 * back to back), little-endian. A value is served only if every field matches
 * what the reading pool expects, its data's checksum holds and, where the pool
 * has a key (tier_remote_key_file), its tag does: HMAC-SHA256 keyed with it
 * over the value's Redis key, this header with the tag zero, and the data, so
 * that whoever can write the cluster without the key makes no value a machine
 * serves, nor moves one to another key.
 */
#define REMOTE_VALUE_MAGIC "KVPR"
#define REMOTE_VALUE_VERSION 2u
#define REMOTE_TAG_BYTES 32
struct remote_value_head {
	char magic[4];
	uint32_t version;
	uint64_t geometry;           /* XXH3-64 of the pool's struct kvtier_geometry */
	uint64_t sum;                /* XXH3-64 of the data */
	uint64_t bytes;              /* the data's length */
	uint8_t tag[REMOTE_TAG_BYTES]; /* zero: untagged (a pool without a key) */
};

/* remote_value.c: @value's header written for its data (after it), tagged when @k has a key. */
void remote_value_seal(const struct remote_tag_key *k, const char *key, size_t key_len,
		       uint8_t *value, uint64_t geometry, size_t data_bytes);
/* A value read back: REMOTE_SOUND when it is this pool's block whole, else why it is refused. */
#define REMOTE_SOUND (-1)
int remote_value_check(const struct remote_tag_key *k, const char *key, size_t key_len,
		       const struct redisReply *rep, uint64_t geometry, size_t data_bytes);

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
	uint64_t asked, asked_sends, asked_asks; /* ASK redirects followed (both links) */
	uint64_t send_errors;        /* blocks whose SET a node answered with an error */
	uint64_t outages;            /* nodes that became unreachable */
	uint32_t nodes_down;         /* in an outage now */
};

struct tier_copier;
struct remote_ask;
struct kvpd_block_origin;

/* Every job of the tier's thread starts so: what it is, and the link as it left it. */
enum remote_kind { REMOTE_SEND, REMOTE_ASK, REMOTE_PURGE };
struct remote_head {
	struct kvpd_job job;         /* type KVPD_JOB_REMOTE */
	enum remote_kind kind;
	uint32_t nodes_known, nodes_answering;
	uint64_t moved, asked;
	bool cluster;
	bool asks;                   /* the ask link's (else the send link's) */
};

#define REMOTE_KEY_MAX 128
#define REMOTE_ROUND_BUCKETS 64      /* rounds' latency, log2 ns */

/* A tenant's bytes written to the cluster, by span of time (remote_charge.c). */
#define REMOTE_CHARGE_SPANS 64
#define REMOTE_CHARGE_NONE 0u            /* no tenant to charge */
#define REMOTE_CHARGE_OVER UINT32_MAX    /* its tenant is at its max_tier_bytes: not sent */
struct kvpd_tenant;
struct remote_charge {
	struct kvpd_tenant *tenant;  /* a reference held */
	uint64_t bytes[REMOTE_CHARGE_SPANS];
	uint64_t span[REMOTE_CHARGE_SPANS];
};

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
	struct remote_access access; /* TLS, AUTH, the values' key: both links' */
	struct tier_copier *send_thread, *ask_thread;
	uint32_t ttl_s;              /* every value's (0: none) */
	struct remote_charge *charges; /* tenants' bytes in the cluster */
	uint32_t ncharges;
	const struct kvpd_client *acting; /* whose request runs now: its committed blocks' tenant */
	uint32_t stamp_s;            /* the known set's time unit */
	/*
	 * The nodes' outages as the pool has said them (either link may see one
	 * first; each is logged once): addresses, down or not. Under @events_lock:
	 * the threads tell, the loop publishes.
	 */
	pthread_mutex_t events_lock;
	struct remote_outage {
		struct kvpd_remote_addr addr;
		bool down;
	} outages[REMOTE_MAX_NODES];
	uint32_t noutages;
	uint64_t outages_total;
	bool set_refusal_said, read_refusal_said;
	/* The loop's */
	struct remote_send *filling; /* this turn's blocks, sent at its end */
	struct remote_send *inflight;
	/* Offers past queue_cap, not pinned: sent as sends come back, if still held */
	struct remote_waiting {
		struct remote_offer *e;   /* a ring of cap */
		uint32_t *tokens;         /* with REMOTE events: each entry's block_size tokens */
		uint32_t head, n, cap;
		uint64_t added, taken;    /* entries ever: a POOL_SYNC waits for those before it */
	} waiting;
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
/* SIGHUP: the secrets read again (a failure logged, the old ones kept). */
void kvpd_remote_reload(struct kvpd *d, struct kvpd_pool *pool);
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
 * local tier): pinned until its send is back. @o: where it came from, for
 * its REMOTE announcement (NULL: unknown, not announced).
 */
void kvpd_remote_offer(struct kvpd_remote *r, const struct kvpd_client *c, uint32_t group,
		       uint32_t block, const struct kvc_hash *key,
		       const struct kvpd_block_origin *o);
/* Block (group, @h)'s key into @buf: its length. */
int kvpd_remote_key(const struct kvpd_remote *r, uint32_t group, const struct kvc_hash *h,
		    char *buf, size_t len);
/* remote_events.c: a link's event, said once a pool (remote_event_fn). */
void remote_event(void *arg, enum remote_event ev, const struct kvpd_remote_addr *node,
		  const struct kvpd_remote_addr *other, const char *why);
/* Slot @slot's node (as @l routes it) answered a SET (@read: a read) with @err. */
void remote_tell_refusal(struct kvpd_remote *r, const struct remote_link *l, uint16_t slot,
			 bool read, const char *err);
/* A node's error that passes (a failover, a slot migrating, a restart): not a refusal. */
bool remote_error_transient(const char *err);
/* The loop: the outages' counts into the stats. */
void remote_events_collect(struct kvpd_remote *r);

/*
 * remote_charge.c: @bytes written for @c's tenant: its charge (to give back
 * if the write fails), REMOTE_CHARGE_NONE, or REMOTE_CHARGE_OVER (not taken:
 * past its max_tier_bytes).
 */
uint32_t remote_charge_take(struct kvpd_remote *r, const struct kvpd_client *c, uint64_t bytes);
void remote_charge_give(struct kvpd_remote *r, uint32_t charge, uint64_t bytes);
/* @tenant's bytes in the cluster, as far as this daemon knows. */
uint64_t remote_charged(const struct kvpd_remote *r, const struct kvpd_tenant *tenant);
void remote_charges_clear(struct kvpd_remote *r);
void remote_charges_free(struct kvpd_remote *r);

/* remote.c: pins @block and puts it in this turn's send; false when it cannot (no memory). */
bool remote_send_queue(struct kvpd_remote *r, uint32_t group, uint32_t block,
		       const struct kvc_hash *key, uint32_t charge,
		       const struct kvpd_block_origin *o);
/* remote_wait.c: room for a pool's worth of offers (with @origins: their tokens too). */
int remote_wait_init(struct kvpd_remote *r, uint32_t pool_blocks, bool origins);
void remote_wait_free(struct kvpd_remote *r);
/* An offer past queue_cap, kept unpinned: false when the ring is full (skipped). */
bool remote_wait(struct kvpd_remote *r, uint32_t group, uint32_t block,
		 const struct kvc_hash *key, uint32_t charge, const struct kvpd_block_origin *o);
/* Sends came back: the oldest offers waiting queued while there is room, if still held. */
void remote_wait_drain(struct kvpd_remote *r);
/* Every offer waiting skipped (a purge). */
void remote_wait_drop(struct kvpd_remote *r);

/* remote_known.c: the known set for a pool of @pool_blocks blocks, values living @ttl_s. */
int remote_known_init(struct kvpd_remote *r, uint32_t pool_blocks, uint32_t ttl_s);
/* The cluster holds (group, key), as far as this daemon knows and its TTL has not passed. */
bool remote_known(struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key);
void remote_known_clear(struct kvpd_remote *r);
/* The cluster holds (group, key), as far as this daemon knows: not sent again; or no more. */
void kvpd_remote_know(struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key);
void kvpd_remote_forget(struct kvpd_remote *r, uint32_t group, const struct kvc_hash *key);
/* A round's time, into the p50/p99 the stats row shows. */
void kvpd_remote_round_time(struct kvpd_remote *r, uint64_t ns);
/* A job back from the thread: the link's state it saw, into the stats. */
void kvpd_remote_head_done(struct kvpd_remote *r, const struct remote_head *h);

/* remote_purge.c: POOL_PURGE_REMOTE of @pool for @c (KVPD_LATER: its completion posted then). */
int kvpd_remote_purge(struct kvpd *d, struct kvpd_client *c, struct kvpd_pool *pool,
		      uint64_t user_data);
void kvpd_remote_run_purge(struct kvpd_job *job);
void kvpd_remote_purge_done(struct kvpd *d, struct kvpd_job *job);

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
