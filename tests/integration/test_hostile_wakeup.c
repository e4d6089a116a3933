/* SPDX-License-Identifier: MIT */
/*
 * No client can stall the daemon, nor make waking it or anyone else dear.
 * 1. While one hostile client flips O_NONBLOCK on every descriptor it holds,
 *    saturates its doorbell's counter and keeps KVP_CQ_NEED_WAKEUP set without
 *    ever waiting (on ABI 1 this froze the event loop in a write to the
 *    client's CQ eventfd), and another hangs 100,000 epoll watches on its
 *    doorbell eventfd and on its socket and sleeps for every completion, so
 *    that each one wakes it (on ABI 1 each wake-up cost the loop ~40 ms), a
 *    bystander's NOP round trips in sleep mode stay under 5 ms (the median
 *    and nine in ten: the rest is the scheduler's) and none takes a second.
 * 2. Sockets watched 100,000 times each, set up (accepted or refused): the
 *    setup reply and the hang-up walk those watches, with interrupts off. That
 *    time is the courier processes'; the event loop's stays near nothing (when
 *    the walks ran on a thread of the daemon's, any page-table change of the
 *    loop's, one copy-on-write fault of ASan's, waited out a whole walk for
 *    its TLB-shootdown IPI: 30-45 ms, one run in two under ASan; now only the
 *    flushes that IPI every core the daemon ran on do, see below).
 * 3. A client queues a second of loop work and rings its doorbell without
 *    pause: the loop still sees new connections (a flood of doorbell
 *    completions once overflowed io_uring's CQ, and the loop heard nothing
 *    more until it slept), and SIGTERM stops it without first working
 *    through the queue (the daemon stops taking entries, it finishes what it
 *    took).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "../../lib/client.h"

#define WATCHES 100000
#define DUPS 100          /* each epoll set watches DUPS descriptors of the file */
#define SETS (WATCHES / DUPS)
#define BYSTANDER_NS (3ull * 1000000000ull)
#define BOUND_NS (5ull * 1000000ull)

static struct daemon dmn;

struct watches {
	int fds[DUPS + SETS];
	unsigned n;
};

static void raise_nofile(void)
{
	struct rlimit rl;

	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	rl.rlim_cur = rl.rlim_max;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	CHECK(rl.rlim_cur >= 3 * (DUPS + SETS) + 64);
}

/* WATCHES epoll watches, for reading and for writing, on @fd's file. */
static void watch_hard(int fd, struct watches *w)
{
	w->n = 0;
	for (unsigned i = 0; i < DUPS; i++) {
		w->fds[w->n] = dup(fd);
		CHECK(w->fds[w->n] >= 0);
		w->n++;
	}
	for (unsigned s = 0; s < SETS; s++) {
		int ep = epoll_create1(EPOLL_CLOEXEC);

		CHECK(ep >= 0);
		for (unsigned i = 0; i < DUPS; i++) {
			struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT };

			CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, w->fds[i], &ev) == 0);
		}
		w->fds[w->n++] = ep;
	}
}

/* Also makes the hostile child die with the test, whatever way the test ends. */
static void ready(void)
{
	CHECK(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0);
	printf("ready\n");
	fflush(stdout);
}

/* Publishes every free SQ entry as a NOP, without ringing the doorbell. */
static void fill_sq(struct kvp_client *h)
{
	struct kvp_sqe *sqe;

	while ((sqe = kvp_get_sqe(h)) != NULL)
		sqe->opcode = KVP_OP_NOP;
	__atomic_store_n(h->sq_tail, h->sq_local_tail, __ATOMIC_RELEASE);
}

