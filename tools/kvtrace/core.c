/* SPDX-License-Identifier: MIT */
/* The in-process trace target: each command is one call into kvcore. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "name_map.h"
#include "trace.h"

struct core_target {
	struct trace_target base;
	struct kvc_pool *pool;
	struct name_map seqs;
	uint32_t *scratch; /* free-queue listing */
	struct kvc_copy *copies; /* the last alloc's or computed's, done already */
	uint32_t ncopies, copies_cap;
};

/* The core's copies, done at once: there is no KV in process, only the blocks' fate. */
static int do_copies(struct core_target *t)
{
	const struct kvc_copy *c;
	uint32_t n = kvc_pool_copies(t->pool, &c);

	if (n > t->copies_cap) {
		struct kvc_copy *p = realloc(t->copies, (size_t)n * sizeof(*p));

		if (!p)
			return -ENOMEM;
		t->copies = p;
		t->copies_cap = n;
	}
	for (uint32_t i = 0; i < n; i++)
		t->copies[i] = c[i];
	t->ncopies = n;
	for (uint32_t i = 0; i < n; i++)
		kvc_copy_done(t->pool, &t->copies[i], true);
	return 0;
}

static void print_copies(const struct core_target *t, struct trace_out *out)
{
	trace_out_printf(out, "copies");
	for (int make = 1; make >= 0; make--) {
		const char *sep = "";

		trace_out_printf(out, make ? " made [" : " hit [");
		for (uint32_t i = 0; i < t->ncopies; i++) {
			if (t->copies[i].make != make)
				continue;
			trace_out_printf(out, "%s%u>%u", sep, t->copies[i].src, t->copies[i].dst);
			sep = ",";
		}
		trace_out_printf(out, "]");
	}
}

static void print_tables(struct kvc_pool *pool, struct kvc_seq *seq, const uint32_t *first,
			 struct trace_out *out)
{
	for (uint32_t g = 0; g < kvc_pool_config(pool)->num_groups; g++) {
		uint32_t len;
		const uint32_t *ids = kvc_seq_table(seq, g, &len);
		uint32_t from = first ? first[g] : 0;

		trace_out_ids(out, ids ? ids + from : NULL, len - from);
	}
}

static int exec_seq_cmd(struct core_target *t, const struct trace_cmd *cmd,
			struct kvc_seq *seq, struct trace_out *out)
{
	uint32_t ngroups = kvc_pool_config(t->pool)->num_groups;
	int ret;

	switch (cmd->op) {
	case TRACE_APPEND:
		ret = kvc_seq_append(seq, cmd->values, cmd->nvalues);
		break;
	case TRACE_COMPUTED:
		ret = kvc_seq_computed(seq, cmd->count);
		if (!ret)
			return do_copies(t);
		break;
	case TRACE_LOOKUP: {
		struct kvc_hit hit;

		ret = kvc_lookup(seq, &hit);
		if (ret)
			return ret;
		trace_out_printf(out, "hit %s %u", cmd->id, hit.tokens);
		for (uint32_t g = 0; g < ngroups; g++)
			trace_out_ids(out, hit.ids[g], hit.nids[g]);
		return 0;
	}
	case TRACE_ALLOC: {
		struct kvc_alloc_req req = {
			.new_tokens = cmd->count, .lookahead = cmd->lookahead, .use_cache = cmd->hit,
		};
		struct kvc_alloc_res res;

		ret = kvc_alloc(seq, &req, &res);
		if (ret == -ENOSPC) {
			trace_out_printf(out, "alloc %s nospace", cmd->id);
			return 0;
		}
		if (ret)
			break;
		trace_out_printf(out, "alloc %s ok", cmd->id);
		print_tables(t->pool, seq, res.first_new, out);
		return do_copies(t);
	}
	case TRACE_FREE:
		kvc_seq_free(seq);
		trace_out_printf(out, "free %s", cmd->id);
		return 0;
	case TRACE_TABLE:
		trace_out_printf(out, "table %s", cmd->id);
		print_tables(t->pool, seq, NULL, out);
		return 0;
	default:
		return -EINVAL;
	}
	if (ret == -EINVAL || ret == -E2BIG)
		trace_out_printf(out, "%s %s invalid", cmd->name, cmd->id);
	return ret == -EINVAL || ret == -E2BIG ? 0 : ret;
}

