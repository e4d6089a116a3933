/* SPDX-License-Identifier: MIT */
/*
 * One submission entry, already copied out of the ring: validate it, call the
 * core, fill the completion. Arena ranges are checked before every access;
 * inputs the core would read twice are copied first.
 */
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "handover/handover.h"
#include "observe/probes.h"
#include "requests/requests.h"
#include "session/kvwritten.h"
#include "session/sizes.h"
#include "events/events.h"
#include "tier/tier.h"

/* EVICT reads its ids out of the arena this many at a time. */
#define EVICT_CHUNK 256

/*
 * The op_flags each opcode understands. Any other bit is refused in one place,
 * so a flag that a newer client sets is never silently ignored.
 */
static const uint32_t known_op_flags[KVP_OP_LAST] = {
	[KVP_OP_SEQ_OPEN] = KVP_OPEN_PREFIX,
	[KVP_OP_ALLOC] = KVP_ALLOC_USE_CACHE,
	[KVP_OP_POOL_CREATE] = KVP_POOL_OWNED,
	[KVP_OP_POOL_DESTROY] = KVP_POOL_DESTROY_DROP_TIER,
};

/* [off, off + len) inside the arena, or NULL. */
/* A NUL-free name of len bytes in the arena, copied into @name. */
static int arena_name(const struct kvpd_client *c, const struct kvp_sqe *sqe,
		      char name[KVP_NAME_MAX])
{
	const char *src = kvpd_arena_range(c, sqe->addr, sqe->len);

	if (!src || sqe->len >= KVP_NAME_MAX)
		return -EINVAL;
	memcpy(name, src, sqe->len);
	name[sqe->len] = '\0';
	return strlen(name) == sqe->len ? 0 : -EINVAL;
}

static uint32_t ngroups(const struct kvpd_client *c)
{
	return kvc_pool_config(c->pool->core)->num_groups;
}

/*
 * Writes per-group id lists (group g: ids[g][0..counts[g])) as struct
 * kvp_block_lists at out_addr. -EOVERFLOW (nothing written) when out_len is
 * short; *needed gets the size either way.
 */
static int write_lists(const struct kvpd_client *c, const struct kvp_sqe *sqe,
		       const uint32_t *const *ids, const uint32_t *counts, __u64 *needed)
{
	uint32_t n = ngroups(c);
	uint64_t total = 0;
	struct kvp_block_lists head = { .num_groups = n };
	uint8_t *out;

	for (uint32_t g = 0; g < n; g++)
		total += counts[g];
	*needed = sizeof(head) + total * sizeof(uint32_t);
	if (*needed > sqe->out_len)
		return -EOVERFLOW;
	out = kvpd_arena_range(c, sqe->out_addr, *needed);
	if (!out)
		return -EINVAL;
	memcpy(head.counts, counts, n * sizeof(*counts));
	memcpy(out, &head, sizeof(head));
	out += sizeof(head);
	for (uint32_t g = 0; g < n; g++) {
		if (counts[g])
			memcpy(out, ids[g], (size_t)counts[g] * sizeof(uint32_t));
		out += (size_t)counts[g] * sizeof(uint32_t);
	}
	return 0;
}

/*
 * The sequence's salt: the client's whole namespace field, whether a user salt
 * follows, then the user salt copied once out of the arena. Namespaces thus
 * never share a block. Its length is bounded only by the arena.
 */
static uint8_t *make_salt(const struct kvpd_client *c, const void *user_salt, uint32_t len,
			  size_t *salt_len)
{
	uint8_t *salt;

	*salt_len = KVP_NAME_MAX + 1 + (size_t)len;
	salt = malloc(*salt_len);
	if (!salt)
		return NULL;
	memcpy(salt, c->namespace_, KVP_NAME_MAX);
	salt[KVP_NAME_MAX] = len ? 1 : 0;
	memcpy(salt + KVP_NAME_MAX + 1, user_salt, len);
	return salt;
}

