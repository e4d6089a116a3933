/* SPDX-License-Identifier: MIT */
/*
 * libkvpool: what an inference engine links to use kvpoold.
 *
 * A struct kvp_client is one connection: its rings, its arena and its
 * doorbells. It is not thread-safe; use one per thread. Every function returns
 * 0 (or a non-negative count) on success and a negative errno on failure.
 *
 * Two levels: kvp_get_sqe / kvp_submit / kvp_peek_cqe / kvp_wait_cqe /
 * kvp_cqe_seen drive the rings directly (batching, pipelining); the kvp_*
 * calls below them submit one request, wait for its completion and return its
 * result.
 *
 * Nothing waits forever: kvp_connect and every call that waits for the daemon
 * give up after the connection's timeout_ms with -ETIMEDOUT. A connection
 * that timed out is poisoned: every later call returns -ENOTCONN until
 * kvp_close (a completion that came late could land in arena space a later
 * call reuses). Once the daemon is gone (its socket hung up, noticed within
 * 25 ms by a waiting call) every call returns -ECONNRESET.
 */
#ifndef LIBKVPOOL_H
#define LIBKVPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../uapi/kvpool.h"

struct kvp_client;

struct kvp_connect_opts {
	const char *socket_path; /* NULL: $KVPOOL_SOCKET, else KVP_DEFAULT_SOCKET */
	const char *pool;        /* NULL or "": attach to none */
	const char *namespace_;  /* NULL or "": the shared default namespace */
	uint32_t sq_entries;     /* 0: 64 */
	uint64_t arena_bytes;    /* 0: 1 MiB */
	unsigned spin_us;        /* how long kvp_wait_cqe spins before sleeping, while the
				  * daemon spins too; 0: sleep at once */
	bool admin;              /* ask for KVP_FEAT_ADMIN */
	bool stats_page;         /* map the daemon's read-only stats page */
	unsigned timeout_ms;     /* how long kvp_connect, and later each waiting call, waits
				  * for the daemon before -ETIMEDOUT; 0: 30000 */
	bool pool_map;           /* ask for KVP_FEAT_POOL_MAP (kvp_map_pool) */
	bool monitor;            /* ask for KVP_FEAT_MONITOR: an observer (kvctl), counted in
				  * the stats' monitors, never listed; needs pool NULL or "".
				  * In what was padding: the struct's size and offsets stay */
	char *why;               /* NULL, or where kvp_connect puts the daemon's reason for
				  * a refusal (NUL-terminated, "" when none came) */
	size_t why_len;          /* bytes at @why; KVP_REASON_MAX holds any reason */
};

/*
 * kvp_connect - connect to kvpoold and map the rings.
 * Returns 0 and *out, or -errno: -ENOENT/-ECONNREFUSED (no daemon), -EACCES (the
 * socket's mode or a directory on its path shuts this uid out), -EPERM
 * (namespace or admin refused), -ENODEV (no such pool), -EINVAL (bad options, a
 * monitor naming a pool),
 * -EPROTO (the daemon speaks another ABI: "kvpoold speaks ABI N, this library
 * ABI M" is printed on stderr), -EDQUOT/-EUSERS (a quota), -ETIMEDOUT (no answer within timeout_ms: a
 * stopped or swamped daemon), -ECONNRESET (it hung up).
 */
int kvp_connect(const struct kvp_connect_opts *opts, struct kvp_client **out);

/*
 * kvp_connect_error - kvp_connect's @err for @opts in words that name the
 * socket, the pool or the namespace that could not be had, with the daemon's
 * reason (opts->why) where it gave one and what to do where that is known:
 * "no kvpoold at PATH (is it running? kvpoold -s PATH)", "pool 'p' not found
 * on PATH (kvctl pool create ...)", "namespace 'x' refused on PATH: uid
 * 1000 is not granted it (config [namespace.x] uids)", "PATH: permission
 * denied (the socket is mode 0660, group kvpool)". Into @buf (cut to @len,
 * NUL-terminated); returns @buf. Print it after "PROGRAM: ".
 */
