/* SPDX-License-Identifier: MIT */
/*
 * The event loop on epoll(7), for where io_uring is refused: Docker's default
 * seccomp profile, gVisor, kernel.io_uring_disabled. Level-triggered watches
 * on descriptors only the daemon holds; accept4 on the listening socket while
 * it is readable. The loop asks for events between spins; a syscall for each
 * ask would cost spin mode its round trips, so asks that come within
 * LOOK_EVERY_NS of the last one are answered with nothing (events wait at
 * most that long while the loop spins; a sleeping loop gets them at once).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvpoold.h"
#include "loop/evloop.h"

#define MAX_EVENTS 64
#define ACCEPTS_PER_WAKE 32 /* then the clients get a turn; level-triggered, it comes back */
#define LOOK_EVERY_NS 20000ull

_Static_assert(EPOLLIN == POLLIN && EPOLLHUP == POLLHUP && EPOLLERR == POLLERR &&
	       EPOLLRDHUP == POLLRDHUP, "epoll's event bits are poll's");

struct epoll_loop {
	int epfd;
	bool accepting;
	uint64_t looked_ns;
	struct epoll_event events[MAX_EVENTS];
};

static struct epoll_loop *loop_of(struct kvpd *d)
{
	return d->ev_state;
}

static int ctl(struct epoll_loop *l, int op, int fd, uint32_t events, uint64_t key)
{
	struct epoll_event e = { .events = events, .data.u64 = key };

	return epoll_ctl(l->epfd, op, fd, &e) ? -errno : 0;
}

static int epoll_init(struct kvpd *d, char *why, size_t why_len)
{
	struct epoll_loop *l = calloc(1, sizeof(*l));

	(void)why;
	(void)why_len;
	if (!l)
		return -ENOMEM;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		int ret = -errno;

		free(l);
		return ret;
	}
	d->ev_state = l;
	return 0;
}

static void epoll_fini(struct kvpd *d)
{
	struct epoll_loop *l = loop_of(d);

	if (!l)
		return;
	close(l->epfd);
	free(l);
	d->ev_state = NULL;
}

static int epoll_watch(struct kvpd *d, int fd, enum kvpd_event ev)
{
	return ctl(loop_of(d), EPOLL_CTL_ADD, fd, EPOLLIN, kvpd_event_key(ev, NULL));
}

static int epoll_accept_start(struct kvpd *d)
{
	struct epoll_loop *l = loop_of(d);
	int ret;

	if (l->accepting)
		return 0;
	ret = ctl(l, EPOLL_CTL_ADD, d->listen_fd, EPOLLIN, kvpd_event_key(KVPD_EV_ACCEPT, NULL));
	l->accepting = ret == 0;
	return ret;
}

static void epoll_accept_stop(struct kvpd *d)
{
	struct epoll_loop *l = loop_of(d);

	if (l->accepting)
		ctl(l, EPOLL_CTL_DEL, d->listen_fd, 0, 0);
	l->accepting = false;
}

/* Edge-triggered: the setup message is only peeked at, and stays readable. */
static int epoll_client_watch(struct kvpd *d, struct kvpd_conn *conn)
{
	return ctl(loop_of(d), EPOLL_CTL_ADD, conn->sock, EPOLLIN | EPOLLRDHUP | EPOLLET,
		   kvpd_event_key(KVPD_EV_CLIENT, conn));
}

/*
 * Edge-triggered too: the doorbell set stays readable for good (its eventfd
 * is never read). An epoll set inside ours takes a lock that every process's
 * nested epoll shares, for as long as their loop checks take: the courier
 * adds it, before it sends the setup reply (so before anything can ring).
 */
static int epoll_doorbell_watch(struct kvpd *d, struct kvpd_conn *conn)
{
	struct kvpd_parcel p = KVPD_PARCEL_INIT;

	p.epfd = loop_of(d)->epfd;
	p.ep_fd = conn->bell;
	p.ep_events = EPOLLIN | EPOLLET;
	p.ep_key = kvpd_event_key(KVPD_EV_DOORBELL, conn);
	kvpd_courier_post(&d->courier, conn->owner, &p);
	return 0;
}

static void epoll_client_release(struct kvpd *d, struct kvpd_conn *conn)
{
	struct epoll_loop *l = loop_of(d);

	/*
	 * Events of this batch that name it find it gone (its key's lookup). The
	 * doorbell set may not be added yet (the courier's parcel): closing it
	 * removes it from ours in any case.
	 */
	ctl(l, EPOLL_CTL_DEL, conn->sock, 0, 0);
	if (conn->bell >= 0)
		ctl(l, EPOLL_CTL_DEL, conn->bell, 0, 0);
	kvpd_courier_close(&d->courier, conn->owner, conn->sock);
	kvpd_courier_close(&d->courier, conn->owner, conn->bell);
	conn->sock = conn->bell = -1;
}

static int accept_some(struct kvpd *d, struct epoll_loop *l, kvpd_event_fn *fn)
{
	int n = 0;

	while (l->accepting && n < ACCEPTS_PER_WAKE) {
		struct kvpd_event_rec e = { .ev = KVPD_EV_ACCEPT };

		e.res = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (e.res < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			e.res = -errno;
		}
		fn(d, &e); /* an error may stop accepting */
		n++;
	}
	return n;
}

static int epoll_loop_wait(struct kvpd *d, int timeout_ms, kvpd_event_fn *fn)
{
	struct epoll_loop *l = loop_of(d);
	int n, handled = 0;

	if (timeout_ms == 0) {
		uint64_t now = kvpd_now_ns();

		if (now - l->looked_ns < LOOK_EVERY_NS)
			return 0;
		l->looked_ns = now;
	}
	n = epoll_wait(l->epfd, l->events, MAX_EVENTS, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		struct kvpd_event_rec e = { .res = (int)l->events[i].events,
					    .key = l->events[i].data.u64 };

		e.ev = kvpd_event_kind(e.key);
		if (e.ev == KVPD_EV_ACCEPT) {
			handled += accept_some(d, l, fn);
			continue;
		}
		/* A client's: one released earlier in this batch is no longer found by its key. */
		fn(d, &e);
		handled++;
	}
	return handled;
}

const struct kvpd_evloop_ops kvpd_evloop_epoll = {
	.name = "epoll",
	.kind = KVP_EVENT_LOOP_EPOLL,
	.init = epoll_init,
	.fini = epoll_fini,
	.watch = epoll_watch,
	.accept_start = epoll_accept_start,
	.accept_stop = epoll_accept_stop,
	.client_watch = epoll_client_watch,
	.doorbell_watch = epoll_doorbell_watch,
	.client_release = epoll_client_release,
	.wait = epoll_loop_wait,
};