static int flipper(void *arg)
{
	struct kvp_client *h = connect_or_die(&dmn, "", "", false);
	int fl_sock = fcntl(h->sock, F_GETFL), fl_bell = fcntl(h->bell, F_GETFL);
	uint64_t near_max = 0xfffffffffffffffeull;

	(void)arg;
	CHECK(fl_sock >= 0 && fl_bell >= 0);
	/* Its own doorbell is dead now: it is served when the daemon wakes for others. */
	CHECK_EQ(write(h->bell, &near_max, sizeof(near_max)), sizeof(near_max));
	ready();
	for (;;) {
		CHECK(fcntl(h->sock, F_SETFL, fl_sock ^ O_NONBLOCK) == 0);
		CHECK(fcntl(h->bell, F_SETFL, fl_bell ^ O_NONBLOCK) == 0);
		__atomic_store_n(h->cq_flags, KVP_CQ_NEED_WAKEUP, __ATOMIC_RELAXED);
		fill_sq(h);
		CHECK(fcntl(h->sock, F_SETFL, fl_sock) == 0);
		CHECK(fcntl(h->bell, F_SETFL, fl_bell) == 0);
		/* Reap whatever came, without looking. */
		__atomic_store_n(h->cq_head, __atomic_load_n(h->cq_tail, __ATOMIC_ACQUIRE),
				 __ATOMIC_RELEASE);
		/*
		 * Thousands of flips a second, not a core's worth: a spinner on one of
		 * two cores would time the scheduler, not the daemon.
		 */
		usleep(100);
	}
}

/*
 * Sleeps for every completion (so the daemon wakes it each time) with its
 * descriptors watched WATCHES times over. It does not ring: the daemon is
 * woken by the bystander, and ringing would only cost the watcher itself.
 */
static int watcher(void *arg)
{
	struct kvp_client *h = connect_or_die(&dmn, "", "", false);
	struct watches on_bell, on_sock;
	struct kvp_cqe *cqe;

	(void)arg;
	raise_nofile();
	watch_hard(h->bell, &on_bell);
	watch_hard(h->sock, &on_sock);
	ready();
	for (;;) {
		fill_sq(h);
		do {
			int ret = kvp_wait_cqe(h, &cqe);

			if (ret == -ECONNRESET)
				_exit(0); /* the daemon stopped */
			CHECK_EQ(ret, 0);
			kvp_cqe_seen(h, cqe);
		} while (__atomic_load_n(h->sq_head, __ATOMIC_ACQUIRE) != h->sq_local_tail ||
			 kvp_peek_cqe(h, &cqe) == 0);
	}
	return 0;
}

/*
 * SOCKETS sockets, each watched WATCHES times (through the same epoll sets),
 * made first; then, on the parent's word, what makes the daemon wake them,
 * one every CHURN_GAP_US: a refused setup (drained, replied, hung up on), an
 * accepted one (the reply). It never reads nor closes them: their teardown
 * would be its own cost, not the daemon's.
 */
#define SOCKETS 12
#define CHURN_GAP_US 50000

static int churner(void *arg)
{
	int go = *(int *)arg;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int socks[SOCKETS], dups[SOCKETS][DUPS];
	char b;

	raise_nofile();
	memcpy(sa.sun_path, dmn.socket, strlen(dmn.socket) + 1);
	for (unsigned i = 0; i < SOCKETS; i++) {
		socks[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		CHECK(socks[i] >= 0);
		for (unsigned k = 0; k < DUPS; k++) {
			dups[i][k] = dup(socks[i]);
			CHECK(dups[i][k] >= 0);
		}
	}
	for (unsigned s = 0; s < SETS; s++) {
		int ep = epoll_create1(EPOLL_CLOEXEC);

		CHECK(ep >= 0);
		for (unsigned i = 0; i < SOCKETS; i++)
			for (unsigned k = 0; k < DUPS; k++) {
				struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT };

				CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, dups[i][k], &ev) == 0);
			}
	}
	ready();
	CHECK_EQ(read(go, &b, 1), 1);
	for (unsigned i = 0; i < SOCKETS; i++) {
		/* Even ones are refused (ABI 1): a reply, then the daemon hangs up. */
		struct kvp_setup s = { .magic = KVP_MAGIC, .sq_entries = 8, .arena_bytes = 4096,
				       .abi_version = i % 2 ? KVP_ABI_VERSION : 1 };

		CHECK(connect(socks[i], (struct sockaddr *)&sa, sizeof(sa)) == 0);
		CHECK_EQ(send(socks[i], &s, sizeof(s), 0), sizeof(s));
		usleep(CHURN_GAP_US);
	}
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}

