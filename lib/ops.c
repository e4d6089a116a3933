/* SPDX-License-Identifier: MIT */
/*
 * libkvpool's blocking calls: each stages its input at the start of the arena,
 * submits one entry and waits for its completion. They need the rings to
 * themselves (-EBUSY while requests of the caller's own are in flight), but
 * for lookups out (lookup_async.c), whose completions are set aside.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client.h"

struct call {
	struct kvp_sqe sqe;
	struct kvp_cqe cqe;
	uint64_t used; /* arena bytes staged so far */
};

/* Copies @len bytes (if @data) to the arena; returns their offset, or -E2BIG. */
static int64_t stage(struct kvp_client *c, struct call *call, const void *data, uint64_t len)
{
	uint64_t off = (call->used + 7) & ~7ull;

	if (off > c->arena_bytes || len > c->arena_bytes - off)
		return -E2BIG;
	if (data && len)
		memcpy(c->arena + off, data, len);
	call->used = off + len;
	return (int64_t)off;
}

/* Reserves @bytes of the arena for the reply. */
static int reserve_out(struct kvp_client *c, struct call *call, uint64_t bytes)
{
	int64_t off;

	if (bytes > UINT32_MAX)
		return -E2BIG;
	off = stage(c, call, NULL, bytes);
	if (off < 0)
		return (int)off;
	call->sqe.out_addr = (uint64_t)off;
	call->sqe.out_len = (uint32_t)bytes;
	return 0;
}

static int run(struct kvp_client *c, struct call *call)
{
	struct kvp_sqe *sqe;
	struct kvp_cqe *cqe;
	int ret;

	if (c->broken)
		return c->broken;
	/* Lookups out are the library's: their completions are set aside as this one is awaited. */
	if (c->sq_local_tail - __atomic_load_n(c->cq_head, __ATOMIC_RELAXED) != c->tickets_out)
		return -EBUSY;
	sqe = kvp_get_sqe(c);
	if (!sqe)
		return -EBUSY;
	call->sqe.user_data = ++c->next_user_data;
	*sqe = call->sqe;
	ret = kvp_submit(c);
	if (ret < 0)
		return ret;
	ret = kvp_wait_cqe(c, &cqe);
	if (ret)
		return ret;
	call->cqe = *cqe;
	kvp_cqe_seen(c, cqe);
	if (call->cqe.user_data != call->sqe.user_data)
		return -EPROTO;
	return call->cqe.res;
}

static void *out_ptr(struct kvp_client *c, const struct call *call)
{
	return c->arena + call->sqe.out_addr;
}

int kvp_nop(struct kvp_client *c)
{
	struct call call = { .sqe.opcode = KVP_OP_NOP };

	return run(c, &call);
}

int kvp_seq_open(struct kvp_client *c, const uint32_t *tokens, uint32_t n, const void *salt,
		 uint32_t salt_len, int64_t prefix, uint64_t *handle)
{
	struct call call = { .sqe = { .opcode = KVP_OP_SEQ_OPEN, .len = n, .arg2 = salt_len } };
	uint64_t token_bytes = (uint64_t)n * sizeof(*tokens);
	int64_t off = stage(c, &call, NULL, token_bytes + salt_len);
	int ret;

	if (off < 0)
		return (int)off;
	/* The salt follows the tokens directly. */
	memcpy(c->arena + off, tokens, token_bytes);
	if (salt_len)
		memcpy(c->arena + off + token_bytes, salt, salt_len);
	call.sqe.addr = (uint64_t)off;
	if (prefix >= 0) {
		if (prefix > UINT32_MAX)
			return -EINVAL;
		call.sqe.op_flags = KVP_OPEN_PREFIX;
		call.sqe.arg1 = (uint32_t)prefix;
	}
	ret = run(c, &call);
	if (ret == 0)
		*handle = call.cqe.aux;
	return ret;
}

static int handle_op(struct kvp_client *c, uint8_t opcode, uint64_t handle, uint32_t len)
{
	struct call call = { 0 };

	kvp_prep_handle_op(&call.sqe, opcode, handle, len);
	return run(c, &call);
}

int kvp_seq_close(struct kvp_client *c, uint64_t handle)
{
	return handle_op(c, KVP_OP_SEQ_CLOSE, handle, 0);
}

int kvp_commit(struct kvp_client *c, uint64_t handle, uint32_t computed)
{
	return handle_op(c, KVP_OP_COMMIT, handle, computed);
}

int kvp_free(struct kvp_client *c, uint64_t handle)
{
	return handle_op(c, KVP_OP_FREE, handle, 0);
}

