/* SPDX-License-Identifier: MIT */
/*
 * Ring corruption: a client that writes an impossible SQ tail or a CQ head
 * past the CQ tail into its shared ring is disconnected (its sequences closed,
 * counted as killed), while a client connected at the same time keeps working
 * and the pool's invariants hold.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "../../lib/client.h"

#define POOL "p"

static struct daemon dmn;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fill(uint32_t *t, uint32_t n, uint32_t base)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = base + i;
}

/* The doorbell, rung whether or not the daemon sleeps. */
static void ring_doorbell(struct kvp_client *c)
{
	uint64_t one = 1;

	CHECK_EQ(write(c->bell, &one, sizeof(one)), sizeof(one));
}

/*
 * The daemon hung up on @c: its socket reads EOF, or ECONNRESET when the
 * daemon closed with doorbells of @c's still unread. Waits at most 3 s.
 */
static void hung_up(struct kvp_client *c)
{
	struct pollfd p = { .fd = c->sock, .events = POLLIN | POLLRDHUP };
	ssize_t n;
	char b;

	CHECK_EQ(poll(&p, 1, 3000), 1);
	CHECK(p.revents & (POLLHUP | POLLRDHUP));
	n = recv(c->sock, &b, 1, MSG_DONTWAIT);
	CHECK(n == 0 || (n < 0 && errno == ECONNRESET));
}

/* A client in the pool with one sequence of 8 tokens, @commit of them computed. */
static struct kvp_client *holder(uint32_t base, uint32_t commit, uint64_t *h)
{
	struct kvp_client *c = connect_or_die(&dmn, POOL, "", false);
	uint32_t t[8];

	fill(t, 8, base);
	CHECK_EQ(kvp_seq_open(c, t, 8, NULL, 0, -1, h), 0);
	CHECK_EQ(kvp_alloc(c, *h, 8, 0, true, NULL, NULL, 0), 0);
	if (commit)
		CHECK_EQ(kvp_commit(c, *h, commit), 0);
	return c;
}

static void pool_is(struct kvp_client *c, uint32_t free_, uint32_t used, uint32_t cached)
{
	struct kvp_pool_stats st;

	CHECK_EQ(kvp_pool_stats(c, &st), 0);
	CHECK_EQ(st.blocks_free, free_);
	CHECK_EQ(st.blocks_used, used);
	CHECK_EQ(st.blocks_cached, cached);
}

static struct kvp_stats_header header(struct kvp_client *c)
{
	static uint8_t buf[16384];
	struct kvp_stats_header h;

	CHECK(kvp_stats(c, buf, sizeof(buf)) >= (int)sizeof(h));
	memcpy(&h, buf, sizeof(h));
	return h;
}

/* The good client: its sequence is intact and requests still work. */
static void good_works(struct kvp_client *y, uint64_t hy)
{
	union {
		struct kvp_block_lists l;
		uint8_t bytes[sizeof(struct kvp_block_lists) + 16 * sizeof(uint32_t)];
	} lb;

	CHECK_EQ(kvp_nop(y), 0);
	memset(&lb, 0, sizeof(lb));
	CHECK_EQ(kvp_get_table(y, hy, &lb.l, sizeof(lb)), sizeof(struct kvp_block_lists) + 8);
	CHECK_EQ(lb.l.counts[0], 2);
	CHECK_EQ(lb.l.ids[0], 1);
	CHECK_EQ(lb.l.ids[1], 2);
}