#define RINGER_ENTRIES 4096
/* What a stop costs past the loop's last turn: the clients' teardown and the exit. */
#define STOP_EXIT_NS (1500ull * 1000000ull)

/*
 * Fills its SQ with SEQ_OPENs of one token and a salt as long as the arena
 * (each costs the loop a copy and a hash of 4 MiB, a second for them all, and
 * leaves nothing behind), then rings its doorbell until they are all taken.
 */
static int ringer(void *arg)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = "p",
				      .arena_bytes = 4u << 20, .sq_entries = RINGER_ENTRIES };
	struct kvp_client *h;
	struct kvp_sqe *sqe;
	uint64_t one = 1, bytes;
	bool said_ready = false;
	void *arena;

	(void)arg;
	CHECK_EQ(kvp_connect(&o, &h), 0);
	arena = kvp_arena(h, &bytes);
	memset(arena, 7, bytes);
	while ((sqe = kvp_get_sqe(h)) != NULL) {
		sqe->opcode = KVP_OP_SEQ_OPEN;
		sqe->len = 1;
		sqe->arg2 = (uint32_t)(bytes - sizeof(uint32_t));
	}
	CHECK(kvp_submit(h) > 0);
	/* Ready once the loop is at it: one turn's worth taken. */
	while (__atomic_load_n(h->sq_head, __ATOMIC_ACQUIRE) != h->sq_local_tail) {
		if (write(h->bell, &one, sizeof(one)) < 0)
			break;
		if (!said_ready && __atomic_load_n(h->sq_head, __ATOMIC_ACQUIRE) >= 64) {
			ready();
			said_ready = true;
		}
	}
	if (!said_ready)
		ready();
	for (;;)
		pause();
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The time thread @tid of process @pid has run, ns (schedstat: exact, not in ticks). */
static uint64_t thread_run_ns(pid_t pid, pid_t tid)
{
	char path[64];
	unsigned long long ns = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, (int)tid);
	f = fopen(path, "r");
	CHECK(f && fscanf(f, "%llu", &ns) == 1);
	fclose(f);
	return ns;
}

static void bystander(void)
{
	static uint64_t lat[1u << 20];
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .spin_us = 0 };
	struct kvp_client *b;
	uint64_t start = test_now_ns();
	size_t n = 0, over = 0;

	CHECK_EQ(kvp_connect(&o, &b), 0);
	while (test_now_ns() - start < BYSTANDER_NS && n < sizeof(lat) / sizeof(lat[0])) {
		uint64_t t0 = test_now_ns();

		CHECK_EQ(kvp_nop(b), 0);
		lat[n] = test_now_ns() - t0;
		over += lat[n] >= BOUND_NS;
		n++;
		/* A client that paces its requests: the daemon goes to sleep between them. */
		usleep(200);
	}
	kvp_close(b);
	qsort(lat, n, sizeof(lat[0]), cmp_u64);
	fprintf(stderr, "bystander: %zu NOPs, median %llu us, p99 %llu us, max %llu us, %zu >= 5 ms\n",
		n, (unsigned long long)lat[n / 2] / 1000, (unsigned long long)lat[n * 99 / 100] / 1000,
		(unsigned long long)lat[n - 1] / 1000, over);
	/*
	 * On ABI 1 every round trip took ~40 ms here, or the loop froze. Now the
	 * median is tens of microseconds, but on a shared machine whose cores the
	 * hostile clients' wake-ups hold with interrupts off, the scheduler keeps
	 * a tail of them waiting (CI: median 162 us, 5% over 5 ms, max 30 ms; one
	 * in a thousand here): the bound is on the bulk, not on that tail.
	 */
	CHECK(n >= 1000);
	CHECK(lat[n / 2] < BOUND_NS);
	CHECK(over <= n / 10);
	CHECK(lat[n - 1] < 1000000000ull);
}

