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
/* A restart: every client closed, saying @why (their sequences end, their blocks freed). */
void kvpd_clients_close_all(struct kvpd *d, const char *why);
/* A restart refused after the drain: accepting again, taking requests again. */
int kvpd_loop_resume(struct kvpd *d);
/* What the rooms above the stats page add to it (kvpd_statpage_init). */
extern const struct kvpd_stats_hooks kvpd_stats_hooks;

/* listen.c */
/* The socket at d->cfg.socket_path, SOCKET.lock held in d->lock_fd: 0 or -errno. */
int kvpd_listen_on(struct kvpd *d);
/* systemd's socket (LISTEN_FDS): 1 taken, 0 none passed, -errno with @why. */
int kvpd_inherit_socket(struct kvpd *d, char *why, size_t why_len);
/* A planned restart's socket and lock (d->handover's), the daemon's: 0, or -errno with @why. */
int kvpd_listen_handed(struct kvpd *d, char *why, size_t why_len);
/* SOCKET.lock removed while held, then closed (@fd -1: none). */
void kvpd_unlock_socket_path(const char *path, int fd);

/* reload.c: SIGHUP: read the config file again (see reload.c for what applies). */
void kvpd_reload(struct kvpd *d);
/* Start-up: the config's pools, each with its tier; -errno (logged, naming the pool) if one fails. */
int kvpd_pools_start(struct kvpd *d);

#endif