static int op_seq_open(struct kvpd_client *c, const struct kvp_sqe *sqe, struct kvp_cqe *cqe)
{
	const uint32_t *tokens;
	const void *user_salt;
	struct kvc_seq *seq;
	int64_t prefix = -1;
	uint64_t bytes;
	size_t salt_len;
	uint8_t *salt;
	int ret;

	/* The salt follows the tokens: one range holds both. */
	if (sqe->len == 0 || kvpd_open_bytes(sqe->len, sqe->arg2, &bytes))
		return -EINVAL;
	tokens = kvpd_arena_range(c, sqe->addr, bytes);
	if (!tokens)
		return -EINVAL;
	user_salt = (const uint8_t *)tokens + (bytes - sqe->arg2);
	if (sqe->len > c->pool->params.max_len)
		return -EINVAL;
	if (sqe->op_flags & KVP_OPEN_PREFIX)
		prefix = sqe->arg1;
	/* Quotas before anything is made: the sequence, and the tokens it keeps. */
	ret = kvpd_quota_take(c->tenant, KVP_QUOTA_SEQUENCES, 1);
	if (ret)
		return ret;
	ret = kvpd_quota_take(c->tenant, KVP_QUOTA_TOKENS, sqe->len);
	if (ret)
		goto err_give_seq;
	salt = make_salt(c, user_salt, sqe->arg2, &salt_len);
	if (!salt) {
		ret = -ENOMEM;
		goto err_give_tokens;
	}
	ret = kvc_seq_create(c->pool->core, tokens, sqe->len, salt, salt_len, prefix, &seq);
	free(salt);
	if (ret)
		goto err_give_tokens;
	ret = kvpd_seq_put(c, seq, &cqe->aux);
	if (ret) {
		kvc_seq_destroy(seq);
		goto err_give_tokens;
	}
	KVPD_PROBE(seq_open, c->gen, (uint64_t)cqe->aux, sqe->len);
	return 0;

err_give_tokens:
	kvpd_quota_give(c->tenant, KVP_QUOTA_TOKENS, sqe->len);
err_give_seq:
	kvpd_quota_give(c->tenant, KVP_QUOTA_SEQUENCES, 1);
	return ret;
}

/* APPEND: never past the pool's max_len, and within the tenants' tokens. */
static int op_append(struct kvpd_client *c, struct kvc_seq *seq, const struct kvp_sqe *sqe)
{
	struct kvc_seq_info info;
	const uint32_t *tokens;
	uint64_t bytes;
	int ret;

	kvc_seq_info(seq, &info);
	if (kvpd_words_bytes(sqe->len, &bytes) || (uint64_t)info.tokens + sqe->len > c->pool->params.max_len)
		return -EINVAL;
	tokens = kvpd_arena_range(c, sqe->addr, bytes);
	if (!tokens)
		return -EINVAL;
	ret = kvpd_quota_take(c->tenant, KVP_QUOTA_TOKENS, sqe->len);
	if (ret)
		return ret;
	ret = kvc_seq_append(seq, tokens, sqe->len);
	if (ret)
		kvpd_quota_give(c->tenant, KVP_QUOTA_TOKENS, sqe->len);
	return ret;
}

/* Its writers bracket themselves: a turn of slow requests runs with the page left to readers (ring.c). */
static struct kvp_stats_pool *pool_stats(struct kvpd *d, const struct kvpd_client *c)
{
	return kvpd_stats_pool_entry(d, c->pool);
}

/* LOOKUP's lists carry the core's id for a position the pool's tier holds, as it is. */
_Static_assert(KVP_BLOCK_TIER == KVC_TIER_BLOCK, "KVP_BLOCK_TIER");