/* Phase 2: where the time of waking watched sockets goes. */
/* The CPU time of the courier's processes, all lanes together. */
static uint64_t couriers_run_ns(const pid_t *lanes, unsigned n)
{
	uint64_t ns = 0;

	for (unsigned i = 0; i < n; i++)
		ns += thread_run_ns(lanes[i], lanes[i]);
	return ns;
}

static void churn(pid_t *churner_pid)
{
	pid_t loop = dmn.pid, lanes[16];
	unsigned nlanes = daemon_children_named(&dmn, "kvpoold-courier", lanes, 16);
	uint64_t loop0, courier0, loop_ns, courier_ns;
	int go[2], said[2];
	char line[32];
	FILE *from;

	CHECK(nlanes > 0);
	CHECK(pipe(go) == 0 && pipe(said) == 0);
	*churner_pid = fork();
	CHECK(*churner_pid >= 0);
	if (*churner_pid == 0) {
		dup2(said[1], STDOUT_FILENO);
		_exit(churner(&go[0]));
	}
	close(said[1]);
	from = fdopen(said[0], "r");
	CHECK(from && fgets(line, sizeof(line), from) && !strcmp(line, "ready\n"));
	loop0 = thread_run_ns(dmn.pid, loop);
	courier0 = couriers_run_ns(lanes, nlanes);
	CHECK_EQ(write(go[1], "g", 1), 1);
	CHECK(fgets(line, sizeof(line), from) && !strcmp(line, "done\n"));
	fclose(from);
	usleep(500000); /* the courier's last parcels */
	loop_ns = thread_run_ns(dmn.pid, loop) - loop0;
	courier_ns = couriers_run_ns(lanes, nlanes) - courier0;
	fprintf(stderr, "%d watched sockets set up: event loop ran %llu ms, courier %llu ms\n",
		SOCKETS, (unsigned long long)loop_ns / 1000000,
		(unsigned long long)courier_ns / 1000000);
	/*
	 * The walks happened (else this proves nothing), and not on the loop: on
	 * it they would be the courier's time over again (18 walks: 12 replies,
	 * 6 hang-ups). The loop may still wait out a walk or two for an IPI: a
	 * core keeps its bit in the daemon's CPU mask after it last ran a thread
	 * of the daemon's until an IPI clears it, and two kinds of TLB flush IPI
	 * the whole mask (the trim, at most once a second; a munmap that frees
	 * page tables).
	 */
	CHECK(courier_ns >= 100000000ull);
	CHECK(loop_ns < courier_ns / 6);
}

/* A ringer's turn is at most TURN_NS (the daemon's bound, ring.c) and the entry that ends it. */
#define TURN_NS 500000ull
#define IDLE_CONNECTS 5
#define IDLE_TIMES 4
#define SETUP_TURNS 128

/*
 * The SEQ_OPENs the daemon has done, as its stats page stands: one aligned
 * counter needs no snapshot, which retries while a busy loop holds the page,
 * and which the library refuses once the daemon is gone (a clean exit leaves
 * the page's last numbers final).
 */
static uint64_t seq_opens(const struct kvp_client *c)
{
	const struct kvp_stats_page *page = c->stats_map;
	const struct kvp_stats_op *ops = (const void *)((const char *)page + page->ops_off);

	return __atomic_load_n(&ops[KVP_OP_SEQ_OPEN].count, __ATOMIC_RELAXED);
}

/*
 * The share of @ns in which the stats page's seqlock is held, sampled: a
 * reader copies the whole page (about 140 KB), so it needs the page let go
 * for longer than the moment between two of the loop's entries.
 */
static unsigned page_held_percent(const struct kvp_client *c, uint64_t ns)
{
	const struct kvp_stats_page *page = c->stats_map;
	uint64_t end = test_now_ns() + ns, held = 0, samples = 0;

	do {
		held += __atomic_load_n(&page->seq, __ATOMIC_ACQUIRE) & 1;
		samples++;
	} while (test_now_ns() < end);
	return (unsigned)(held * 100 / samples);
}

