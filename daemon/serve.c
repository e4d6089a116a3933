/* SPDX-License-Identifier: MIT */
/*
 * The daemon's loop (top level: it drives every room): serves the clients' rings, spinning on them for spin_us
 * after the last piece of work, then sets NEED_WAKEUP on every ring and sleeps
 * in the event loop implementation (evloop.h) until a doorbell, a connection,
 * a signal, the housekeeping timer or a finished job wakes it.
 */
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "serve.h"
#include "data/data.h"
#include "events/events.h"
#include "handover/handover.h"
#include "loop/spin.h"
#include "observe/probes.h"
#include "requests/requests.h"

/* A connection must send its setup this soon: a half-open one holds a slot of its uid's. */
#define SETUP_TIMEOUT_NS 1000000000ull
/* Housekeeping ticks: a stale connection goes within a quarter second of its deadline. */
#define TICK_NS 250000000ull
#define TICKS_PER_SECOND 4
/*
 * Sequences closed since the heap was last trimmed that make it worth a
 * trim: the allocator keeps freed memory for reuse, and a client that opened
 * a million sequences would otherwise leave the daemon that much bigger.
 */
#define TRIM_AFTER_SEQS 1024

/*
 * The implementation: io_uring where it works (one ring batches the waits and
 * the re-arms), epoll where io_uring is refused or lacks multishot.
 */
static int choose_evloop(struct kvpd *d)
{
	char why[128] = "";
	int ret;

	if (d->cfg.event_loop != KVPD_EVLOOP_EPOLL) {
		ret = kvpd_evloop_uring.init(d, why, sizeof(why));
		if (ret == 0) {
			d->ev = &kvpd_evloop_uring;
			kvpd_log(d, KVPD_LOG_NOTICE, "event loop: io_uring");
			return 0;
		}
		if (d->cfg.event_loop == KVPD_EVLOOP_IO_URING) {
			kvpd_log(d, KVPD_LOG_ERR, "event loop: io_uring unavailable: %s", why);
			return ret;
		}
	}
	ret = kvpd_evloop_epoll.init(d, why, sizeof(why));
	if (ret) {
		kvpd_log(d, KVPD_LOG_ERR, "event loop: epoll: %s", strerror(-ret));
		return ret;
	}
	d->ev = &kvpd_evloop_epoll;
	if (d->cfg.event_loop == KVPD_EVLOOP_EPOLL)
		kvpd_log(d, KVPD_LOG_NOTICE, "event loop: epoll");
	else
		kvpd_log(d, KVPD_LOG_NOTICE, "event loop: epoll (io_uring unavailable: %s)", why);
	return 0;
}

void kvpd_signal_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
}

int kvpd_loop_init(struct kvpd *d)
{
	struct itimerspec tick = { { 0, TICK_NS }, { 0, TICK_NS } };
	sigset_t mask;
	int ret;

	ret = choose_evloop(d);
	if (ret)
		return ret;
	d->stats->page->event_loop = d->ev->kind;
	kvpd_signal_set(&mask);
	if (sigprocmask(SIG_BLOCK, &mask, NULL)) {
		ret = -errno;
		goto err_fini;
	}
	d->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (d->signal_fd < 0) {
		ret = -errno;
		goto err_fini;
	}
	d->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (d->timer_fd < 0) {
		ret = -errno;
		goto err_close_signal;
	}
	if (timerfd_settime(d->timer_fd, 0, &tick, NULL)) {
		ret = -errno;
		goto err_close_timer;
	}
	ret = d->ev->watch(d, d->signal_fd, KVPD_EV_SIGNAL) ?:
	      d->ev->watch(d, d->timer_fd, KVPD_EV_TIMER) ?:
	      d->ev->watch(d, d->workers->done_efd, KVPD_EV_JOBS) ?: d->ev->accept_start(d);
	if (ret) {
		kvpd_log(d, KVPD_LOG_ERR, "event loop: cannot watch its descriptors: %s", strerror(-ret));
		goto err_close_timer;
	}
	return 0;

err_close_timer:
	close(d->timer_fd);
	d->timer_fd = -1;
err_close_signal:
	close(d->signal_fd);
	d->signal_fd = -1;
err_fini:
	d->ev->fini(d);
	d->ev = NULL;
	return ret;
}

void kvpd_clients_close_all(struct kvpd *d, const char *why)
{
	for (unsigned i = 0; i < d->cfg.max_clients; i++)
		if (d->clients[i])
			kvpd_client_close(d, d->clients[i], why);
}

int kvpd_loop_resume(struct kvpd *d)
{
	d->stopping = false;
	kvpd_handover_refused(d);
	return d->ev->accept_start(d);
}

void kvpd_loop_exit(struct kvpd *d)
{
	kvpd_clients_close_all(d, "daemon exiting");
	d->ev->fini(d);
	d->ev = NULL;
	if (d->timer_fd >= 0)
		close(d->timer_fd);
	if (d->signal_fd >= 0)
		close(d->signal_fd);
}

const struct kvpd_stats_hooks kvpd_stats_hooks = {
	.bracket_end = kvpd_stats_bracket_end,
	.sealed = kvpd_stats_batches_fire,
	.view_fill = kvpd_tenants_view_fill,
};

static void stop_accepting(struct kvpd *d)
{
	d->stopping = true;
	d->ev->accept_stop(d);
}

