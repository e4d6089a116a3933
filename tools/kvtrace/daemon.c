/* SPDX-License-Identifier: MIT */
/*
 * The daemon trace target: the trace runs through kvpoold as one admin client,
 * on a private pool created from its pool/group lines and destroyed at the end.
 * It must print exactly what the in-process target prints.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "name_map.h"
#include "trace.h"

/*
 * The connection outlives every sequence of the trace, so its arena is sized
 * once: token arrays go through it in pieces (append_tokens), and a quarter
 * of a uid's default max_arena_bytes leaves room for three more replays.
 */
#define ARENA_BYTES (64ull << 20)

struct daemon_seq {
	uint64_t handle;
	uint64_t tokens;
};

struct daemon_target {
	struct trace_target base;
	const char *socket;
	struct kvp_client *client;
	struct kvp_pool_params params;
	bool pool_created;
	struct name_map seqs;
	void *buf;
	size_t buf_bytes;
};

static int reserve_buf(struct daemon_target *t, size_t bytes)
{
	void *p;

	if (bytes <= t->buf_bytes)
		return 0;
	p = realloc(t->buf, bytes);
	if (!p)
		return -ENOMEM;
	t->buf = p;
	t->buf_bytes = bytes;
	return 0;
}

static void print_lists(const struct kvp_block_lists *l, struct trace_out *out)
{
	const uint32_t *ids = l->ids;

	for (uint32_t g = 0; g < l->num_groups; g++) {
		trace_out_ids(out, ids, l->counts[g]);
		ids += l->counts[g];
	}
}

/* Arena bytes a blocking call can use for its reply: all of it (staged from offset 0). */
static size_t max_out_bytes(const struct daemon_target *t)
{
	uint64_t bytes;

	kvp_arena(t->client, &bytes);
	return bytes < UINT32_MAX ? (size_t)bytes : UINT32_MAX;
}

/* Room for block lists of @ids ids in all, capped by what a reply can hold. */
static size_t lists_bytes(const struct daemon_target *t, uint64_t ids)
{
	uint64_t bytes = sizeof(struct kvp_block_lists) + ids * sizeof(uint32_t);

	return bytes < max_out_bytes(t) ? (size_t)bytes : max_out_bytes(t);
}

/*
 * A lookup hit is at most (tokens - 1) / block_size blocks, in every group; it
 * may exceed the pool's blocks, as windows leave null positions in it.
 */
static size_t lookup_bytes(const struct daemon_target *t, const struct daemon_seq *s)
{
	uint64_t blocks = s->tokens ? (s->tokens - 1) / t->params.block_size : 0;

	return lists_bytes(t, blocks * t->params.num_groups);
}

/*
 * ALLOC's new blocks all leave the free queue, so there are fewer of them, in
 * all groups together, than the pool's blocks; and no more than a table of
 * tokens + new + lookahead tokens (at most max_len) has, per group.
 */
static size_t alloc_bytes(const struct daemon_target *t, const struct daemon_seq *s,
			  const struct trace_cmd *cmd)
{
	uint64_t cap = s->tokens + (uint64_t)cmd->count + cmd->lookahead;
	uint64_t ids;

	if (cap > t->params.max_len)
		cap = t->params.max_len;
	ids = (uint64_t)t->params.num_groups * (cap / t->params.block_size + 2);
	return lists_bytes(t, ids < t->params.num_blocks ? ids : t->params.num_blocks);
}

/*
 * APPEND_TOKENS in pieces the arena holds. The core refuses a whole append
 * that would pass KVC_MAX_TOKENS (-E2BIG, nothing appended): refused here too
 * before a piece is sent, so that no part of it lands.
 */
static int append_tokens(struct daemon_target *t, struct daemon_seq *s, const uint32_t *tokens,
			 uint32_t n)
{
	uint32_t piece = (uint32_t)(max_out_bytes(t) / sizeof(uint32_t));
	int ret = 0;

	if (n > piece && s->tokens + n > KVC_MAX_TOKENS)
		return -E2BIG;
	for (uint32_t done = 0; !ret && done < n; done += piece) {
		uint32_t m = n - done < piece ? n - done : piece;

		ret = kvp_append(t->client, s->handle, tokens + done, m);
		if (!ret)
			s->tokens += m;
	}
	return ret;
}

