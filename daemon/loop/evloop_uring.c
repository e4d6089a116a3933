/* SPDX-License-Identifier: MIT */
/*
 * The event loop on liburing: a multishot accept on the listening socket and
 * a multishot poll per watched descriptor, each poll's user_data a watch of
 * ours. A released client's descriptors are closed (by the courier) only once
 * their polls have posted their last completions: until then a poll holds a
 * reference to the file, and whoever drops the last one pays for its release.
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvpoold.h"
#include "loop/evloop.h"

#define RING_ENTRIES 256
/*
 * Two multishot polls a client (socket, doorbell set), each posting on every
 * wake-up: a client that rings without pause fills the CQ within one busy
 * turn. Room for four completions a client; an overflow beyond that is
 * flushed at the next look (uring_wait), never left to wait for a sleep.
 */
#define CQES_PER_CLIENT 4
#define CQ_MIN 1024
#define TAG_ACCEPT 1ull /* user_data of the accept; watches are pointers, never 1 or 2 */
#define TAG_CANCEL 2ull

struct watch {
	struct watch *prev, *next;
	int fd;
	enum kvpd_event ev;
	struct kvpd_conn *conn; /* a client's, until released */
	uint64_t owner;         /* its client's courier key (KVPD_COURIER_ANON: none) */
	bool released;         /* no more events: close fd at the poll's last completion */
};

struct uring_loop {
	struct io_uring ring;
	struct watch *watches; /* every live poll's, for fini */
	bool accepting;        /* accept_start without accept_stop */
	bool accept_armed;     /* a multishot accept is in the ring */
};

static struct uring_loop *loop_of(struct kvpd *d)
{
	return d->ev_state;
}

static struct io_uring_sqe *get_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe) {
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	return sqe;
}

static unsigned poll_mask(enum kvpd_event ev)
{
	return POLLIN | (ev == KVPD_EV_CLIENT ? POLLRDHUP : 0);
}

static int arm_poll(struct uring_loop *l, struct watch *w)
{
	struct io_uring_sqe *sqe = get_sqe(&l->ring);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_multishot(sqe, w->fd, poll_mask(w->ev));
	io_uring_sqe_set_data(sqe, w);
	return 0;
}

static int arm_accept(struct kvpd *d, struct uring_loop *l)
{
	struct io_uring_sqe *sqe = get_sqe(&l->ring);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_multishot_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	io_uring_sqe_set_data64(sqe, TAG_ACCEPT);
	l->accept_armed = true;
	return 0;
}

static void cancel(struct uring_loop *l, uint64_t user_data)
{
	struct io_uring_sqe *sqe = get_sqe(&l->ring);

	if (!sqe)
		return;
	io_uring_prep_cancel64(sqe, user_data, 0);
	io_uring_sqe_set_data64(sqe, TAG_CANCEL);
}

static struct watch *watch_new(struct uring_loop *l, int fd, enum kvpd_event ev,
			       struct kvpd_conn *conn)
{
	struct watch *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->fd = fd;
	w->ev = ev;
	w->conn = conn;
	w->owner = conn ? conn->owner : KVPD_COURIER_ANON;
	w->next = l->watches;
	if (w->next)
		w->next->prev = w;
	l->watches = w;
	return w;
}

static void watch_free(struct uring_loop *l, struct watch *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		l->watches = w->next;
	if (w->next)
		w->next->prev = w->prev;
	free(w);
}

enum { PROBE_POLL = 101, PROBE_ACCEPT, PROBE_CANCEL };

struct probe_state {
	bool poll_ok, accept_ok;     /* what each request's completions showed */
	bool poll_done, accept_done; /* each one's last completion is in */
};

static void probe_seen(struct io_uring *ring, struct io_uring_cqe *cqe, struct probe_state *p)
{
	bool more = cqe->flags & IORING_CQE_F_MORE;

	if (cqe->user_data == PROBE_POLL) {
		p->poll_ok |= cqe->res > 0 && more;
		p->poll_done |= !more;
	} else if (cqe->user_data == PROBE_ACCEPT) {
		p->accept_ok &= cqe->res != -EINVAL;
		p->accept_done |= !more;
	}
	io_uring_cqe_seen(ring, cqe);
}

/*
 * Whether this kernel has what the loop uses, tried rather than looked up:
 * multishot poll (5.13) must post a completion that stays armed, and
 * multishot accept (5.19) must be taken (older kernels answer -EINVAL). Both
 * are cancelled and their last completions collected before returning.
 */
