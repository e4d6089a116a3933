/* SPDX-License-Identifier: MIT */
/*
 * The daemon's side of a client's rings. Indices written by the client are
 * read once, with acquire, and checked against our own copies before use: a
 * tail more than a ring ahead, or a head past what we produced, is corruption
 * and ends the session. Entries are copied out before anything looks at them.
 */
#include <errno.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "session/session.h"

/* The longest the stats page's seqlock stays odd for one batch of entries (plus one entry). */
#define STATS_BRACKET_NS 100000ull
/*
 * An entry slower than this leaves the page to readers while the next one
 * runs: a reader copies the whole page (about 140 KB, tens of us), which a
 * bracket reopened at once after each slow entry never leaves room for.
 */
#define SLOW_ENTRY_NS 20000ull
/* The longest one client's turn takes entries for (plus one entry). */
#define TURN_NS 500000ull
/* Entries ahead whose lines are fetched: about one entry's work covers a line's transfer. */
#define PREFETCH_AHEAD 4u

static inline uint32_t load_acquire(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void store_release(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/*
 * Whether serving the client would take an entry: one is waiting and its
 * completion has room. A client whose CQ is full is not pending (else the
 * daemon would spin on it); it rings the doorbell when it reaps.
 */
bool kvpd_ring_pending(struct kvpd_client *c)
{
	if (c->data_blocked || load_acquire(c->sq_tail) == c->sq_next)
		return false;
	return c->cq_next - load_acquire(c->cq_head) + c->inflight < c->cq_entries;
}

static bool is_data_path(uint8_t opcode)
{
	return opcode == KVP_OP_WRITE_KV || opcode == KVP_OP_READ_KV || opcode == KVP_OP_ATTEND;
}

/* An entry on a sequence whose COMMIT's window snapshots are still copied out of its rings. */
static bool waits_for_copies(struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	const struct kvpd_seq_slot *slot;

	switch (sqe->opcode) {
	case KVP_OP_SEQ_CLOSE: case KVP_OP_APPEND_TOKENS: case KVP_OP_LOOKUP: case KVP_OP_ALLOC:
	case KVP_OP_COMMIT: case KVP_OP_FREE: case KVP_OP_GET_TABLE: case KVP_OP_WRITE_KV:
	case KVP_OP_READ_KV:
		slot = c->pool ? kvpd_seq_slot(c, sqe->handle) : NULL;
		return slot && slot->copying;
	}
	return false;
}

void kvpd_ring_set_sleeping(struct kvpd_client *c, bool sleeping)
{
	if (c->sleeping_flag_set == sleeping)
		return;
	c->sleeping_flag_set = sleeping;
	__atomic_store_n(c->sq_flags, sleeping ? KVP_SQ_NEED_WAKEUP : 0u, __ATOMIC_RELEASE);
}

/*
 * FUTEX_WAKE of one waiter on the CQ tail, where a sleeping client waits: it
 * never blocks, and its cost does not depend on what the client does with its
 * descriptors. Shared (no FUTEX_PRIVATE_FLAG): the word is in the memfd both
 * processes map.
 */
static void wake_client(struct kvpd_client *c)
{
	syscall(SYS_futex, c->cq_tail, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Makes the completions written so far visible, waking the client if it sleeps. */
static void publish_cq(struct kvpd_client *c)
{
	store_release(c->cq_tail, c->cq_next);
	/* Pairs with the client's fence between setting CQ_NEED_WAKEUP and re-checking the tail. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(c->cq_flags, __ATOMIC_RELAXED) & KVP_CQ_NEED_WAKEUP)
		wake_client(c);
}

/* Atomic loads: the compiler may not re-read a field from shared memory after the check. */
static void copy_sqe(struct kvp_sqe *dst, const struct kvp_sqe *src)
{
	const uint64_t *from = (const uint64_t *)src;
	uint64_t words[sizeof(*dst) / sizeof(uint64_t)];

	/* Unrolled: a loop of 8 atomic loads is not, and it was a tenth of an ALLOC's time. */
#pragma GCC unroll 8
	for (unsigned i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		words[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
	memcpy(dst, words, sizeof(*dst));
}

int kvpd_ring_process(struct kvpd *d, struct kvpd_client *c, unsigned budget,
		      kvpd_dispatch_fn *dispatch)
{
	uint32_t tail = load_acquire(c->sq_tail);
	uint32_t avail = tail - c->sq_next;
	uint32_t cq_used = c->cq_next - c->cq_head_seen + c->inflight;
	uint32_t n;

	if (avail == 0)
		return 0;
	if (avail > c->sq_entries) {
		kvpd_client_close(d, c, "SQ tail out of range");
		return -EPROTO;
	}
	/* The client's CQ head is another cache line to pull: read it only when room runs short. */
	if (cq_used + (avail < budget ? avail : budget) > c->cq_entries) {
		uint32_t head = load_acquire(c->cq_head);

		if (c->cq_next - head > c->cq_entries || head - c->cq_head_seen > c->cq_entries) {
			kvpd_client_close(d, c, "CQ head out of range");
			return -EPROTO;
		}
		c->cq_head_seen = head;
		cq_used = c->cq_next - head + c->inflight;
	}
	/* Never more completions than the CQ has room for: stop taking entries instead. */
	n = avail;
	if (n > c->cq_entries - cq_used)
		n = c->cq_entries - cq_used;
	if (n > budget)
		n = budget;
	if (n == 0)
		return 0;
	/* One clock read per entry: each entry's time runs from the previous one's end. */
	uint64_t t = kvpd_now_ns(), bracket = t, turn_start = t;
	bool held = false;

	c->touched_pool = false;
	for (uint32_t i = 0; i < n; i++) {
		struct kvp_sqe sqe;
		struct kvp_cqe cqe;
		uint64_t done;

		/*
		 * The client's core wrote the entries and will read the
		 * completions: each line crosses cores. Asking for the ones a few
		 * entries ahead overlaps those transfers with this entry's work.
		 */
		if (i + PREFETCH_AHEAD < n) { /* not past the tail: the client may be writing there */
			__builtin_prefetch(&c->sqes[(c->sq_next + PREFETCH_AHEAD) & (c->sq_entries - 1)], 0);
			__builtin_prefetch(&c->cqes[(c->cq_next + PREFETCH_AHEAD) & (c->cq_entries - 1)], 1);
		}
		copy_sqe(&sqe, &c->sqes[c->sq_next & (c->sq_entries - 1)]);
		/*
		 * Flow control, not an error: with KVP_MAX_DATA_INFLIGHT data-path
		 * requests on the workers, or KVPD_CLIENT_JOB_BYTES of their memory,
		 * the next one waits in the SQ (and so does all that follows it)
		 * until one comes back; meanwhile the client is not pending,
		 * whatever it writes into its ring. So does an entry on a sequence
		 * whose COMMIT's window snapshots are still being copied out of
		 * its rings, until they are (a batch of COMMIT, APPEND, ALLOC goes
		 * through as it is, later).
		 */
		if ((is_data_path(sqe.opcode) && (c->inflight >= KVP_MAX_DATA_INFLIGHT ||
						  c->job_bytes >= KVPD_CLIENT_JOB_BYTES)) ||
		    (c->commits_copying && waits_for_copies(c, &sqe))) {
			c->data_blocked = true;
			n = i;
			break;
		}
		c->sq_next++;
		/*
		 * Quick entries share one bracket (their stats writers nest in
		 * it); after a slow one, the next runs outside any, its writers
		 * bracketing only their own writes.
		 */
		if (!held && !c->slow_entry) {
			kvpd_stats_begin(d);
			held = true;
			bracket = t;
		}
		memset(&cqe, 0, sizeof(cqe));
		cqe.user_data = sqe.user_data;
		d->taken_ns = t;
		/* A request handed to the workers keeps its CQ room through c->inflight. */
		if (dispatch(d, c, &sqe, &cqe)) {
			memcpy(&c->cqes[c->cq_next++ & (c->cq_entries - 1)], &cqe, sizeof(cqe));
			done = kvpd_now_ns();
			kvpd_stats_op(d, c, sqe.opcode, cqe.res, done - t);
		} else {
			done = kvpd_now_ns(); /* its time is counted when its job comes back */
		}
		c->slow_entry = done - t > SLOW_ENTRY_NS;
		t = done;
		/* Readers of the stats page retry while it is written: not for a whole slow batch. */
		if (held && (c->slow_entry || done - bracket > STATS_BRACKET_NS)) {
			kvpd_stats_end(d);
			held = false;
		}
		/*
		 * A turn is bounded in time as well as in entries: slow requests
		 * (a long prompt, a huge salt) must not keep the other clients and
		 * the loop's events waiting for --budget of them.
		 */
		if (done - turn_start > TURN_NS) {
			n = i + 1;
			break;
		}
	}
	if (!held)
		kvpd_stats_begin(d);
	if (n == 0) {
		kvpd_stats_end(d);
		return 0;
	}
	if (c->touched_pool && c->pool)
		kvpd_stats_pool(d, c->pool, c->gen);
	kvpd_stats_client(d, c);
	kvpd_stats_end(d);
	store_release(c->sq_head, c->sq_next);
	publish_cq(c);
	return (int)n;
}

void kvpd_ring_post(struct kvpd_client *c, const struct kvp_cqe *cqe)
{
	memcpy(&c->cqes[c->cq_next++ & (c->cq_entries - 1)], cqe, sizeof(*cqe));
	publish_cq(c);
}