/* GET_TABLE: a table's length is not known here, so the reply room doubles until it fits. */
static int get_table(struct daemon_target *t, const struct daemon_seq *s)
{
	size_t max = max_out_bytes(t), bytes = (size_t)64 << 10 < max ? (size_t)64 << 10 : max;
	int ret;

	for (;;) {
		ret = reserve_buf(t, bytes);
		if (!ret)
			ret = kvp_get_table(t->client, s->handle, t->buf, bytes);
		if (ret != -EOVERFLOW || bytes == max)
			return ret;
		bytes = bytes < max / 2 ? bytes * 2 : max;
	}
}

static int exec_seq_cmd(struct daemon_target *t, const struct trace_cmd *cmd,
			struct daemon_seq *s, struct trace_out *out)
{
	uint32_t hit;
	int ret;

	switch (cmd->op) {
	case TRACE_APPEND:
		ret = append_tokens(t, s, cmd->values, cmd->nvalues);
		break;
	case TRACE_COMPUTED:
		ret = kvp_commit(t->client, s->handle, cmd->count);
		break;
	case TRACE_LOOKUP:
		ret = reserve_buf(t, lookup_bytes(t, s));
		if (ret)
			return ret;
		ret = kvp_lookup(t->client, s->handle, t->buf, lookup_bytes(t, s));
		if (ret < 0)
			break;
		trace_out_printf(out, "hit %s %d", cmd->id, ret);
		print_lists(t->buf, out);
		return 0;
	case TRACE_ALLOC: {
		size_t bytes = alloc_bytes(t, s, cmd);

		ret = reserve_buf(t, bytes);
		if (ret)
			return ret;
		ret = kvp_alloc(t->client, s->handle, cmd->count, cmd->lookahead, cmd->hit, &hit,
				t->buf, bytes);
		if (ret == -ENOSPC) {
			trace_out_printf(out, "alloc %s nospace", cmd->id);
			return 0;
		}
		if (ret)
			break;
		trace_out_printf(out, "alloc %s ok", cmd->id);
		print_lists(t->buf, out);
		return 0;
	}
	case TRACE_FREE:
		ret = kvp_free(t->client, s->handle);
		if (ret)
			return ret;
		trace_out_printf(out, "free %s", cmd->id);
		return 0;
	case TRACE_TABLE:
		ret = get_table(t, s);
		if (ret < 0)
			return ret;
		trace_out_printf(out, "table %s", cmd->id);
		print_lists(t->buf, out);
		return 0;
	default:
		return -EINVAL;
	}
	/* As the core target: the core's -E2BIG (past KVC_MAX_TOKENS) is a refusal too. */
	if (ret == -EINVAL || ret == -E2BIG) {
		trace_out_printf(out, "%s %s invalid", cmd->name, cmd->id);
		return 0;
	}
	return ret;
}

static int exec_new_seq(struct daemon_target *t, const struct trace_cmd *cmd,
			struct trace_out *out)
{
	struct daemon_seq *s;
	int ret;

	if (name_map_get(&t->seqs, cmd->id)) {
		trace_out_printf(out, "seq %s invalid", cmd->id);
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	ret = kvp_seq_open(t->client, cmd->values, cmd->nvalues, cmd->salt,
			   cmd->salt ? (uint32_t)strlen(cmd->salt) : 0, cmd->prefix, &s->handle);
	if (ret == -EINVAL) {
		free(s);
		trace_out_printf(out, "seq %s invalid", cmd->id);
		return 0;
	}
	s->tokens = cmd->nvalues;
	if (!ret)
		ret = name_map_put(&t->seqs, cmd->id, s);
	if (ret)
		free(s);
	return ret;
}

static int exec_freeq(struct daemon_target *t, struct trace_out *out)
{
	int n, ret = reserve_buf(t, (size_t)t->params.num_blocks * sizeof(uint32_t));

	if (ret)
		return ret;
	n = kvp_dump_freeq(t->client, t->buf, t->params.num_blocks);
	if (n < 0)
		return n;
	trace_out_printf(out, "freeq");
	trace_out_ids(out, t->buf, (uint32_t)n);
	return 0;
}

static int daemon_exec(struct trace_target *base, const struct trace_cmd *cmd,
		       struct trace_out *out)
{
	struct daemon_target *t = (struct daemon_target *)base;
	struct kvp_pool_stats st;
	struct daemon_seq *s;
	int ret;

