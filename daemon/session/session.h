/* SPDX-License-Identifier: MIT */
/*
 * The session room: one client's connection (client.c: accept, setup, close;
 * attach.c: its pool), its rings (ring.c: entries copied out, completions posted), its
 * sequence handles (seqs.c) and the KV written past their computed counts
 * (kvwritten.c), its rows of the stats page and the fragmentation gauge
 * counted over its sequences (client_stats.c), and the checked sizes of what
 * it wrote (sizes.c).
 *
 * It may use the pools, tenants, observe, loop and config rooms, the core and
 * the shared headers. What each ring entry asks is for the requests room
 * above: ring.c hands it to the kvpd_dispatch_fn it is given.
 */
#ifndef KVPOOLD_SESSION_H
#define KVPOOLD_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpoold.h"
#include "core/kvcore.h"
#include "pools/pools.h"
#include "tenants/tenants.h"

/*
 * A sequence handle: client tag (24 bits) | slot generation (16) | slot (24),
 * slots per client; a slot whose generation is spent is retired (seqs.c).
 */
struct kvpd_seq_kv;

struct kvpd_seq_slot {
	struct kvc_seq *seq; /* NULL when free */
	struct kvpd_seq_kv *kv; /* what WRITE_KV wrote past computed; NULL until first used */
	uint32_t epoch;         /* bumped by FREE: a write from before lands in blocks now gone */
	bool busy;              /* a request on it waits for jobs (blocks coming up from a
				 * tier, a window snapshot's copies): other requests on it
				 * get -EBUSY meanwhile */
	uint8_t parts;          /* those jobs not back yet (kvpd_seq_later) */
	uint8_t copying;        /* COMMITs whose window snapshots are still being copied out
				 * of its rings: the client's next entry on it waits in the
				 * SQ meanwhile (ring.c), so nothing writes a ring under a copy */
	uint32_t snap_at;       /* its admission hit window snapshots at this boundary (0:
				 * none): its rings hold nothing older than each window */
	uint32_t later_flags;   /* their completions' flags, merged */
	int32_t later_res;      /* the first error among them */
	uint32_t gen;
	uint32_t next_free;
};

/*
 * A client's requests completed since its last op_batch probe: a tracer that
 * counts requests traps once per batch instead of once per request. Filled
 * only while op_batch has a tracer attached.
 */
struct kvpd_op_batch {
	struct kvpd_client *next; /* in kvpd.batch_pending */
	uint32_t ops, errors;
	uint32_t hist[KVP_HIST_BUCKETS]; /* latency, log2 ns, as the stats page's */
};

struct kvpd_client {
	uint32_t slot, gen;  /* in kvpd.clients: an event's key names (slot, gen) */
	struct kvpd_conn conn; /* what the event loop watches: its socket, handed to the
				* courier to close at release, and its own epoll set holding
				* its doorbell eventfd (never the eventfd the client holds) */
	int mem_fd, bell_efd, stats_fd; /* until the setup reply carries them away */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool admin;
	bool may_map;        /* KVP_FEAT_POOL_MAP agreed */
	bool monitor;        /* KVP_FEAT_MONITOR agreed: counted in d->nmonitors, never listed */
	uint64_t map_parcel; /* the courier's seq of its last POOL_MAP message */
	bool ready;          /* setup done, rings mapped */
	unsigned active_idx; /* in kvpd.active while ready */
	bool dead;           /* closed, kept only until its jobs come back */
	uint32_t inflight;   /* jobs on the workers; their completions have CQ room reserved */
	size_t job_bytes;    /* their memory (KVPD_CLIENT_JOB_BYTES) */
	bool data_blocked;   /* KVP_MAX_DATA_INFLIGHT reached with a data-path entry next, or
			      * an entry on a sequence whose snapshots are being copied */
	uint32_t commits_copying; /* its COMMITs with window snapshots still being copied */
	struct kvpd_tenant *tenant[2]; /* its uid's; its namespace's (NULL in the shared one) */
	struct kvpd_statview *stat_view; /* the page it was given, when not the full one */
	uint64_t arena_charged; /* arena bytes taken from its tenants' quotas */
	struct kvpd_lane lane; /* its jobs' tasks not yet taken, for the workers' round */
	uint64_t accepted_ns;
	char namespace_[KVP_NAME_MAX];
	struct kvpd_pool *pool;

	/* The shared mapping; every field in it is written by a hostile peer. */
	void *map;
	size_t map_bytes;
	uint32_t *sq_head, *sq_tail, *sq_flags;
	uint32_t *cq_head, *cq_tail, *cq_flags;
	struct kvp_sqe *sqes;
	struct kvp_cqe *cqes;
	uint8_t *arena;
	uint64_t arena_bytes;
	uint32_t sq_entries, cq_entries;
	uint32_t sq_next;    /* our own copies of the indices we own */
	uint32_t cq_next;
	uint32_t cq_head_seen; /* the client's CQ head when last read and checked */
	bool sleeping_flag_set;

	struct kvpd_seq_slot *seqs;
	uint32_t seqs_cap, seqs_open, seq_free_head;
	uint64_t ops;
	struct kvpd_charge charge; /* distinct blocks its sequences hold */
	bool touched_pool;         /* this batch changed its pool: republish it */
	bool slow_entry;           /* its last entry was slow: the next runs with the stats page free */
	struct kvpd_op_batch batch;
};