int kvp_append(struct kvp_client *c, uint64_t handle, const uint32_t *tokens, uint32_t n)
{
	struct call call = { .sqe = { .opcode = KVP_OP_APPEND_TOKENS, .handle = handle, .len = n } };
	int64_t off = stage(c, &call, tokens, (uint64_t)n * sizeof(*tokens));

	if (off < 0)
		return (int)off;
	call.sqe.addr = (uint64_t)off;
	return run(c, &call);
}

/* Runs a call whose reply is block lists, copying them to @lists when given. */
static int lists_call(struct kvp_client *c, struct call *call, struct kvp_block_lists *lists,
		      size_t bytes)
{
	int ret;

	if (lists && (ret = reserve_out(c, call, bytes)))
		return ret;
	ret = run(c, call);
	if (ret >= 0 && lists && !(call->cqe.flags & KVP_CQE_F_OVERFLOW))
		memcpy(lists, out_ptr(c, call), call->sqe.out_len);
	return ret;
}

int kvp_lookup(struct kvp_client *c, uint64_t handle, struct kvp_block_lists *lists,
	       size_t lists_bytes)
{
	struct call call = { .sqe = { .opcode = KVP_OP_LOOKUP, .handle = handle } };

	return lists_call(c, &call, lists, lists_bytes);
}

int kvp_alloc(struct kvp_client *c, uint64_t handle, uint32_t new_tokens, uint32_t lookahead,
	      bool use_cache, uint32_t *hit_tokens, struct kvp_block_lists *lists,
	      size_t lists_bytes)
{
	struct call call = { 0 };
	int ret;

	kvp_prep_alloc(&call.sqe, handle, new_tokens, lookahead, use_cache);
	/* Room for no header: refused before anything is allocated, as the daemon would. */
	if (lists && lists_bytes < sizeof(*lists))
		return -EINVAL;
	ret = lists_call(c, &call, lists, lists_bytes);
	if (ret == 0 && hit_tokens)
		*hit_tokens = (uint32_t)call.cqe.aux;
	if (ret == 0 && lists && (call.cqe.flags & KVP_CQE_F_OVERFLOW))
		return -EOVERFLOW;
	return ret;
}

int kvp_get_table(struct kvp_client *c, uint64_t handle, struct kvp_block_lists *lists,
		  size_t bytes)
{
	struct call call = { .sqe = { .opcode = KVP_OP_GET_TABLE, .handle = handle } };

	return lists_call(c, &call, lists, bytes);
}

int kvp_pool_stats(struct kvp_client *c, struct kvp_pool_stats *st)
{
	struct call call = { .sqe.opcode = KVP_OP_POOL_STATS };
	int ret = reserve_out(c, &call, sizeof(*st)) ?: run(c, &call);

	if (ret == 0)
		memcpy(st, out_ptr(c, &call), sizeof(*st));
	return ret;
}

int kvp_stats(struct kvp_client *c, void *buf, size_t bytes)
{
	struct call call = { .sqe.opcode = KVP_OP_STATS };
	int ret = reserve_out(c, &call, bytes) ?: run(c, &call);

	if (ret > 0)
		memcpy(buf, out_ptr(c, &call), (size_t)ret);
	return ret;
}

/* A request whose input is a name (no NUL), staged first in the arena. */
static int stage_name(struct kvp_client *c, struct call *call, uint8_t opcode, const char *name)
{
	int64_t off = stage(c, call, name, strlen(name));

	if (off < 0)
		return (int)off;
	call->sqe.opcode = opcode;
	call->sqe.len = (uint32_t)strlen(name);
	call->sqe.addr = (uint64_t)off;
	return 0;
}

static int name_call(struct kvp_client *c, uint8_t opcode, const char *name)
{
	struct call call = { 0 };

	return stage_name(c, &call, opcode, name) ?: run(c, &call);
}

int kvp_attach(struct kvp_client *c, const char *name)
{
	struct call call = { 0 };
	int ret = stage_name(c, &call, KVP_OP_ATTACH, name) ?:
		  reserve_out(c, &call, KVP_ATTACH_REPLY_BYTES) ?: run(c, &call);

	if (ret == 0) {
		/* A daemon before generations writes the pool's info alone. */
		memset(&c->pool, 0, sizeof(c->pool));
		c->pool_generation = 0;
		if (call.cqe.aux == sizeof(c->pool) || call.cqe.aux == KVP_ATTACH_REPLY_BYTES)
			memcpy(&c->pool, out_ptr(c, &call), sizeof(c->pool));
		if (call.cqe.aux == KVP_ATTACH_REPLY_BYTES)
			memcpy(&c->pool_generation, (uint8_t *)out_ptr(c, &call) + sizeof(c->pool),
			       sizeof(c->pool_generation));
	}
	return ret;
}