int main(void)
{
	static const char *const pool_kv[] = { "blocks=32", "block_size=4", "groups=full", NULL };
	struct kvp_stats_header h0, h;
	struct kvp_client *y, *x, *w, *z, *fresh;
	struct kvp_cqe *cqe;
	uint64_t hy, hx, hw, hz;
	uint32_t head;

	watchdog_start("test_fault_corrupt", 30);

	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, POOL, pool_kv);

	/* Y, the good client: blocks 1, 2, both published. */
	y = holder(100, 8, &hy);
	pool_is(y, 29, 2, 2);
	h0 = header(y);

	/* X: blocks 3, 4, the first published. Then an SQ tail ten rings ahead. */
	x = holder(200, 4, &hx);
	pool_is(y, 27, 4, 3);
	head = __atomic_load_n(x->sq_head, __ATOMIC_ACQUIRE);
	__atomic_store_n(x->sq_tail, head + 10 * x->sq_entries, __ATOMIC_RELEASE);
	ring_doorbell(x);
	CHECK_EQ(kvp_wait_cqe(x, &cqe), -ECONNRESET);
	hung_up(x);
	kvp_close(x);
	/* X's blocks came back; its published one stays cached. Y did not notice. */
	good_works(y, hy);
	pool_is(y, 29, 2, 3);
	h = header(y);
	CHECK_EQ(h.clients_killed, h0.clients_killed + 1);

	/* W: an SQ tail just one entry more than a ring ahead (and one behind, for good measure). */
	w = holder(300, 0, &hw);
	pool_is(y, 27, 4, 3);
	head = __atomic_load_n(w->sq_head, __ATOMIC_ACQUIRE);
	__atomic_store_n(w->sq_tail, head + w->sq_entries + 1, __ATOMIC_RELEASE);
	ring_doorbell(w);
	CHECK_EQ(kvp_wait_cqe(w, &cqe), -ECONNRESET);
	hung_up(w);
	kvp_close(w);
	good_works(y, hy);
	pool_is(y, 29, 2, 3);
	w = holder(300, 0, &hw);
	head = __atomic_load_n(w->sq_head, __ATOMIC_ACQUIRE);
	__atomic_store_n(w->sq_tail, head - 1, __ATOMIC_RELEASE);
	ring_doorbell(w);
	CHECK_EQ(kvp_wait_cqe(w, &cqe), -ECONNRESET);
	hung_up(w);
	kvp_close(w);
	good_works(y, hy);
	pool_is(y, 29, 2, 3);
	h = header(y);
	CHECK_EQ(h.clients_killed, h0.clients_killed + 3);

	/*
	 * Z: a CQ head far past the CQ tail. The daemon may read the head only when
	 * it needs CQ room, so keep submitting NOPs, a ring at a time, until it hangs up:
	 * that must happen before more than a CQ's worth of them completed.
	 */
	z = holder(400, 0, &hz);
	pool_is(y, 27, 4, 3);
	CHECK_EQ(kvp_nop(z), 0);
	head = __atomic_load_n(z->cq_tail, __ATOMIC_ACQUIRE);
	CHECK_EQ(*z->cq_head, head);
	__atomic_store_n(z->cq_head, head + 0x80000000u, __ATOMIC_RELEASE);
	{
		uint32_t rounds = 0, limit = z->cq_entries / z->sq_entries + 2;
		bool gone = false;

		while (!gone) {
			struct kvp_sqe *sqe;
			uint64_t deadline = now_ns() + 3000000000ull;

			CHECK(rounds++ < limit);
			while ((sqe = kvp_get_sqe(z)) != NULL)
				sqe->opcode = KVP_OP_NOP;
			/* Ask to be woken when completions land, then hand the batch over. */
			__atomic_store_n(z->cq_flags, KVP_CQ_NEED_WAKEUP, __ATOMIC_RELAXED);
			CHECK(kvp_submit(z) > 0);
			ring_doorbell(z);
			/* Until the daemon hangs up or has taken the whole batch. */
			for (;;) {
				struct pollfd p = { .fd = z->sock, .events = POLLIN | POLLRDHUP };

				CHECK(now_ns() < deadline);
				CHECK(poll(&p, 1, 1) >= 0);
				if (p.revents & (POLLHUP | POLLRDHUP)) {
					gone = true;
					break;
				}
				if (__atomic_load_n(z->sq_head, __ATOMIC_ACQUIRE) == *z->sq_tail)
					break;
			}
		}
		CHECK((uint32_t)(__atomic_load_n(z->cq_tail, __ATOMIC_ACQUIRE) - head) <=
		      z->cq_entries);
	}
	hung_up(z);
	kvp_close(z);
	good_works(y, hy);
	pool_is(y, 29, 2, 3);
	h = header(y);
	CHECK_EQ(h.clients_killed, h0.clients_killed + 4);

	/* The daemon is fine: a new client works and shares Y's published blocks. */
	fresh = connect_or_die(&dmn, POOL, "", false);
	CHECK_EQ(kvp_nop(fresh), 0);
	{
		uint32_t t[8], hit = 0;
		uint64_t hf;

		fill(t, 8, 100);
		CHECK_EQ(kvp_seq_open(fresh, t, 8, NULL, 0, -1, &hf), 0);
		CHECK_EQ(kvp_alloc(fresh, hf, 4, 0, true, &hit, NULL, 0), 0);
		CHECK_EQ(hit, 4);
		CHECK_EQ(kvp_seq_close(fresh, hf), 0);
	}
	kvp_close(fresh);
	CHECK_EQ(kvp_seq_close(y, hy), 0);
	kvp_close(y);
	{
		struct kvp_pool_stats st;

		check_pool_or_die(&dmn, POOL, &st);
		CHECK_EQ(st.blocks_free, 31);
		CHECK_EQ(st.blocks_used, 0);
		CHECK_EQ(st.blocks_cached, 3);
	}
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
