/* SPDX-License-Identifier: MIT */
/* kvctl stats: the pools' tiers (docs/tiers.md), as a table and in the Prometheus format. */
#include <stdio.h>

#include "kvctl.h"

static uint64_t held_bytes(const struct kvp_stats_tier *t)
{
	return (uint64_t)t->slot_bytes * t->held;
}

static const char *kind_name(const struct kvp_stats_tier *t)
{
	return t->kind == KVP_TIER_DISK ? "disk" : "host";
}

static double mb_per_s(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns * 1000.0 : 0.0;
}

static uint64_t refused_total(const struct kvp_stats_remote *r)
{
	uint64_t n = 0;

	for (unsigned k = 0; k < KVP_REMOTE_REFUSED_MAX; k++)
		n += r->refused[k];
	return n;
}

/* A cluster tier's row: the columns it shares with the local tiers; sent is its STORED. */
static void remote_row(const struct kvp_stats_pool *p, const struct kvp_stats_remote *r)
{
	printf("%-20.*s %-5s %9s %9s %9s %6u %9llu %8llu %9s %9s %8s %9llu %12llu %6s %8s %8s "
	       "%9s %8llu %8s\n", KVP_NAME_MAX, p->name, "remote", "-", "-", "-", r->queued,
	       (unsigned long long)r->sent, (unsigned long long)r->skipped, "-", "-", "-",
	       (unsigned long long)r->promoted, (unsigned long long)r->hit_tokens, "-", "-", "-",
	       "-", (unsigned long long)refused_total(r), "-");
}

void print_tiers_table(const struct kvp_stats_view *s)
{
	bool any = false;

	KVP_STATS_FOR_EACH_POOL(s, p)
		any |= kvp_stats_tier_of(s, p) != NULL || kvp_stats_remote_of(s, p) != NULL;
	if (!any)
		return;
	printf("\n%-20s %-5s %9s %9s %9s %6s %9s %8s %9s %9s %8s %9s %12s %6s %8s %8s %9s %8s "
	       "%8s\n", "TIERS", "KIND", "SLOTS", "HELD", "HELD_MiB", "QUEUE", "STORED", "SKIPPED",
	       "ABANDONED", "UNOFFERED", "EVICTED", "PROMOTED", "HIT_TOKENS", "FAILED", "MB/s_DN",
	       "MB/s_UP", "RESTORED", "REFUSED", "W_FAILED");
	KVP_STATS_FOR_EACH_POOL(s, p) {
		const struct kvp_stats_tier *t = kvp_stats_tier_of(s, p);
		const struct kvp_stats_remote *r = kvp_stats_remote_of(s, p);

		if (r)
			remote_row(p, r);
		if (!t)
			continue;
		printf("%-20.*s %-5s %9u %9u %9.1f %6u %9llu %8llu %9llu %9llu %8llu %9llu %12llu "
		       "%6llu %8.1f %8.1f %9llu %8llu %8llu\n", KVP_NAME_MAX, p->name, kind_name(t),
		       t->slots, t->held,
		       held_bytes(t) / 1048576.0, t->queued,
		       (unsigned long long)t->stored, (unsigned long long)t->skipped,
		       (unsigned long long)t->abandoned,
		       (unsigned long long)kvp_tier_unoffered_total(t),
		       (unsigned long long)t->evicted,
		       (unsigned long long)t->promoted, (unsigned long long)t->hit_tokens,
		       (unsigned long long)t->read_failures, mb_per_s(t->bytes_down, t->ns_down),
		       mb_per_s(t->bytes_up, t->ns_up), (unsigned long long)t->restored,
		       (unsigned long long)t->refused, (unsigned long long)t->write_failures);
	}
}

static void sample(FILE *out, const char *metric, const struct kvp_stats_pool *p,
		   const struct kvp_stats_tier *t, const char *dir, uint64_t value)
{
	fprintf(out, "%s{", metric);
	prom_label(out, "pool", p->name, KVP_NAME_MAX, true);
	fprintf(out, ",tier=\"%s\"", kind_name(t));
	if (dir)
		fprintf(out, ",direction=\"%s\"", dir);
	fprintf(out, "} %llu\n", (unsigned long long)value);
}

#define TIER_METRIC(name, type, help, field)                                       \
	do {                                                                       \
		fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);    \
		KVP_STATS_FOR_EACH_POOL(s, p)                                      \
			if ((t = kvp_stats_tier_of(s, p)))                         \
				sample(out, name, p, t, NULL, t->field);                 \
	} while (0)

static void remote_sample(FILE *out, const char *metric, const struct kvp_stats_pool *p,
			  const char *dir, uint64_t value)
{
	fprintf(out, "%s{", metric);
	prom_label(out, "pool", p->name, KVP_NAME_MAX, true);
	fprintf(out, ",tier=\"remote\"");
	if (dir)
		fprintf(out, ",direction=\"%s\"", dir);
	fprintf(out, "} %llu\n", (unsigned long long)value);
}