int kvp_pool_layout(struct kvp_client *c, void *buf, size_t bytes)
{
	struct call call = { .sqe.opcode = KVP_OP_POOL_LAYOUT };
	int ret = reserve_out(c, &call, bytes);

	if (ret)
		return ret;
	ret = run(c, &call);
	if (ret == -EOVERFLOW)
		return call.cqe.aux > INT32_MAX ? -EOVERFLOW : (int)call.cqe.aux;
	if (ret > 0)
		memcpy(buf, out_ptr(c, &call), (size_t)ret);
	return ret;
}

/* A refusal's reason (cqe.aux bytes at out_addr) into @why; "" when none came. */
static void take_reason(struct kvp_client *c, const struct call *call, int ret, char *why,
			size_t why_len)
{
	if (why && why_len)
		snprintf(why, why_len, "%.*s", ret < 0 && call->cqe.aux ? KVP_REASON_MAX - 1 : 0,
			 (const char *)out_ptr(c, call));
}

int kvp_pool_map_request(struct kvp_client *c, uint64_t *tag, char *why, size_t why_len)
{
	struct call call = { .sqe.opcode = KVP_OP_POOL_MAP };
	int ret = reserve_out(c, &call, KVP_REASON_MAX);

	if (ret)
		return ret;
	ret = run(c, &call);
	*tag = call.sqe.user_data;
	take_reason(c, &call, ret, why, why_len);
	return ret;
}

int kvp_daemon_restart(struct kvp_client *c, const char *path, char *why, size_t why_len)
{
	struct call call = { .sqe.opcode = KVP_OP_DAEMON_RESTART };
	size_t len = path ? strlen(path) : 0;
	int64_t off = stage(c, &call, path, len);
	int ret;

	if (why && why_len)
		*why = '\0';
	if (off < 0)
		return (int)off;
	call.sqe.addr = (uint64_t)off;
	call.sqe.len = (uint32_t)len;
	ret = reserve_out(c, &call, KVP_REASON_MAX);
	if (ret)
		return ret;
	ret = run(c, &call);
	take_reason(c, &call, ret, why, why_len);
	return ret < 0 ? ret : 0;
}

int kvp_pool_destroy(struct kvp_client *c, const char *name)
{
	return kvp_pool_destroy_flags(c, name, 0);
}

int kvp_pool_destroy_flags(struct kvp_client *c, const char *name, uint32_t flags)
{
	struct call call = { 0 };
	int ret = stage_name(c, &call, KVP_OP_POOL_DESTROY, name);

	if (ret)
		return ret;
	call.sqe.op_flags = flags;
	return run(c, &call);
}

int kvp_pool_sync(struct kvp_client *c, const char *name)
{
	return name_call(c, KVP_OP_POOL_SYNC, name ? name : "");
}

int kvp_pool_purge_remote(struct kvp_client *c, const char *name, uint64_t *purged)
{
	struct call call = { 0 };
	int ret = stage_name(c, &call, KVP_OP_POOL_PURGE_REMOTE, name ? name : "") ?:
		  run(c, &call);

	if (ret >= 0 && purged)
		*purged = call.cqe.aux;
	return ret < 0 ? ret : 0;
}

static int pool_create(struct kvp_client *c, const struct kvp_pool_params *params,
		       uint32_t op_flags)
{
	struct call call = { .sqe = { .opcode = KVP_OP_POOL_CREATE, .len = sizeof(*params),
				      .op_flags = op_flags } };
	int64_t off = stage(c, &call, params, sizeof(*params));

	if (off < 0)
		return (int)off;
	call.sqe.addr = (uint64_t)off;
	return run(c, &call);
}

/* POOL_CREATE of the @len bytes staged at @off: room for a refusal's reason, run, the reason. */
static int create_staged(struct kvp_client *c, struct call *call, int64_t off, uint32_t len,
			 char *why, size_t why_len)
{
	int ret;

	if (off < 0)
		return (int)off;
	call->sqe.addr = (uint64_t)off;
	call->sqe.len = len;
	ret = reserve_out(c, call, KVP_REASON_MAX);
	if (ret)
		return ret;
	ret = run(c, call);
	take_reason(c, call, ret, why, why_len);
	return ret;
}

