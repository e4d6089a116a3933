/* SPDX-License-Identifier: MIT */
/* libkvpool internals: the connection the public struct kvp_client stands for. */
#ifndef LIBKVPOOL_CLIENT_H
#define LIBKVPOOL_CLIENT_H

#include <poll.h>
#include <stdbool.h>
#include <time.h>

#include "libkvpool.h"

struct kvp_client {
	int sock;              /* the session: its hang-up is the daemon's death */
	int bell;              /* the SQ doorbell eventfd */
	int broken;            /* 0, or what every call returns: -ENOTCONN after a time-out,
				* -ECONNRESET once the daemon is gone */
	uint64_t timeout_ns;   /* how long a blocking call waits */
	void *map;
	size_t map_bytes;
	uint32_t *sq_head, *sq_tail, *sq_flags;
	uint32_t *cq_head, *cq_tail, *cq_flags;
	struct kvp_sqe *sqes;
	struct kvp_cqe *cqes;
	uint32_t sq_entries, cq_entries;
	uint32_t sq_local_tail;
	uint32_t sq_head_seen; /* the daemon's SQ head when last read */
	uint8_t *arena;
	uint64_t arena_bytes;
	uint64_t features;
	uint32_t daemon_version; /* KVP_VERSION_CODE of the daemon's release */
	uint64_t boot_id;        /* the daemon's run (kvp_setup_reply.boot_id) */
	uint64_t pool_generation; /* the attached pool's (setup reply, then ATTACH's) */
	unsigned spin_us;
	uint64_t next_user_data;
	struct kvp_pool_info pool;
	void *stats_map;
	size_t stats_bytes;
	/* Lookups out (kvp_lookup_start): their completions set aside as the CQ is read. */
	struct kvp_ticket {
		uint64_t user_data;  /* KVP_TICKET_BIT | a count; 0: a free slot */
		int32_t res;
		uint8_t state;       /* TICKET_OUT, TICKET_DONE, TICKET_DROPPED */
	} tickets[KVP_LOOKUPS_MAX];
	uint32_t tickets_out;    /* submitted, completion not reaped: the CQ owes them */
	uint64_t tickets_made;
	uint64_t tickets_reaped; /* a wait for one lookup looks for this to move */
};

/* The user_data bit a lookup's entry carries: ring-level callers keep it clear. */
#define KVP_TICKET_BIT (1ull << 63)

/*
 * When the completion at the CQ's head is a lookup's, records it and reaps
 * it: true. kvp_peek_cqe calls this, so every reader of the CQ sets them aside.
 */
bool kvp_ticket_reap(struct kvp_client *c, const struct kvp_cqe *cqe);

/*
 * kvp_wait_cqe until @deadline. @for_lookup: a wait for a lookup set aside,
 * which also ends (-EAGAIN) once one is, and leaves the connection usable
 * when the deadline passes (-ETIMEDOUT).
 */
int kvp_wait_cqe_until(struct kvp_client *c, struct kvp_cqe **cqe, uint64_t deadline,
		       bool for_lookup);
/* Waits until @fd is readable, at most until @deadline (kvp_now_ns): -ETIMEDOUT after. */
int kvp_wait_readable(int fd, uint64_t deadline);
/*
 * POOL_MAP's request: its completion's res (how many descriptors follow on
 * the socket) and *tag, the user_data the messages carry; a refusal's reason
 * to @why.
 */
int kvp_pool_map_request(struct kvp_client *c, uint64_t *tag, char *why, size_t why_len);

static inline uint64_t kvp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void kvp_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

#endif
