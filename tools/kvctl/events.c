/* SPDX-License-Identifier: MIT */
/* kvctl stats: the pools' KV events publishers (docs/events.md), as a table and for Prometheus. */
#include <stdio.h>

#include "kvctl.h"

void print_events_table(const struct kvp_stats_view *s)
{
	bool any = false;

	KVP_STATS_FOR_EACH_POOL(s, p)
		any |= kvp_stats_events_of(s, p) != NULL;
	if (!any)
		return;
	printf("\n%-20s %-6s %10s %10s %10s %10s %7s %10s %10s %9s %8s %9s %7s %7s\n",
	       "KV EVENTS", "FORMAT", "BATCHES", "EVENTS", "STORED", "REMOVED", "CLEARED", "SENT",
	       "SENT_KiB", "DROPPED", "REPLAYS", "REPLAYED", "KEPT", "QUEUED");
	KVP_STATS_FOR_EACH_POOL(s, p) {
		const struct kvp_stats_events *e = kvp_stats_events_of(s, p);

		if (!e)
			continue;
		printf("%-20.*s %-6s %10llu %10llu %10llu %10llu %7llu %10llu %10.1f %9llu %8llu "
		       "%9llu %7u %7u\n", KVP_NAME_MAX, p->name,
		       e->format == KVP_EVENTS_ARRAY ? "array" : "map",
		       (unsigned long long)e->batches, (unsigned long long)e->events,
		       (unsigned long long)e->blocks_stored, (unsigned long long)e->blocks_removed,
		       (unsigned long long)e->cleared, (unsigned long long)e->sent, e->bytes / 1024.0,
		       (unsigned long long)e->dropped, (unsigned long long)e->replays,
		       (unsigned long long)e->replayed, e->kept, e->queued);
	}
}

#define EVENTS_METRIC(metric, type, help, field)                                      \
	do {                                                                          \
		fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", metric, help, metric, type);   \
		KVP_STATS_FOR_EACH_POOL(s, p)                                         \
			if ((e = kvp_stats_events_of(s, p))) {                        \
				fprintf(out, "%s{", metric);                                \
				prom_label(out, "pool", p->name, KVP_NAME_MAX, true);      \
				fprintf(out, "} %llu\n", (unsigned long long)e->field);     \
			}                                                             \
	} while (0)

void print_events_prometheus(FILE *out, const struct kvp_stats_view *s)
{
	const struct kvp_stats_events *e;
	bool any = false;

	KVP_STATS_FOR_EACH_POOL(s, p)
		any |= kvp_stats_events_of(s, p) != NULL;
	if (!any)
		return;
	EVENTS_METRIC("kvpool_events_batches_total", "counter",
		      "KV event batches a pool made (each a sequence number).", batches);
	EVENTS_METRIC("kvpool_events_total", "counter", "KV events in them.", events);
	EVENTS_METRIC("kvpool_events_stored_blocks_total", "counter",
		      "Block hashes announced (BlockStored).", blocks_stored);
	EVENTS_METRIC("kvpool_events_removed_blocks_total", "counter",
		      "Block hashes withdrawn (BlockRemoved).", blocks_removed);
	EVENTS_METRIC("kvpool_events_cleared_total", "counter",
		      "AllBlocksCleared events (pool resets).", cleared);
	EVENTS_METRIC("kvpool_events_sent_batches_total", "counter",
		      "KV event batches handed to the PUB socket.", sent);
	EVENTS_METRIC("kvpool_events_sent_bytes_total", "counter",
		      "Their payloads' bytes.", bytes);
	EVENTS_METRIC("kvpool_events_dropped_batches_total", "counter",
		      "KV event batches never sent: the publisher's queue was full (kept for "
		      "replay), or one could not be made.", dropped);
	EVENTS_METRIC("kvpool_events_replays_total", "counter",
		      "Replay requests answered.", replays);
	EVENTS_METRIC("kvpool_events_replayed_batches_total", "counter",
		      "KV event batches sent by replays.", replayed);
	EVENTS_METRIC("kvpool_events_kept_batches", "gauge",
		      "KV event batches kept for replay.", kept);
	EVENTS_METRIC("kvpool_events_queued_batches", "gauge",
		      "KV event batches waiting for the publisher.", queued);
}