const char *kvp_connect_error(const struct kvp_connect_opts *opts, int err, char *buf, size_t len);

/*
 * kvp_close - unmap, close the connection; the daemon closes every sequence left
 * open. The only call a poisoned connection still takes.
 */
void kvp_close(struct kvp_client *c);

/* kvp_pool_info - the attached pool's geometry (zeros when attached to none). */
const struct kvp_pool_info *kvp_pool_info(const struct kvp_client *c);

/* kvp_features - the KVP_FEAT_* bits agreed at setup. */
uint64_t kvp_features(const struct kvp_client *c);

/*
 * kvp_boot_id - the daemon's run this connection reached: random at its start,
 * never 0 (0 from an older daemon). Two connections with the same one
 * reach the same daemon, so block ids one of them got mean the same to the
 * other; after a restart they differ.
 */
uint64_t kvp_boot_id(const struct kvp_client *c);

/*
 * kvp_pool_generation - the attached pool's generation: random when the pool
 * was built, never 0, the same for as long as that pool is (a planned restart
 * of the daemon hands it on), another once it is built again (destroyed and
 * created, a changed geometry). An engine that reconnects and finds the same
 * one may keep what it knew of the pool's blocks. 0 attached to none, or from
 * a daemon before generations. Set at connect and by kvp_attach.
 */
uint64_t kvp_pool_generation(const struct kvp_client *c);

/* kvp_daemon_version - the daemon's release, KVP_VERSION_CODE(major, minor, patch); 0 before 0.2.0. */
uint32_t kvp_daemon_version(const struct kvp_client *c);

/* kvp_version - this library's release, "MAJOR.MINOR.PATCH". */
const char *kvp_version(void);

/*
 * kvp_arena - the shared data arena: requests name their inputs and outputs
 * by offsets into it. The blocking calls below stage their data from offset
 * 0, so a caller mixing both levels must not expect its own arena data to
 * survive a blocking call.
 */
void *kvp_arena(const struct kvp_client *c, uint64_t *bytes);

/*
 * kvp_get_sqe - the next free submission entry, zeroed; NULL when the SQ is full
 * (or the connection is poisoned or reset: kvp_submit says which).
 */
struct kvp_sqe *kvp_get_sqe(struct kvp_client *c);

/* kvp_submit - publish the entries got since the last submit; returns how many. */
int kvp_submit(struct kvp_client *c);

/* kvp_peek_cqe - the oldest unseen completion, or -EAGAIN when there is none. */
int kvp_peek_cqe(struct kvp_client *c, struct kvp_cqe **cqe);

/*
 * kvp_wait_cqe - the oldest unseen completion, spinning for spin_us and then
 * sleeping (FUTEX_WAIT on the CQ tail). -ECONNRESET if the daemon went away,
 * -ETIMEDOUT after timeout_ms (the connection is poisoned then).
 */
int kvp_wait_cqe(struct kvp_client *c, struct kvp_cqe **cqe);

/* kvp_cqe_seen - hand the completion's slot back to the daemon. */
void kvp_cqe_seen(struct kvp_client *c, struct kvp_cqe *cqe);

/*
 * Filling an entry got from kvp_get_sqe (zeroed) for the ring level, as the
 * blocking calls below fill theirs: each sets what its opcode reads. Arena
 * offsets, user_data and the order of requests are the caller's.
 */
static inline void kvp_prep_handle_op(struct kvp_sqe *sqe, uint8_t opcode, uint64_t handle,
				      uint32_t len)
{
	sqe->opcode = opcode;
	sqe->handle = handle;
	sqe->len = len;
}

static inline void kvp_prep_alloc(struct kvp_sqe *sqe, uint64_t handle, uint32_t new_tokens,
				  uint32_t lookahead, bool use_cache)
{
	kvp_prep_handle_op(sqe, KVP_OP_ALLOC, handle, new_tokens);
	sqe->arg1 = lookahead;
	sqe->op_flags = use_cache ? KVP_ALLOC_USE_CACHE : 0;
}

