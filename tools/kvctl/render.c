/* SPDX-License-Identifier: MIT */
/* kvctl stats / clients: tables, JSON (libkvpool's) and the Prometheus text format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvctl.h"

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

void print_clients_table(const struct kvp_stats_view *s)
{
	printf("%-8s %8s %6s %-16s %-20s %5s %9s %10s\n", "CLIENT", "PID", "UID", "NAMESPACE",
	       "POOL", "SEQS", "BLOCKS", "OPS");
	KVP_STATS_FOR_EACH_CLIENT(s, c)
		printf("%-8u %8d %6u %-16.*s %-20.*s %5u %9llu %10llu\n", c->client_id, c->pid, c->uid,
		       KVP_NAME_MAX, c->namespace_, KVP_NAME_MAX, c->pool, c->sequences,
		       (unsigned long long)c->blocks_held, (unsigned long long)c->ops);
}

void print_stats_table(const struct kvp_stats_view *s)
{
	const struct kvp_stats_page *pg = s->page;

	printf("%-20s %6s %9s %9s %9s %9s %7s %7s %5s\n", "POOL", "BLOCK", "TOTAL", "FREE", "USED",
	       "CACHED", "USAGE", "CLIENTS", "SEQS");
	KVP_STATS_FOR_EACH_POOL(s, p)
		printf("%-20.*s %6u %9u %9u %9u %9u %6.1f%% %7u %5u\n", KVP_NAME_MAX, p->name,
		       p->block_size, p->blocks_total, p->blocks_free, p->blocks_used, p->blocks_cached,
		       100.0 * kvp_pool_usage(p), p->clients, p->sequences);
	/* Readers added CACHED to FREE and USED and found more blocks than TOTAL. */
	printf("CACHED: blocks holding a prefix-cache entry, counted in FREE (evictable) or USED; "
	       "not a third part\n");
	KVP_STATS_FOR_EACH_POOL(s, p) {
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
			       kvp_kind_name(gr->kind), gr->param, (unsigned long long)gr->blocks_held,
			       (unsigned long long)gr->window_drops, (unsigned long long)gr->tokens_held,
			       (unsigned long long)gr->tokens_needed,
			       100.0 * (1.0 - ratio(gr->tokens_needed, gr->tokens_held)) *
				       (gr->tokens_held != 0));
		}
	}
	print_tiers_table(s);
	print_snapshots_table(s);
	print_events_table(s);
	printf("\n");
	print_clients_table(s);
	print_tenants_table(s);
	printf("\n%-14s %12s %8s %10s %10s\n", "OPERATION", "COUNT", "ERRORS", "p50<=", "p99<=");
	for (unsigned o = 0; o < KVP_STATS_OPS; o++) {
		const struct kvp_stats_op *op = &s->ops[o];

		if (!op->count)
			continue;
		printf("%-14s %12llu %8llu %8llu ns %8llu ns\n", kvp_opcode_name(o),
		       (unsigned long long)op->count, (unsigned long long)op->errors,
		       (unsigned long long)kvp_hist_percentile(op->hist, KVP_HIST_BUCKETS, 0.5),
		       (unsigned long long)kvp_hist_percentile(op->hist, KVP_HIST_BUCKETS, 0.99));
	}
	printf("p50<=, p99<=: upper bounds of the power-of-two latency buckets holding them\n");
	printf("\nclients: %llu connected, %llu disconnected, %llu killed with sequences open; "
	       "monitors: %u\n", (unsigned long long)pg->clients_connected,
	       (unsigned long long)pg->clients_disconnected, (unsigned long long)pg->clients_killed,
	       pg->monitors);
	printf("event loop: %s\n", kvp_event_loop_name(pg->event_loop));
}

void print_clients_view(const struct kvp_stats_view *s)
{
	print_clients_table(s);
	print_tenants_table(s);
	printf("\nmonitors: %u (connections that only watch, kvctl among them: not listed)\n",
	       s->page->monitors);
}

/* The groups in the words they were given in: "full swa:64". */
/* Bytes below 1 KiB as they are, then KiB, MiB or GiB with one decimal ("4.0 MiB"). */
static void human_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB" };
	double v = (double)bytes / 1024;
	unsigned u = 0;

	if (bytes < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
		return;
	}
	/* 1023.96 KiB would print as "1024.0 KiB": that is 1.0 MiB. */
	while (u < 2 && v >= 1023.95) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
}

/* What the daemon allocates (pools.c): K and V of every layer of every block. */
static uint64_t kv_bytes(const struct kvp_pool_params *p)
{
	uint64_t elem = p->dtype == KVP_DTYPE_F32 ? 4 : 2;

	return 2ull * p->layers_per_group * p->block_size * p->kv_heads * p->head_dim * elem *
	       p->num_blocks;
}

void print_pool_created(const struct kvp_pool_params_v2 *p)
{
	char groups[KVP_MAX_GROUPS * 20], size[32] = "none";

	kvp_pool_params_groups(&p->v1, groups, sizeof(groups));
	if (p->v1.kv_heads)
		human_bytes(kv_bytes(&p->v1), size, sizeof(size));
	printf("pool %.*s created: %u blocks of %u tokens, groups %s, KV %s\n", KVP_NAME_MAX,
	       p->v1.name, p->v1.num_blocks, p->v1.block_size, groups, size);
}

void print_stats_json(const struct kvp_stats_view *s, bool clients_only)
{
	char *json = kvp_stats_json(s, clients_only);

	if (!json) {
		fprintf(stderr, "kvctl: out of memory\n");
		return;
	}
	puts(json);
	free(json);
}
