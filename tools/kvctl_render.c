/* SPDX-License-Identifier: MIT */
/* kvctl stats / clients: tables, JSON (json-c) and the Prometheus text format. */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "kvctl.h"

static double usage_of(const struct kvp_stats_pool *p)
{
	return p->blocks_total > 1 ? (double)p->blocks_used / (p->blocks_total - 1) : 0.0;
}

/* The stats page says which; one from before ABI 2 leaves it 0. */
static const char *event_loop_name(const struct kvp_stats_page *pg)
{
	switch (pg->event_loop) {
	case KVP_EVENT_LOOP_IO_URING: return "io_uring";
	case KVP_EVENT_LOOP_EPOLL: return "epoll";
	default: return "unknown";
	}
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

#define FOR_EACH_POOL(s, p)                                                              \
	for (const struct kvp_stats_pool *p = (s)->pools; p < (s)->pools + (s)->page->max_pools; p++) \
		if (p->in_use)

#define FOR_EACH_CLIENT(s, c)                                                               \
	for (const struct kvp_stats_client *c = (s)->clients;                             \
	     c < (s)->clients + (s)->page->max_clients; c++)                              \
		if (c->in_use)

void print_clients_table(const struct snapshot *s)
{
	printf("%-8s %8s %6s %-16s %-20s %5s %9s %10s\n", "CLIENT", "PID", "UID", "NAMESPACE",
	       "POOL", "SEQS", "BLOCKS", "OPS");
	FOR_EACH_CLIENT(s, c)
		printf("%-8u %8d %6u %-16.*s %-20.*s %5u %9llu %10llu\n", c->client_id, c->pid, c->uid,
		       KVP_NAME_MAX, c->namespace_, KVP_NAME_MAX, c->pool, c->sequences,
		       (unsigned long long)c->blocks_held, (unsigned long long)c->ops);
}

void print_stats_table(const struct snapshot *s)
{
	const struct kvp_stats_page *pg = s->page;

	printf("%-20s %6s %9s %9s %9s %9s %7s %7s %5s\n", "POOL", "BLOCK", "TOTAL", "FREE", "USED",
	       "CACHED", "USAGE", "CLIENTS", "SEQS");
	FOR_EACH_POOL(s, p)
		printf("%-20.*s %6u %9u %9u %9u %9u %6.1f%% %7u %5u\n", KVP_NAME_MAX, p->name,
		       p->block_size, p->blocks_total, p->blocks_free, p->blocks_used, p->blocks_cached,
		       100.0 * usage_of(p), p->clients, p->sequences);
	FOR_EACH_POOL(s, p) {
		printf("\npool %.*s: prefix cache %llu/%llu tokens hit (%.1f%%) at admission, "
		       "%llu/%llu in lookups; evictions reuse %llu evict %llu reset %llu; nospace %llu\n",
		       KVP_NAME_MAX, p->name, (unsigned long long)p->prefix_hits_tokens,
		       (unsigned long long)p->prefix_queries_tokens,
		       100.0 * ratio(p->prefix_hits_tokens, p->prefix_queries_tokens),
		       (unsigned long long)p->lookup_hits_tokens,
		       (unsigned long long)p->lookup_queries_tokens,
		       (unsigned long long)p->evictions_reuse, (unsigned long long)p->evictions_evict,
		       (unsigned long long)p->evictions_reset, (unsigned long long)p->nospace);
		printf("  %-5s %-8s %7s %9s %12s %13s %13s %6s\n", "GROUP", "KIND", "PARAM", "BLOCKS",
		       "DROPPED", "TOKENS_HELD", "TOKENS_NEEDED", "FRAG");
		for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++) {
			const struct kvp_stats_group *gr = &p->groups[g];

			printf("  %-5u %-8s %7u %9llu %12llu %13llu %13llu %5.1f%%\n", g,
			       kind_name(gr->kind), gr->param, (unsigned long long)gr->blocks_held,
			       (unsigned long long)gr->window_drops, (unsigned long long)gr->tokens_held,
			       (unsigned long long)gr->tokens_needed,
			       100.0 * (1.0 - ratio(gr->tokens_needed, gr->tokens_held)) *
				       (gr->tokens_held != 0));
		}
	}
	printf("\n");
	print_clients_table(s);
	print_tenants_table(s);
	printf("\n%-14s %12s %8s %10s %10s\n", "OPERATION", "COUNT", "ERRORS", "P50", "P99");
	for (unsigned o = 0; o < KVP_STATS_OPS; o++) {
		const struct kvp_stats_op *op = &s->ops[o];

		if (!op->count)
			continue;
		printf("%-14s %12llu %8llu %8llu ns %8llu ns\n", opcode_name(o),
		       (unsigned long long)op->count, (unsigned long long)op->errors,
		       (unsigned long long)hist_percentile(op->hist, KVP_HIST_BUCKETS, 0.5),
		       (unsigned long long)hist_percentile(op->hist, KVP_HIST_BUCKETS, 0.99));
	}
	printf("\nclients: %llu connected, %llu disconnected, %llu killed with sequences open\n",
	       (unsigned long long)pg->clients_connected,
	       (unsigned long long)pg->clients_disconnected, (unsigned long long)pg->clients_killed);
	printf("event loop: %s\n", event_loop_name(pg));
}

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