/* WRITE_KV (K then V at @arena_off) or READ_KV (into @arena_off, @out_len bytes). */
static inline void kvp_prep_kv(struct kvp_sqe *sqe, uint8_t opcode, uint64_t handle,
			       uint16_t group, uint16_t layer, uint32_t first_pos, uint32_t count,
			       uint64_t arena_off, uint32_t out_len)
{
	kvp_prep_handle_op(sqe, opcode, handle, count);
	sqe->arg1 = first_pos;
	sqe->arg2 = KVP_KV_SEL(group, layer);
	if (opcode == KVP_OP_READ_KV) {
		sqe->out_addr = arena_off;
		sqe->out_len = out_len;
	} else {
		sqe->addr = arena_off;
	}
}

/* Blocking calls: one request each, completed before they return. */

/* kvp_nop - a round trip that does nothing. */
int kvp_nop(struct kvp_client *c);

/*
 * kvp_seq_open - open a sequence with its prompt. @salt (may be NULL) is mixed
 * with the connection's namespace; @prefix < 0 means the prompt length.
 */
int kvp_seq_open(struct kvp_client *c, const uint32_t *tokens, uint32_t n, const void *salt,
		 uint32_t salt_len, int64_t prefix, uint64_t *handle);

/* kvp_seq_close - free the sequence's blocks and forget it. */
int kvp_seq_close(struct kvp_client *c, uint64_t handle);

/* kvp_append - add generated tokens to the sequence. */
int kvp_append(struct kvp_client *c, uint64_t handle, const uint32_t *tokens, uint32_t n);

/*
 * kvp_lookup - the prefix-cache hit the sequence would get now (advisory: an
 * ALLOC with use_cache may see less). Returns the hit length in tokens; with
 * @lists non-NULL, copies the per-group ids there (@lists_bytes available).
 */
int kvp_lookup(struct kvp_client *c, uint64_t handle, struct kvp_block_lists *lists,
	       size_t lists_bytes);

/* Lookups one connection may have out at once (kvp_lookup_start). */
#define KVP_LOOKUPS_MAX 64

/*
 * kvp_lookup_start - kvp_lookup without waiting for its answer, which may take
 * a network round: a pool with a cluster tier asks the cluster (up to its
 * tier_remote_timeout_ms) for the blocks past its local hit. *@ticket names it
 * for kvp_lookup_poll. Until it completes, the daemon holds the sequence (its
 * other requests answer -EBUSY); the connection's other calls, blocking or of
 * the ring level, go on: the library sets the lookup's completion aside when
 * they meet it. Ring-level callers then keep bit 63 of their user_data clear.
 * -EAGAIN with KVP_LOOKUPS_MAX lookups out, -EBUSY with the SQ full.
 */
int kvp_lookup_start(struct kvp_client *c, uint64_t handle, uint64_t *ticket);

/*
 * kvp_lookup_poll - the lookup's answer once it came: the hit in tokens (as
 * kvp_lookup's), or -errno; the ticket is spent then. -EINPROGRESS while it is
 * out, after waiting up to @wait_ns for it (0: only a look). A wait ends early
 * when the CQ's next completion is a ring-level request's the caller has not
 * reaped. -ENOENT for a ticket not out; the connection's error once it is
 * broken.
 */
int kvp_lookup_poll(struct kvp_client *c, uint64_t ticket, uint64_t wait_ns);

/* kvp_lookup_drop - forget a lookup out: its completion is reaped and dropped when it comes. */
void kvp_lookup_drop(struct kvp_client *c, uint64_t ticket);

