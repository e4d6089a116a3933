/* SPDX-License-Identifier: MIT */
/*
 * The top of the daemon: main.c, the daemon's loop (serve.c) and SIGHUP's
 * reload (reload.c) drive every room; no room includes this header.
 */
#ifndef KVPOOLD_SERVE_H
#define KVPOOLD_SERVE_H

#include <signal.h>

#include "kvpoold.h"
#include "observe/statpage.h"

/* serve.c */
/* The signals the loop reads from its signalfd (SIGTERM, SIGINT, SIGHUP), into @set. */
void kvpd_signal_set(sigset_t *set);
/* Picks the implementation (logging which, and why), watches the daemon's descriptors. */
int kvpd_loop_init(struct kvpd *d);
int kvpd_loop_run(struct kvpd *d);
void kvpd_loop_exit(struct kvpd *d);
/* What the rooms above the stats page add to it (kvpd_statpage_init). */
extern const struct kvpd_stats_hooks kvpd_stats_hooks;

/* reload.c: SIGHUP: read the config file again (see reload.c for what applies). */
void kvpd_reload(struct kvpd *d);
/* Start-up: the config's pools, each with its tier; -errno (logged, naming the pool) if one fails. */
int kvpd_pools_start(struct kvpd *d);

#endif
