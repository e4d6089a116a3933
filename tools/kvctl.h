/* SPDX-License-Identifier: MIT */
/* kvctl's pieces: renderings of the daemon's stats page (kvp_stats_view_take's copy). */
#ifndef KVPOOL_KVCTL_H
#define KVPOOL_KVCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/libkvpool.h"

void print_stats_table(const struct kvp_stats_view *s);
void print_clients_table(const struct kvp_stats_view *s);
/* kvctl clients: the clients, the quotas, the monitors' count. */
void print_clients_view(const struct kvp_stats_view *s);
/* "pool NAME created: N blocks of BS tokens, groups G, KV SIZE". */
void print_pool_created(const struct kvp_pool_params_v2 *p);
void print_stats_json(const struct kvp_stats_view *s, bool clients_only);
void print_prometheus(const struct kvp_stats_view *s);
/* One label of a Prometheus sample, its value escaped; @first: no comma before it. */
void prom_label(const char *key, const char *value, size_t max, bool first);

/* kvctl_tenants.c: the uids' and namespaces' use of their quotas. */
void print_tenants_table(const struct kvp_stats_view *s);
void print_tenants_prometheus(const struct kvp_stats_view *s);

int kvctl_top(struct kvp_client *c, bool json, unsigned interval_ms, unsigned count);
/* kvctl acct: @argv from "acct" on; a -s/--socket there overrides @socket_path. */
int kvctl_acct(int argc, char **argv, const char *socket_path);

#endif