/*
 * kvp_alloc - allocate slots for @new_tokens (+ @lookahead); with @use_cache,
 * look the prefix cache up and take the hit atomically, reporting its length
 * in *hit_tokens. -ENOSPC when the pool is short. With @lists non-NULL,
 * copies the new blocks' ids there (@lists_bytes available).
 *
 * The new blocks all come off the free queue, so sizeof(struct kvp_block_lists)
 * plus 4 bytes per block of the pool (kvp_pool_info()->num_blocks) always holds
 * them. With less room:
 * -EOVERFLOW: the allocation HAS happened (the sequence holds the new blocks,
 *   *hit_tokens is set) but their ids did not fit in @lists_bytes; @lists is
 *   left as it was. kvp_get_table() reads the tables.
 * -EINVAL: nothing allocated, when @lists_bytes is less than
 *   sizeof(struct kvp_block_lists); -E2BIG likewise when it exceeds the arena.
 */
int kvp_alloc(struct kvp_client *c, uint64_t handle, uint32_t new_tokens, uint32_t lookahead,
	      bool use_cache, uint32_t *hit_tokens, struct kvp_block_lists *lists,
	      size_t lists_bytes);

/* kvp_commit - @computed tokens now have their KV written: publish and drop. */
int kvp_commit(struct kvp_client *c, uint64_t handle, uint32_t computed);

/* kvp_free - release the sequence's blocks, keep the sequence (a preemption). */
int kvp_free(struct kvp_client *c, uint64_t handle);

/* kvp_get_table - copy the sequence's block tables. -EOVERFLOW if @bytes is short. */
int kvp_get_table(struct kvp_client *c, uint64_t handle, struct kvp_block_lists *lists,
		  size_t bytes);

/*
 * The KV data path (pools created with kv_heads, head_dim, layers_per_group).
 * K and V are [count][kv_heads][head_dim] in the pool dtype (kvp_pool_info).
 * Requests in flight together are not ordered: attend over positions only
 * after the WRITE_KV of them has completed (the blocking calls do so).
 */

/*
 * kvp_write_kv - store K and V of positions first_pos.. of a sequence in one
 * group and layer. -EPERM below the computed count (committed KV is shared and
 * immutable), -EINVAL at or past the allocated slots.
 */
int kvp_write_kv(struct kvp_client *c, uint64_t handle, uint32_t group, uint32_t layer,
		 uint32_t first_pos, uint32_t count, const void *k, const void *v);

/* kvp_read_kv - copy K and V back out; -ENODATA if a position is not present. */
int kvp_read_kv(struct kvp_client *c, uint64_t handle, uint32_t group, uint32_t layer,
		uint32_t first_pos, uint32_t count, void *k, void *v);

/* One sequence's queries: positions first_pos .. first_pos + count - 1. */
struct kvp_attend_req {
	uint64_t handle;
	uint32_t first_pos, count;
	const void *q; /* [count][q_heads][head_dim], f32 with q_f32, else the pool dtype */
	void *out;     /* same shape and dtype */
};

/*
 * kvp_attend - causal attention of every query over its sequence's KV in one
 * group and layer, with the group's mask (full, sliding window, R-SWA, chunked,
 * cyclic); GQA when q_heads is a multiple of kv_heads. softcap > 0 caps the
 * logits. -ENODATA when a mask needs a position that was dropped or never
 * written. Many sequences per call make a decode step one request per layer.
 */
int kvp_attend(struct kvp_client *c, uint32_t group, uint32_t layer, uint32_t q_heads,
	       float scale, float softcap, bool q_f32, const struct kvp_attend_req *seqs,
	       uint32_t nseqs);

/*
 * kvp_prep_attend - the ring level's ATTEND: stages it in the arena from
 * offset @off (a multiple of 8) and fills @sqe (got from kvp_get_sqe).
 * Returns the arena bytes it takes; -E2BIG when they pass the arena's end.
 * Once its completion came with res 0, kvp_attend_collect copies the
 * outputs to each seqs[].out (the same @seqs, @off, @q_heads and @q_f32).
 */
int64_t kvp_prep_attend(struct kvp_client *c, struct kvp_sqe *sqe, uint64_t off,
			uint32_t group, uint32_t layer, uint32_t q_heads, float scale,
			float softcap, bool q_f32, const struct kvp_attend_req *seqs,
			uint32_t nseqs);