static int exec_new_seq(struct core_target *t, const struct trace_cmd *cmd, struct trace_out *out)
{
	struct kvc_seq *seq;
	int ret;

	if (name_map_get(&t->seqs, cmd->id)) {
		trace_out_printf(out, "seq %s invalid", cmd->id);
		return 0;
	}
	ret = kvc_seq_create(t->pool, cmd->values, cmd->nvalues, cmd->salt,
			     cmd->salt ? strlen(cmd->salt) : 0, cmd->prefix, &seq);
	if (ret == -EINVAL) {
		trace_out_printf(out, "seq %s invalid", cmd->id);
		return 0;
	}
	if (ret)
		return ret;
	ret = name_map_put(&t->seqs, cmd->id, seq);
	if (ret)
		kvc_seq_destroy(seq);
	return ret;
}

static int exec_freeq(struct core_target *t, struct trace_out *out)
{
	uint32_t n = kvc_pool_free_queue(t->pool, NULL, 0);
	uint32_t *ids = realloc(t->scratch, ((size_t)n + 1) * sizeof(*ids));

	if (!ids)
		return -ENOMEM;
	t->scratch = ids;
	kvc_pool_free_queue(t->pool, ids, n);
	trace_out_printf(out, "freeq");
	trace_out_ids(out, ids, n);
	return 0;
}

static int core_exec(struct trace_target *base, const struct trace_cmd *cmd,
		     struct trace_out *out)
{
	struct core_target *t = (struct core_target *)base;
	struct kvc_pool_counters pc;
	struct kvc_pool_stats st;
	struct kvc_seq *seq;

	switch (cmd->op) {
	case TRACE_SEQ:
		return exec_new_seq(t, cmd, out);
	case TRACE_FREEQ:
		return exec_freeq(t, out);
	case TRACE_STATS:
		kvc_pool_stats(t->pool, &st);
		trace_out_printf(out, "stats free=%u used=%u cached=%u", st.free, st.used, st.cached);
		return 0;
	case TRACE_RESET:
		trace_out_printf(out, "reset %s", kvc_pool_reset(t->pool) ? "busy" : "ok");
		return 0;
	case TRACE_COPIES:
		print_copies(t, out);
		return 0;
	case TRACE_SNAPSHOTS:
		kvc_pool_counters(t->pool, &pc);
		trace_out_printf(out, "snapshots held=%u made=%llu hit=%llu evicted=%llu skipped=%llu",
				 pc.snap_held, (unsigned long long)pc.snap_made,
				 (unsigned long long)pc.snap_hit, (unsigned long long)pc.snap_evicted,
				 (unsigned long long)pc.snap_skipped);
		return 0;
	case TRACE_EVICT:
		trace_out_printf(out, "evict %s",
				 kvc_pool_evict(t->pool, cmd->values, cmd->nvalues) < 0 ? "invalid" : "ok");
		return 0;
	default:
		seq = name_map_get(&t->seqs, cmd->id);
		if (!seq) {
			trace_out_printf(out, "%s %s invalid", cmd->name, cmd->id);
			return 0;
		}
		return exec_seq_cmd(t, cmd, seq, out);
	}
}

static int core_create_pool(struct trace_target *base, const struct kvc_pool_config *cfg)
{
	struct core_target *t = (struct core_target *)base;

	return kvc_pool_create(cfg, &t->pool);
}

static void destroy_seq(void *seq)
{
	kvc_seq_destroy(seq);
}

static void core_destroy(struct trace_target *base)
{
	struct core_target *t = (struct core_target *)base;

	name_map_release(&t->seqs, destroy_seq);
	kvc_pool_destroy(t->pool);
	free(t->scratch);
	free(t->copies);
	free(t);
}

int trace_core_target(struct trace_target **out)
{
	struct core_target *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->base = (struct trace_target){
		.exec = core_exec, .create_pool = core_create_pool, .destroy = core_destroy,
	};
	*out = &t->base;
	return 0;
}
