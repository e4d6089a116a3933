/* SPDX-License-Identifier: MIT */
/*
 * The event loop's one door to the kernel: readiness of the daemon's own
 * descriptors (signalfd, timerfd, the workers' eventfd), new connections, and
 * per client its socket (the setup message, the hang-up) and its doorbell.
 * Two implementations, one file each: evloop_uring.c (liburing, multishot
 * accept and poll) and evloop_epoll.c (epoll(7), for where io_uring is
 * refused). Nothing outside them knows which one runs; clients cannot tell.
 *
 * Every watched descriptor is one whose file only the daemon holds: a client
 * can neither change its flags nor attach waiters to it. The doorbell eventfd
 * the client does hold is watched through the client's own epoll set
 * (conn->bell), which the daemon alone holds.
 *
 * The loop room (this interface, its two implementations, the courier that
 * makes their descriptors' calls, the spin-then-sleep wake-ups) knows a
 * client only as its struct kvpd_conn and an event only by its key: whose
 * client a key names is for the rooms above to say. It may use the config
 * room and the shared headers.
 */
#ifndef KVPOOLD_EVLOOP_H
#define KVPOOLD_EVLOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvpd;

/* A client as the event loop knows it: the two descriptors it watches and its key. */
struct kvpd_conn {
	int sock;                /* its socket: the setup message, the hang-up */
	int bell;                /* its own epoll set, holding its doorbell eventfd */
	void *ev_sock, *ev_bell; /* the implementation's */
	uint64_t key;            /* slot << 8 | gen << 32: what its events carry (kvpd_event_key) */
	uint64_t owner;          /* its peer's uid: the courier key its calls go under */
};

enum kvpd_event {
	KVPD_EV_ACCEPT = 1, /* a connection: res is its descriptor, or -errno */
	KVPD_EV_SIGNAL,     /* the signalfd is readable */
	KVPD_EV_TIMER,      /* the housekeeping timerfd is readable */
	KVPD_EV_JOBS,       /* the workers' eventfd is readable */
	KVPD_EV_CLIENT,     /* a client's socket: res is its POLL* bits */
	KVPD_EV_DOORBELL,   /* a client rang: the loop is awake, nothing to read */
	KVPD_EV_LOST,       /* a client's watch ended and cannot be made again: close it */
};

struct kvpd_event_rec {
	enum kvpd_event ev;
	uint64_t key;          /* KVPD_EV_CLIENT, _DOORBELL, _LOST: whose (kvpd_event_key) */
	int res;
};

typedef void kvpd_event_fn(struct kvpd *d, const struct kvpd_event_rec *e);

struct kvpd_evloop_ops {
	const char *name; /* as logged and shown by kvctl stats */
	uint32_t kind;    /* KVP_EVENT_LOOP_* */
	/* 0, or -errno with the reason it is unavailable in @why. */
	int (*init)(struct kvpd *d, char *why, size_t why_len);
	/* Closes what it still holds; every client must be released first. */
	void (*fini)(struct kvpd *d);
	/* Readiness of a descriptor of the daemon's own, until fini. */
	int (*watch)(struct kvpd *d, int fd, enum kvpd_event ev);
	/* KVPD_EV_ACCEPT events from d->listen_fd until accept_stop. */
	int (*accept_start)(struct kvpd *d);
	void (*accept_stop)(struct kvpd *d);
	/*
	 * KVPD_EV_CLIENT events for conn->sock until client_release, edge-triggered:
	 * one per message that arrives, and its hang-up.
	 */
	int (*client_watch)(struct kvpd *d, struct kvpd_conn *conn);
	/* KVPD_EV_DOORBELL events for conn->bell until client_release, one per ring at least. */
	int (*doorbell_watch)(struct kvpd *d, struct kvpd_conn *conn);
	/*
	 * No more events for @conn; its sock and bell (-1 when unset) go to the
	 * courier to close once nothing of the loop's refers to them: what their
	 * release costs (the client's hang-up walks its waiters) is the courier's
	 * time, not the loop's. Sets both to -1.
	 */
	void (*client_release)(struct kvpd *d, struct kvpd_conn *conn);
	/*
	 * Hands every ready event to @fn, sleeping up to @timeout_ms (-1: until
	 * one comes) when none is. With 0 it only looks, and may skip looking
	 * when it looked a moment ago. Returns events handled, or -errno.
	 */
	int (*wait)(struct kvpd *d, int timeout_ms, kvpd_event_fn *fn);
};

extern const struct kvpd_evloop_ops kvpd_evloop_uring;
extern const struct kvpd_evloop_ops kvpd_evloop_epoll;

/* user_data / epoll_data of an event: kind | slot << 8 | gen << 32 (conn NULL: the daemon's). */
static inline uint64_t kvpd_event_key(enum kvpd_event ev, const struct kvpd_conn *conn)
{
	return (uint64_t)ev | (conn ? conn->key : 0);
}

static inline enum kvpd_event kvpd_event_kind(uint64_t key)
{
	return (enum kvpd_event)(key & 0xff);
}

#endif