/* The cluster tiers' samples of a family the local tiers' TIER_METRIC just opened. */
#define REMOTE_SAMPLES(name, value)                                                \
	KVP_STATS_FOR_EACH_POOL(s, p)                                              \
		if ((r = kvp_stats_remote_of(s, p)))                               \
			remote_sample(out, name, p, NULL, value)

void print_tiers_prometheus(FILE *out, const struct kvp_stats_view *s)
{
	const struct kvp_stats_tier *t;
	const struct kvp_stats_remote *r;

	TIER_METRIC("kvpool_tier_bytes", "gauge", "A pool's tier's memory.", bytes);
	TIER_METRIC("kvpool_tier_slots", "gauge", "Blocks a pool's tier can hold.", slots);
	TIER_METRIC("kvpool_tier_blocks", "gauge", "Blocks a pool's tier holds, hittable.", held);
	fprintf(out, "# HELP kvpool_tier_held_bytes The bytes of the blocks a pool's tier holds.\n"
	       "# TYPE kvpool_tier_held_bytes gauge\n");
	KVP_STATS_FOR_EACH_POOL(s, p)
		if ((t = kvp_stats_tier_of(s, p)))
			sample(out, "kvpool_tier_held_bytes", p, t, NULL, held_bytes(t));
	TIER_METRIC("kvpool_tier_queued_blocks", "gauge", "Copies into a tier in flight.", queued);
	REMOTE_SAMPLES("kvpool_tier_queued_blocks", r->queued);
	TIER_METRIC("kvpool_tier_stored_blocks_total", "counter",
		    "Blocks copied into a tier and kept (a cluster tier's: written).", stored);
	REMOTE_SAMPLES("kvpool_tier_stored_blocks_total", r->sent);
	TIER_METRIC("kvpool_tier_skipped_blocks_total", "counter",
		    "Blocks not copied into a tier: its queue was full or no slot was free (a "
		    "cluster tier's: or a node down, late or refusing).", skipped);
	REMOTE_SAMPLES("kvpool_tier_skipped_blocks_total", r->skipped);
	TIER_METRIC("kvpool_tier_abandoned_blocks_total", "counter",
		    "Copies into a tier dropped: their block was handed out meanwhile.", abandoned);
	TIER_METRIC("kvpool_tier_evicted_blocks_total", "counter",
		    "Tier entries dropped for room.", evicted);
	TIER_METRIC("kvpool_tier_promoted_blocks_total", "counter",
		    "Blocks copied up from a tier into the pool by ALLOC.", promoted);
	REMOTE_SAMPLES("kvpool_tier_promoted_blocks_total", r->promoted);
	TIER_METRIC("kvpool_tier_read_failures_total", "counter",
		    "Blocks whose copy up from a tier failed.", read_failures);
	TIER_METRIC("kvpool_tier_hit_tokens_total", "counter",
		    "ALLOC's hit tokens from its first promoted position on.", hit_tokens);
	REMOTE_SAMPLES("kvpool_tier_hit_tokens_total", r->hit_tokens);
	TIER_METRIC("kvpool_tier_restored_blocks_total", "counter",
		    "Blocks a disk tier found on disk at its pool's start, hittable at once.",
		    restored);
	TIER_METRIC("kvpool_tier_refused_blocks_total", "counter",
		    "Blocks on a disk tier never hit: a checksum failed, past the file's end, "
		    "or a duplicate (a cluster tier's: values read back and not served).", refused);
	REMOTE_SAMPLES("kvpool_tier_refused_blocks_total", refused_total(r));
	TIER_METRIC("kvpool_tier_write_failures_total", "counter",
		    "Copies into a disk tier the disk did not take.", write_failures);
	TIER_METRIC("kvpool_tier_declined_blocks_total", "counter",
		    "Blocks tier_policy second_sight kept out of a tier: seen leaving the pool "
		    "for the first time.", declined);
	fprintf(out, "# HELP kvpool_tier_unoffered_blocks_total Cached blocks a pool handed out for "
		"new data that its tier did not hold then, by reason.\n"
		"# TYPE kvpool_tier_unoffered_blocks_total counter\n");
	KVP_STATS_FOR_EACH_POOL(s, p)
		if ((t = kvp_stats_tier_of(s, p)))
			for (unsigned why = 0; why < KVP_TIER_UNOFFERED_REASONS; why++) {
				fprintf(out, "kvpool_tier_unoffered_blocks_total{");
				prom_label(out, "pool", p->name, KVP_NAME_MAX, true);
				fprintf(out, ",tier=\"%s\",reason=\"%s\"} %llu\n", kind_name(t),
					kvp_tier_unoffered_name(why),
					(unsigned long long)t->unoffered[why]);
			}
	fprintf(out, "# HELP kvpool_tier_copied_bytes_total Bytes copied between a pool and its tier.\n"
	       "# TYPE kvpool_tier_copied_bytes_total counter\n");
	KVP_STATS_FOR_EACH_POOL(s, p)
		if ((t = kvp_stats_tier_of(s, p))) {
			sample(out, "kvpool_tier_copied_bytes_total", p, t, "down", t->bytes_down);
			sample(out, "kvpool_tier_copied_bytes_total", p, t, "up", t->bytes_up);
		}
	KVP_STATS_FOR_EACH_POOL(s, p)
		if ((r = kvp_stats_remote_of(s, p))) {
			remote_sample(out, "kvpool_tier_copied_bytes_total", p, "down", r->bytes_out);
			remote_sample(out, "kvpool_tier_copied_bytes_total", p, "up", r->bytes_in);
		}
	fprintf(out, "# HELP kvpool_tier_copy_seconds_total Time the copies between a pool and its "
	       "tier took.\n# TYPE kvpool_tier_copy_seconds_total counter\n");
	KVP_STATS_FOR_EACH_POOL(s, p)
		if ((t = kvp_stats_tier_of(s, p))) {
			fprintf(out, "kvpool_tier_copy_seconds_total{");
			prom_label(out, "pool", p->name, KVP_NAME_MAX, true);
			fprintf(out, ",tier=\"%s\",direction=\"down\"} %.9f\n", kind_name(t),
			       (double)t->ns_down / 1e9);
			fprintf(out, "kvpool_tier_copy_seconds_total{");
			prom_label(out, "pool", p->name, KVP_NAME_MAX, true);
			fprintf(out, ",tier=\"%s\",direction=\"up\"} %.9f\n", kind_name(t),
			       (double)t->ns_up / 1e9);
		}
}