static int op_lookup(struct kvpd *d, struct kvpd_client *c, struct kvc_seq *seq,
		     const struct kvp_sqe *sqe, struct kvp_cqe *cqe)
{
	uint32_t counts[KVC_MAX_GROUPS];
	struct kvc_seq_info info;
	struct kvc_hit hit;
	int ret = kvc_lookup(seq, &hit);

	if (ret)
		return ret;
	kvc_seq_info(seq, &info);
	kvpd_stats_begin(d);
	pool_stats(d, c)->lookup_queries_tokens += info.tokens;
	pool_stats(d, c)->lookup_hits_tokens += hit.tokens;
	kvpd_stats_end(d);
	KVPD_PROBE(lookup, c->gen, info.tokens, hit.tokens);
	if (sqe->out_len) {
		const uint32_t *ids[KVC_MAX_GROUPS];
		uint32_t *marked = NULL;
		size_t n = 0;

		for (uint32_t g = 0; g < ngroups(c); g++) {
			counts[g] = hit.nids[g];
			ids[g] = hit.ids[g];
			n += hit.nids[g];
		}
		/* Positions only the cluster tier holds: KVP_BLOCK_REMOTE. */
		if (c->pool->remote && n && !(marked = malloc(n * sizeof(*marked))))
			return -ENOMEM;
		if (marked)
			kvpd_remote_mark(c->pool, seq, &hit, ids, marked);
		ret = write_lists(c, sqe, ids, counts, &cqe->aux);
		free(marked);
		if (ret)
			return ret;
	}
	return (int)hit.tokens;
}

static void alloc_accounting(struct kvpd *d, struct kvpd_client *c, struct kvc_seq *seq,
			     const struct kvc_alloc_req *req, uint64_t handle, int ret,
			     const struct kvc_alloc_res *res, const struct kvc_seq_info *before)
{
	if (ret == -ENOSPC) {
		kvpd_stats_begin(d);
		pool_stats(d, c)->nospace++;
		kvpd_stats_end(d);
		if (KVPD_PROBE_ENABLED(nospace)) {
			struct kvc_pool_stats st;

			kvc_pool_stats(c->pool->core, &st);
			KVPD_PROBE(nospace, c->gen, (uint32_t)kvc_alloc_cost(seq, req), st.free);
		}
	}
	if (ret == 0 && req->use_cache) {
		/* As vLLM counts: the tokens offered to the cache, and the hit, at admission. */
		kvpd_stats_begin(d);
		pool_stats(d, c)->prefix_queries_tokens += before->tokens;
		pool_stats(d, c)->prefix_hits_tokens += res->hit_tokens;
		kvpd_stats_end(d);
		KVPD_PROBE(prefix_admit, c->gen, before->tokens, res->hit_tokens);
	}
	KVPD_PROBE(alloc, c->gen, handle, req->new_tokens, ret ? 0u : res->taken, ret,
		   kvpd_now_ns() - d->taken_ns);
}

/*
 * ALLOC's output, checked before the core runs, so that a request whose lists
 * could never be written changes nothing: the whole of [out_addr, out_addr +
 * out_len) in the arena, room for the header at least. Whether the ids really
 * allocated fit is known only afterwards (KVP_CQE_F_OVERFLOW).
 */
static int alloc_out_valid(const struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	if (!sqe->out_len)
		return 0;
	if (sqe->out_len < sizeof(struct kvp_block_lists) ||
	    !kvpd_arena_range(c, sqe->out_addr, sqe->out_len))
		return -EINVAL;
	return 0;
}

static int op_alloc(struct kvpd *d, struct kvpd_client *c, struct kvc_seq *seq,
		    const struct kvp_sqe *sqe, struct kvp_cqe *cqe)
{
	struct kvc_alloc_req req = {
		.new_tokens = sqe->len,
		.lookahead = sqe->arg1,
		.use_cache = sqe->op_flags & KVP_ALLOC_USE_CACHE,
	};
	const uint32_t *ids[KVC_MAX_GROUPS];
	uint32_t counts[KVC_MAX_GROUPS];
	struct kvc_seq_info before;
	struct kvc_alloc_res res;
	__u64 needed;
	int ret;

	ret = alloc_out_valid(c, sqe);
	if (ret)
		return ret;
	/* Whether it is an admission, and the tokens it offers the cache (counted then only). */
	kvc_seq_info(seq, &before);
	ret = kvc_alloc(seq, &req, &res);
	alloc_accounting(d, c, seq, &req, sqe->handle, ret, &res, &before);
	if (ret)
		return ret;
	if (!before.running) /* an admission: what its rings hold starts at its hit */
		kvpd_seq_slot(c, sqe->handle)->snap_at = res.hit_tokens;
	cqe->aux = res.hit_tokens;
	if (sqe->out_len) {
		for (uint32_t g = 0; g < ngroups(c); g++) {
			uint32_t len;
			const uint32_t *table = kvc_seq_table(seq, g, &len);

			ids[g] = table ? table + res.first_new[g] : NULL;
			counts[g] = len - res.first_new[g];
		}
		if (write_lists(c, sqe, ids, counts, &needed))
			cqe->flags |= KVP_CQE_F_OVERFLOW;
	}
	/* Blocks coming up from the pool's tier, snapshots into its rings: the completion waits for their KV. */
	return kvpd_snap_copies(d, c, sqe, cqe, kvpd_tier_alloc_done(d, c, sqe, &res, cqe));
}

