/* SPDX-License-Identifier: MIT */
/*
 * The event loop: one liburing ring for multishot accept, per-client hang-up
 * polls and doorbell reads, a signalfd and a housekeeping timerfd; between
 * events it spins on the clients' submission rings for spin_us, then sets
 * NEED_WAKEUP on every ring and sleeps in io_uring_submit_and_wait.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "kvpoold.h"
#include "probes.h"
#include "spin.h"

#define SETUP_TIMEOUT_NS (5ull * 1000000000ull)

static struct io_uring_sqe *get_sqe(struct kvpd *d)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);

	if (!sqe) {
		io_uring_submit(&d->ring);
		sqe = io_uring_get_sqe(&d->ring);
	}
	return sqe;
}

int kvpd_arm_poll(struct kvpd *d, int fd, enum kvpd_event ev, struct kvpd_client *c,
		  bool multishot)
{
	struct io_uring_sqe *sqe = get_sqe(d);
	unsigned mask = POLLIN | (ev == KVPD_EV_HANGUP ? POLLRDHUP : 0);

	if (!sqe)
		return -EBUSY;
	if (multishot)
		io_uring_prep_poll_multishot(sqe, fd, mask);
	else
		io_uring_prep_poll_add(sqe, fd, mask);
	io_uring_sqe_set_data64(sqe, kvpd_ev(ev, c));
	return 0;
}

int kvpd_arm_doorbell(struct kvpd *d, struct kvpd_client *c)
{
	struct io_uring_sqe *sqe = get_sqe(d);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, c->sq_efd, &d->doorbell_sink, sizeof(d->doorbell_sink), 0);
	io_uring_sqe_set_data64(sqe, kvpd_ev(KVPD_EV_DOORBELL, c));
	return 0;
}

void kvpd_cancel_client(struct kvpd *d, struct kvpd_client *c)
{
	static const enum kvpd_event evs[] = { KVPD_EV_SETUP, KVPD_EV_HANGUP, KVPD_EV_DOORBELL };

	for (unsigned i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
		struct io_uring_sqe *sqe = get_sqe(d);

		if (!sqe)
			break;
		io_uring_prep_cancel64(sqe, kvpd_ev(evs[i], c), 0);
		io_uring_sqe_set_data64(sqe, KVPD_EV_CANCEL);
	}
	io_uring_submit(&d->ring);
}

static int arm_jobs(struct kvpd *d)
{
	struct io_uring_sqe *sqe = get_sqe(d);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, d->workers.done_efd, &d->jobs_sink, sizeof(d->jobs_sink), 0);
	io_uring_sqe_set_data64(sqe, KVPD_EV_JOBS);
	return 0;
}

static int arm_accept(struct kvpd *d)
{
	struct io_uring_sqe *sqe = get_sqe(d);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_multishot_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, KVPD_EV_ACCEPT);
	return 0;
}

int kvpd_loop_init(struct kvpd *d)
{
	struct itimerspec every_second = { { 1, 0 }, { 1, 0 } };
	sigset_t mask;
	int ret;

	ret = io_uring_queue_init(256, &d->ring, 0);
	if (ret)
		return ret;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	if (sigprocmask(SIG_BLOCK, &mask, NULL)) {
		ret = -errno;
		goto err_exit_ring;
	}
	d->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (d->signal_fd < 0) {
		ret = -errno;
		goto err_exit_ring;
	}
	d->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (d->timer_fd < 0) {
		ret = -errno;
		goto err_close_signal;
	}
	if (timerfd_settime(d->timer_fd, 0, &every_second, NULL)) {
		ret = -errno;
		goto err_close_timer;
	}
	ret = arm_accept(d) ?: kvpd_arm_poll(d, d->signal_fd, KVPD_EV_SIGNAL, NULL, true) ?:
	      kvpd_arm_poll(d, d->timer_fd, KVPD_EV_TIMER, NULL, true) ?: arm_jobs(d);
	if (ret)
		goto err_close_timer;
	io_uring_submit(&d->ring);
	return 0;

err_close_timer:
	close(d->timer_fd);
	d->timer_fd = -1;
err_close_signal:
	close(d->signal_fd);
	d->signal_fd = -1;
err_exit_ring:
	io_uring_queue_exit(&d->ring);
	return ret;
}

void kvpd_loop_exit(struct kvpd *d)
{
	for (unsigned i = 0; i < d->cfg.max_clients; i++)
		if (d->clients[i])
			kvpd_client_close(d, d->clients[i], "daemon exiting");
	if (d->timer_fd >= 0)
		close(d->timer_fd);
	if (d->signal_fd >= 0)
		close(d->signal_fd);
	io_uring_queue_exit(&d->ring);
}

static void stop_accepting(struct kvpd *d)
{
	struct io_uring_sqe *sqe = get_sqe(d);

	d->stopping = true;
	if (sqe) {
		io_uring_prep_cancel64(sqe, KVPD_EV_ACCEPT, 0);
		io_uring_sqe_set_data64(sqe, KVPD_EV_CANCEL);
		io_uring_submit(&d->ring);
	}
}

static void housekeeping(struct kvpd *d)
{
	uint64_t now = kvpd_now_ns(), expirations;

	if (read(d->timer_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
		kvpd_log(d, 0, "timerfd: %s", strerror(errno));
	for (unsigned i = 0; i < d->cfg.max_clients; i++) {
		struct kvpd_client *c = d->clients[i];

		if (c && !c->ready && now - c->accepted_ns > SETUP_TIMEOUT_NS)
			kvpd_client_close(d, c, "no setup message within 5 s");
	}
	/* Orphaned pools still busy at their owner's close: their jobs drain, their users detach. */
	kvpd_pools_reap(d);
	kvpd_stats_fragmentation(d);
}