void kvp_attend_collect(struct kvp_client *c, uint64_t off, uint32_t q_heads, bool q_f32,
			const struct kvp_attend_req *seqs, uint32_t nseqs);

/* kvp_pool_stats - the attached pool's block counts. */
int kvp_pool_stats(struct kvp_client *c, struct kvp_pool_stats *st);

/*
 * kvp_stats - the daemon's whole stats snapshot (struct kvp_stats_header,
 * pool entries, client entries) into @buf. Returns the bytes written;
 * -EOVERFLOW when @bytes is short.
 */
int kvp_stats(struct kvp_client *c, void *buf, size_t bytes);

/*
 * kvp_attach - attach the connection to pool @name (no sequence may be open);
 * kvp_pool_info() describes that pool after it ("" detaches: zeros).
 */
int kvp_attach(struct kvp_client *c, const char *name);

/*
 * kvp_stats_snapshot - a consistent copy of the daemon's stats page (struct
 * kvp_stats_page and the arrays its offsets name) into @buf, read under the
 * page's seqlock without asking the daemon anything. Returns the bytes
 * copied; -ENODEV unless connected with .stats_page; -EOVERFLOW if @bytes is
 * less than kvp_stats_bytes(); -ECONNRESET once the daemon hung up, and the
 * poisoned connection's error after a time-out; -EAGAIN when the daemon kept
 * the page in writing for 5 s.
 */
int kvp_stats_snapshot(const struct kvp_client *c, void *buf, size_t bytes);
size_t kvp_stats_bytes(const struct kvp_client *c);

/*
 * A stats snapshot with its arrays located and checked against its size:
 * what kvctl renders. kvp_stats_view_take copies the page again into the
 * same buffer (allocated on first use); -EPROTO for a page this library does
 * not understand. kvp_stats_view_release frees the buffer.
 */
struct kvp_stats_view {
	void *buf;
	size_t bytes;
	const struct kvp_stats_page *page;
	const struct kvp_stats_pool *pools;     /* page->max_pools entries (in_use marks live ones) */
	const struct kvp_stats_client *clients; /* page->max_clients entries, likewise */
	const struct kvp_stats_op *ops;         /* KVP_STATS_OPS entries, by opcode */
	const struct kvp_stats_tenant *tenants; /* max_tenants entries (in_use marks live ones) */
	unsigned max_tenants;
	const struct kvp_stats_tier *tiers;     /* page->max_pools, parallel to pools; NULL from
						 * a daemon without tiers */
	const struct kvp_stats_events *events;  /* likewise, KV events; NULL from a daemon
						 * without them */
	const struct kvp_stats_snapshots *snapshots; /* likewise, window snapshots; NULL
						      * from a daemon without them */
	const struct kvp_stats_remote *remote;  /* likewise, cluster tiers; NULL from a
						 * daemon without them */
	uint64_t taken_ns;                      /* CLOCK_MONOTONIC when copied */
};

int kvp_stats_view_take(struct kvp_client *c, struct kvp_stats_view *v);

/* The live entries of a view's tables. */
#define KVP_STATS_FOR_EACH_POOL(v, p)                                                        \
	for (const struct kvp_stats_pool *p = (v)->pools; p < (v)->pools + (v)->page->max_pools; \
	     p++)                                                                            \
		if (p->in_use)