static json_object *pool_json(const struct kvp_stats_pool *p)
{
	json_object *o = json_object_new_object(), *pc = json_object_new_object(),
		    *ev = json_object_new_object(), *groups = json_object_new_array();

	json_object_object_add(o, "name", jname(p->name));
	json_object_object_add(o, "block_size", ju64(p->block_size));
	json_object_object_add(o, "blocks_total", ju64(p->blocks_total));
	json_object_object_add(o, "blocks_free", ju64(p->blocks_free));
	json_object_object_add(o, "blocks_used", ju64(p->blocks_used));
	json_object_object_add(o, "blocks_cached", ju64(p->blocks_cached));
	json_object_object_add(o, "usage", json_object_new_double(usage_of(p)));
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
		json_object_object_add(go, "kind", json_object_new_string(kind_name(gr->kind)));
		json_object_object_add(go, "param", ju64(gr->param));
		json_object_object_add(go, "blocks_held", ju64(gr->blocks_held));
		json_object_object_add(go, "window_drops", ju64(gr->window_drops));
		json_object_object_add(frag, "tokens_held", ju64(gr->tokens_held));
		json_object_object_add(frag, "tokens_needed", ju64(gr->tokens_needed));
		json_object_object_add(go, "fragmentation", frag);
		json_object_array_add(groups, go);
	}
	json_object_object_add(o, "groups", groups);
	return o;
}

static json_object *ops_json(const struct snapshot *s)
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
		json_object_object_add(j, "p50_ns", ju64(hist_percentile(op->hist, KVP_HIST_BUCKETS, 0.5)));
		json_object_object_add(j, "p99_ns", ju64(hist_percentile(op->hist, KVP_HIST_BUCKETS, 0.99)));
		json_object_object_add(ops, opcode_name(o), j);
	}
	return ops;
}

void print_stats_json(const struct snapshot *s, bool clients_only)
{
	json_object *root = json_object_new_object(), *clients = json_object_new_array();

	FOR_EACH_CLIENT(s, c)
		json_object_array_add(clients, client_json(c));
	if (!clients_only) {
		json_object *pools = json_object_new_array();

		FOR_EACH_POOL(s, p)
			json_object_array_add(pools, pool_json(p));
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
				       json_object_new_string(event_loop_name(s->page)));
	}
	puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
						  JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(root);
}

/* ---- Prometheus text exposition format 0.0.4 ---- */

static void meta(const char *name, const char *type, const char *help)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Label values: backslash, quote and newline escaped; names are printable already. */
void prom_label(const char *key, const char *value, size_t max, bool first)
{
	printf("%s%s=\"", first ? "" : ",", key);
	for (size_t i = 0; i < max && value[i]; i++) {
		if (value[i] == '\\' || value[i] == '"')
			putchar('\\');
		if (value[i] == '\n')
			fputs("\\n", stdout);
		else
			putchar(value[i]);
	}
	putchar('"');
}

