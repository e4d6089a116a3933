/* SPDX-License-Identifier: MIT */
/*
 * The courier: a thread that makes the calls whose cost a client controls,
 * so that it never stalls the event loop: the setup reply and the final
 * close of a socket (each wakes the client's end, a pass over every waiter
 * the client put there, epoll watches included), the last close of a
 * client's doorbell set (it unhooks from an eventfd the client may be
 * writing, and waits for that write's pass), and adding a doorbell set to
 * the loop's epoll (it takes a lock every process's nested epoll shares).
 * Parcels are delivered in the order they were posted.
 *
 * The thread keeps the queue; the calls themselves run in a process of the
 * courier's own (kvpd_courier_spawn): a clone of the daemon that shares its
 * descriptor table (CLONE_FILES) but not its address space. A wake-up pass
 * runs with interrupts off, and a core with interrupts off answers no
 * TLB-shootdown IPI: when that core had the daemon's address space loaded,
 * any thread of the daemon that unmapped or replaced a page (the loop's
 * munmap of a client's rings, a copy-on-write fault) waited for the whole
 * pass, 30-45 ms for a socket watched 100,000 times. The process's core
 * holds another address space, which the daemon's flushes pass by. Without
 * the process (clone refused), the thread makes the calls itself.
 */
#ifndef KVPOOLD_COURIER_H
#define KVPOOLD_COURIER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KVPD_PARCEL_FDS 4
#define KVPD_PARCEL_BYTES 256
#define KVPD_PARCEL_WHY 128 /* KVP_REASON_MAX */

struct kvpd_parcel {
	struct kvpd_parcel *next;
	uint64_t seq;                  /* set by kvpd_courier_post */
	int epfd;                      /* first, epoll_ctl(epfd, EPOLL_CTL_ADD, ep_fd); -1: none */
	int ep_fd;
	uint32_t ep_events;
	uint64_t ep_key;
	int sock;                      /* then sent on with MSG_DONTWAIT; -1: nothing to send */
	unsigned drain;                /* messages read off sock first and dropped: a socket
					* closed with unread ones fails the peer's next read
					* (ECONNRESET) before it sees what we sent */
	size_t len;
	unsigned char msg[KVPD_PARCEL_BYTES];
	int pass[KVPD_PARCEL_FDS];     /* descriptors sent with the message (SCM_RIGHTS) */
	unsigned npass;
	bool counted;                  /* pass[] are copies counted in the courier's
					* copies_queued, closed (by close[]) once out */
	size_t why_len;                /* then a second message: why (a refusal's reason) */
	char why[KVPD_PARCEL_WHY];
	int close[KVPD_PARCEL_FDS];    /* closed once the message is out */
	unsigned nclose;
};

struct kvpd_courier {
	pthread_t thread;
	pid_t helper;         /* the courier's process; 0: none, the thread delivers */
	int helper_sock;      /* a socketpair: the thread's end, */
	int helper_end;       /* the process's end (both in the shared table) */
	int helper_pidfd;     /* readable once the process is gone */
	pthread_mutex_t lock;
	pthread_cond_t wake;  /* a parcel was posted, or stop */
	pthread_cond_t idle;  /* the queue is empty and nothing is being delivered */
	struct kvpd_parcel *head, *tail;
	bool busy;            /* delivering one, outside the lock */
	bool started, stop;
	const struct kvpd_log *log; /* the daemon's */
	/*
	 * Copies of descriptors queued to be passed (POOL_MAP's): the loop
	 * bounds them, as each holds a descriptor of the daemon's until sent.
	 */
	unsigned copies_queued;
	uint64_t posted;      /* parcels posted (under lock) */
	uint64_t delivered;   /* atomic: the seq of the last parcel delivered */
};

/*
 * Clones the courier's process. Early, while the daemon's address space is
 * small and holds no GPU mappings: the clone's copy of it is never used.
 */
int kvpd_courier_spawn(struct kvpd_courier *k);
int kvpd_courier_start(struct kvpd_courier *k);
/* Delivers what is posted, joins the thread, then ends the process. */
void kvpd_courier_stop(struct kvpd_courier *k);
/*
 * Copies @p. Without memory it is delivered on the caller's thread once the
 * queue is empty (order is kept), as it is before start. Returns its sequence
 * number: it is out once kvpd_courier_delivered() reaches it.
 */
uint64_t kvpd_courier_post(struct kvpd_courier *k, const struct kvpd_parcel *p);
static inline bool kvpd_courier_delivered(struct kvpd_courier *k, uint64_t seq)
{
	return __atomic_load_n(&k->delivered, __ATOMIC_ACQUIRE) >= seq;
}
/* @why, cut to fit and NUL-terminated, as the parcel's second message. */
static inline void kvpd_parcel_why(struct kvpd_parcel *p, const char *why)
{
	p->why_len = strnlen(why, sizeof(p->why) - 1) + 1;
	memcpy(p->why, why, p->why_len - 1);
	p->why[p->why_len - 1] = '\0';
}

/* A parcel that does nothing until filled in. */
#define KVPD_PARCEL_INIT { .epfd = -1, .sock = -1 }
/* Closes @fd (nothing when negative) on the courier. */
void kvpd_courier_close(struct kvpd_courier *k, int fd);

#endif
