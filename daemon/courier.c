/* SPDX-License-Identifier: MIT */
/* The courier's thread: see courier.h for why it exists. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "courier.h"
#include "kvpoold.h"

static void deliver(const struct kvpd_courier *k, const struct kvpd_parcel *p)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVPD_PARCEL_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)p->msg, .iov_len = p->len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (p->epfd >= 0) {
		struct epoll_event ev = { .events = p->ep_events, .data.u64 = p->ep_key };

		/* Out of memory or of epoll watches: that client wakes the loop no more. */
		if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->ep_fd, &ev))
			kvpd_logf(k->log, KVPD_LOG_ERR, "a client's doorbell cannot be watched: %s",
				strerror(errno));
	}
	for (unsigned i = 0; p->sock >= 0 && i < p->drain; i++) {
		char sink;

		if (recv(p->sock, &sink, sizeof(sink), MSG_DONTWAIT) < 0)
			break;
	}
	if (p->sock >= 0) {
		if (p->npass) {
			struct cmsghdr *cm;

			memset(&ctl, 0, sizeof(ctl));
			msg.msg_control = ctl.buf;
			msg.msg_controllen = CMSG_SPACE(p->npass * sizeof(int));
			cm = CMSG_FIRSTHDR(&msg);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(p->npass * sizeof(int));
			memcpy(CMSG_DATA(cm), p->pass, p->npass * sizeof(int));
		}
		/*
		 * A failure is the client's: gone, or its receive side full. The
		 * loop sees its hang-up, or its setup times out, on its own.
		 */
		if (sendmsg(p->sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0 && p->why_len)
			(void)!send(p->sock, p->why, p->why_len, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	for (unsigned i = 0; i < p->nclose; i++)
		close(p->close[i]);
}

static void deliver_counted(struct kvpd_courier *k, const struct kvpd_parcel *p)
{
	deliver(k, p);
	if (p->counted)
		__atomic_fetch_sub(&k->copies_queued, p->npass, __ATOMIC_RELAXED);
	/*
	 * Parcels are delivered oldest first, but one delivered out of memory on
	 * its poster's thread may finish after a younger one: never go back.
	 */
	uint64_t seen = __atomic_load_n(&k->delivered, __ATOMIC_RELAXED);

	while (seen < p->seq && !__atomic_compare_exchange_n(&k->delivered, &seen, p->seq, true,
							     __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

static void *courier_main(void *arg)
{
	struct kvpd_courier *k = arg;

	pthread_mutex_lock(&k->lock);
	for (;;) {
		struct kvpd_parcel *p = k->head;

		if (!p) {
			if (k->stop)
				break;
			pthread_cond_wait(&k->wake, &k->lock);
			continue;
		}
		k->head = p->next;
		if (!k->head)
			k->tail = NULL;
		k->busy = true;
		pthread_mutex_unlock(&k->lock);
		deliver_counted(k, p);
		free(p);
		pthread_mutex_lock(&k->lock);
		k->busy = false;
		if (!k->head)
			pthread_cond_broadcast(&k->idle);
	}
	pthread_mutex_unlock(&k->lock);
	return NULL;
}

int kvpd_courier_start(struct kvpd_courier *k)
{
	sigset_t all, old;
	int ret;

	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->wake, NULL);
	pthread_cond_init(&k->idle, NULL);
	/* Signals belong to the event loop's signalfd. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(&k->thread, NULL, courier_main, k);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	/* Named, so that top, perf and the tests can tell its time from the loop's. */
	if (!ret)
		pthread_setname_np(k->thread, "kvpoold-courier");
	if (ret) {
		pthread_mutex_destroy(&k->lock);
		pthread_cond_destroy(&k->wake);
		pthread_cond_destroy(&k->idle);
		return ret;
	}
	k->started = true;
	return 0;
}

void kvpd_courier_stop(struct kvpd_courier *k)
{
	if (!k->started)
		return;
	pthread_mutex_lock(&k->lock);
	k->stop = true;
	pthread_cond_signal(&k->wake);
	pthread_mutex_unlock(&k->lock);
	pthread_join(k->thread, NULL);
	pthread_mutex_destroy(&k->lock);
	pthread_cond_destroy(&k->wake);
	pthread_cond_destroy(&k->idle);
	k->started = false;
}

uint64_t kvpd_courier_post(struct kvpd_courier *k, const struct kvpd_parcel *p)
{
	struct kvpd_parcel *copy, here;

	if (p->counted)
		__atomic_fetch_add(&k->copies_queued, p->npass, __ATOMIC_RELAXED);
	if (!k->started) {
		here = *p;
		here.seq = ++k->posted;
		deliver_counted(k, &here);
		return here.seq;
	}
	copy = malloc(sizeof(*copy));
	if (!copy) {
		/*
		 * Out of memory: deliver it here, but only after what is queued, or a
		 * close could overtake a send on the same descriptor number.
		 */
		here = *p;
		pthread_mutex_lock(&k->lock);
		while (k->head || k->busy)
			pthread_cond_wait(&k->idle, &k->lock);
		here.seq = ++k->posted;
		pthread_mutex_unlock(&k->lock);
		deliver_counted(k, &here);
		return here.seq;
	}
	*copy = *p;
	copy->next = NULL;
	pthread_mutex_lock(&k->lock);
	/* Read here: once the lock is let go, the courier may deliver and free it. */
	here.seq = copy->seq = ++k->posted;
	if (k->tail)
		k->tail->next = copy;
	else
		k->head = copy;
	k->tail = copy;
	pthread_cond_signal(&k->wake);
	pthread_mutex_unlock(&k->lock);
	return here.seq;
}

void kvpd_courier_close(struct kvpd_courier *k, int fd)
{
	struct kvpd_parcel p = KVPD_PARCEL_INIT;

	p.close[p.nclose++] = fd;

	if (fd >= 0)
		kvpd_courier_post(k, &p);
}