static void pool_sample(const char *metric, const struct kvp_stats_pool *p, const char *k2,
			const char *v2, uint64_t value)
{
	printf("%s{", metric);
	prom_label("pool", p->name, KVP_NAME_MAX, true);
	if (k2)
		prom_label(k2, v2, 64, false);
	printf("} %llu\n", (unsigned long long)value);
}

static void group_sample(const char *metric, const struct kvp_stats_pool *p, uint32_t g,
			 const char *state, uint64_t value)
{
	printf("%s{", metric);
	prom_label("pool", p->name, KVP_NAME_MAX, true);
	printf(",group=\"%u\",kind=\"%s\"", g, kind_name(p->groups[g].kind));
	if (state)
		prom_label("state", state, 16, false);
	printf("} %llu\n", (unsigned long long)value);
}

static void print_histograms(const struct snapshot *s)
{
	const char *name = "kvpool_operation_duration_seconds";

	meta(name, "histogram", "Time from taking a request off its ring to posting its completion.");
	for (unsigned o = 0; o < KVP_STATS_OPS; o++) {
		const struct kvp_stats_op *op = &s->ops[o];
		uint64_t cumulative = 0;

		if (!op->count)
			continue;
		/* Bucket b holds [2^b, 2^(b+1)) ns: its upper edge is le. */
		for (unsigned b = 0; b < KVP_HIST_BUCKETS - 1; b++) {
			cumulative += op->hist[b];
			printf("%s_bucket{op=\"%s\",le=\"%.9g\"} %llu\n", name, opcode_name(o),
			       (double)(2ull << b) * 1e-9, (unsigned long long)cumulative);
		}
		printf("%s_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", name, opcode_name(o),
		       (unsigned long long)op->count);
		printf("%s_sum{op=\"%s\"} %.9f\n", name, opcode_name(o), (double)op->sum_ns * 1e-9);
		printf("%s_count{op=\"%s\"} %llu\n", name, opcode_name(o), (unsigned long long)op->count);
	}
}

