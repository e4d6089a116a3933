/* SPDX-License-Identifier: MIT */
/* The stats snapshot as JSON (json-c): what kvctl stats --json prints and Client.stats() returns. */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "libkvpool.h"

static json_object *jname(const char *name)
{
	return json_object_new_string_len(name, (int)strnlen(name, KVP_NAME_MAX));
}

static json_object *ju64(uint64_t v)
{
	return json_object_new_int64((int64_t)v);
}

static json_object *client_json(const struct kvp_stats_client *c)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "client_id", ju64(c->client_id));
	json_object_object_add(o, "pid", json_object_new_int64(c->pid));
	json_object_object_add(o, "uid", ju64(c->uid));
	json_object_object_add(o, "namespace", jname(c->namespace_));
	json_object_object_add(o, "pool", jname(c->pool));
	json_object_object_add(o, "sequences", ju64(c->sequences));
	json_object_object_add(o, "blocks_held", ju64(c->blocks_held));
	json_object_object_add(o, "ops", ju64(c->ops));
	return o;
}

/* A pool's tier, or null: kvctl's TIERS table in JSON. */
static json_object *tier_json(const struct kvp_stats_tier *t)
{
	json_object *o, *unoffered;

	if (!t || !t->in_use)
		return NULL;
	o = json_object_new_object();
	json_object_object_add(o, "kind", json_object_new_string(t->kind == KVP_TIER_DISK ? "disk" :
								  "host"));
	json_object_object_add(o, "bytes", ju64(t->bytes));
	json_object_object_add(o, "slots", ju64(t->slots));
	json_object_object_add(o, "slot_bytes", ju64(t->slot_bytes));
	json_object_object_add(o, "held", ju64(t->held));
	json_object_object_add(o, "held_bytes", ju64((uint64_t)t->slot_bytes * t->held));
	json_object_object_add(o, "queued", ju64(t->queued));
	json_object_object_add(o, "stored", ju64(t->stored));
	json_object_object_add(o, "skipped", ju64(t->skipped));
	json_object_object_add(o, "abandoned", ju64(t->abandoned));
	json_object_object_add(o, "evicted", ju64(t->evicted));
	json_object_object_add(o, "promoted", ju64(t->promoted));
	json_object_object_add(o, "read_failures", ju64(t->read_failures));
	json_object_object_add(o, "hit_tokens", ju64(t->hit_tokens));
	json_object_object_add(o, "bytes_down", ju64(t->bytes_down));
	json_object_object_add(o, "bytes_up", ju64(t->bytes_up));
	json_object_object_add(o, "mb_per_s_down", json_object_new_double(
		t->ns_down ? (double)t->bytes_down / (double)t->ns_down * 1000.0 : 0.0));
	json_object_object_add(o, "mb_per_s_up", json_object_new_double(
		t->ns_up ? (double)t->bytes_up / (double)t->ns_up * 1000.0 : 0.0));
	json_object_object_add(o, "restored", ju64(t->restored));
	json_object_object_add(o, "refused", ju64(t->refused));
	json_object_object_add(o, "write_failures", ju64(t->write_failures));
	json_object_object_add(o, "declined", ju64(t->declined));
	unoffered = json_object_new_object();
	for (unsigned r = 0; r < KVP_TIER_UNOFFERED_REASONS; r++)
		json_object_object_add(unoffered, kvp_tier_unoffered_name(r), ju64(t->unoffered[r]));
	json_object_object_add(o, "unoffered", unoffered);
	return o;
}

/* A pool's window snapshots, or null: kvctl's SNAPSHOTS table in JSON. */
static json_object *snapshots_json(const struct kvp_stats_snapshots *n)
{
	json_object *o;

	if (!n)
		return NULL;
	o = json_object_new_object();
	json_object_object_add(o, "held", ju64(n->held));
	json_object_object_add(o, "made", ju64(n->made));
	json_object_object_add(o, "hit", ju64(n->hit));
	json_object_object_add(o, "evicted", ju64(n->evicted));
	json_object_object_add(o, "skipped", ju64(n->skipped));
	return o;
}