/* Pool @p's tier row in view @v, or NULL when it has none (or the daemon has no tiers). */
static inline const struct kvp_stats_tier *kvp_stats_tier_of(const struct kvp_stats_view *v,
							     const struct kvp_stats_pool *p)
{
	const struct kvp_stats_tier *t = v->tiers ? &v->tiers[p - v->pools] : NULL;

	return t && t->in_use ? t : NULL;
}
/* Pool @p's KV events row in view @v, or NULL when it publishes none. */
static inline const struct kvp_stats_events *kvp_stats_events_of(const struct kvp_stats_view *v,
								 const struct kvp_stats_pool *p)
{
	const struct kvp_stats_events *e = v->events ? &v->events[p - v->pools] : NULL;

	return e && e->in_use ? e : NULL;
}
/* Pool @p's window snapshots row in view @v, or NULL when it has no cyclic group (or caching). */
static inline const struct kvp_stats_snapshots *
kvp_stats_snapshots_of(const struct kvp_stats_view *v, const struct kvp_stats_pool *p)
{
	const struct kvp_stats_snapshots *n = v->snapshots ? &v->snapshots[p - v->pools] : NULL;

	return n && n->in_use ? n : NULL;
}
/* Pool @p's cluster tier row in view @v, or NULL when it has none (tier_remote). */
static inline const struct kvp_stats_remote *kvp_stats_remote_of(const struct kvp_stats_view *v,
								 const struct kvp_stats_pool *p)
{
	const struct kvp_stats_remote *r = v->remote ? &v->remote[p - v->pools] : NULL;

	return r && r->in_use ? r : NULL;
}
#define KVP_STATS_FOR_EACH_CLIENT(v, c)                                                      \
	for (const struct kvp_stats_client *c = (v)->clients;                                \
	     c < (v)->clients + (v)->page->max_clients; c++)                                  \
		if (c->in_use)
#define KVP_STATS_FOR_EACH_TENANT(v, t)                                                      \
	for (const struct kvp_stats_tenant *t = (v)->tenants; t < (v)->tenants + (v)->max_tenants; \
	     t++)                                                                            \
		if (t->in_use)
void kvp_stats_view_release(struct kvp_stats_view *v);

/*
 * kvp_stats_json - the view as the JSON document `kvctl stats --json` prints
 * (@clients_only: `kvctl clients --json`), pretty-printed, in malloc'd
 * memory the caller frees; NULL when out of memory.
 */
char *kvp_stats_json(const struct kvp_stats_view *v, bool clients_only);

/* The names kvctl, the JSON and the Prometheus samples use. */
const char *kvp_opcode_name(unsigned opcode);   /* "ALLOC"; "UNKNOWN" past the table */
const char *kvp_kind_name(unsigned kind);       /* "full" "swa" "rswa" "chunked" "cyclic" */
const char *kvp_quota_name(unsigned key);       /* KVP_QUOTA_*: "clients" ... "blocks" */
const char *kvp_event_loop_name(unsigned loop); /* "io_uring", "epoll" or "unknown" */
/* KVP_TIER_UNOFFERED_*: "window", "queue_full", ... ("unknown" past them) */
const char *kvp_tier_unoffered_name(unsigned reason);
/* A tier's evicted cached blocks it did not hold, every reason summed (kvctl's UNOFFERED). */
uint64_t kvp_tier_unoffered_total(const struct kvp_stats_tier *t);
/* Blocks in use out of those a pool can hand out (the null block left out), 0..1. */
double kvp_pool_usage(const struct kvp_stats_pool *p);
/* Latency percentile from a log2 histogram: the upper edge of the bucket holding it. */
uint64_t kvp_hist_percentile(const __u64 *hist, unsigned buckets, double p);

/*
 * kvp_pool_layout - where the attached pool's K and V lie: struct
 * kvp_kv_layout, its layers, its pieces' sizes (see KVP_OP_POOL_LAYOUT) into
 * @buf. Returns the size of the whole; when that is more than @bytes nothing
 * is copied (call again with as many). -EOPNOTSUPP: the pool holds no KV.
 */
int kvp_pool_layout(struct kvp_client *c, void *buf, size_t bytes);

/*
 * One layer's K and V in a mapping (layer l of every group). Element (block b,
 * token t, kv head h, dim d) of K is at
 *   k + b * block_stride + t * token_stride + h * head_stride + d * dtype size,
 * of V likewise from v; head_dim elements are contiguous.
 */
struct kvp_map_layer {
	uint8_t *k, *v;
	uint64_t block_stride, token_stride, head_stride;
};

struct kvp_cuda_map;

