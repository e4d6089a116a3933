/* SPDX-License-Identifier: MIT */
/*
 * libkvpool never hangs. Against a SIGSTOPped daemon: kvp_nop gives
 * -ETIMEDOUT after the connection's timeout_ms (500 here), and every later
 * call -ENOTCONN (the connection is poisoned); kvp_connect gives -ETIMEDOUT
 * too, also when the daemon's accept backlog is full. Once the daemon goes
 * on, a new connection works at once, also one that comes after more dead
 * connections in the backlog than the daemon has slots (--max-clients 16).
 * A daemon killed while a client waits gives -ECONNRESET within 100 ms of
 * its death, and from then on to every call.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define TIMEOUT_MS 500
#define BACKLOG_FILL 512
#define MAX_CLIENTS 16 /* kvpoold --max-clients */
#define DEAD_AHEAD (4 * MAX_CLIENTS)

static struct daemon dmn;

static struct kvp_client *client(unsigned timeout_ms)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .timeout_ms = timeout_ms };
	struct kvp_client *c;

	CHECK_EQ(kvp_connect(&o, &c), 0);
	return c;
}

/* How long @ret took to come, in ms, checking it was -ETIMEDOUT within the timeout's slack. */
static void timed_out_in_time(int ret, uint64_t t0, const char *what)
{
	uint64_t ms = (test_now_ns() - t0) / 1000000;

	fprintf(stderr, "%s: %s after %llu ms\n", what, strerror(-ret), (unsigned long long)ms);
	CHECK_EQ(ret, -ETIMEDOUT);
	CHECK(ms >= TIMEOUT_MS - 10 && ms < TIMEOUT_MS + 1500);
}

/*
 * Connects up to @max sockets into the daemon's accept backlog and stops at
 * the first EAGAIN (full). Returns how many; their descriptors in @fds.
 */
static int fill_backlog(int *fds, int max)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n = 0;

	memcpy(sa.sun_path, dmn.socket, strlen(dmn.socket) + 1);
	while (n < max) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);

		CHECK(fd >= 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
			CHECK_EQ(errno, EAGAIN);
			close(fd);
			break;
		}
		fds[n++] = fd;
	}
	return n;
}

static void close_all(int *fds, int n)
{
	while (n)
		close(fds[--n]);
}

static void stopped_daemon(void)
{
	struct kvp_client *c = client(TIMEOUT_MS), *late;
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .timeout_ms = TIMEOUT_MS };
	int fill[BACKLOG_FILL], nfill, ret;
	uint64_t t0;

	CHECK_EQ(kvp_nop(c), 0);
	CHECK_EQ(kill(dmn.pid, SIGSTOP), 0);

	t0 = test_now_ns();
	timed_out_in_time(kvp_nop(c), t0, "kvp_nop, daemon stopped");
	/* Poisoned: nothing may land in the arena behind a later call's back. */
	CHECK_EQ(kvp_nop(c), -ENOTCONN);
	CHECK_EQ(kvp_submit(c), -ENOTCONN);
	CHECK(kvp_get_sqe(c) == NULL);
	kvp_close(c);

	t0 = test_now_ns();
	timed_out_in_time(kvp_connect(&o, &late), t0, "kvp_connect, daemon stopped");

	/* A full backlog: connect(2) itself would wait (EAGAIN when non-blocking). */
	nfill = fill_backlog(fill, BACKLOG_FILL);
	CHECK(nfill > DEAD_AHEAD && nfill < BACKLOG_FILL);
	t0 = test_now_ns();
	ret = kvp_connect(&o, &late);
	timed_out_in_time(ret, t0, "kvp_connect, backlog full");
	close_all(fill, nfill);

	CHECK_EQ(kill(dmn.pid, SIGCONT), 0);
	c = client(5000);
	CHECK_EQ(kvp_nop(c), 0);
	kvp_close(c);
}

static int behind_the_dead(void *arg)
{
	struct kvp_client *c;

	(void)arg;
	printf("connecting\n");
	fflush(stdout);
	c = client(5000);
	CHECK_EQ(kvp_nop(c), 0);
	kvp_close(c);
	return 0;
}

/*
 * A live connection behind more dead ones than the daemon has slots, all
 * accepted at once when it goes on: the dead give their slots back first.
 */
static void backlog_of_dead(void)
{
	int fill[DEAD_AHEAD], nfill;
	pid_t kid;

	CHECK_EQ(kill(dmn.pid, SIGSTOP), 0);
	nfill = fill_backlog(fill, DEAD_AHEAD);
	CHECK_EQ(nfill, DEAD_AHEAD);
	close_all(fill, nfill);
	kid = fork_child_ready(behind_the_dead, NULL);
	usleep(200000); /* its connect, with room in the backlog, is done by now */
	CHECK_EQ(kill(dmn.pid, SIGCONT), 0);
	CHECK_EQ(wait_child(kid), 0);
}

struct waiter {
	int report; /* the child writes its result and when it had it */
};

struct waiter_report {
	int ret, after;
	uint64_t at_ns;
};

/* Connects, is told the daemon stopped, then waits in kvp_nop until the daemon is gone. */
static int waiter(void *arg)
{
	const struct waiter *w = arg;
	struct kvp_client *c = client(30000);
	struct waiter_report r;

	printf("connected\n");
	fflush(stdout);
	/* The parent stops the daemon now; this NOP waits until it is killed. */
	usleep(200000);
	r.ret = kvp_nop(c);
	r.at_ns = test_now_ns();
	r.after = kvp_nop(c);
	kvp_close(c);
	CHECK_EQ(write(w->report, &r, sizeof(r)), sizeof(r));
	return 0;
}

static void killed_daemon(void)
{
	struct waiter w;
	struct waiter_report r;
	int pipefd[2];
	uint64_t dead_ns;
	pid_t kid;

	CHECK(pipe(pipefd) == 0);
	w.report = pipefd[1];
	kid = fork_child_ready(waiter, &w);
	CHECK_EQ(kill(dmn.pid, SIGSTOP), 0);
	usleep(500000); /* the waiter is asleep in kvp_nop by now */
	watchdog_watch(NULL);
	CHECK_EQ(kill(dmn.pid, SIGKILL), 0);
	CHECK_EQ(wait_child(dmn.pid), 128 + SIGKILL);
	dead_ns = test_now_ns();
	CHECK_EQ(read(pipefd[0], &r, sizeof(r)), sizeof(r));
	CHECK_EQ(wait_child(kid), 0);
	fprintf(stderr, "kvp_nop, daemon killed: %s %llu ms after its death\n", strerror(-r.ret),
		(unsigned long long)(r.at_ns > dead_ns ? (r.at_ns - dead_ns) / 1000000 : 0));
	CHECK_EQ(r.ret, -ECONNRESET);
	CHECK(r.at_ns < dead_ns + 100000000ull);
	CHECK_EQ(r.after, -ECONNRESET);
}

int main(void)
{
	watchdog_start("test_timeouts", 120);
	static const char *const args[] = { "--max-clients", "16", NULL } /* MAX_CLIENTS */;

	CHECK_EQ(daemon_start(&dmn, args), 0);
	watchdog_watch(&dmn);
	stopped_daemon();
	backlog_of_dead();
	killed_daemon();
	return 0;
}