static const char *probe(struct io_uring *ring)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int efd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct probe_state p = { .accept_ok = true };
	const char *missing = "cannot set up the probe";
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;

	/* An autobound abstract address: nothing on the filesystem. */
	if (efd < 0 || lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa_family_t)) ||
	    listen(lfd, 1))
		goto out_close;
	sqe = io_uring_get_sqe(ring);
	io_uring_prep_poll_multishot(sqe, efd, POLLIN);
	io_uring_sqe_set_data64(sqe, PROBE_POLL);
	sqe = io_uring_get_sqe(ring);
	io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, PROBE_ACCEPT);
	io_uring_submit(ring);
	/* The eventfd is readable already: its first completion is in by now. */
	while (io_uring_peek_cqe(ring, &cqe) == 0)
		probe_seen(ring, cqe, &p);
	for (uint64_t target = PROBE_POLL; target <= PROBE_ACCEPT; target++) {
		sqe = io_uring_get_sqe(ring);
		io_uring_prep_cancel64(sqe, target, 0);
		io_uring_sqe_set_data64(sqe, PROBE_CANCEL);
	}
	io_uring_submit(ring);
	for (unsigned waits = 0; waits < 10 && !(p.poll_done && p.accept_done); waits++) {
		struct __kernel_timespec ts = { .tv_nsec = 100000000 };

		if (io_uring_wait_cqe_timeout(ring, &cqe, &ts) == 0)
			probe_seen(ring, cqe, &p);
	}
	/* The cancels' own completions. */
	while (io_uring_peek_cqe(ring, &cqe) == 0)
		probe_seen(ring, cqe, &p);
	if (!p.poll_done || !p.accept_done)
		missing = "its cancel did not complete";
	else if (!p.poll_ok)
		missing = "no multishot poll";
	else if (!p.accept_ok)
		missing = "no multishot accept";
	else
		missing = NULL;
out_close:
	if (efd >= 0)
		close(efd);
	if (lfd >= 0)
		close(lfd);
	return missing;
}

static int uring_init(struct kvpd *d, char *why, size_t why_len)
{
	struct uring_loop *l = calloc(1, sizeof(*l));
	struct io_uring_params p = { .flags = IORING_SETUP_CQSIZE };
	const char *missing;
	int ret;

	if (!l)
		return -ENOMEM;
	p.cq_entries = d->cfg.max_clients * CQES_PER_CLIENT + CQ_MIN;
	ret = io_uring_queue_init_params(RING_ENTRIES, &l->ring, &p);
	if (ret) {
		snprintf(why, why_len, "%s", strerror(-ret));
		goto err_free;
	}
	missing = probe(&l->ring);
	if (missing) {
		snprintf(why, why_len, "%s", missing);
		ret = -EOPNOTSUPP;
		goto err_exit_ring;
	}
	d->ev_state = l;
	return 0;

err_exit_ring:
	io_uring_queue_exit(&l->ring);
err_free:
	free(l);
	return ret;
}

static void uring_fini(struct kvpd *d)
{
	struct uring_loop *l = loop_of(d);

	if (!l)
		return;
	/*
	 * Tearing the ring down drops the polls' file references; what they held
	 * goes to the courier (still running: its queued replies come first).
	 */
	io_uring_queue_exit(&l->ring);
	while (l->watches) {
		struct watch *w = l->watches;

		if (w->released)
			kvpd_courier_close(&d->courier, w->owner, w->fd);
		watch_free(l, w);
	}
	free(l);
	d->ev_state = NULL;
}

static int uring_watch(struct kvpd *d, int fd, enum kvpd_event ev)
{
	struct uring_loop *l = loop_of(d);
	struct watch *w = watch_new(l, fd, ev, NULL);
	int ret;

	if (!w)
		return -ENOMEM;
	ret = arm_poll(l, w);
	if (ret)
		watch_free(l, w);
	return ret;
}

static int uring_accept_start(struct kvpd *d)
{
	struct uring_loop *l = loop_of(d);

	l->accepting = true;
	/* One still armed (its cancel not yet done) is re-armed when it ends. */
	return l->accept_armed ? 0 : arm_accept(d, l);
}

static void uring_accept_stop(struct kvpd *d)
{
	struct uring_loop *l = loop_of(d);

	l->accepting = false;
	if (l->accept_armed)
		cancel(l, TAG_ACCEPT);
}

static int watch_client_fd(struct uring_loop *l, struct kvpd_conn *conn, int fd,
			   enum kvpd_event ev, void **slot)
{
	struct watch *w = watch_new(l, fd, ev, conn);
	int ret;

	if (!w)
		return -ENOMEM;
	ret = arm_poll(l, w);
	if (ret) {
		watch_free(l, w);
		return ret;
	}
	*slot = w;
	return 0;
}

static int uring_client_watch(struct kvpd *d, struct kvpd_conn *conn)
{
	return watch_client_fd(loop_of(d), conn, conn->sock, KVPD_EV_CLIENT, &conn->ev_sock);
}

static int uring_doorbell_watch(struct kvpd *d, struct kvpd_conn *conn)
{
	return watch_client_fd(loop_of(d), conn, conn->bell, KVPD_EV_DOORBELL, &conn->ev_bell);
}