static int op_get_table(struct kvpd_client *c, struct kvc_seq *seq, const struct kvp_sqe *sqe,
			struct kvp_cqe *cqe)
{
	const uint32_t *ids[KVC_MAX_GROUPS];
	uint32_t counts[KVC_MAX_GROUPS];

	for (uint32_t g = 0; g < ngroups(c); g++)
		ids[g] = kvc_seq_table(seq, g, &counts[g]);
	return write_lists(c, sqe, ids, counts, &cqe->aux) ?: (int)cqe->aux;
}

/* A LOOKUP or an ALLOC again, once the pool's cluster tier answered (kvpd_remote_ask). */
static int seq_op_again(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			struct kvp_cqe *cqe)
{
	struct kvc_seq *seq = kvpd_seq_get(c, sqe->handle);
	int ret;

	if (!seq)
		return -EBADF;
	kvpd_tier_acting(c->pool, c);
	ret = sqe->opcode == KVP_OP_LOOKUP ? op_lookup(d, c, seq, sqe, cqe) :
					     op_alloc(d, c, seq, sqe, cqe);
	kvpd_tier_acting(c->pool, NULL);
	if (c->pool->events)
		kvpd_events_cut(c->pool->events);
	return ret;
}

/* Operations on one of the client's sequences. */
static int seq_op(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
		  struct kvp_cqe *cqe)
{
	struct kvpd_seq_slot *slot = kvpd_seq_slot(c, sqe->handle);
	struct kvc_seq_info info;
	struct kvc_seq *seq;

	/* Its ALLOC waits for blocks from a tier: nothing else on it until that completes. */
	if (slot && slot->busy)
		return -EBUSY;
	if (sqe->opcode == KVP_OP_SEQ_CLOSE) {
		int ret = kvpd_seq_close(c, sqe->handle);

		d->seqs_released += ret == 0;
		return ret;
	}
	seq = kvpd_seq_get(c, sqe->handle);
	if (!seq)
		return -EBADF;
	switch (sqe->opcode) {
	case KVP_OP_APPEND_TOKENS:
		return op_append(c, seq, sqe);
	case KVP_OP_LOOKUP:
		return kvpd_remote_ask(d, c, seq, sqe, seq_op_again) ?: op_lookup(d, c, seq, sqe, cqe);
	case KVP_OP_ALLOC:
		return kvpd_remote_ask(d, c, seq, sqe, seq_op_again) ?: op_alloc(d, c, seq, sqe, cqe);
	case KVP_OP_COMMIT: {
		int ret = kvpd_kv_commit(c, sqe->handle, sqe->len);

		/* Its window snapshots: copied out of the rings before the sequence's next entry. */
		return ret ? ret : kvpd_snap_copies(d, c, sqe, cqe, 0);
	}
	case KVP_OP_FREE:
		kvc_seq_info(seq, &info);
		kvc_seq_free(seq);
		kvpd_seq_slot(c, sqe->handle)->epoch++;
		kvpd_seq_kv_reset(kvpd_seq_slot(c, sqe->handle)->kv, ngroups(c));
		KVPD_PROBE(seq_free, c->gen, sqe->handle, info.blocks_held);
		return 0;
	case KVP_OP_GET_TABLE:
		return op_get_table(c, seq, sqe, cqe);
	}
	return -EINVAL;
}

