/* SPDX-License-Identifier: MIT */
/*
 * Restarts: a daemon killed with SIGKILL leaves its socket and lock file
 * behind, and one started at once on the same socket, before the old one is
 * even reaped, takes them over (on ABI 1 it said "another kvpoold is
 * listening there" for the ~15 ms the dying daemon still took connections).
 * A daemon started beside a live one refuses with that message, exit status
 * 1, and leaves the live one serving. A clean exit removes the socket and its
 * lock file.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define RESTARTS 10

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static long count_in_file(const char *path, const char *text)
{
	char line[512];
	long n = 0;
	FILE *f = fopen(path, "r");

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, text) != NULL;
	if (f)
		fclose(f);
	return n;
}

/* kvpoold on @socket beside a live daemon: its exit status; it said why in @log. */
static int beside(const char *socket, const char *log)
{
	const char *bin = getenv("KVPOOLD") ? getenv("KVPOOLD") : "daemon/kvpoold";
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
	CHECK_EQ(count_in_file(log, "another kvpoold is listening there"), 1);
	unlink(log);
	kvp_close(connect_or_die(&d, "", "", false));

	for (unsigned i = 0; i < RESTARTS; i++) {
		pid_t dying = d.pid;

		CHECK_EQ(kill(dying, SIGKILL), 0);
		CHECK_EQ(daemon_restart(&d, NULL), 0);
		CHECK_EQ(wait_child(dying), 128 + SIGKILL);
		kvp_close(connect_or_die(&d, "", "", false));
	}
	CHECK_EQ(count_in_file(d.log, "another kvpoold is listening there"), 0);

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