static void handle_signal(struct kvpd *d)
{
	struct signalfd_siginfo si;

	while (read(d->signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		kvpd_log(d, 1, "signal %u: finishing in-flight work and exiting", si.ssi_signo);
		stop_accepting(d);
	}
}

static void handle_cqe(struct kvpd *d, const struct io_uring_cqe *cqe)
{
	enum kvpd_event ev = (enum kvpd_event)(cqe->user_data & 0xff);
	bool more = cqe->flags & IORING_CQE_F_MORE;
	struct kvpd_client *c = kvpd_client_lookup(d, cqe->user_data);

	switch (ev) {
	case KVPD_EV_ACCEPT:
		if (cqe->res >= 0 && d->stopping)
			close(cqe->res);
		else if (cqe->res >= 0)
			kvpd_client_accept(d, cqe->res);
		if (!more && !d->stopping && arm_accept(d))
			kvpd_log(d, 0, "cannot re-arm accept");
		break;
	case KVPD_EV_SIGNAL:
		handle_signal(d);
		break;
	case KVPD_EV_TIMER:
		housekeeping(d);
		if (!more)
			kvpd_arm_poll(d, d->timer_fd, KVPD_EV_TIMER, NULL, true);
		break;
	case KVPD_EV_SETUP:
		if (c && cqe->res < 0)
			kvpd_client_close(d, c, strerror(-cqe->res));
		else if (c)
			kvpd_client_setup(d, c);
		break;
	case KVPD_EV_HANGUP:
		/* Any event on the socket after setup is its hang-up (or a protocol breach). */
		if (c)
			kvpd_client_close(d, c, "hung up");
		break;
	case KVPD_EV_DOORBELL:
		if (!c)
			break;
		if (cqe->res < 0)
			kvpd_client_close(d, c, "doorbell read failed");
		else if (kvpd_arm_doorbell(d, c))
			kvpd_client_close(d, c, "cannot re-arm its doorbell");
		break;
	case KVPD_EV_JOBS:
		/* Completions are drained every turn; this read only wakes a sleeping loop. */
		if (arm_jobs(d))
			kvpd_log(d, 0, "cannot re-arm the workers' eventfd");
		break;
	case KVPD_EV_CANCEL:
		break;
	}
}

static unsigned reap_events(struct kvpd *d)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_for_each_cqe(&d->ring, head, cqe) {
		handle_cqe(d, cqe);
		n++;
	}
	io_uring_cq_advance(&d->ring, n);
	return n;
}

