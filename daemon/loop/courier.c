/* SPDX-License-Identifier: MIT */
/* The courier's thread and process: see courier.h for why they exist. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "loop/courier.h"

/*
 * The calls themselves. Also what the courier's process runs, a clone that
 * copied the daemon's memory mid-use: system calls only, no allocation, no
 * lock, no log. Returns 0, or the errno of a failed epoll_ctl, the one
 * failure the daemon reports (the others are the client's).
 */
static int deliver_here(const struct kvpd_parcel *p)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVPD_PARCEL_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)p->msg, .iov_len = p->len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	int err = 0;

	if (p->epfd >= 0) {
		struct epoll_event ev = { .events = p->ep_events, .data.u64 = p->ep_key };

		if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->ep_fd, &ev))
			err = errno;
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
	return err;
}

/*
 * The process's life: a parcel in, its calls, its result out. A message of
 * no bytes (or the socketpair's failure) ends it; so does the daemon's
 * death (PR_SET_PDEATHSIG), as it shares the daemon's descriptors and would
 * otherwise keep every one of them open.
 */
static void __attribute__((noreturn)) helper_main(struct kvpd_courier *k, pid_t parent)
{
	struct kvpd_parcel p;
	sigset_t all;

	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(1);
	prctl(PR_SET_NAME, "kvpoold-courier");
	for (;;) {
		ssize_t n = recv(k->helper_end, &p, sizeof(p), 0);
		int err;

		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(p))
			_exit(n == 0 ? 0 : 1);
		err = deliver_here(&p);
		if (send(k->helper_end, &err, sizeof(err), MSG_NOSIGNAL) != sizeof(err))
			_exit(1);
	}
}

int kvpd_courier_spawn(struct kvpd_courier *k)
{
	pid_t self = getpid(), pid;
	int sv[2], pidfd, ret;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -errno;
	k->helper_sock = sv[0];
	k->helper_end = sv[1];
	/* Raw clone: glibc's fork would not share the table; nothing runs atfork handlers here. */
	pid = (pid_t)syscall(SYS_clone, CLONE_FILES | SIGCHLD, NULL, NULL, NULL, 0);
	if (pid < 0) {
		ret = -errno;
		goto err_close_pair;
	}
	if (pid == 0)
		helper_main(k, self);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0) {
		ret = -errno;
		goto err_kill;
	}
	k->helper = pid;
	k->helper_pidfd = pidfd;
	return 0;

err_kill:
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
err_close_pair:
	close(sv[0]);
	close(sv[1]);
	return ret;
}

/* Reaps the process (killed first when @kill) and closes the pair: the thread delivers. */
static void helper_reap(struct kvpd_courier *k, bool kill_it, const char *when)
{
	int status = 0;

	if (kill_it)
		kill(k->helper, SIGKILL);
	waitpid(k->helper, &status, 0);
	if (when)
		kvpd_logf(k->log, KVPD_LOG_ERR, "the courier's process ended %s (%s %d); the "
			  "courier's thread makes its calls from now on", when,
			  WIFSIGNALED(status) ? "signal" : "status",
			  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	close(k->helper_pidfd);
	close(k->helper_sock);
	close(k->helper_end);
	k->helper = 0;
}

/*
 * Hands @p to the process and waits for its result; false when the process
 * is gone and @p not delivered. One that dies after taking @p off the pair
 * has taken it for good: it may have made some of the calls, and closing
 * twice could close a descriptor the loop has since reused.
 */
static bool deliver_there(struct kvpd_courier *k, const struct kvpd_parcel *p, int *err)
{
	struct pollfd on[2] = { { .fd = k->helper_sock, .events = POLLIN },
				{ .fd = k->helper_pidfd, .events = POLLIN } };
	struct kvpd_parcel unread;

	if (send(k->helper_sock, p, sizeof(*p), MSG_NOSIGNAL) != sizeof(*p)) {
		helper_reap(k, true, "when its socket refused a parcel");
		return false;
	}
	for (;;) {
		if (poll(on, 2, -1) < 0)
			continue; /* EINTR; this thread blocks every signal */
		if (recv(k->helper_sock, err, sizeof(*err), MSG_DONTWAIT) == sizeof(*err))
			return true;
		if (!on[1].revents)
			continue;
		/* Both ends are in the shared table: what it did not take is still there. */
		if (recv(k->helper_end, &unread, sizeof(unread), MSG_DONTWAIT) == sizeof(unread)) {
			helper_reap(k, false, "between parcels");
			return false;
		}
		helper_reap(k, false, "with a parcel in hand, lost");
		*err = 0;
		return true;
	}
}

static void deliver(struct kvpd_courier *k, const struct kvpd_parcel *p, bool there)
{
	int err;

	if (!there || !k->helper || !deliver_there(k, p, &err))
		err = deliver_here(p);
	/* Out of memory or of epoll watches: that client wakes the loop no more. */
	if (err)
		kvpd_logf(k->log, KVPD_LOG_ERR, "a client's doorbell cannot be watched: %s",
			  strerror(err));
}

/* @there: on the courier's thread, which alone talks to the process. */
static void deliver_counted(struct kvpd_courier *k, const struct kvpd_parcel *p, bool there)
{
	deliver(k, p, there);
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
		deliver_counted(k, p, true);
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

/* A message of no bytes: the process ends once it has delivered the ones before. */
static void helper_stop(struct kvpd_courier *k)
{
	if (k->helper)
		helper_reap(k, send(k->helper_sock, "", 0, MSG_NOSIGNAL) != 0, NULL);
}

void kvpd_courier_stop(struct kvpd_courier *k)
{
	if (k->started) {
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
	helper_stop(k);
}

uint64_t kvpd_courier_post(struct kvpd_courier *k, const struct kvpd_parcel *p)
{
	struct kvpd_parcel *copy, here;

	if (p->counted)
		__atomic_fetch_add(&k->copies_queued, p->npass, __ATOMIC_RELAXED);
	if (!k->started) {
		here = *p;
		here.seq = ++k->posted;
		deliver_counted(k, &here, false);
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
		deliver_counted(k, &here, false);
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
