/* SPDX-License-Identifier: MIT */
/*
 * An in-process kvpoold for fuzz_session and fuzz_config: the real daemon code (everything in
 * daemon/ but main.c) behind a do-nothing event loop, with clients that
 * connect through a socketpair and then drive their rings from the same
 * thread. See fuzz_daemon.c for what lives per process and what per input.
 */
#ifndef KVPOOL_FUZZ_DAEMON_H
#define KVPOOL_FUZZ_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include "serve.h"
#include "data/data.h"
#include "requests/requests.h"

/* The client's side of one session: its end of the socket and its own mapping of the memfd. */
struct fz_client {
	bool connected;       /* the setup succeeded: the fields below are set */
	int sock;             /* our end; -1 when none */
	uint32_t slot, gen;   /* the daemon's name for it (gen 0: none) */
	uint8_t *map;
	size_t map_bytes;
	uint32_t *sq_head, *sq_tail, *sq_flags, *cq_head, *cq_tail, *cq_flags;
	struct kvp_sqe *sqes;
	struct kvp_cqe *cqes;
	uint8_t *arena;
	uint64_t arena_bytes;
	uint32_t sq_entries, cq_entries;
	bool admin;

	/* The client model: what a well-behaved client keeps. */
	uint32_t sq_local;    /* the tail we write next */
	uint32_t cq_local;    /* our CQ head */
	uint32_t cq_scanned;  /* completions looked at for handles */
	bool hostile;         /* an index was written out of protocol: no accounting checks */
	uint64_t handles[16];
	unsigned nhandles;
	uint32_t submitted;   /* user_data counter */
	uint64_t obj_off, obj_len; /* the last arena object written (FZ_F_AUTO) */
};

/* FUZZ_VERBOSE is set: the daemon logs, the harness shows completions. */
extern bool fz_verbose;
/* The event loop's failures the next connection sees (FZ_S2_FAIL_*). */
extern bool fz_fail_client_watch, fz_fail_doorbell_watch;

/* The daemon, made on first use and kept for the process. */
struct kvpd *fz_daemon(void);
/*
 * An input starts: what must be as it is now at its end (fz_teardown), and
 * whether every probe has a tracer (a tracer's semaphore count) meanwhile.
 */
void fz_begin(bool tracing);
/* This input's pools: "kv" (KV memory, of @kv_shape and @dtype) and "plain" (no KV). */
void fz_pools_create(struct kvpd *d, unsigned kv_shape, unsigned dtype, unsigned plain_shape);
/*
 * A connection from @uid sending @len bytes of @s (with its hang-up when @hup);
 * fc->connected says whether the daemon took it.
 */
void fz_connect(struct kvpd *d, struct fz_client *fc, const struct kvp_setup *s, size_t len,
		uid_t uid, bool hup);
/* The daemon's client of @fc, while it is open. */
struct kvpd_client *fz_client_of(struct kvpd *d, const struct fz_client *fc);
/* The hang-up: the daemon closes the session (its jobs may still run); our end goes too. */
void fz_hangup(struct kvpd *d, struct fz_client *fc);
/* Completions that arrived: the handles of SEQ_OPENs, and the ABI's promises on every CQE. */
void fz_scan_cqes(struct fz_client *fc);
/* Waits for every job on the workers and completes it (aborts if one never finishes). */
void fz_drain(struct kvpd *d);
/* Every client gone and drained: check what must hold, then free this input's pools. */
void fz_teardown(struct kvpd *d);
/*
 * Makes pool parameters affordable (blocks, block size, windows, KV geometry):
 * a value in range that is too large becomes the fuzzers' cap; one out of
 * range stays as it is, so that valid stays valid and invalid invalid.
 */
void fz_clamp_pool_params(struct kvp_pool_params *p);
void fz_clamp_pool_spec(struct kvpd_pool_spec *spec);
/* Aborts with a message: the fuzzer reports it as a crash, with the input. */
void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