/* What only a cluster tier has: blocks it did not send, its nodes, its rounds. */
void print_remote_prometheus(FILE *out, const struct kvp_stats_view *s)
{
	const struct kvp_stats_remote *r;

	fprintf(out, "# HELP kvpool_tier_remote_deduplicated_blocks_total Blocks a cluster tier did "
		"not send: the cluster holds them.\n"
		"# TYPE kvpool_tier_remote_deduplicated_blocks_total counter\n");
	REMOTE_SAMPLES("kvpool_tier_remote_deduplicated_blocks_total", r->deduplicated);
	fprintf(out, "# HELP kvpool_tier_remote_nodes A cluster tier's nodes, known and answering.\n"
		"# TYPE kvpool_tier_remote_nodes gauge\n");
	KVP_STATS_FOR_EACH_POOL(s, p)
		if ((r = kvp_stats_remote_of(s, p))) {
			fprintf(out, "kvpool_tier_remote_nodes{");
			prom_label(out, "pool", p->name, KVP_NAME_MAX, true);
			fprintf(out, ",state=\"known\"} %u\n", r->nodes_known);
			fprintf(out, "kvpool_tier_remote_nodes{");
			prom_label(out, "pool", p->name, KVP_NAME_MAX, true);
			fprintf(out, ",state=\"answering\"} %u\n", r->nodes_answering);
		}
	fprintf(out, "# HELP kvpool_tier_remote_rounds_total A cluster tier's existence rounds.\n"
		"# TYPE kvpool_tier_remote_rounds_total counter\n");
	REMOTE_SAMPLES("kvpool_tier_remote_rounds_total", r->rounds);
	fprintf(out, "# HELP kvpool_tier_remote_timeouts_total A cluster tier's rounds past "
		"tier_remote_timeout_ms.\n# TYPE kvpool_tier_remote_timeouts_total counter\n");
	REMOTE_SAMPLES("kvpool_tier_remote_timeouts_total", r->timeouts);
	fprintf(out, "# HELP kvpool_tier_remote_moved_total MOVED replies a cluster tier met (its slot "
		"map read again).\n# TYPE kvpool_tier_remote_moved_total counter\n");
	REMOTE_SAMPLES("kvpool_tier_remote_moved_total", r->moved);
	fprintf(out, "# HELP kvpool_tier_remote_asked_total ASK redirects a cluster tier followed (a "
		"slot migrating).\n# TYPE kvpool_tier_remote_asked_total counter\n");
	REMOTE_SAMPLES("kvpool_tier_remote_asked_total", r->asked);
	fprintf(out, "# HELP kvpool_tier_remote_send_errors_total Blocks whose SET a node answered "
		"with an error (NOPERM, OOM...).\n"
		"# TYPE kvpool_tier_remote_send_errors_total counter\n");
	REMOTE_SAMPLES("kvpool_tier_remote_send_errors_total", r->send_errors);
	fprintf(out, "# HELP kvpool_tier_remote_outages_total Nodes that became unreachable to a "
		"cluster tier.\n# TYPE kvpool_tier_remote_outages_total counter\n");
	REMOTE_SAMPLES("kvpool_tier_remote_outages_total", r->outages);
	fprintf(out, "# HELP kvpool_tier_remote_nodes_down A cluster tier's nodes in an outage now.\n"
		"# TYPE kvpool_tier_remote_nodes_down gauge\n");
	REMOTE_SAMPLES("kvpool_tier_remote_nodes_down", r->nodes_down);
}