static uint64_t connect_ns(const struct kvp_connect_opts *o, struct kvp_client **c)
{
	uint64_t t0 = test_now_ns();

	CHECK_EQ(kvp_connect(o, c), 0);
	return test_now_ns() - t0;
}

/*
 * Phase 3: a new client connects while the loop works through a ringer's
 * queue: its setup is answered between two turns, long before the queue is
 * done (seconds of work, a minute under ASan), not once the loop has nothing
 * left to do. The stats page counts the SEQ_OPENs taken by then, when it can
 * be read at once: the loop lets go of the page while it runs a slow entry,
 * and a snapshot that waited anyway (load) may count the queue done. Returns that client, whose stats page main() reads
 * past the daemon's exit; *@entry_ns is the loop's pace.
 */
static struct kvp_client *busy(pid_t *ringer_pid, uint64_t *entry_ns)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .timeout_ms = 10000,
				      .stats_page = true };
	const char *const pool[] = { "blocks=64", "block_size=16", "groups=full", NULL };
	uint64_t idle[IDLE_CONNECTS], t0, t1, opened, queue_ns, turn_ns, bound;
	unsigned held;
	const struct kvp_stats_page *page;
	const struct kvp_stats_op *ops;
	struct kvp_client *c;
	void *snap;

	create_pool_or_die(&dmn, "p", pool);
	/*
	 * The same connect to the same daemon, its loop idle: what a setup costs
	 * in this run. The slowest of a few, as outside load that slows one
	 * setup should widen the bound, not fail it.
	 */
	for (unsigned i = 0; i < IDLE_CONNECTS; i++) {
		idle[i] = connect_ns(&o, &c);
		kvp_close(c);
	}
	qsort(idle, IDLE_CONNECTS, sizeof(idle[0]), cmp_u64);
	*ringer_pid = fork_child_ready(ringer, NULL);
	t0 = connect_ns(&o, &c);
	snap = malloc(kvp_stats_bytes(c));
	t1 = test_now_ns();
	CHECK(snap && kvp_stats_snapshot(c, snap, kvp_stats_bytes(c)) > 0);
	t1 = test_now_ns() - t1;
	page = snap;
	ops = (const struct kvp_stats_op *)((const char *)snap + page->ops_off);
	opened = ops[KVP_OP_SEQ_OPEN].count;
	CHECK(opened > 0);
	/*
	 * The loop times each entry from the previous one's end, within a turn:
	 * their mean is its pace in this run, slowed by whatever slows the loop
	 * (outside load, ASan), and the queue's time at that pace leaves out the
	 * time between turns, so it is less than the queue takes.
	 */
	*entry_ns = ops[KVP_OP_SEQ_OPEN].sum_ns / opened;
	queue_ns = RINGER_ENTRIES * *entry_ns;
	turn_ns = TURN_NS + *entry_ns;
	bound = IDLE_TIMES * idle[IDLE_CONNECTS - 1] + SETUP_TURNS * turn_ns;
	fprintf(stderr, "connected in %llu ms while the loop was busy (idle: %llu us at most; "
		"bound %llu ms), %llu of %u SEQ_OPENs taken (read in %llu ms), %llu us each: "
		"the queue is %llu ms of work\n", (unsigned long long)t0 / 1000000,
		(unsigned long long)idle[IDLE_CONNECTS - 1] / 1000, (unsigned long long)bound / 1000000,
		(unsigned long long)opened, RINGER_ENTRIES, (unsigned long long)t1 / 1000000,
		(unsigned long long)*entry_ns / 1000, (unsigned long long)queue_ns / 1000000);
	/*
	 * Bounds in this run's own figures, not in milliseconds: outside load
	 * stretches the busy connect (each step of the setup waits for the
	 * loop, a CPU hog while it works, to be scheduled again), and it slows
	 * the loop's entries as much. Answered between turns, the setup costs
	 * what it costs idle plus the few of the loop's turns it spans (the
	 * accept, the setup message, the reply); SETUP_TURNS leaves the
	 * scheduler several times the most it was seen to take under load.
	 *
	 * A daemon that answered setups only once the queue was done would
	 * take the rest of it: every entry after the ringer's first 64, at
	 * least their own time, nearly all of queue_ns (its snapshot then
	 * counts and times the whole queue). That fails the second check
	 * whatever the load, and the first unless its idle connects were
	 * themselves slow enough to take a good part of the queue.
	 */
	CHECK(t0 < bound);
	CHECK(t0 < queue_ns / 4);
	CHECK(t1 >= 20000000ull || opened < RINGER_ENTRIES * 3 / 4);
	/*
	 * Each of the ringer's entries takes milliseconds: the loop runs them
	 * with the page let go, bracketing only its counters' writes. Held
	 * through each, as it was, readers waited for a gap of a few us between
	 * two entries, and a snapshot timed out after 5 s in one CI run.
	 */
	held = page_held_percent(c, 20 * *entry_ns < 2000000000ull ? 20 * *entry_ns : 2000000000ull);
	fprintf(stderr, "the stats page was held %u%% of 20 entries' time\n", held);
	CHECK(held < 10);
	free(snap);
	return c;
}