struct kvp_pool_map {
	struct kvp_kv_layout layout; /* as kvp_pool_layout reports it */
	struct kvp_map_layer *layers; /* [layout.num_layers]: host addresses for a host pool,
				       * device addresses (CUdeviceptr) for a cuda pool */
	uint32_t num_pieces;
	void **piece;                /* where each piece is mapped: host pieces each on their
				      * own, cuda pieces back to back in one device range */
	uint64_t *piece_bytes;
	struct kvp_cuda_map *cuda;   /* a cuda pool's import (libkvpool's) */
	char why[KVP_REASON_MAX];    /* after a failure: the daemon's reason, or the driver's */
};

/*
 * kvp_map_pool - map the attached pool's KV memory (connect with .pool_map).
 * Allowed only on a pool restricted to this client's namespace: -EPERM
 * otherwise, with the daemon's reason in map->why. A cuda pool is imported
 * into the primary context of its device (the one torch uses), which
 * libkvpool loads libcuda.so.1 for only then; a failure there says why in
 * map->why ("libcuda.so.1 not loadable: ...", "cuMemMap failed: ..."). The
 * memory stays mapped until kvp_unmap_pool, the daemon's death included. The
 * descriptors
 * come on the connection socket and are read here only. A client that writes
 * KV through the mapping makes it present with COMMIT (the daemon takes its
 * word: one namespace is one trust domain); WRITE_KV, READ_KV and ATTEND go on
 * working. What an earlier call left unread (one that timed out) is read off
 * and closed first; -EBUSY only if the daemon still finds an earlier map's
 * descriptors on their way after the timeout, -ETIMEDOUT when this call's do
 * not come within it,
 * -EOPNOTSUPP for a pool without KV, -EINVAL from a daemon without POOL_MAP.
 */
int kvp_map_pool(struct kvp_client *c, struct kvp_pool_map *map);
/* kvp_unmap_pool - undo kvp_map_pool; @map is zeroed. */
void kvp_unmap_pool(struct kvp_pool_map *map);

/* Admin calls (connect with .admin = true; -EPERM otherwise). */

/* kvp_pool_create - create a pool; -EEXIST if the name is taken. */
int kvp_pool_create(struct kvp_client *c, const struct kvp_pool_params *params);

/*
 * kvp_pool_create_owned - as kvp_pool_create, but the pool belongs to this
 * connection (KVP_POOL_OWNED): once it is closed, or its process dies, the
 * daemon destroys the pool as soon as nothing uses it. For private pools that
 * must not outlive their creator (kvtrace --socket's).
 */
int kvp_pool_create_owned(struct kvp_client *c, const struct kvp_pool_params *params);

/*
 * kvp_pool_create_v2 - create a pool where @params says (backend, device,
 * layout, namespace); @op_flags 0 or KVP_POOL_OWNED. A refusal's reason, when
 * the daemon gives one, goes to @why ("" otherwise).
 */
int kvp_pool_create_v2(struct kvp_client *c, const struct kvp_pool_params_v2 *params,
		       uint32_t op_flags, char *why, size_t why_len);

/*
 * kvp_pool_create_v3 - as kvp_pool_create_v2, with @keys (NUL-terminated, at
 * most KVP_POOL_KEYS_MAX bytes; NULL: none) a text of `key = value` lines in
 * kvpool.conf(5)'s [pool.NAME] words, which the daemon applies over @params
 * and refuses, naming the key, as it refuses the config file's. Needs
 * KVP_FEAT_POOL_KEYS (asked for with the admin feature): -EOPNOTSUPP, with a
 * reason, from an older daemon.
 */
int kvp_pool_create_v3(struct kvp_client *c, const struct kvp_pool_params_v2 *params,
		       const char *keys, uint32_t op_flags, char *why, size_t why_len);

/* kvp_pool_destroy - destroy a pool; -EBUSY while another client uses it. */
int kvp_pool_destroy(struct kvp_client *c, const char *name);
/*
 * kvp_pool_destroy_flags - the same with POOL_DESTROY's op_flags:
 * KVP_POOL_DESTROY_DROP_TIER removes the pool's disk tier file too (without
 * it the file is kept, for a pool of the same name and geometry made later).
 */
