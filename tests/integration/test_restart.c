/* SPDX-License-Identifier: MIT */
/*
 * Restarts: a daemon killed with SIGKILL leaves its socket and lock file
 * behind, and one started at once on the same socket, before the old one is
 * even reaped, takes them over (on ABI 1 it said "another kvpoold is
 * listening there" for the ~15 ms the dying daemon still took connections).
 * A daemon started beside a live one refuses with that message, exit status
 * 1, and leaves the live one serving; so it does beside a listener that takes
 * no lock (a kvpoold older than the lock). A clean exit removes the socket
 * and its lock file.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define RESTARTS 10

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* kvpoold on @socket beside a live daemon: its exit status; it said why in @log. */
static int beside(const char *socket, const char *log)
{
	const char *bin = getenv("KVPOOLD") ? getenv("KVPOOLD") : "build/bin/kvpoold";
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0) {
		if (!freopen(log, "w", stderr))
			_exit(127);
		execl(bin, bin, "--socket", socket, (char *)NULL);
		_exit(127);
	}
	return wait_child(pid);
}

/* A listener at a path of its own, lock-less: kvpoold must leave its socket alone. */
static void lockless_listener(const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char log[160];
	struct stat before, after;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	CHECK(fd >= 0);
	CHECK(snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/other.sock", dir) <
	      (int)sizeof(sa.sun_path));
	snprintf(log, sizeof(log), "%s/other.log", dir);
	CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 8) == 0);
	CHECK(lstat(sa.sun_path, &before) == 0);
	CHECK_EQ(beside(sa.sun_path, log), 1);
	CHECK_EQ(lines_with(log, "another kvpoold is listening there"), 1);
	CHECK(lstat(sa.sun_path, &after) == 0);
	CHECK_EQ(after.st_ino, before.st_ino);
	close(fd);
	unlink(sa.sun_path);
	unlink(log);
}

int main(void)
{
	struct daemon d;
	char lock[160], log[160];
	uint64_t t0;

	watchdog_start("test_restart", 120);
	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	snprintf(lock, sizeof(lock), "%s.lock", d.socket);
	snprintf(log, sizeof(log), "%s/beside.log", d.dir);
	CHECK(exists(lock));

	/* A live daemon holds the lock: the second one waits a second for it, then says why. */
	t0 = test_now_ns();
	CHECK_EQ(beside(d.socket, log), 1);
	CHECK(test_now_ns() - t0 < 5000000000ull);
	CHECK_EQ(lines_with(log, "another kvpoold is listening there"), 1);
	unlink(log);
	kvp_close(connect_or_die(&d, "", "", false));
	lockless_listener(d.dir);

	for (unsigned i = 0; i < RESTARTS; i++) {
		pid_t dying = d.pid;

		CHECK_EQ(kill(dying, SIGKILL), 0);
		CHECK_EQ(daemon_restart(&d, NULL), 0);
		CHECK_EQ(wait_child(dying), 128 + SIGKILL);
		kvp_close(connect_or_die(&d, "", "", false));
	}
	CHECK_EQ(lines_with(d.log, "another kvpoold is listening there"), 0);

	/* A clean exit leaves nothing behind. */
	watchdog_watch(NULL);
	{
		char sock[128];

		strcpy(sock, d.socket);
		CHECK_EQ(daemon_stop(&d), 0);
		CHECK(!exists(sock));
		CHECK(!exists(lock));
	}
	return 0;
}
