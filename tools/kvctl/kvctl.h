/* SPDX-License-Identifier: MIT */
/* kvctl's pieces: renderings of the daemon's stats page (kvp_stats_view_take's copy). */
#ifndef KVPOOL_KVCTL_H
#define KVPOOL_KVCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "../../lib/libkvpool.h"

void print_stats_table(const struct kvp_stats_view *s);
void print_clients_table(const struct kvp_stats_view *s);
/* kvctl clients: the clients, the quotas, the monitors' count. */
void print_clients_view(const struct kvp_stats_view *s);
/* "pool NAME created: N blocks of BS tokens, groups G, KV SIZE". */
void print_pool_created(const struct kvp_pool_params_v2 *p);
void print_stats_json(const struct kvp_stats_view *s, bool clients_only);
void print_prometheus(FILE *out, const struct kvp_stats_view *s);
/* One label of a Prometheus sample, its value escaped; @first: no comma before it. */
void prom_label(FILE *out, const char *key, const char *value, size_t max, bool first);

/* tiers.c: the pools' tiers; nothing for a daemon whose pools have none. */
void print_tiers_table(const struct kvp_stats_view *s);
void print_tiers_prometheus(FILE *out, const struct kvp_stats_view *s);
void print_remote_prometheus(FILE *out, const struct kvp_stats_view *s);
/* snapshots.c: the pools' window snapshots; nothing where no pool has a cyclic group. */
void print_snapshots_table(const struct kvp_stats_view *s);
void print_snapshots_prometheus(FILE *out, const struct kvp_stats_view *s);
/* events.c: the pools' KV events publishers; nothing where no pool has one. */
void print_events_table(const struct kvp_stats_view *s);
void print_events_prometheus(FILE *out, const struct kvp_stats_view *s);

/* tenants.c: the uids' and namespaces' use of their quotas. */
void print_tenants_table(const struct kvp_stats_view *s);
void print_tenants_prometheus(FILE *out, const struct kvp_stats_view *s);

int kvctl_top(struct kvp_client *c, bool json, unsigned interval_ms, unsigned count);
/* kvctl acct: @argv from "acct" on; a -s/--socket there overrides @socket_path. */
int kvctl_acct(int argc, char **argv, const char *socket_path);

/* CLOCK_MONOTONIC in ns: deadlines and elapsed times. */
static inline uint64_t kvctl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* main.c: what every command shares. */
#define SOCKET_HELP                                                                        \
	"  -s, --socket PATH   the daemon's socket (default $KVPOOL_SOCKET, else\n"       \
	"                      " KVP_DEFAULT_SOCKET ")\n"                                  \
	"  -h, --help          show this help and exit\n"

/* What the options after a command set. */
struct cmd_opts {
	const char *socket;
	bool json, prom;
	bool drop_tier;
	unsigned interval, count;
	unsigned timeout_ms;   /* --timeout; 0: not given */
	const char *listen;    /* --listen ADDR:PORT */
	const char *exec;      /* --exec PATH */
	int nargs;     /* operands, in order */
	char **args;
};

enum { OPT_JSON = 256, OPT_PROM, OPT_INTERVAL, OPT_COUNT, OPT_DROP_TIER, OPT_TIMEOUT, OPT_LISTEN,
       OPT_EXEC };
/* parse_cmd printed the command's help: kvctl exits 0. */
#define HELP_SHOWN (-1)
/* Options a command takes beyond -s and -h: bits (1 << (OPT_x - OPT_JSON)). */
#define TAKES(opt) (1u << ((opt) - OPT_JSON))

/* "kvctl: CMD: what is wrong", and where to read more. Returns 2, kvctl's usage status. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * The options of command @cmd ("stats", "pool create"), before or after its
 * operands: -s/--socket and -h/--help for every command, @takes of the rest.
 * Returns 0 (the operands in o->args), HELP_SHOWN, or 2 for a usage error
 * (said on stderr). o->args must hold @argc entries.
 */
int parse_cmd(const char *cmd, const char *help, unsigned takes, int argc, char **argv,
	      struct cmd_opts *o);
/* The socket kvctl talks to: --socket, else $KVPOOL_SOCKET, else the default. */
const char *socket_path(const char *socket);
/*
 * Every kvctl connection is a monitor: it watches the clients, it is not one of
 * them. monitor_connect puts why it failed at @msg (kvp_connect_error's words);
 * @timeout_ms 0 is libkvpool's default. connect_to says it on stderr.
 */
int monitor_connect(const char *socket, bool admin, unsigned timeout_ms, struct kvp_client **c,
		    char *msg, size_t len);
int connect_to(const char *socket, bool admin, struct kvp_client **c);
/* A stats snapshot that could not be had (kvp_stats_view_take's @err), in words. */
void snapshot_error(int err, const char *socket, char *buf, size_t len);

/* health.c: kvctl health. */
int cmd_health(int argc, char **argv, struct cmd_opts *o);
/* A NOP's failure (kvp_nop's @err) on a connection waiting @timeout_ms, in words. */
void nop_error(int err, const char *socket, unsigned timeout_ms, char *buf, size_t len);
/* exporter.c: kvctl exporter. */
int cmd_exporter(int argc, char **argv, struct cmd_opts *o);

/* pool.c: pool create | destroy | sync. */
int cmd_pool(int argc, char **argv, struct cmd_opts *o);
/* daemon.c: daemon restart. */
int cmd_daemon(int argc, char **argv, struct cmd_opts *o);

#endif