/* A pool's cluster tier, or null: kvctl's TIERS remote row in JSON. */
static json_object *remote_json(const struct kvp_stats_remote *r)
{
	static const char *const refused[] = { "header", "geometry", "checksum", "missing",
					       "late", "tag" };
	json_object *o, *by = json_object_new_object();

	if (!r) {
		json_object_put(by);
		return NULL;
	}
	o = json_object_new_object();
	json_object_object_add(o, "cluster", json_object_new_boolean(r->cluster));
	json_object_object_add(o, "nodes_known", ju64(r->nodes_known));
	json_object_object_add(o, "nodes_answering", ju64(r->nodes_answering));
	json_object_object_add(o, "queued", ju64(r->queued));
	json_object_object_add(o, "sent", ju64(r->sent));
	json_object_object_add(o, "skipped", ju64(r->skipped));
	json_object_object_add(o, "deduplicated", ju64(r->deduplicated));
	json_object_object_add(o, "hit_tokens", ju64(r->hit_tokens));
	json_object_object_add(o, "promoted", ju64(r->promoted));
	json_object_object_add(o, "bytes_out", ju64(r->bytes_out));
	json_object_object_add(o, "bytes_in", ju64(r->bytes_in));
	json_object_object_add(o, "rounds", ju64(r->rounds));
	json_object_object_add(o, "timeouts", ju64(r->timeouts));
	json_object_object_add(o, "round_p50_us", json_object_new_double(r->round_p50_ns / 1e3));
	json_object_object_add(o, "round_p99_us", json_object_new_double(r->round_p99_ns / 1e3));
	json_object_object_add(o, "moved", ju64(r->moved));
	json_object_object_add(o, "asked", ju64(r->asked));
	json_object_object_add(o, "send_errors", ju64(r->send_errors));
	json_object_object_add(o, "outages", ju64(r->outages));
	json_object_object_add(o, "nodes_down", ju64(r->nodes_down));
	for (unsigned k = 0; k < sizeof(refused) / sizeof(refused[0]); k++)
		json_object_object_add(by, refused[k], ju64(r->refused[k]));
	json_object_object_add(o, "refused", by);
	return o;
}

/* A pool's KV events publisher, or null: kvctl's KV EVENTS table in JSON. */
static json_object *events_json(const struct kvp_stats_events *e)
{
	json_object *o;

	if (!e)
		return NULL;
	o = json_object_new_object();
	json_object_object_add(o, "format", json_object_new_string(
		e->format == KVP_EVENTS_ARRAY ? "array" : "map"));
	json_object_object_add(o, "batches", ju64(e->batches));
	json_object_object_add(o, "events", ju64(e->events));
	json_object_object_add(o, "blocks_stored", ju64(e->blocks_stored));
	json_object_object_add(o, "blocks_removed", ju64(e->blocks_removed));
	json_object_object_add(o, "cleared", ju64(e->cleared));
	json_object_object_add(o, "sent", ju64(e->sent));
	json_object_object_add(o, "bytes", ju64(e->bytes));
	json_object_object_add(o, "dropped", ju64(e->dropped));
	json_object_object_add(o, "replays", ju64(e->replays));
	json_object_object_add(o, "replayed", ju64(e->replayed));
	json_object_object_add(o, "kept", ju64(e->kept));
	json_object_object_add(o, "queued", ju64(e->queued));
	return o;
}

static json_object *pool_json(const struct kvp_stats_pool *p, const struct kvp_stats_tier *t,
			      const struct kvp_stats_events *e, const struct kvp_stats_snapshots *n,
			      const struct kvp_stats_remote *r)
{
	json_object *o = json_object_new_object(), *pc = json_object_new_object(),
		    *ev = json_object_new_object(), *groups = json_object_new_array();

	json_object_object_add(o, "name", jname(p->name));
	json_object_object_add(o, "block_size", ju64(p->block_size));
	json_object_object_add(o, "blocks_total", ju64(p->blocks_total));
	json_object_object_add(o, "blocks_free", ju64(p->blocks_free));
	json_object_object_add(o, "blocks_used", ju64(p->blocks_used));
	json_object_object_add(o, "blocks_cached", ju64(p->blocks_cached));
	json_object_object_add(o, "usage", json_object_new_double(kvp_pool_usage(p)));
	json_object_object_add(o, "clients", ju64(p->clients));
	json_object_object_add(o, "sequences", ju64(p->sequences));
	json_object_object_add(pc, "queries_tokens", ju64(p->prefix_queries_tokens));
	json_object_object_add(pc, "hits_tokens", ju64(p->prefix_hits_tokens));
	json_object_object_add(pc, "lookup_queries_tokens", ju64(p->lookup_queries_tokens));
	json_object_object_add(pc, "lookup_hits_tokens", ju64(p->lookup_hits_tokens));
	json_object_object_add(o, "prefix_cache", pc);
	json_object_object_add(ev, "reuse", ju64(p->evictions_reuse));
	json_object_object_add(ev, "evict", ju64(p->evictions_evict));
	json_object_object_add(ev, "reset", ju64(p->evictions_reset));
	json_object_object_add(o, "evictions", ev);
	json_object_object_add(o, "nospace", ju64(p->nospace));
	for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++) {
		const struct kvp_stats_group *gr = &p->groups[g];
		json_object *go = json_object_new_object(), *frag = json_object_new_object();

		json_object_object_add(go, "group", ju64(g));
		json_object_object_add(go, "kind", json_object_new_string(kvp_kind_name(gr->kind)));
		json_object_object_add(go, "param", ju64(gr->param));
		json_object_object_add(go, "blocks_held", ju64(gr->blocks_held));
		json_object_object_add(go, "window_drops", ju64(gr->window_drops));
		json_object_object_add(frag, "tokens_held", ju64(gr->tokens_held));
		json_object_object_add(frag, "tokens_needed", ju64(gr->tokens_needed));
		json_object_object_add(go, "fragmentation", frag);
		json_object_array_add(groups, go);
	}
	json_object_object_add(o, "groups", groups);
	json_object_object_add(o, "tier", tier_json(t));
	json_object_object_add(o, "tier_remote", remote_json(r));
	json_object_object_add(o, "events", events_json(e));
	json_object_object_add(o, "snapshots", snapshots_json(n));
	return o;
}

