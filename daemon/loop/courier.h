/* SPDX-License-Identifier: MIT */
/*
 * The courier: threads that make the calls whose cost a client controls, so
 * that they never stall the event loop: the setup reply and the final close
 * of a socket (each wakes the client's end, a pass over every waiter the
 * client put there, epoll watches included), the last close of a client's
 * doorbell set (it unhooks from an eventfd the client may be writing, and
 * waits for that write's pass), and adding a doorbell set to the loop's epoll
 * (it takes a lock every process's nested epoll shares).
 *
 * A parcel is posted under a key, its client's uid: one uid's parcels are
 * delivered in the order they were posted, one at a time, and the uids take
 * turns. KVPD_COURIER_LANES lanes deliver, each a thread with a process of
 * its own, so a uid whose every send walks millions of watches holds one
 * lane, never another uid's parcel: the others go on in the other lanes.
 * Such a walk runs with interrupts off, and whatever the scheduler queued on
 * its core waits for it: a key whose parcel took KVPD_COURIER_SLOW_NS of CPU
 * or more rests KVPD_COURIER_REST times as long before its next, so that its
 * walks hold at most a quarter of one core.
 *
 * A lane's thread takes parcels; the calls themselves run in the lane's
 * process (kvpd_courier_spawn): a clone of the daemon that shares its
 * descriptor table (CLONE_FILES) but not its address space. A wake-up pass
 * runs with interrupts off, and a core with interrupts off answers no
 * TLB-shootdown IPI: when that core had the daemon's address space loaded,
 * any thread of the daemon that unmapped or replaced a page (the loop's
 * munmap of a client's rings, a copy-on-write fault) waited for the whole
 * pass, 30-45 ms for a socket watched 100,000 times. The process's core
 * holds another address space, which the daemon's flushes pass by. Without
 * its process (clone refused, or the process died), a lane's thread makes
 * the calls itself.
 */
#ifndef KVPOOLD_COURIER_H
#define KVPOOLD_COURIER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#define KVPD_PARCEL_FDS 4
#define KVPD_PARCEL_BYTES 256
#define KVPD_PARCEL_WHY 128 /* KVP_REASON_MAX */
/*
 * Lanes: uids served at once. One hostile uid holds one; the rest serve
 * everyone else. Each costs a thread, a process and three descriptors.
 */
#define KVPD_COURIER_LANES 4
/* A parcel this dear (CPU ns) makes its key rest KVPD_COURIER_REST times as long. */
#define KVPD_COURIER_SLOW_NS 1000000ull
#define KVPD_COURIER_REST 3
/* The key of a parcel whose peer is unknown (its credentials unreadable). */
#define KVPD_COURIER_ANON UINT64_MAX

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
	bool counted;                  /* pass[] are copies counted in their key's
					* (kvpd_courier_copies), closed (by close[]) once out */
	size_t why_len;                /* then a second message: why (a refusal's reason) */
	char why[KVPD_PARCEL_WHY];
	int close[KVPD_PARCEL_FDS];    /* closed once the message is out */
	unsigned nclose;
};

struct kvpd_courier;

struct kvpd_courier_lane {
	struct kvpd_courier *k;
	unsigned index;
	pthread_t thread;
	bool started;
	pid_t helper;         /* the lane's process; 0: none, the thread delivers */
	int helper_sock;      /* a socketpair: the thread's end, */
	int helper_end;       /* the process's end (both in the shared table) */
	int helper_pidfd;     /* readable once the process is gone */
};

struct kvpd_courier_queue; /* one key's parcels (courier.c) */

struct kvpd_courier {
	struct kvpd_courier_lane lanes[KVPD_COURIER_LANES];
	pthread_mutex_t lock;
	pthread_cond_t wake;  /* a key has a parcel to take, or stop */
	pthread_cond_t idle;  /* nothing queued nor being delivered */
	struct kvpd_courier_queue *queues;   /* every key with a parcel queued or in hand */
	struct kvpd_courier_queue *ready;    /* keys with one to take and none in hand: */
	struct kvpd_courier_queue *ready_tail; /* their turns, longest waiting first */
	unsigned resting;     /* keys resting after a dear parcel */
	bool started, stop;
	const struct kvpd_log *log; /* the daemon's */
	uint64_t posted;      /* parcels posted (under lock) */
};

/*
 * Clones the lanes' processes. Early, while the daemon's address space is
 * small and holds no GPU mappings: the clones' copies of it are never used.
 * A lane whose clone failed has none; returns the first failure.
 */
int kvpd_courier_spawn(struct kvpd_courier *k);
int kvpd_courier_start(struct kvpd_courier *k);
/* Delivers what is posted, joins the threads, then ends the processes. */
void kvpd_courier_stop(struct kvpd_courier *k);
/*
 * Copies @p into @key's queue. Without memory it is delivered on the
 * caller's thread once nothing is queued (order is kept), as it is before
 * start. Returns its sequence number, for kvpd_courier_delivered().
 */
uint64_t kvpd_courier_post(struct kvpd_courier *k, uint64_t key, const struct kvpd_parcel *p);
/* Whether @key's parcel @seq is out (exact: only that key's parcels come before it). */
bool kvpd_courier_delivered(struct kvpd_courier *k, uint64_t key, uint64_t seq);
/* Descriptor copies of @key's parcels (counted ones) not yet out. */
unsigned kvpd_courier_copies(struct kvpd_courier *k, uint64_t key);
/* @why, cut to fit and NUL-terminated, as the parcel's second message. */
static inline void kvpd_parcel_why(struct kvpd_parcel *p, const char *why)
{
	p->why_len = strnlen(why, sizeof(p->why) - 1) + 1;
	memcpy(p->why, why, p->why_len - 1);
	p->why[p->why_len - 1] = '\0';
}

/* A parcel that does nothing until filled in. */
#define KVPD_PARCEL_INIT { .epfd = -1, .sock = -1 }
/* Closes @fd (nothing when negative) on the courier, in @key's turn. */
void kvpd_courier_close(struct kvpd_courier *k, uint64_t key, int fd);

#endif