/*
 * Copies EVICT's ids out of the arena, each id read once and each distinct id
 * kept once, in the order it first appears: the private list is bounded by the
 * pool however often an id repeats, and the core, which reads the list twice
 * (validate, then evict), sees the same effect as with the repeats (an id's
 * hash is gone after its first occurrence). -EINVAL for an id it would refuse.
 */
static int evict_ids(const struct kvpd_client *c, const uint32_t *src, uint32_t len,
		     uint32_t **out, uint32_t *n)
{
	uint32_t num_blocks = kvc_pool_config(c->pool->core)->num_blocks;
	uint64_t *seen = calloc((num_blocks + 63) / 64, sizeof(*seen));
	uint32_t *ids = malloc((size_t)(len < num_blocks ? len : num_blocks) * sizeof(*ids));
	uint32_t chunk[EVICT_CHUNK];
	int ret = -ENOMEM;

	*n = 0;
	if (!seen || !ids)
		goto err_free;
	ret = -EINVAL;
	for (uint32_t i = 0; i < len; i += EVICT_CHUNK) {
		uint32_t m = len - i < EVICT_CHUNK ? len - i : EVICT_CHUNK;

		memcpy(chunk, src + i, (size_t)m * sizeof(*chunk));
		for (uint32_t k = 0; k < m; k++) {
			uint32_t id = chunk[k];

			if (id == KVC_NULL_BLOCK || id >= num_blocks)
				goto err_free;
			if (seen[id / 64] & (1ull << (id % 64)))
				continue;
			seen[id / 64] |= 1ull << (id % 64);
			ids[(*n)++] = id;
		}
	}
	free(seen);
	*out = ids;
	return 0;

err_free:
	free(ids);
	free(seen);
	return ret;
}

static int op_evict(struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	uint64_t bytes;
	const uint32_t *src = kvpd_words_bytes(sqe->len, &bytes) ? NULL :
			      kvpd_arena_range(c, sqe->addr, bytes);
	uint32_t *ids, n;
	int ret;

	/* Any number of ids the arena holds: repeats are allowed, as the core allows them. */
	if (!src || sqe->len == 0)
		return -EINVAL;
	ret = evict_ids(c, src, sqe->len, &ids, &n);
	if (ret)
		return ret;
	ret = kvc_pool_evict(c->pool->core, ids, n);
	free(ids);
	return ret;
}

static int op_dump_freeq(struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	uint32_t max = sqe->out_len / sizeof(uint32_t);
	uint64_t bytes;
	uint32_t *out = kvpd_words_bytes(max, &bytes) ? NULL : kvpd_arena_range(c, sqe->out_addr, bytes);

	if (!out)
		return -EINVAL;
	return (int)kvc_pool_free_queue(c->pool->core, out, max);
}

static int op_check(struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	char why[256] = "";
	char *out = kvpd_arena_range(c, sqe->out_addr, sqe->out_len);
	int ret = kvc_pool_check(c->pool->core, why, sizeof(why));

	/* The text and its NUL only: never the rest of a large buffer (strncpy would pad it). */
	if (out && sqe->out_len) {
		size_t n = strnlen(why, sqe->out_len - 1);

		memcpy(out, why, n);
		out[n] = '\0';
	}
	return ret;
}

/*
 * A refusal's reason, NUL-terminated and cut to out_len, to the request's
 * output buffer when it names one; cqe.aux is its length.
 */
static void give_reason(const struct kvpd_client *c, const struct kvp_sqe *sqe,
			struct kvp_cqe *cqe, const char *why)
{
	kvpd_client_reason(c, sqe->out_addr, sqe->out_len, why, cqe);
}

/* Refused while a client other than @c is attached or any sequence is open. */
static int op_pool_destroy(struct kvpd *d, struct kvpd_client *c, const char *name,
			   uint32_t flags)
{
	struct kvpd_pool *pool = kvpd_pool_find(d, name);

	if (!pool)
		return -ENOENT;
	if (kvpd_pool_busy(pool, c->pool == pool))
		return -EBUSY;
	if (c->pool == pool)
		kvpd_client_detach(c);
	return kvpd_pool_destroy(d, name, flags & KVP_POOL_DESTROY_DROP_TIER);
}