/* [off, off + len) of @c's arena, or NULL where it is not all inside it. */
static inline void *kvpd_arena_range(const struct kvpd_client *c, uint64_t off, uint64_t len)
{
	if (off > c->arena_bytes || len > c->arena_bytes - off)
		return NULL;
	return c->arena + off;
}

/* attach.c */
/*
 * A refusal's reason into @c's arena at @out_addr (at most @out_len bytes, NUL
 * included; nothing when 0 or outside the arena), its length into cqe->aux.
 */
void kvpd_client_reason(const struct kvpd_client *c, uint64_t out_addr, uint32_t out_len,
			const char *why, struct kvp_cqe *cqe);
/* The attached pool's geometry as the setup reply and ATTACH give it (zeros: none). */
void kvpd_fill_pool_info(const struct kvpd_client *c, struct kvp_pool_info *info);
/* A refusal's reason goes to @why. */
int kvpd_client_attach(struct kvpd *d, struct kvpd_client *c, const char *pool, char *why,
		       size_t why_len);
/* Leaves its pool without publishing it (the pool is about to go). */
void kvpd_client_detach(struct kvpd_client *c);

/*
 * A job of @c's goes to the workers, or is back: what it holds of the client's
 * CQ room and job memory. With the last one back, the charge lets go of the
 * blocks it kept while they were pinned (tenants/charge.h).
 */
static inline void kvpd_client_job_out(struct kvpd_client *c, size_t bytes)
{
	c->inflight++;
	c->job_bytes += bytes;
}

static inline void kvpd_client_job_back(struct kvpd_client *c, size_t bytes)
{
	c->inflight--;
	c->job_bytes -= bytes;
	if (!c->inflight)
		kvpd_charge_settle(&c->charge);
}

/* client.c */
int kvpd_client_accept(struct kvpd *d, int fd);
/* Its socket has news (@revents: POLL* bits): the setup message, or its hang-up. */
void kvpd_client_event(struct kvpd *d, struct kvpd_client *c, int revents);
void kvpd_client_close(struct kvpd *d, struct kvpd_client *c, const char *why);
/* The last of a closed client's jobs is back: its hold on its tenants goes, it is unmapped and freed. */
void kvpd_client_free(struct kvpd *d, struct kvpd_client *c);
/* The open client an event's key names (kvpd_event_key), or NULL. */
struct kvpd_client *kvpd_client_lookup(struct kvpd *d, uint64_t key);
/* Accepting again after accept failed (out of descriptors), unless the daemon is stopping. */
void kvpd_accept_resume(struct kvpd *d);

/* ring.c */
/* What each entry asks: false when the request went to the workers (completed later). */
typedef bool kvpd_dispatch_fn(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			      struct kvp_cqe *cqe);
/* Returns entries consumed, or -EPROTO after disconnecting a corrupt client. */
int kvpd_ring_process(struct kvpd *d, struct kvpd_client *c, unsigned budget,
		      kvpd_dispatch_fn *dispatch);
bool kvpd_ring_pending(struct kvpd_client *c);
/* Posts a completion whose CQ room was reserved when its entry was taken. */
void kvpd_ring_post(struct kvpd_client *c, const struct kvp_cqe *cqe);
void kvpd_ring_set_sleeping(struct kvpd_client *c, bool sleeping);

/* seqs.c: per-client handle table */
int kvpd_seq_put(struct kvpd_client *c, struct kvc_seq *seq, __u64 *handle);
struct kvc_seq *kvpd_seq_get(struct kvpd_client *c, uint64_t handle);
struct kvpd_seq_slot *kvpd_seq_slot(struct kvpd_client *c, uint64_t handle);
int kvpd_seq_close(struct kvpd_client *c, uint64_t handle);
/*
 * A request on @slot completes once one more job is back: the sequence is
 * busy until the last is. An ALLOC may wait for two (a tier's promotions and
 * a snapshot's copies), each holding a copy of its completion.
 */
void kvpd_seq_later(struct kvpd_seq_slot *slot);
/*
 * One of them is back with @cqe: its flags and error are merged in. True when
 * it was the last: *cqe is then the completion to post (just the first error
 * when there was one), and the sequence is no longer busy.
 */
bool kvpd_seq_later_back(struct kvpd_seq_slot *slot, struct kvp_cqe *cqe);
void kvpd_seqs_close_all(struct kvpd_client *c);

/* kvwritten.c: COMMIT of @n positions written past computed (a mapped pool: the client's word). */
int kvpd_kv_commit(struct kvpd_client *c, uint64_t handle, uint32_t n);

/* client_stats.c */
void kvpd_stats_op(struct kvpd *d, struct kvpd_client *c, uint8_t opcode, int32_t res,
		   uint64_t ns);
/* Fires @c's pending op_batch now (before it disconnects). */
void kvpd_stats_batch_flush(struct kvpd *d, struct kvpd_client *c);
void kvpd_stats_client(struct kvpd *d, struct kvpd_client *c);
void kvpd_stats_client_remove(struct kvpd *d, struct kvpd_client *c);
/* Every pool's fragmentation, counted over its clients' sequences (once a second). */
void kvpd_stats_fragmentation(struct kvpd *d);
/* struct kvpd_stats_hooks: the pools due a count; the op batches to fire. */
void kvpd_stats_bracket_end(struct kvpd *d, uint64_t now);
void kvpd_stats_batches_fire(struct kvpd *d);

#endif
