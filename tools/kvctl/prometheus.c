/* SPDX-License-Identifier: MIT */
/*
 * kvctl stats --prometheus and kvctl exporter's /metrics: the stats page in the
 * Prometheus text exposition format 0.0.4.
 */
#include <stdio.h>

#include "kvctl.h"

static void meta(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Label values: backslash, quote and newline escaped; names are printable already. */
void prom_label(FILE *out, const char *key, const char *value, size_t max, bool first)
{
	fprintf(out, "%s%s=\"", first ? "" : ",", key);
	for (size_t i = 0; i < max && value[i]; i++) {
		if (value[i] == '\\' || value[i] == '"')
			putc('\\', out);
		if (value[i] == '\n')
			fputs("\\n", out);
		else
			putc(value[i], out);
	}
	putc('"', out);
}

static void pool_sample(FILE *out, const char *metric, const struct kvp_stats_pool *p,
			const char *k2, const char *v2, uint64_t value)
{
	fprintf(out, "%s{", metric);
	prom_label(out, "pool", p->name, KVP_NAME_MAX, true);
	if (k2)
		prom_label(out, k2, v2, 64, false);
	fprintf(out, "} %llu\n", (unsigned long long)value);
}

static void group_sample(FILE *out, const char *metric, const struct kvp_stats_pool *p, uint32_t g,
			 const char *state, uint64_t value)
{
	fprintf(out, "%s{", metric);
	prom_label(out, "pool", p->name, KVP_NAME_MAX, true);
	fprintf(out, ",group=\"%u\",kind=\"%s\"", g, kvp_kind_name(p->groups[g].kind));
	if (state)
		prom_label(out, "state", state, 16, false);
	fprintf(out, "} %llu\n", (unsigned long long)value);
}

static void print_histograms(FILE *out, const struct kvp_stats_view *s)
{
	const char *name = "kvpool_operation_duration_seconds";

	meta(out, name, "histogram", "Time from taking a request off its ring to posting its completion.");
	for (unsigned o = 0; o < KVP_STATS_OPS; o++) {
		const struct kvp_stats_op *op = &s->ops[o];
		uint64_t cumulative = 0;

		if (!op->count)
			continue;
		/* Bucket b holds [2^b, 2^(b+1)) ns: its upper edge is le. */
		for (unsigned b = 0; b < KVP_HIST_BUCKETS - 1; b++) {
			cumulative += op->hist[b];
			fprintf(out, "%s_bucket{op=\"%s\",le=\"%.9g\"} %llu\n", name, kvp_opcode_name(o),
			       (double)(2ull << b) * 1e-9, (unsigned long long)cumulative);
		}
		fprintf(out, "%s_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", name, kvp_opcode_name(o),
		       (unsigned long long)op->count);
		fprintf(out, "%s_sum{op=\"%s\"} %.9f\n", name, kvp_opcode_name(o), (double)op->sum_ns * 1e-9);
		fprintf(out, "%s_count{op=\"%s\"} %llu\n", name, kvp_opcode_name(o), (unsigned long long)op->count);
	}
}

void print_prometheus(FILE *out, const struct kvp_stats_view *s)
{
	const struct kvp_stats_page *pg = s->page;
	unsigned clients = 0;

	meta(out, "kvpool_info", "gauge", "The daemon: its event loop and the ABI it speaks (always 1).");
	fprintf(out, "kvpool_info{event_loop=\"%s\",abi=\"%d\"} 1\n", kvp_event_loop_name(pg->event_loop), KVP_ABI_VERSION);
	meta(out, "kvpool_blocks", "gauge", "Blocks of a pool by state (cached blocks may be free or used).");
	KVP_STATS_FOR_EACH_POOL(s, p) {
		pool_sample(out, "kvpool_blocks", p, "state", "free", p->blocks_free);
		pool_sample(out, "kvpool_blocks", p, "state", "used", p->blocks_used);
		pool_sample(out, "kvpool_blocks", p, "state", "cached", p->blocks_cached);
	}
	meta(out, "kvpool_pool_capacity_blocks", "gauge", "Blocks of a pool, the null block included.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		pool_sample(out, "kvpool_pool_capacity_blocks", p, NULL, NULL, p->blocks_total);
	meta(out, "kvpool_pool_block_size_tokens", "gauge", "Tokens per block.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		pool_sample(out, "kvpool_pool_block_size_tokens", p, NULL, NULL, p->block_size);
	meta(out, "kvpool_sequences", "gauge", "Open sequences.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		pool_sample(out, "kvpool_sequences", p, NULL, NULL, p->sequences);
	meta(out, "kvpool_prefix_cache_queries_tokens_total", "counter",
	     "Tokens offered to the prefix cache at admission (ALLOC with the cache).");
	KVP_STATS_FOR_EACH_POOL(s, p)
		pool_sample(out, "kvpool_prefix_cache_queries_tokens_total", p, NULL, NULL, p->prefix_queries_tokens);
	meta(out, "kvpool_prefix_cache_hits_tokens_total", "counter", "Tokens the prefix cache hit at admission.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		pool_sample(out, "kvpool_prefix_cache_hits_tokens_total", p, NULL, NULL, p->prefix_hits_tokens);
	meta(out, "kvpool_prefix_cache_lookup_queries_tokens_total", "counter", "Tokens asked by advisory LOOKUPs.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		pool_sample(out, "kvpool_prefix_cache_lookup_queries_tokens_total", p, NULL, NULL,
			    p->lookup_queries_tokens);
	meta(out, "kvpool_prefix_cache_lookup_hits_tokens_total", "counter", "Tokens advisory LOOKUPs hit.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		pool_sample(out, "kvpool_prefix_cache_lookup_hits_tokens_total", p, NULL, NULL, p->lookup_hits_tokens);
	meta(out, "kvpool_cache_evictions_total", "counter", "Prefix-cache entries removed, by cause.");
	KVP_STATS_FOR_EACH_POOL(s, p) {
		pool_sample(out, "kvpool_cache_evictions_total", p, "cause", "reuse", p->evictions_reuse);
		pool_sample(out, "kvpool_cache_evictions_total", p, "cause", "evict", p->evictions_evict);
		pool_sample(out, "kvpool_cache_evictions_total", p, "cause", "reset", p->evictions_reset);
	}
	meta(out, "kvpool_nospace_total", "counter", "ALLOCs refused for want of free blocks.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		pool_sample(out, "kvpool_nospace_total", p, NULL, NULL, p->nospace);
	meta(out, "kvpool_group_blocks", "gauge", "Blocks in use by a group of layers.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++)
			group_sample(out, "kvpool_group_blocks", p, g, NULL, p->groups[g].blocks_held);
	meta(out, "kvpool_window_dropped_blocks_total", "counter", "Blocks a group's window dropped.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++)
			group_sample(out, "kvpool_window_dropped_blocks_total", p, g, NULL,
				     p->groups[g].window_drops);
	meta(out, "kvpool_group_tokens", "gauge",
	     "Fragmentation: token slots held by running sequences, and tokens their masks need.");
	KVP_STATS_FOR_EACH_POOL(s, p)
		for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++) {
			group_sample(out, "kvpool_group_tokens", p, g, "held", p->groups[g].tokens_held);
			group_sample(out, "kvpool_group_tokens", p, g, "needed", p->groups[g].tokens_needed);
		}
	meta(out, "kvpool_client_blocks", "gauge", "Distinct blocks a client's sequences hold (its charge).");
	KVP_STATS_FOR_EACH_CLIENT(s, c) {
		fprintf(out, "kvpool_client_blocks{client=\"%u\",pid=\"%d\",", c->client_id, c->pid);
		prom_label(out, "namespace", c->namespace_, KVP_NAME_MAX, true);
		prom_label(out, "pool", c->pool, KVP_NAME_MAX, false);
		fprintf(out, "} %llu\n", (unsigned long long)c->blocks_held);
		clients++;
	}
	meta(out, "kvpool_clients", "gauge", "Clients connected now.");
	fprintf(out, "kvpool_clients %u\n", clients);
	meta(out, "kvpool_monitors", "gauge", "Monitors connected now (kvctl among them): not clients.");
	fprintf(out, "kvpool_monitors %u\n", pg->monitors);
	meta(out, "kvpool_client_connections_total", "counter", "Clients that completed their setup.");
	fprintf(out, "kvpool_client_connections_total %llu\n", (unsigned long long)pg->clients_connected);
	meta(out, "kvpool_client_disconnections_total", "counter", "Clients gone.");
	fprintf(out, "kvpool_client_disconnections_total %llu\n", (unsigned long long)pg->clients_disconnected);
	meta(out, "kvpool_clients_killed_total", "counter", "Clients gone with sequences open.");
	fprintf(out, "kvpool_clients_killed_total %llu\n", (unsigned long long)pg->clients_killed);
	meta(out, "kvpool_operations_total", "counter", "Requests completed, by opcode.");
	for (unsigned o = 0; o < KVP_STATS_OPS; o++)
		if (s->ops[o].count)
			fprintf(out, "kvpool_operations_total{op=\"%s\"} %llu\n", kvp_opcode_name(o),
			       (unsigned long long)s->ops[o].count);
	meta(out, "kvpool_operation_errors_total", "counter", "Requests completed with an error, by opcode.");
	for (unsigned o = 0; o < KVP_STATS_OPS; o++)
		if (s->ops[o].count)
			fprintf(out, "kvpool_operation_errors_total{op=\"%s\"} %llu\n", kvp_opcode_name(o),
			       (unsigned long long)s->ops[o].errors);
	print_histograms(out, s);
	print_tenants_prometheus(out, s);
	print_tiers_prometheus(out, s);
	print_remote_prometheus(out, s);
	print_snapshots_prometheus(out, s);
	print_events_prometheus(out, s);
}
