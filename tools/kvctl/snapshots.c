/* SPDX-License-Identifier: MIT */
/* kvctl stats: the pools' window snapshots (cyclic groups, docs/design.md), as a table and for Prometheus. */
#include <stdio.h>

#include "kvctl.h"

static bool any_snapshots(const struct kvp_stats_view *s)
{
	KVP_STATS_FOR_EACH_POOL(s, p)
		if (kvp_stats_snapshots_of(s, p))
			return true;
	return false;
}

void print_snapshots_table(const struct kvp_stats_view *s)
{
	if (!any_snapshots(s))
		return;
	printf("\n%-20s %9s %10s %10s %10s %10s\n", "SNAPSHOTS", "HELD", "MADE", "HIT", "EVICTED",
	       "SKIPPED");
	KVP_STATS_FOR_EACH_POOL(s, p) {
		const struct kvp_stats_snapshots *n = kvp_stats_snapshots_of(s, p);

		if (n)
			printf("%-20.*s %9u %10llu %10llu %10llu %10llu\n", KVP_NAME_MAX, p->name,
			       n->held, (unsigned long long)n->made, (unsigned long long)n->hit,
			       (unsigned long long)n->evicted, (unsigned long long)n->skipped);
	}
}

#define SNAPSHOT_METRIC(metric, type, help, field)                                    \
	do {                                                                          \
		fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", metric, help, metric, type);   \
		KVP_STATS_FOR_EACH_POOL(s, p)                                         \
			if ((n = kvp_stats_snapshots_of(s, p))) {                     \
				fprintf(out, "%s{", metric);                                \
				prom_label(out, "pool", p->name, KVP_NAME_MAX, true);      \
				fprintf(out, "} %llu\n", (unsigned long long)n->field);     \
			}                                                             \
	} while (0)

void print_snapshots_prometheus(FILE *out, const struct kvp_stats_view *s)
{
	const struct kvp_stats_snapshots *n;

	if (!any_snapshots(s))
		return;
	SNAPSHOT_METRIC("kvpool_snapshot_blocks", "gauge",
			"Blocks a pool holds as window snapshots of its cyclic groups (cached).", held);
	SNAPSHOT_METRIC("kvpool_snapshot_made_blocks_total", "counter",
			"Window snapshot blocks copied out of a ring and cached.", made);
	SNAPSHOT_METRIC("kvpool_snapshot_hit_blocks_total", "counter",
			"Window snapshot blocks copied into a hitting sequence's ring.", hit);
	SNAPSHOT_METRIC("kvpool_snapshot_evicted_blocks_total", "counter",
			"Window snapshot blocks whose key was lost (reused, evicted, reset).", evicted);
	SNAPSHOT_METRIC("kvpool_snapshot_skipped_blocks_total", "counter",
			"Window snapshot blocks not made: the free queue was empty.", skipped);
}
