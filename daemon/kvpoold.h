/* SPDX-License-Identifier: MIT */
/*
 * The daemon's context: every piece of mutable state, reached from here. Shared
 * by every room but config (the lowest), so it names only what the lowest of
 * them may see: the config room's settings, the loop room's interface and
 * courier, the log. Each other room's state is a pointer to a struct that only
 * its own header (and the rooms above it, which include that header) complete:
 * a room reaches a higher room's state only by including that room's header,
 * which tests/rooms.sh refuses. docs/design.md, "Where things are", ranks the
 * rooms.
 */
#ifndef KVPOOLD_H
#define KVPOOLD_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "log.h"
#include "config/config.h"
#include "loop/courier.h"
#include "loop/evloop.h"

struct kvpd_pool;        /* pools/pools.h */
struct kvpd_tier;        /* tier/tier.h */
struct kvpd_events;      /* events/events.h */
struct kvpd_client;      /* session/session.h */
struct kvpd_tenant;      /* tenants/tenants.h */
struct kvpd_workers;     /* pools/jobs.h */
struct kvpd_plugin;      /* pools/plugin.h */
struct kvpd_statpage;    /* observe/statpage.h */
struct kvpd_statview;
struct kvpd_handover;    /* handover/handover.h */

/* A request's answer when it completes later (the workers, a tier): no result is an INT_MIN. */
#define KVPD_LATER INT_MIN

struct kvpd {
	struct kvpd_config cfg;
	struct kvpd_cli cli;
	const char *config_path; /* --config, re-read at SIGHUP; NULL: none */
	char *inherited_path;    /* the socket systemd passed (LISTEN_FDS): no lock, no unlink */
	struct kvpd_log log;
	const struct kvpd_evloop_ops *ev;
	void *ev_state;           /* the implementation's */
	struct kvpd_courier courier;
	int listen_fd, lock_fd, signal_fd, timer_fd;
	bool stopping;
	bool accept_paused;       /* accept failed (out of descriptors): until a client leaves */
	bool accept_paused_logged;
	long ncpus;
	uint64_t boot_id;         /* this run's, random, never 0: kvp_setup_reply.boot_id */

	struct kvpd_pool *pools[KVPD_MAX_POOLS];
	unsigned npools;
	struct kvpd_pool *pools_building; /* prepared, being built off the loop (pools.h) */
	unsigned npools_building;

	struct kvpd_tenant *tenants;
	uint64_t seqs_released;       /* since the heap was last trimmed */
	unsigned ticks;               /* housekeeping's */
	struct kvpd_client **clients; /* by slot */
	unsigned nclients;
	struct kvpd_client **active;  /* set up, dense: what the loop polls */
	unsigned nactive;
	unsigned nmonitors;           /* of the active, KVP_FEAT_MONITOR's: not listed in stats */
	uint64_t client_gen;

	struct kvpd_workers *workers;
	struct kvpd_plugin *cuda;         /* the CUDA backend, loaded by the first cuda pool */
	uint32_t jobs_inflight;
	struct kvpd_statpage *stats;      /* the full page, for admin readers */
	struct kvpd_handover *handover;   /* a planned restart: this run's and the last's */
	struct kvpd_statview *stat_views; /* the uids' pages */
	uint64_t taken_ns; /* when the entry being dispatched was taken */
	struct kvpd_client *batch_pending; /* clients with an op_batch to fire */

	uint64_t connected, disconnected, killed;
	uint8_t *stats_buf;
	size_t stats_cap;
};

#endif