void print_prometheus(const struct snapshot *s)
{
	const struct kvp_stats_page *pg = s->page;
	unsigned clients = 0;

	meta("kvpool_info", "gauge", "The daemon: its event loop and the ABI it speaks (always 1).");
	printf("kvpool_info{event_loop=\"%s\",abi=\"%d\"} 1\n", event_loop_name(pg), KVP_ABI_VERSION);
	meta("kvpool_blocks", "gauge", "Blocks of a pool by state (cached blocks may be free or used).");
	FOR_EACH_POOL(s, p) {
		pool_sample("kvpool_blocks", p, "state", "free", p->blocks_free);
		pool_sample("kvpool_blocks", p, "state", "used", p->blocks_used);
		pool_sample("kvpool_blocks", p, "state", "cached", p->blocks_cached);
	}
	meta("kvpool_pool_capacity_blocks", "gauge", "Blocks of a pool, the null block included.");
	FOR_EACH_POOL(s, p)
		pool_sample("kvpool_pool_capacity_blocks", p, NULL, NULL, p->blocks_total);
	meta("kvpool_pool_block_size_tokens", "gauge", "Tokens per block.");
	FOR_EACH_POOL(s, p)
		pool_sample("kvpool_pool_block_size_tokens", p, NULL, NULL, p->block_size);
	meta("kvpool_sequences", "gauge", "Open sequences.");
	FOR_EACH_POOL(s, p)
		pool_sample("kvpool_sequences", p, NULL, NULL, p->sequences);
	meta("kvpool_prefix_cache_queries_tokens_total", "counter",
	     "Tokens offered to the prefix cache at admission (ALLOC with the cache).");
	FOR_EACH_POOL(s, p)
		pool_sample("kvpool_prefix_cache_queries_tokens_total", p, NULL, NULL, p->prefix_queries_tokens);
	meta("kvpool_prefix_cache_hits_tokens_total", "counter", "Tokens the prefix cache hit at admission.");
	FOR_EACH_POOL(s, p)
		pool_sample("kvpool_prefix_cache_hits_tokens_total", p, NULL, NULL, p->prefix_hits_tokens);
	meta("kvpool_prefix_cache_lookup_queries_tokens_total", "counter", "Tokens asked by advisory LOOKUPs.");
	FOR_EACH_POOL(s, p)
		pool_sample("kvpool_prefix_cache_lookup_queries_tokens_total", p, NULL, NULL,
			    p->lookup_queries_tokens);
	meta("kvpool_prefix_cache_lookup_hits_tokens_total", "counter", "Tokens advisory LOOKUPs hit.");
	FOR_EACH_POOL(s, p)
		pool_sample("kvpool_prefix_cache_lookup_hits_tokens_total", p, NULL, NULL, p->lookup_hits_tokens);
	meta("kvpool_cache_evictions_total", "counter", "Prefix-cache entries removed, by cause.");
	FOR_EACH_POOL(s, p) {
		pool_sample("kvpool_cache_evictions_total", p, "cause", "reuse", p->evictions_reuse);
		pool_sample("kvpool_cache_evictions_total", p, "cause", "evict", p->evictions_evict);
		pool_sample("kvpool_cache_evictions_total", p, "cause", "reset", p->evictions_reset);
	}
	meta("kvpool_nospace_total", "counter", "ALLOCs refused for want of free blocks.");
	FOR_EACH_POOL(s, p)
		pool_sample("kvpool_nospace_total", p, NULL, NULL, p->nospace);
	meta("kvpool_group_blocks", "gauge", "Blocks in use by a group of layers.");
	FOR_EACH_POOL(s, p)
		for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++)
			group_sample("kvpool_group_blocks", p, g, NULL, p->groups[g].blocks_held);
	meta("kvpool_window_dropped_blocks_total", "counter", "Blocks a group's window dropped.");
	FOR_EACH_POOL(s, p)
		for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++)
			group_sample("kvpool_window_dropped_blocks_total", p, g, NULL,
				     p->groups[g].window_drops);
	meta("kvpool_group_tokens", "gauge",
	     "Fragmentation: token slots held by running sequences, and tokens their masks need.");
	FOR_EACH_POOL(s, p)
		for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++) {
			group_sample("kvpool_group_tokens", p, g, "held", p->groups[g].tokens_held);
			group_sample("kvpool_group_tokens", p, g, "needed", p->groups[g].tokens_needed);
		}
	meta("kvpool_client_blocks", "gauge", "Distinct blocks a client's sequences hold (its charge).");
	FOR_EACH_CLIENT(s, c) {
		printf("kvpool_client_blocks{client=\"%u\",pid=\"%d\",", c->client_id, c->pid);
		prom_label("namespace", c->namespace_, KVP_NAME_MAX, true);
		prom_label("pool", c->pool, KVP_NAME_MAX, false);
		printf("} %llu\n", (unsigned long long)c->blocks_held);
		clients++;
	}
	meta("kvpool_clients", "gauge", "Clients connected now.");
	printf("kvpool_clients %u\n", clients);
	meta("kvpool_client_connections_total", "counter", "Clients that completed their setup.");
	printf("kvpool_client_connections_total %llu\n", (unsigned long long)pg->clients_connected);
	meta("kvpool_client_disconnections_total", "counter", "Clients gone.");
	printf("kvpool_client_disconnections_total %llu\n", (unsigned long long)pg->clients_disconnected);
	meta("kvpool_clients_killed_total", "counter", "Clients gone with sequences open.");
	printf("kvpool_clients_killed_total %llu\n", (unsigned long long)pg->clients_killed);
	meta("kvpool_operations_total", "counter", "Requests completed, by opcode.");
	for (unsigned o = 0; o < KVP_STATS_OPS; o++)
		if (s->ops[o].count)
			printf("kvpool_operations_total{op=\"%s\"} %llu\n", opcode_name(o),
			       (unsigned long long)s->ops[o].count);
	meta("kvpool_operation_errors_total", "counter", "Requests completed with an error, by opcode.");
	for (unsigned o = 0; o < KVP_STATS_OPS; o++)
		if (s->ops[o].count)
			printf("kvpool_operation_errors_total{op=\"%s\"} %llu\n", opcode_name(o),
			       (unsigned long long)s->ops[o].errors);
	print_histograms(s);
	print_tenants_prometheus(s);
}