/* Its poll's last completion closes @fd; without a poll, the courier closes it now. */
static void release_fd(struct kvpd *d, struct uring_loop *l, struct watch *w, int fd,
		       uint64_t owner)
{
	if (!w) {
		kvpd_courier_close(&d->courier, owner, fd);
		return;
	}
	w->released = true;
	w->conn = NULL;
	cancel(l, (uint64_t)(uintptr_t)w);
}

static void uring_client_release(struct kvpd *d, struct kvpd_conn *conn)
{
	struct uring_loop *l = loop_of(d);

	release_fd(d, l, conn->ev_sock, conn->sock, conn->owner);
	release_fd(d, l, conn->ev_bell, conn->bell, conn->owner);
	io_uring_submit(&l->ring);
	conn->ev_sock = conn->ev_bell = NULL;
	conn->sock = conn->bell = -1;
}

static void handle_accept(struct kvpd *d, struct uring_loop *l, const struct io_uring_cqe *cqe,
			  kvpd_event_fn *fn)
{
	struct kvpd_event_rec e = { .ev = KVPD_EV_ACCEPT, .res = cqe->res };

	if (!(cqe->flags & IORING_CQE_F_MORE))
		l->accept_armed = false;
	if (!l->accepting) {
		/* Accepted while a stop was on its way: never seen by the loop. */
		if (cqe->res >= 0)
			kvpd_courier_close(&d->courier, KVPD_COURIER_ANON, cqe->res);
		return;
	}
	fn(d, &e); /* may stop accepting */
	if (l->accepting && !l->accept_armed)
		arm_accept(d, l);
}

static void handle_poll(struct kvpd *d, struct uring_loop *l, struct watch *w,
			const struct io_uring_cqe *cqe, kvpd_event_fn *fn)
{
	bool more = cqe->flags & IORING_CQE_F_MORE;

	if (!w->released) {
		/* A poll that failed reads as an error on the descriptor. */
		struct kvpd_event_rec e = { .ev = w->ev, .key = kvpd_event_key(w->ev, w->conn),
					    .res = cqe->res < 0 ? POLLERR : cqe->res };

		fn(d, &e); /* may release w */
	}
	if (more)
		return;
	if (!w->released) {
		if (arm_poll(l, w) == 0)
			return;
		if (w->conn) { /* its client's close releases w: this was its last completion */
			struct kvpd_event_rec lost = { .ev = KVPD_EV_LOST,
						       .key = kvpd_event_key(KVPD_EV_LOST, w->conn) };

			fn(d, &lost);
		}
		else
			kvpd_log(d, KVPD_LOG_ERR, "event loop: cannot re-arm a poll: its events are lost");
	}
	if (w->released)
		kvpd_courier_close(&d->courier, w->owner, w->fd);
	watch_free(l, w);
}

static int reap(struct kvpd *d, struct uring_loop *l, kvpd_event_fn *fn)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_for_each_cqe(&l->ring, head, cqe) {
		if (cqe->user_data == TAG_ACCEPT)
			handle_accept(d, l, cqe, fn);
		else if (cqe->user_data != TAG_CANCEL)
			handle_poll(d, l, (struct watch *)(uintptr_t)cqe->user_data, cqe, fn);
		n++;
	}
	io_uring_cq_advance(&l->ring, n);
	return (int)n;
}

static int uring_wait(struct kvpd *d, int timeout_ms, kvpd_event_fn *fn)
{
	struct uring_loop *l = loop_of(d);
	int ret;

	if (timeout_ms == 0) {
		/*
		 * Completions that overflowed wait in the kernel until an enter asks
		 * for them, and meanwhile every multishot poll has ended: a busy loop
		 * must not leave them there until it next sleeps.
		 */
		if (io_uring_sq_ready(&l->ring))
			io_uring_submit(&l->ring);
		else if (io_uring_cq_has_overflow(&l->ring))
			io_uring_get_events(&l->ring);
		return reap(d, l, fn);
	}
	if (timeout_ms < 0) {
		ret = io_uring_submit_and_wait(&l->ring, 1);
	} else {
		struct __kernel_timespec ts = { .tv_sec = timeout_ms / 1000,
						.tv_nsec = (timeout_ms % 1000) * 1000000ll };
		struct io_uring_cqe *cqe;

		ret = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
	}
	/*
	 * Woken by a signal or the timeout, or the kernel short of something for
	 * a moment (EAGAIN, EBUSY: completions to reap first): reap, go on.
	 */
	if (ret < 0 && ret != -EINTR && ret != -ETIME && ret != -EAGAIN && ret != -EBUSY)
		return ret;
	return reap(d, l, fn);
}

const struct kvpd_evloop_ops kvpd_evloop_uring = {
	.name = "io_uring",
	.kind = KVP_EVENT_LOOP_IO_URING,
	.init = uring_init,
	.fini = uring_fini,
	.watch = uring_watch,
	.accept_start = uring_accept_start,
	.accept_stop = uring_accept_stop,
	.client_watch = uring_client_watch,
	.doorbell_watch = uring_doorbell_watch,
	.client_release = uring_client_release,
	.wait = uring_wait,
};
