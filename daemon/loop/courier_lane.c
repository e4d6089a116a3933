/* SPDX-License-Identifier: MIT */
/*
 * A courier lane's process and the calls a parcel asks for (courier_lane.c),
 * for the courier's queues (courier.c): see courier.h for why they exist.
 */
#include <errno.h>
#include <poll.h>
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
#include "loop/courier_lane.h"

/*
 * The calls themselves. Also what a lane's process runs, a clone that copied
 * the daemon's memory mid-use: system calls only, no allocation, no lock, no
 * log. Returns 0, or the errno of a failed epoll_ctl, the one failure the
 * daemon reports (the others are the client's).
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

/* What a lane's process answers for a parcel. */
struct delivery {
	int err;          /* deliver_here's */
	uint64_t cpu_ns;  /* the calls' CPU time, their wake-up passes included */
};

uint64_t kvpd_courier_clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The calls, timed on the calling thread's CPU clock. */
static struct delivery deliver_timed(const struct kvpd_parcel *p)
{
	uint64_t t0 = kvpd_courier_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	struct delivery r = { .err = 0 };

	r.err = deliver_here(p);
	r.cpu_ns = kvpd_courier_clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
	return r;
}

/*
 * A lane process's life: a parcel in, its calls, its result out. A message
 * of no bytes (or the socketpair's failure) ends it; so does the daemon's
 * death (PR_SET_PDEATHSIG), as it shares the daemon's descriptors and would
 * otherwise keep every one of them open.
 */
static void __attribute__((noreturn)) helper_main(int end, pid_t parent)
{
	struct kvpd_parcel p;
	sigset_t all;

	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(1);
	prctl(PR_SET_NAME, "kvpoold-courier");
	for (;;) {
		ssize_t n = recv(end, &p, sizeof(p), 0);
		struct delivery r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(p))
			_exit(n == 0 ? 0 : 1);
		r = deliver_timed(&p);
		if (send(end, &r, sizeof(r), MSG_NOSIGNAL) != sizeof(r))
			_exit(1);
	}
}

static int lane_spawn(struct kvpd_courier_lane *l)
{
	pid_t self = getpid(), pid;
	int sv[2], pidfd, ret;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -errno;
	/* Raw clone: glibc's fork would not share the table; nothing runs atfork handlers here. */
	pid = (pid_t)syscall(SYS_clone, CLONE_FILES | SIGCHLD, NULL, NULL, NULL, 0);
	if (pid < 0) {
		ret = -errno;
		goto err_close_pair;
	}
	if (pid == 0)
		helper_main(sv[1], self);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0) {
		ret = -errno;
		goto err_kill;
	}
	l->helper_sock = sv[0];
	l->helper_end = sv[1];
	l->helper = pid;
	l->helper_pidfd = pidfd;
	return 0;

err_kill:
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
err_close_pair:
	close(sv[0]);
	close(sv[1]);
	return ret;
}

int kvpd_courier_spawn(struct kvpd_courier *k)
{
	int first = 0;

	for (unsigned i = 0; i < KVPD_COURIER_LANES; i++) {
		int ret;

		k->lanes[i].k = k;
		k->lanes[i].index = i;
		ret = lane_spawn(&k->lanes[i]);
		if (ret && !first)
			first = ret;
	}
	return first;
}

/* Reaps the process (killed first when @kill) and closes the pair: the thread delivers. */
static void helper_reap(struct kvpd_courier_lane *l, bool kill_it, const char *when)
{
	int status = 0;

	if (kill_it)
		kill(l->helper, SIGKILL);
	waitpid(l->helper, &status, 0);
	if (when)
		kvpd_logf(l->k->log, KVPD_LOG_ERR, "the process of courier lane %u ended %s (%s %d); "
			  "that lane's thread makes its calls from now on", l->index, when,
			  WIFSIGNALED(status) ? "signal" : "status",
			  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	close(l->helper_pidfd);
	close(l->helper_sock);
	close(l->helper_end);
	l->helper = 0;
}

/*
 * Hands @p to the process and waits for its result; false when the process
 * is gone and @p not delivered. One that dies after taking @p off the pair
 * has taken it for good: it may have made some of the calls, and closing
 * twice could close a descriptor the loop has since reused.
 */
static bool deliver_there(struct kvpd_courier_lane *l, const struct kvpd_parcel *p,
			  struct delivery *r)
{
	struct pollfd on[2] = { { .fd = l->helper_sock, .events = POLLIN },
				{ .fd = l->helper_pidfd, .events = POLLIN } };
	struct kvpd_parcel unread;

	if (send(l->helper_sock, p, sizeof(*p), MSG_NOSIGNAL) != sizeof(*p)) {
		helper_reap(l, true, "when its socket refused a parcel");
		return false;
	}
	for (;;) {
		if (poll(on, 2, -1) < 0)
			continue; /* EINTR; this thread blocks every signal */
		if (recv(l->helper_sock, r, sizeof(*r), MSG_DONTWAIT) == sizeof(*r))
			return true;
		if (!on[1].revents)
			continue;
		/* Both ends are in the shared table: what it did not take is still there. */
		if (recv(l->helper_end, &unread, sizeof(unread), MSG_DONTWAIT) == sizeof(unread)) {
			helper_reap(l, false, "between parcels");
			return false;
		}
		helper_reap(l, false, "with a parcel in hand, lost");
		*r = (struct delivery){ .err = 0 };
		return true;
	}
}

/*
 * @l: the lane whose thread this is (the one that talks to its process); NULL:
 * here. Returns the calls' CPU time.
 */
uint64_t kvpd_lane_deliver(struct kvpd_courier *k, struct kvpd_courier_lane *l,
			   const struct kvpd_parcel *p)
{
	struct delivery r;

	if (!l || !l->helper || !deliver_there(l, p, &r))
		r = deliver_timed(p);
	/* Out of memory or of epoll watches: that client wakes the loop no more. */
	if (r.err)
		kvpd_logf(k->log, KVPD_LOG_ERR, "a client's doorbell cannot be watched: %s",
			  strerror(r.err));
	return r.cpu_ns;
}

/* A message of no bytes: the process ends once it has delivered the ones before. */
void kvpd_lane_stop(struct kvpd_courier_lane *l)
{
	if (l->helper)
		helper_reap(l, send(l->helper_sock, "", 0, MSG_NOSIGNAL) != 0, NULL);
}