int kvp_pool_create_v2(struct kvp_client *c, const struct kvp_pool_params_v2 *params,
		       uint32_t op_flags, char *why, size_t why_len)
{
	struct call call = { .sqe = { .opcode = KVP_OP_POOL_CREATE, .op_flags = op_flags } };

	return create_staged(c, &call, stage(c, &call, params, sizeof(*params)), sizeof(*params),
			     why, why_len);
}

int kvp_pool_create_v3(struct kvp_client *c, const struct kvp_pool_params_v2 *params,
		       const char *keys, uint32_t op_flags, char *why, size_t why_len)
{
	struct kvp_pool_params_v3 v3 = { .v2 = *params };
	struct call call = { .sqe = { .opcode = KVP_OP_POOL_CREATE, .op_flags = op_flags } };
	size_t keys_len = keys ? strlen(keys) : 0;
	int64_t off;

	if (why && why_len)
		*why = '\0';
	if (!(c->features & KVP_FEAT_POOL_KEYS)) {
		if (why && why_len)
			snprintf(why, why_len, "the daemon takes no pool keys (POOL_CREATE v3): "
				 "an older kvpoold");
		return -EOPNOTSUPP;
	}
	if (keys_len > KVP_POOL_KEYS_MAX)
		return -E2BIG;
	v3.keys_len = (uint32_t)keys_len;
	off = stage(c, &call, &v3, sizeof(v3));
	/* The text right after the struct: v3 and its keys are one range. */
	if (off >= 0 && keys_len && stage(c, &call, keys, keys_len) != off + (int64_t)sizeof(v3))
		off = -E2BIG;
	return create_staged(c, &call, off, (uint32_t)(sizeof(v3) + keys_len), why, why_len);
}

int kvp_pool_create(struct kvp_client *c, const struct kvp_pool_params *params)
{
	return pool_create(c, params, 0);
}

int kvp_pool_create_owned(struct kvp_client *c, const struct kvp_pool_params *params)
{
	return pool_create(c, params, KVP_POOL_OWNED);
}

int kvp_evict(struct kvp_client *c, const uint32_t *ids, uint32_t n)
{
	struct call call = { .sqe = { .opcode = KVP_OP_EVICT, .len = n } };
	int64_t off = stage(c, &call, ids, (uint64_t)n * sizeof(*ids));

	if (off < 0)
		return (int)off;
	call.sqe.addr = (uint64_t)off;
	return run(c, &call);
}

int kvp_reset(struct kvp_client *c)
{
	struct call call = { .sqe.opcode = KVP_OP_RESET };

	return run(c, &call);
}

int kvp_pool_reset(struct kvp_client *c, const char *name)
{
	return name_call(c, KVP_OP_RESET, name);
}

int kvp_dump_freeq(struct kvp_client *c, uint32_t *ids, uint32_t max)
{
	struct call call = { .sqe.opcode = KVP_OP_DUMP_FREEQ };
	int ret = reserve_out(c, &call, (uint64_t)max * sizeof(*ids)) ?: run(c, &call);

	if (ret > 0)
		memcpy(ids, out_ptr(c, &call), (size_t)((uint32_t)ret < max ? (uint32_t)ret : max) * sizeof(*ids));
	return ret;
}

int kvp_check(struct kvp_client *c, char *why, size_t why_len)
{
	struct call call = { .sqe.opcode = KVP_OP_CHECK };
	int ret = reserve_out(c, &call, 256);

	if (ret)
		return ret;
	ret = run(c, &call);
	if (why && why_len)
		snprintf(why, why_len, "%.*s", 255, (const char *)out_ptr(c, &call));
	return ret;
}

static size_t dtype_bytes(uint32_t dtype)
{
	return dtype == KVP_DTYPE_F32 ? 4 : 2;
}

/* Bytes of K (or of V) for @count tokens of the attached pool. */
static uint64_t kv_bytes(const struct kvp_client *c, uint32_t count)
{
	return (uint64_t)count * c->pool.kv_heads * c->pool.head_dim * dtype_bytes(c->pool.dtype);
}

int kvp_write_kv(struct kvp_client *c, uint64_t handle, uint32_t group, uint32_t layer,
		 uint32_t first_pos, uint32_t count, const void *k, const void *v)
{
	struct call call = { 0 };
	uint64_t bytes = kv_bytes(c, count);
	int64_t off;

	if (group > 0xffff || layer > 0xffff)
		return -EINVAL;
	off = stage(c, &call, NULL, 2 * bytes);
	if (off < 0)
		return (int)off;
	memcpy(c->arena + off, k, bytes);
	memcpy(c->arena + off + bytes, v, bytes);
	kvp_prep_kv(&call.sqe, KVP_OP_WRITE_KV, handle, (uint16_t)group, (uint16_t)layer, first_pos,
		    count, (uint64_t)off, 0);
	return run(c, &call);
}