int kvp_pool_destroy_flags(struct kvp_client *c, const char *name, uint32_t flags);
/*
 * kvp_pool_sync - wait until every copy into pool @name's tier (NULL: the
 * attached pool's) queued before the call has finished; 0 at once for a pool
 * without a tier. -ENOENT: no such pool.
 */
int kvp_pool_sync(struct kvp_client *c, const char *name);
/*
 * kvp_daemon_restart - a planned restart of the daemon (admin): it execs
 * @path (NULL: the binary it was started from) once the requests it took are
 * done, with its pools' cache handed over (docs/reliability.md). 0: under way,
 * this connection is closed when it execs (kvp_boot_id tells the next run
 * from this one); -ENOENT, -EACCES, -ENOEXEC: @path is not a kvpoold that runs
 * here, -EALREADY: a restart is under way, with the reason in @why. A daemon
 * older than the opcode answers -EINVAL.
 */
int kvp_daemon_restart(struct kvp_client *c, const char *path, char *why, size_t why_len);

/*
 * kvp_pool_purge_remote - delete pool @name's keys (NULL: the attached pool's)
 * from its cluster tier, every master's; *@purged (if not NULL): how many.
 * -EOPNOTSUPP: the pool has no cluster tier; -EHOSTUNREACH: a master was not
 * reached (the others' keys are deleted all the same).
 */
int kvp_pool_purge_remote(struct kvp_client *c, const char *name, uint64_t *purged);

/* kvp_evict - remove the cache entries of the given blocks; returns how many had one. */
int kvp_evict(struct kvp_client *c, const uint32_t *ids, uint32_t n);

/* kvp_reset - clear the attached pool's prefix cache; -EBUSY while blocks are in use. */
int kvp_reset(struct kvp_client *c);
/* kvp_pool_reset - the same for pool @name (admin; the connection need not be attached). */
int kvp_pool_reset(struct kvp_client *c, const char *name);

/* kvp_dump_freeq - copy up to @max free-queue ids, head first; returns the queue length. */
int kvp_dump_freeq(struct kvp_client *c, uint32_t *ids, uint32_t max);

/* kvp_check - verify the attached pool's invariants: 0, or -EUCLEAN with @why filled. */
int kvp_check(struct kvp_client *c, char *why, size_t why_len);

/*
 * Pool parameters in the words of kvtrace's pool/group lines and the config
 * file: blocks, block_size, caching, free_order, publish, max_len,
 * max_step_tokens, groups ("full swa:128 ..."), kv_heads, head_dim, dtype
 * (f32|f16|bf16), layers_per_group.
 */
void kvp_pool_params_init(struct kvp_pool_params *p, const char *name);
/* kvp_pool_params_set - one key=value; -EINVAL (unknown key, bad value). */
int kvp_pool_params_set(struct kvp_pool_params *p, const char *key, const char *value);
/*
 * The same for POOL_CREATE v2, which also takes backend (host|cuda), device
 * (a CUDA ordinal), namespace (a name, or "" for every namespace) and layout
 * (block|layer; default: block for host, layer for cuda).
 */
void kvp_pool_params_v2_init(struct kvp_pool_params_v2 *p, const char *name);
/* The groups in the config's words, "full swa:128", into @buf (cut to @len, NUL-terminated). */
void kvp_pool_params_groups(const struct kvp_pool_params *p, char *buf, size_t len);
int kvp_pool_params_v2_set(struct kvp_pool_params_v2 *p, const char *key, const char *value);
/*
 * kvp_pool_param_help - what key @key of kvp_pool_params_v2_set takes, in words
 * for a message after a refusal ("2..16777216", "on|off", ...): the limits the
 * daemon checks, not only those the parser does. @key NULL: every key, comma
 * separated. NULL for an unknown key.
 */
const char *kvp_pool_param_help(const char *key);

#endif
