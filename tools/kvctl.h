/* SPDX-License-Identifier: MIT */
/* kvctl's pieces: a consistent snapshot of the daemon's stats page, and its renderings. */
#ifndef KVPOOL_KVCTL_H
#define KVPOOL_KVCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/libkvpool.h"

struct snapshot {
	void *buf;
	size_t bytes;
	const struct kvp_stats_page *page;
	const struct kvp_stats_pool *pools;   /* page->max_pools entries (in_use marks live ones) */
	const struct kvp_stats_client *clients;
	const struct kvp_stats_op *ops;       /* KVP_STATS_OPS entries, by opcode */
	const struct kvp_stats_tenant *tenants; /* max_tenants entries (in_use marks live ones) */
	unsigned max_tenants;
	uint64_t taken_ns;                    /* CLOCK_MONOTONIC when copied */
};

int snapshot_take(struct kvp_client *c, struct snapshot *s);
void snapshot_release(struct snapshot *s);

const char *opcode_name(unsigned opcode);
const char *kind_name(unsigned kind);
/* Latency percentile from a log2 histogram: the upper edge of the bucket holding it. */
uint64_t hist_percentile(const __u64 *hist, unsigned buckets, double p);

void print_stats_table(const struct snapshot *s);
void print_clients_table(const struct snapshot *s);
void print_stats_json(const struct snapshot *s, bool clients_only);
void print_prometheus(const struct snapshot *s);
/* One label of a Prometheus sample, its value escaped; @first: no comma before it. */
void prom_label(const char *key, const char *value, size_t max, bool first);

/* kvctl_tenants.c: the uids' and namespaces' use of their quotas. */
void print_tenants_table(const struct snapshot *s);
struct json_object;
void tenants_json(const struct snapshot *s, struct json_object *root);
void print_tenants_prometheus(const struct snapshot *s);

int kvctl_top(struct kvp_client *c, bool json, unsigned interval_ms, unsigned count);
int kvctl_acct(int argc, char **argv, const char *socket_path);

#endif