/* A connection, or why accept failed: out of descriptors or memory stops accepting a while. */
static void handle_accept(struct kvpd *d, int res)
{
	if (res >= 0) {
		if (d->stopping)
			kvpd_courier_close(&d->courier, KVPD_COURIER_ANON, res);
		else
			kvpd_client_accept(d, res);
		return;
	}
	if (res == -ECONNABORTED || res == -EINTR || res == -EAGAIN)
		return; /* that connection's trouble, not ours */
	/* Every other error would repeat at once: retrying now would spin. */
	kvpd_log(d, d->accept_paused_logged ? KVPD_LOG_DEBUG : KVPD_LOG_WARNING,
		 "accept: %s: not accepting until a client leaves or a second passes", strerror(-res));
	d->accept_paused_logged = true;
	d->accept_paused = true;
	d->ev->accept_stop(d);
}

static void housekeeping(struct kvpd *d)
{
	uint64_t now = kvpd_now_ns(), expirations;

	if (read(d->timer_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
		kvpd_log(d, KVPD_LOG_ERR, "timerfd: %s", strerror(errno));
	for (unsigned i = 0; i < d->cfg.max_clients; i++) {
		struct kvpd_client *c = d->clients[i];

		if (c && !c->ready && now - c->accepted_ns > SETUP_TIMEOUT_NS)
			kvpd_client_close(d, c, "no setup message within 1 s");
	}
	kvpd_accept_resume(d);
	/* Orphaned pools still busy at their owner's close: their jobs drain, their users detach. */
	kvpd_pools_reap(d);
	kvpd_events_expire(d); /* the cluster's keys past their TTL */
	kvpd_handover_reap(d); /* the last run's memory, let go */
	kvpd_events_stats(d); /* the publishers count on their threads */
	if (d->seqs_released >= TRIM_AFTER_SEQS) {
		d->seqs_released = 0;
		malloc_trim(0);
	}
	/* O(sequences): once a second is enough for a gauge. */
	if (++d->ticks % TICKS_PER_SECOND == 0)
		kvpd_stats_fragmentation(d);
}

static void handle_signal(struct kvpd *d)
{
	struct signalfd_siginfo si;

	while (read(d->signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			if (!d->stopping)
				kvpd_reload(d);
			continue;
		}
		bool restarting = d->handover->requested;

		if (si.ssi_signo == SIGTERM && kvpd_handover_stop(d))
			kvpd_log(d, KVPD_LOG_NOTICE, "signal %u: finishing in-flight work, then handing "
				 "the cache to systemd's descriptor store and exiting", si.ssi_signo);
		else
			kvpd_log(d, KVPD_LOG_NOTICE, "signal %u: finishing in-flight work and exiting%s",
				 si.ssi_signo, restarting ? " (the restart under way is called off)" : "");
		if (si.ssi_signo != SIGTERM)
			kvpd_handover_refused(d);
		stop_accepting(d);
	}
}

static void handle_event(struct kvpd *d, const struct kvpd_event_rec *e)
{
	struct kvpd_client *c;
	uint64_t sink;

	switch (e->ev) {
	case KVPD_EV_ACCEPT:
		handle_accept(d, e->res);
		break;
	case KVPD_EV_SIGNAL:
		handle_signal(d);
		break;
	case KVPD_EV_TIMER:
		housekeeping(d);
		break;
	case KVPD_EV_JOBS:
		/* Completions are drained every turn; this only wakes a sleeping loop. */
		if (read(d->workers->done_efd, &sink, sizeof(sink)) < 0 && errno != EAGAIN)
			kvpd_log(d, KVPD_LOG_ERR, "workers' eventfd: %s", strerror(errno));
		break;
	case KVPD_EV_CLIENT:
		if ((c = kvpd_client_lookup(d, e->key)))
			kvpd_client_event(d, c, e->res);
		break;
	case KVPD_EV_DOORBELL:
		break; /* the loop is awake: it serves every ring next */
	case KVPD_EV_LOST:
		if ((c = kvpd_client_lookup(d, e->key)))
			kvpd_client_close(d, c, "cannot watch its descriptors");
		break;
	}
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
		int r = kvpd_ring_process(d, d->active[(*cursor + k) % d->nactive], d->cfg.budget,
					  kvpd_dispatch);

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
		/*
		 * Stopping, the loop takes nothing more off the rings: it finishes
		 * what it took (the workers' jobs), not whatever clients keep queueing.
		 */
		unsigned done = d->stopping ? 0 : serve_clients(d, &cursor);
		int events = d->ev->wait(d, 0, handle_event);

		if (events < 0)
			return events;
		done += (unsigned)events;
		if (__atomic_load_n(&d->workers->ndone, __ATOMIC_RELAXED)) {
			kvpd_jobs_complete(d);
			done++;
		}
		/* What the turn's requests moved to the free queues' heads goes down to their tiers. */
		if (done) {
			kvpd_tier_turn(d);
			kvpd_events_turn(d); /* after the tier's: its drops are the turn's too */
		}
		/* idle: a short task run here is one worker fewer to wake, and to wait for */
		if (!done && kvpd_workers_help(d->workers))
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
			/*
			 * Or a few blocks a tier's background copier has not got to yet,
			 * in time the loop spins away anyway: it never keeps the loop
			 * awake past its spin (a busy machine's cores are its clients').
			 */
			else if (!kvpd_tier_help(d))
				kvpd_cpu_relax();
			continue;
		}
		set_sleeping(d, true);
		/* Pairs with the client's fence between publishing its tail and reading our flag. */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (!any_pending(d) && !kvpd_workers_loop_sleeping(d->workers, true)) {
			uint64_t slept = kvpd_now_ns();
			int ret;

			KVPD_PROBE(ring_sleep, d->nactive);
			ret = d->ev->wait(d, -1, handle_event);
			KVPD_PROBE(ring_wake, kvpd_now_ns() - slept);
			if (ret < 0)
				return ret;
		}
		kvpd_workers_loop_sleeping(d->workers, false);
		set_sleeping(d, false);
		last_work = kvpd_now_ns();
	}
}
