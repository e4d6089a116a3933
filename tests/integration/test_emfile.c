/* SPDX-License-Identifier: MIT */
/*
 * Out of descriptors, the daemon neither spins nor breaks. Under
 * RLIMIT_NOFILE 64 (prlimit --nofile=64) it lowers --max-clients 1000 to
 * what fits and says so, serves that many and refuses one more, at rest.
 * When accept itself fails (its limit lowered under it, as if something else
 * had taken the descriptors), it stops accepting instead of retrying at once
 * (on ABI 1 the loop re-armed accept in a loop, 100% of a core), and takes
 * the waiting connections once a client leaves or a second passes. That part
 * runs on epoll, whose accept4 sees a lowered limit at once; io_uring's
 * multishot accept keeps the limit it was armed with.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOFILE 64
#define MAX_CAP 64

static struct daemon dmn;

/* The first number after @prefix in the daemon's log, or -1. */
static long log_number(const char *prefix)
{
	char line[512];
	long v = -1;
	FILE *f = fopen(dmn.log, "r");

	while (f && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, prefix);

		if (at && sscanf(at + strlen(prefix), "%ld", &v) == 1)
			break;
	}
	if (f)
		fclose(f);
	return v;
}

static bool log_has(const char *text)
{
	char line[512];
	bool found = false;
	FILE *f = fopen(dmn.log, "r");

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, text) != NULL;
	if (f)
		fclose(f);
	return found;
}

static int try_connect(unsigned timeout_ms, struct kvp_client **c)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .timeout_ms = timeout_ms };

	return kvp_connect(&o, c);
}

/* The lowest descriptor number the daemon has free: the limit that leaves it none. */
static long lowest_free_fd(void)
{
	bool used[4096] = { false };
	char path[64];
	struct dirent *e;
	DIR *dir;
	long fd = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)dmn.pid);
	dir = opendir(path);
	CHECK(dir);
	while ((e = readdir(dir)) != NULL) {
		long n = strtol(e->d_name, NULL, 10);

		if (e->d_name[0] != '.' && n >= 0 && n < 4096)
			used[n] = true;
	}
	closedir(dir);
	while (fd < 4096 && used[fd])
		fd++;
	return fd;
}

/* The daemon's CPU time over @ms, in ticks (USER_HZ, 100 a second). */
static long cpu_over(unsigned ms)
{
	long t0 = daemon_cpu_ticks(&dmn), t1;

	usleep(ms * 1000);
	t1 = daemon_cpu_ticks(&dmn);
	CHECK(t0 >= 0 && t1 >= 0);
	return t1 - t0;
}

static int stranded(void *arg)
{
	struct kvp_client *c;

	(void)arg;
	/* The daemon cannot accept it: its setup times out. */
	return try_connect(500, &c) == -ETIMEDOUT ? 0 : 1;
}

/* Fills every slot, refuses one more, and stays at rest. Returns how many it holds. */
static long fill(struct kvp_client **held)
{
	long cap = log_number("max_clients 1000 capped to "), ticks;
	struct kvp_client *c;
	int ret;

	fprintf(stderr, "max_clients capped to %ld under RLIMIT_NOFILE %d\n", cap, NOFILE);
	CHECK(log_has("capped to ") && log_has(": RLIMIT_NOFILE is 64"));
	CHECK(cap >= 8 && cap < NOFILE / 2);
	for (long i = 0; i < cap; i++)
		held[i] = connect_or_die(&dmn, "", "", false);
	/* Turned away at once, told why, not left waiting. */
	ret = try_connect(5000, &c);
	CHECK_EQ(ret, -EUSERS);
	ticks = cpu_over(1000);
	fprintf(stderr, "full: %ld ticks of CPU in 1 s\n", ticks);
	CHECK(ticks <= 5);
	return cap;
}

static void release(struct kvp_client **held, long n)
{
	while (n > 0)
		kvp_close(held[--n]);
}

int main(void)
{
	const char *capped[] = { "--max-clients", "1000", NULL };
	const char *on_epoll[] = { "--max-clients", "1000", "--event-loop", "epoll", NULL };
	struct kvp_client *held[MAX_CAP], *c;
	struct rlimit low = { 0, NOFILE }, restore = { NOFILE, NOFILE };
	pid_t kids[3];
	long cap, ticks;
	int ret;

	watchdog_start("test_emfile", 120);
	CHECK_EQ(daemon_start_nofile(&dmn, capped, NOFILE), 0);
	watchdog_watch(&dmn);
	cap = fill(held);
	kvp_close(held[--cap]);
	CHECK_EQ(try_connect(5000, &held[cap]), 0);
	release(held, cap + 1);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);

	/* Accept itself fails: no descriptor is left under the lowered limit. */
	CHECK_EQ(daemon_start_nofile(&dmn, on_epoll, NOFILE), 0);
	watchdog_watch(&dmn);
	cap = fill(held);
	kvp_close(held[--cap]);
	usleep(100000);
	low.rlim_cur = (rlim_t)lowest_free_fd();
	CHECK_EQ(prlimit(dmn.pid, RLIMIT_NOFILE, &low, NULL), 0);
	for (unsigned i = 0; i < 3; i++)
		kids[i] = fork_child(stranded, NULL);
	ticks = cpu_over(1000);
	fprintf(stderr, "accept failing: %ld ticks of CPU in 1 s\n", ticks);
	CHECK(ticks <= 10);
	for (unsigned i = 0; i < 3; i++)
		CHECK_EQ(wait_child(kids[i]), 0);
	CHECK(log_has("accept: Too many open files: not accepting until a client leaves or a second passes"));

	/*
	 * Descriptors again: a client leaving (or the next second) resumes
	 * accepting. The stranded connections come first (set up and hung up
	 * on at once, their clients gone): room for them too.
	 */
	CHECK_EQ(prlimit(dmn.pid, RLIMIT_NOFILE, &restore, NULL), 0);
	for (unsigned i = 0; i < 4; i++)
		kvp_close(held[--cap]);
	/*
	 * Descriptors the courier has yet to close may refuse a setup (-EMFILE) a
	 * moment, and so may the clients just closed, counted until the loop hears
	 * them hang up, with the stranded ones it takes meanwhile (-EUSERS).
	 */
	for (uint64_t t0 = test_now_ns();
	     ((ret = try_connect(3000, &c)) == -EMFILE || ret == -EUSERS) &&
	     test_now_ns() - t0 < 3000000000ull;)
		usleep(10000);
	CHECK_EQ(ret, 0);
	CHECK_EQ(kvp_nop(c), 0);
	kvp_close(c);
	release(held, cap);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