/* The pool an admin request names (len bytes at addr), or the attached one (len 0). */
static int named_pool(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
		      struct kvpd_pool **pool)
{
	char name[KVP_NAME_MAX];
	int ret;

	*pool = c->pool;
	if (sqe->len) {
		ret = arena_name(c, sqe, name);
		if (ret)
			return ret;
		*pool = kvpd_pool_find(d, name);
		if (!*pool)
			return -ENOENT;
	}
	return *pool ? 0 : -ENODEV;
}

static int op_pool_sync(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	struct kvpd_pool *pool;

	return named_pool(d, c, sqe, &pool) ?: kvpd_tier_sync(d, c, pool, sqe->user_data);
}

static int op_pool_purge_remote(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	struct kvpd_pool *pool;

	return named_pool(d, c, sqe, &pool) ?: kvpd_tier_purge_remote(d, c, pool, sqe->user_data);
}

/* vLLM's reset_prefix_cache: every cached block forgets its hash; -EBUSY while any is in use. */
static int op_reset(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	struct kvpd_pool *pool;
	int ret = named_pool(d, c, sqe, &pool);

	if (ret)
		return ret;
	if (pool == c->pool)
		c->touched_pool = true;
	return kvc_pool_reset(pool->core);
}

/* kvctl daemon restart: the binary checked, then the drain begins (handover/restart.c). */
static int op_daemon_restart(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			     struct kvp_cqe *cqe)
{
	const char *path = sqe->len ? kvpd_arena_range(c, sqe->addr, sqe->len) : "";
	char why[KVP_REASON_MAX] = "";
	int ret;

	if (!path)
		return -EINVAL;
	ret = kvpd_restart_request(d, path, sqe->len, (uint32_t)c->pid, (uint32_t)c->uid, why,
				   sizeof(why));
	if (ret) {
		kvpd_log(d, KVPD_LOG_WARNING, "restart asked by pid %d refused: %s; serving on",
			 (int)c->pid, *why ? why : strerror(-ret));
		give_reason(c, sqe, cqe, why);
	}
	return ret;
}

static int admin_op(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
		    struct kvp_cqe *cqe)
{
	char name[KVP_NAME_MAX];

	if (!c->admin)
		return -EPERM;
	switch (sqe->opcode) {
	case KVP_OP_POOL_CREATE:
		return kvpd_pool_create_request(d, c, sqe, cqe);
	case KVP_OP_POOL_DESTROY:
		return arena_name(c, sqe, name) ?: op_pool_destroy(d, c, name, sqe->op_flags);
	case KVP_OP_POOL_SYNC:
		return op_pool_sync(d, c, sqe);
	case KVP_OP_POOL_PURGE_REMOTE:
		return op_pool_purge_remote(d, c, sqe);
	case KVP_OP_RESET:
		return op_reset(d, c, sqe);
	case KVP_OP_DAEMON_RESTART:
		return op_daemon_restart(d, c, sqe, cqe);
	}
	if (!c->pool)
		return -ENODEV;
	c->touched_pool = true;
	switch (sqe->opcode) {
	case KVP_OP_EVICT:
		return op_evict(c, sqe);
	case KVP_OP_DUMP_FREEQ:
		return op_dump_freeq(c, sqe);
	case KVP_OP_CHECK:
		return op_check(c, sqe);
	}
	return -EINVAL;
}

/* A sequence's request: blocks it completes go to the cluster charged to its client's tenant. */
static int seq_op_acting(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			 struct kvp_cqe *cqe)
{
	int ret;

	kvpd_tier_acting(c->pool, c);
	ret = seq_op(d, c, sqe, cqe);
	kvpd_tier_acting(c->pool, NULL);
	return ret;
}

static int dispatch(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
		    struct kvp_cqe *cqe)
{
	char name[KVP_NAME_MAX];
	void *out;