/*
 * Round robin from a rotating start, a bounded budget each: no client starves
 * the rest. A client closed while serving (corrupt ring) is swapped out of
 * d->active; the next one may then be skipped this turn, never served twice.
 */
static unsigned serve_clients(struct kvpd *d, unsigned *cursor)
{
	unsigned done = 0, n = d->nactive;

	for (unsigned k = 0; k < n && k < d->nactive; k++) {
		int r = kvpd_ring_process(d, d->active[(*cursor + k) % d->nactive], d->cfg.budget);

		if (r > 0)
			done += (unsigned)r;
	}
	if (d->nactive)
		*cursor = (*cursor + 1) % d->nactive;
	return done;
}

static bool any_pending(struct kvpd *d)
{
	for (unsigned i = 0; i < d->nactive; i++)
		if (kvpd_ring_pending(d->active[i]))
			return true;
	return false;
}

static void set_sleeping(struct kvpd *d, bool sleeping)
{
	for (unsigned i = 0; i < d->nactive; i++)
		kvpd_ring_set_sleeping(d->active[i], sleeping);
}

/*
 * Spinning only pays while every spinner has a core: with more clients than
 * free cores the daemon would steal the core a client needs, and two spinners
 * on one core take milliseconds per round trip.
 */
static uint64_t spin_budget_ns(const struct kvpd *d)
{
	return d->nactive + 1 <= (unsigned long)d->ncpus ? d->cfg.spin_us * 1000ull : 0;
}

int kvpd_loop_run(struct kvpd *d)
{
	uint64_t last_work = kvpd_now_ns();
	unsigned cursor = 0, spins = 0;

	for (;;) {
		unsigned done = serve_clients(d, &cursor);

		if (io_uring_sq_ready(&d->ring))
			io_uring_submit(&d->ring);
		done += reap_events(d);
		if (__atomic_load_n(&d->workers.ndone, __ATOMIC_RELAXED)) {
			kvpd_jobs_complete(d);
			done++;
		}
		/* idle: a short task run here is one worker fewer to wake, and to wait for */
		if (!done && kvpd_workers_help(&d->workers))
			done++;
		if (done) {
			last_work = kvpd_now_ns();
			continue;
		}
		if (d->stopping && !d->jobs_inflight)
			return 0; /* nothing left in flight */
		if (kvpd_now_ns() - last_work < spin_budget_ns(d)) {
			/*
			 * A spinner that shares its core with a runnable task (a client
			 * spinning too, a compiler) would hold it for a whole time slice:
			 * milliseconds per round trip. Yielding now and then costs a
			 * syscall when the core is ours alone.
			 */
			if (++spins % 32 == 0)
				sched_yield();
			else
				kvpd_cpu_relax();
			continue;
		}
		set_sleeping(d, true);
		/* Pairs with the client's fence between publishing its tail and reading our flag. */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (!any_pending(d) && !kvpd_workers_loop_sleeping(&d->workers, true)) {
			uint64_t slept = kvpd_now_ns();
			int ret;

			KVPD_PROBE(ring_sleep, d->nactive);
			ret = io_uring_submit_and_wait(&d->ring, 1);
			KVPD_PROBE(ring_wake, kvpd_now_ns() - slept);
			if (ret < 0 && ret != -EINTR)
				return ret;
		}
		kvpd_workers_loop_sleeping(&d->workers, false);
		set_sleeping(d, false);
		last_work = kvpd_now_ns();
	}
}