int kvp_read_kv(struct kvp_client *c, uint64_t handle, uint32_t group, uint32_t layer,
		uint32_t first_pos, uint32_t count, void *k, void *v)
{
	struct call call = { 0 };
	uint64_t bytes = kv_bytes(c, count);
	int ret;

	if (group > 0xffff || layer > 0xffff)
		return -EINVAL;
	ret = reserve_out(c, &call, 2 * bytes);
	if (ret)
		return ret;
	kvp_prep_kv(&call.sqe, KVP_OP_READ_KV, handle, (uint16_t)group, (uint16_t)layer, first_pos,
		    count, call.sqe.out_addr, call.sqe.out_len);
	ret = run(c, &call);
	if (ret == 0) {
		memcpy(k, out_ptr(c, &call), bytes);
		memcpy(v, (uint8_t *)out_ptr(c, &call) + bytes, bytes);
	}
	return ret;
}

static size_t q_row_bytes(const struct kvp_client *c, bool q_f32)
{
	return (size_t)c->pool.head_dim * (q_f32 ? 4 : dtype_bytes(c->pool.dtype));
}

int64_t kvp_prep_attend(struct kvp_client *c, struct kvp_sqe *sqe, uint64_t off,
			uint32_t group, uint32_t layer, uint32_t q_heads, float scale,
			float softcap, bool q_f32, const struct kvp_attend_req *seqs,
			uint32_t nseqs)
{
	uint64_t hdr = sizeof(struct kvp_attend) + (uint64_t)nseqs * sizeof(struct kvp_attend_seq);
	size_t head_bytes = q_row_bytes(c, q_f32);
	struct call staged = { .used = off };
	struct kvp_attend *a;
	int64_t at;

	if (group > 0xffff || layer > 0xffff || hdr > UINT32_MAX || off % 8)
		return -EINVAL;
	at = stage(c, &staged, NULL, hdr);
	if (at < 0)
		return at;
	a = (struct kvp_attend *)(c->arena + at);
	*a = (struct kvp_attend){ .group = (uint16_t)group, .layer = (uint16_t)layer,
				  .num_seqs = nseqs, .q_heads = q_heads,
				  .flags = q_f32 ? KVP_ATTEND_Q_F32 : 0, .scale = scale,
				  .softcap = softcap };
	for (uint32_t s = 0; s < nseqs; s++) {
		uint64_t bytes = (uint64_t)seqs[s].count * q_heads * head_bytes;
		int64_t q = stage(c, &staged, seqs[s].q, bytes), out = stage(c, &staged, NULL, bytes);

		if (q < 0 || out < 0)
			return -E2BIG;
		a->seqs[s] = (struct kvp_attend_seq){ .handle = seqs[s].handle,
						      .first_pos = seqs[s].first_pos,
						      .count = seqs[s].count,
						      .q_off = (uint64_t)q,
						      .out_off = (uint64_t)out };
	}
	sqe->opcode = KVP_OP_ATTEND;
	sqe->addr = (uint64_t)at;
	sqe->len = (uint32_t)hdr;
	return (int64_t)(staged.used - off);
}

void kvp_attend_collect(struct kvp_client *c, uint64_t off, uint32_t q_heads, bool q_f32,
			const struct kvp_attend_req *seqs, uint32_t nseqs)
{
	const struct kvp_attend *a = (const struct kvp_attend *)(c->arena + off);
	size_t head_bytes = q_row_bytes(c, q_f32);

	for (uint32_t s = 0; s < nseqs; s++)
		memcpy(seqs[s].out, c->arena + a->seqs[s].out_off,
		       (size_t)seqs[s].count * q_heads * head_bytes);
}

int kvp_attend(struct kvp_client *c, uint32_t group, uint32_t layer, uint32_t q_heads,
	       float scale, float softcap, bool q_f32, const struct kvp_attend_req *seqs,
	       uint32_t nseqs)
{
	struct call call = { 0 };
	int64_t staged = kvp_prep_attend(c, &call.sqe, 0, group, layer, q_heads, scale, softcap,
					 q_f32, seqs, nseqs);
	int ret;

	if (staged < 0)
		return (int)staged;
	ret = run(c, &call);
	if (ret == 0)
		kvp_attend_collect(c, 0, q_heads, q_f32, seqs, nseqs);
	return ret;
}