	if (sqe->flags || sqe->resv1 || sqe->resv2)
		return -EINVAL;
	if (sqe->opcode > KVP_OP_POOL_MAP && sqe->opcode < KVP_OP_POOL_CREATE)
		return -EINVAL;
	if (sqe->opcode >= KVP_OP_LAST)
		return -EINVAL;
	if (sqe->op_flags & ~known_op_flags[sqe->opcode])
		return -EINVAL;
	if (sqe->opcode >= KVP_OP_POOL_CREATE)
		return admin_op(d, c, sqe, cqe);
	switch (sqe->opcode) {
	case KVP_OP_NOP:
		return 0;
	case KVP_OP_STATS:
		out = kvpd_arena_range(c, sqe->out_addr, sqe->out_len);
		return out ? kvpd_stats(d, c, out, sqe->out_len, &cqe->aux) : -EINVAL;
	case KVP_OP_ATTACH: {
		char why[KVP_REASON_MAX] = "";
		int ret = arena_name(c, sqe, name) ?:
			  kvpd_client_attach(d, c, name, why, sizeof(why));

		if (ret) {
			give_reason(c, sqe, cqe, why);
		} else if (sqe->out_len >= sizeof(struct kvp_pool_info) &&
			   (out = kvpd_arena_range(c, sqe->out_addr, sizeof(struct kvp_pool_info)))) {
			/* The new geometry, as the setup reply gives it for the pool named there. */
			kvpd_fill_pool_info(c, out);
			cqe->aux = sizeof(struct kvp_pool_info);
			/* Then its generation, to a client that made room for it (ABI 2's). */
			if (sqe->out_len >= KVP_ATTACH_REPLY_BYTES &&
			    (out = kvpd_arena_range(c, sqe->out_addr, KVP_ATTACH_REPLY_BYTES))) {
				uint64_t gen = c->pool ? c->pool->generation : 0;

				memcpy((uint8_t *)out + sizeof(struct kvp_pool_info), &gen, sizeof(gen));
				cqe->aux = KVP_ATTACH_REPLY_BYTES;
			}
		}
		return ret;
	}
	}
	if (!c->pool)
		return -ENODEV;
	switch (sqe->opcode) {
	case KVP_OP_SEQ_OPEN:
		c->touched_pool = true;
		return op_seq_open(c, sqe, cqe);
	case KVP_OP_SEQ_CLOSE:
	case KVP_OP_APPEND_TOKENS:
	case KVP_OP_LOOKUP:
	case KVP_OP_ALLOC:
	case KVP_OP_COMMIT:
	case KVP_OP_FREE:
	case KVP_OP_GET_TABLE:
		c->touched_pool = true;
		return seq_op_acting(d, c, sqe, cqe);
	case KVP_OP_WRITE_KV:
	case KVP_OP_READ_KV:
		return kvpd_kv_io(d, c, sqe) ?: KVPD_LATER;
	case KVP_OP_ATTEND:
		return kvpd_attend(d, c, sqe) ?: KVPD_LATER;
	case KVP_OP_POOL_LAYOUT:
		out = kvpd_arena_range(c, sqe->out_addr, sqe->out_len);
		return out ? kvpd_pool_layout(c->pool, out, sqe->out_len, &cqe->aux) : -EINVAL;
	case KVP_OP_POOL_MAP: {
		char why[KVP_REASON_MAX] = "";
		int ret = kvpd_pool_map(d, c, sqe->user_data, why, sizeof(why));

		if (ret < 0)
			give_reason(c, sqe, cqe, why);
		return ret;
	}
	case KVP_OP_POOL_STATS: {
		struct kvc_pool_stats st;
		struct kvp_pool_stats ps;

		out = kvpd_arena_range(c, sqe->out_addr, sizeof(ps));
		if (!out || sqe->out_len < sizeof(ps))
			return -EINVAL;
		kvc_pool_stats(c->pool->core, &st);
		ps = (struct kvp_pool_stats){ kvc_pool_config(c->pool->core)->num_blocks, st.free,
					      st.used, st.cached };
		memcpy(out, &ps, sizeof(ps));
		return 0;
	}
	}
	return -EINVAL;
}

bool kvpd_dispatch(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
		   struct kvp_cqe *cqe)
{
	int res = dispatch(d, c, sqe, cqe);

	/* One request's blocks are one event: the next request's start another. */
	if (c->pool && c->pool->events)
		kvpd_events_cut(c->pool->events);
	if (res == KVPD_LATER)
		return false;
	cqe->res = res;
	return true;
}