	switch (cmd->op) {
	case TRACE_SEQ:
		return exec_new_seq(t, cmd, out);
	case TRACE_FREEQ:
		return exec_freeq(t, out);
	case TRACE_STATS:
		ret = kvp_pool_stats(t->client, &st);
		if (ret)
			return ret;
		trace_out_printf(out, "stats free=%u used=%u cached=%u", st.blocks_free, st.blocks_used,
				 st.blocks_cached);
		return 0;
	case TRACE_COPIES:
	case TRACE_SNAPSHOTS:
		fprintf(stderr, "kvtrace: %s: in process only (kvpoold does the copies itself; kvctl stats counts its snapshots)\n",
			cmd->name);
		return -EOPNOTSUPP;
	case TRACE_RESET:
		ret = kvp_reset(t->client);
		if (ret && ret != -EBUSY)
			return ret;
		trace_out_printf(out, "reset %s", ret ? "busy" : "ok");
		return 0;
	case TRACE_EVICT:
		ret = kvp_evict(t->client, cmd->values, cmd->nvalues);
		if (ret < 0 && ret != -EINVAL)
			return ret;
		trace_out_printf(out, "evict %s", ret < 0 ? "invalid" : "ok");
		return 0;
	default:
		s = name_map_get(&t->seqs, cmd->id);
		if (!s) {
			trace_out_printf(out, "%s %s invalid", cmd->name, cmd->id);
			return 0;
		}
		return exec_seq_cmd(t, cmd, s, out);
	}
}

/*
 * Says why on stderr itself, naming the socket and the daemon's reason: the
 * target interface carries only an errno, which would say "No such file or
 * directory" for a daemon that is not there.
 */
static int daemon_create_pool(struct trace_target *base, const struct kvc_pool_config *cfg)
{
	struct daemon_target *t = (struct daemon_target *)base;
	char why[KVP_REASON_MAX] = "", msg[2 * KVP_REASON_MAX];
	struct kvp_connect_opts opts = {
		.socket_path = t->socket, .arena_bytes = ARENA_BYTES, .admin = true,
		.why = why, .why_len = sizeof(why),
	};
	struct kvp_pool_params_v2 params;
	static unsigned seq;
	char name[KVP_NAME_MAX];
	int ret;

	snprintf(name, sizeof(name), "kvtrace-%d-%u", (int)getpid(), seq++);
	kvp_pool_params_init(&t->params, name);
	t->params.num_blocks = cfg->num_blocks;
	t->params.block_size = cfg->block_size;
	t->params.caching = cfg->caching;
	t->params.free_order = cfg->free_order == KVC_FREE_APPEND;
	t->params.publish = cfg->publish == KVC_PUBLISH_ALLOC;
	t->params.max_len = cfg->max_len;
	t->params.max_step_tokens = cfg->max_step_tokens;
	t->params.num_groups = (uint8_t)cfg->num_groups;
	for (uint32_t g = 0; g < cfg->num_groups; g++) {
		/* kvcore's and the ABI's kinds are numbered alike. */
		t->params.group_kind[g] = (uint8_t)cfg->groups[g].kind;
		t->params.group_param[g] = cfg->groups[g].param;
	}
	ret = kvp_connect(&opts, &t->client);
	if (ret) {
		fprintf(stderr, "kvtrace: cannot create the pool: %s\n",
			kvp_connect_error(&opts, ret, msg, sizeof(msg)));
		return ret;
	}
	/* Owned: a replay killed half way leaves no pool behind. */
	memset(&params, 0, sizeof(params));
	params.v1 = t->params;
	why[0] = '\0';
	ret = kvp_pool_create_v2(t->client, &params, KVP_POOL_OWNED, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "kvtrace: kvpoold at %s refused pool %s: %s\n", t->socket, name,
			*why ? why : strerror(-ret));
		return ret;
	}
	t->pool_created = true;
	ret = kvp_attach(t->client, name);
	if (ret)
		fprintf(stderr, "kvtrace: cannot attach pool %s on kvpoold at %s: %s\n", name,
			t->socket, strerror(-ret));
	return ret;
}

static void daemon_destroy(struct trace_target *base)
{
	struct daemon_target *t = (struct daemon_target *)base;
	struct name_map_slot *slots = t->seqs.slots;

	for (size_t i = 0; t->client && i < t->seqs.cap; i++)
		if (slots[i].name)
			kvp_seq_close(t->client, ((struct daemon_seq *)slots[i].value)->handle);
	name_map_release(&t->seqs, free);
	if (t->pool_created && kvp_pool_destroy(t->client, t->params.name))
		fprintf(stderr, "kvtrace: could not destroy pool %s\n", t->params.name);
	kvp_close(t->client);
	free(t->buf);
	free(t);
}

int trace_daemon_target(const char *socket, struct trace_target **out)
{
	struct daemon_target *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->base = (struct trace_target){
		.exec = daemon_exec, .create_pool = daemon_create_pool, .destroy = daemon_destroy,
	};
	t->socket = socket;
	*out = &t->base;
	return 0;
}