int main(void)
{
	struct kvp_client *c;
	pid_t hostile[4];
	uint64_t t0, entry_ns, left, done;
	int status;

	watchdog_start("test_hostile_wakeup", 120);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);

	hostile[0] = fork_child_ready(flipper, NULL);
	hostile[1] = fork_child_ready(watcher, NULL);
	bystander();
	/* Their requests would be the loop's time too: they pause while it is measured. */
	kill(hostile[0], SIGSTOP);
	kill(hostile[1], SIGSTOP);
	churn(&hostile[2]);
	kill(hostile[0], SIGCONT);
	kill(hostile[1], SIGCONT);
	c = busy(&hostile[3], &entry_ns);
	/* Every hostile client is still at it. */
	for (unsigned i = 0; i < 4; i++)
		CHECK_EQ(waitpid(hostile[i], &status, WNOHANG), 0);

	/* With the ringer's queue not yet worked through. */
	left = RINGER_ENTRIES - seq_opens(c);
	t0 = test_now_ns();
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	t0 = test_now_ns() - t0;
	done = seq_opens(c);
	fprintf(stderr, "daemon stopped in %llu ms, %llu of %u SEQ_OPENs done "
		"(%llu left: %llu ms of work)\n", (unsigned long long)t0 / 1000000,
		(unsigned long long)done, RINGER_ENTRIES, (unsigned long long)left,
		(unsigned long long)(left * entry_ns) / 1000000);
	/*
	 * Stopping, the loop takes no more entries: it finishes the turn it was
	 * in. A daemon that worked through the queue first would have done all
	 * of it, which the count shows whatever the load. The time is held to
	 * what the rest of the queue would take at the loop's pace rather than
	 * to a fixed second, which outside load took the stop past (the
	 * courier's hang-up walks, an ASan daemon's exit): a sanity bound, not
	 * the proof, as the loop's pace in busy() may be well below its pace
	 * later. The exit itself is added: the hostile clients' teardown took
	 * 531 ms past 112 ms of queue in one CI run, with the queue left undone.
	 */
	if (!left) {
		/*
		 * The loop got through the whole queue before the stop could be
		 * tried: this test process was not scheduled for that long (the
		 * hostile clients and the loop hold both cores). Nothing to stop
		 * mid-queue, so nothing about it to check; the rest was.
		 */
		fprintf(stderr, "the stop mid-queue not checked: the queue was done before it\n");
	} else {
		CHECK(done < RINGER_ENTRIES);
		CHECK(t0 < left * entry_ns + STOP_EXIT_NS);
	}
	kvp_close(c);
	for (unsigned i = 0; i < 4; i++) {
		kill(hostile[i], SIGKILL);
		waitpid(hostile[i], &status, 0);
	}
	return 0;
}