static json_object *ops_json(const struct kvp_stats_view *s)
{
	json_object *ops = json_object_new_object();

	for (unsigned o = 0; o < KVP_STATS_OPS; o++) {
		const struct kvp_stats_op *op = &s->ops[o];
		json_object *j;

		if (!op->count)
			continue;
		j = json_object_new_object();
		json_object_object_add(j, "count", ju64(op->count));
		json_object_object_add(j, "errors", ju64(op->errors));
		json_object_object_add(j, "sum_ns", ju64(op->sum_ns));
		json_object_object_add(j, "p50_ns", ju64(kvp_hist_percentile(op->hist, KVP_HIST_BUCKETS, 0.5)));
		json_object_object_add(j, "p99_ns", ju64(kvp_hist_percentile(op->hist, KVP_HIST_BUCKETS, 0.99)));
		json_object_object_add(ops, kvp_opcode_name(o), j);
	}
	return ops;
}

static void tenants_json(const struct kvp_stats_view *s, json_object *root)
{
	json_object *arr = json_object_new_array();

	KVP_STATS_FOR_EACH_TENANT(s, t) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "kind", json_object_new_string(
			t->kind == KVP_TENANT_UID ? "uid" : "namespace"));
		if (t->kind == KVP_TENANT_UID)
			json_object_object_add(o, "uid", json_object_new_int64(t->uid));
		else
			json_object_object_add(o, "namespace", json_object_new_string_len(
				t->namespace_, (int)strnlen(t->namespace_, KVP_NAME_MAX)));
		for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++) {
			json_object *q = json_object_new_object();

			json_object_object_add(q, "used", json_object_new_int64((int64_t)t->used[k]));
			json_object_object_add(q, "limit", t->limit[k] == KVP_QUOTA_UNLIMITED ? NULL :
					       json_object_new_int64((int64_t)t->limit[k]));
			json_object_object_add(o, kvp_quota_name(k), q);
		}
		json_object_array_add(arr, o);
	}
	json_object_object_add(root, "tenants", arr);
	json_object_object_add(root, "other_clients", json_object_new_int64(s->page->other_clients));
	json_object_object_add(root, "monitors", json_object_new_int64(s->page->monitors));
}

char *kvp_stats_json(const struct kvp_stats_view *s, bool clients_only)
{
	json_object *root = json_object_new_object(), *clients = json_object_new_array();
	const char *text;
	char *copy;

	KVP_STATS_FOR_EACH_CLIENT(s, c)
		json_object_array_add(clients, client_json(c));
	if (!clients_only) {
		json_object *pools = json_object_new_array();

		KVP_STATS_FOR_EACH_POOL(s, p)
			json_object_array_add(pools, pool_json(p, kvp_stats_tier_of(s, p),
							      kvp_stats_events_of(s, p),
							      kvp_stats_snapshots_of(s, p),
							      kvp_stats_remote_of(s, p)));
		json_object_object_add(root, "pools", pools);
	}
	json_object_object_add(root, "clients", clients);
	tenants_json(s, root);
	if (!clients_only) {
		json_object_object_add(root, "operations", ops_json(s));
		json_object_object_add(root, "clients_connected", ju64(s->page->clients_connected));
		json_object_object_add(root, "clients_disconnected", ju64(s->page->clients_disconnected));
		json_object_object_add(root, "clients_killed", ju64(s->page->clients_killed));
		json_object_object_add(root, "event_loop",
				       json_object_new_string(kvp_event_loop_name(s->page->event_loop)));
	}
	text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
							 JSON_C_TO_STRING_NOSLASHESCAPE);
	copy = text ? strdup(text) : NULL;
	json_object_put(root);
	return copy;
}

