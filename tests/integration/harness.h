/* SPDX-License-Identifier: MIT */
/*
 * Integration-test harness: start a real kvpoold on a private socket, connect
 * clients, fork client processes, and stop the daemon checking it exits 0.
 * The daemon binary comes from $KVPOOLD (default build/bin/kvpoold).
 */
#ifndef KVPOOL_TEST_HARNESS_H
#define KVPOOL_TEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "../../lib/libkvpool.h"

struct daemon {
	pid_t pid;
	char dir[64];
	char socket[128];
	char log[128];
};

/*
 * Starts kvpoold with @extra_args (NULL-terminated, may be NULL), and with
 * --event-loop $KVPOOL_EVENT_LOOP when that is set; waits until it accepts.
 */
int daemon_start(struct daemon *d, const char *const *extra_args);
/* As daemon_start, under RLIMIT_NOFILE @nofile (soft and hard; 0: inherited). */
int daemon_start_nofile(struct daemon *d, const char *const *extra_args, unsigned nofile);
/* A new kvpoold on @d's socket (and log, appended to), as daemon_start does it. */
int daemon_restart(struct daemon *d, const char *const *extra_args);
/* SIGTERM, then waits: returns the exit status (0 expected), or -1. */
int daemon_stop(struct daemon *d);
/* The kvpoold under test: $KVPOOLD, else build/bin/kvpoold. */
const char *daemon_binary(void);
/*
 * Where that daemon finds the CUDA plugin by default (gpu/ beside its
 * directory's parent) in @dir; true when libkvpool_cuda.so is there (built).
 */
bool daemon_plugin_dir(char *dir, size_t len);
/* CLOCK_MONOTONIC, ns. */
uint64_t test_now_ns(void);
/* The daemon's CPU time so far (user + system), in clock ticks, or -1. */
long daemon_cpu_ticks(const struct daemon *d);
/* The number in the first line of @path that @format (with one %ld) matches, or -1. */
long proc_field(const char *path, const char *format);
/* The daemon's resident set size in KiB (from /proc), or -1. */
long daemon_rss_kib(const struct daemon *d);

/* How many lines of the file at @path (a daemon's log) contain @text; 0 when there is none. */
long lines_with(const char *path, const char *text);
/*
 * The daemon's child process named @name (its comm), or 0: scans /proc, as
 * /proc/PID/task/TID/children is not on every kernel.
 */
pid_t daemon_child_named(const struct daemon *d, const char *name);
/* Up to @max of them (the courier's lanes), in @out; returns how many. */
unsigned daemon_children_named(const struct daemon *d, const char *name, pid_t *out,
			       unsigned max);
/*
 * A test that fails (CHECK exits) or hangs must not leave its daemon running
 * behind it, and whoever reads the failure wants the daemon's log. Call
 * watchdog_start first thing in main, before any fork: at exit from this
 * process (not from a forked child that exits, which shares the daemon) it
 * SIGKILLs the watched daemon and prints where its log is; after @seconds it
 * prints "@test_name: timed out", SIGKILLs the daemon and exits 1.
 */
void watchdog_start(const char *test_name, unsigned seconds);
/*
 * @d (NULL: none) becomes the daemon the watchdog kills: set it right after
 * daemon_start, and back to NULL before a daemon_stop, whose exit status the
 * test checks and whose log it keeps or removes.
 */
void watchdog_watch(struct daemon *d);

/* Connects to @d: attached to @pool ("" for none), in @ns, admin or not; aborts the test on failure. */
struct kvp_client *connect_or_die(const struct daemon *d, const char *pool, const char *ns,
				  bool admin);
/* POOL_CREATE v2 parameters from kvctl-style "key=value" words (NULL-terminated). */
void pool_params_or_die(struct kvp_pool_params_v2 *p, const char *name, const char *const *kv);
/* Creates a pool from kvctl-style "key=value" words (NULL-terminated), v2 keys included. */
void create_pool_or_die(const struct daemon *d, const char *name, const char *const *kv);
/* Likewise with a host tier of @tier_bytes (POOL_CREATE v3's tier_host_bytes), by @admin. */
void create_tiered_pool_or_die(struct kvp_client *admin, const char *name, const char *const *kv,
			       uint64_t tier_bytes);
/* The pool's stats through an admin CHECK first: aborts if invariants are broken. */
void check_pool_or_die(const struct daemon *d, const char *pool, struct kvp_pool_stats *st);

/*
 * Tenants: tests that run clients as other uids need root (they return 77
 * without it). daemon_open_to_all lets any uid reach @d's socket (the harness
 * makes its directory 0700 and the socket 0660); drop_to_uid makes the
 * calling process (a forked child) @uid, group @uid too, for good.
 */
void daemon_open_to_all(const struct daemon *d);
/*
 * A copy of the program @bin, mode 0755, in @d's directory, in @path: after
 * daemon_open_to_all another uid can run it there, where the tree it was built
 * in may be closed to that uid (a CI clone in a 0700 temporary directory).
 */
void daemon_copy_program(const struct daemon *d, const char *bin, char *path, size_t len);
void drop_to_uid(uid_t uid);
/*
 * Writes @text to a new config file and returns its path, valid until the
 * next call; the file is removed at exit.
 */
const char *config_file(const char *text);

/* Runs @fn(@arg) in a forked child; returns its pid. */
pid_t fork_child(int (*fn)(void *arg), void *arg);
/*
 * Runs @fn(@arg) in a forked child and returns its pid once the child has
 * printed something on its stdout (and flushed it): "I am ready".
 */
pid_t fork_child_ready(int (*fn)(void *arg), void *arg);
/* Waits for @pid; returns its exit status, or 128 + signal. */
int wait_child(pid_t pid);

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

#define CHECK_EQ(a, b)                                                                     \
	do {                                                                               \
		long long a_ = (long long)(a), b_ = (long long)(b);                        \
		if (a_ != b_) {                                                            \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__,   \
				__LINE__, #a, a_, #b, b_);                                 \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

#endif
