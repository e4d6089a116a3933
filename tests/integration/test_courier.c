/* SPDX-License-Identifier: MIT */
/*
 * The courier's processes (daemon/loop/courier.c): one child of the daemon per
 * lane, each named kvpoold-courier, with the daemon's very descriptor table
 * (the same numbers open on the same files); the signals an admin sends the
 * process group do nothing to them; one killed, the daemon says so once and
 * that lane's thread makes its calls (setups are answered, hang-ups closed);
 * they end with the daemon, reaped by a clean exit and killed with a killed
 * one, whose clients then see the hang-up (they would wait forever if one
 * kept the sockets open).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "loop/courier.h"

#define LOST_LINE "ended between parcels (signal 9); that lane's thread makes its calls " \
		  "from now on"
#define LANES KVPD_COURIER_LANES

static struct daemon dmn;

/* Every descriptor of @pid's, as "number -> target" lines, in @out; returns how many. */
static unsigned fd_table(pid_t pid, char out[][96], unsigned max)
{
	char dir[64];
	struct dirent *e;
	unsigned n = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	CHECK(d);
	while ((e = readdir(d))) {
		char path[320], target[64];
		ssize_t len;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		len = readlink(path, target, sizeof(target) - 1);
		if (len < 0)
			continue; /* opendir's own, closed by now */
		target[len] = '\0';
		CHECK(n < max);
		snprintf(out[n++], 96, "%.15s -> %.63s", e->d_name, target);
	}
	closedir(d);
	return n;
}

static int cmp_line(const void *a, const void *b)
{
	return strcmp(a, b);
}

/*
 * The same descriptors, by number and by file: one table. Read from /proc one after the other,
 * so a daemon still opening its own (the loop's, after the socket listens) can show one more
 * in the second read: compared again until the two reads agree, for up to a second.
 */
static bool tables_equal(pid_t courier)
{
	static char ours[256][96], its[256][96];
	unsigned n_ours = fd_table(dmn.pid, ours, 256), n_its = fd_table(courier, its, 256);

	CHECK(n_ours >= 4); /* 0-2, the listening socket at least */
	if (n_its != n_ours)
		return false;
	qsort(ours, n_ours, sizeof(ours[0]), cmp_line);
	qsort(its, n_its, sizeof(its[0]), cmp_line);
	for (unsigned i = 0; i < n_ours; i++)
		if (strcmp(ours[i], its[i]))
			return false;
	return true;
}

static void same_table(pid_t courier)
{
	unsigned tries = 0;

	while (!tables_equal(courier)) {
		CHECK(++tries < 100);
		usleep(10000);
	}
}

static char process_state(pid_t pid)
{
	char path[64], state = 'X';
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 'X';
	if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1)
		state = '?';
	fclose(f);
	return state;
}

static void nop_round(void)
{
	struct kvp_client *c = connect_or_die(&dmn, "", "", false);

	CHECK_EQ(kvp_nop(c), 0);
	kvp_close(c);
}

/*
 * Until the daemon has handled every hang-up (its log line comes before it posts the closes)
 * and the processes have made the calls they posted: closing a client's socket and, on the
 * epoll loop, its doorbell set, which takes epoll's global lock. A SIGKILL meanwhile finds a
 * parcel in hand (logged so, and lost), not the process between parcels that this test means.
 * Idle is every lane's waiting for the next parcel (S), twice 10 ms apart: nothing else is
 * posted then.
 */
static void couriers_idle(const pid_t *lanes)
{
	uint64_t t0 = test_now_ns();
	unsigned idle = 0;

	while (lines_with(dmn.log, " connected: ") != lines_with(dmn.log, " disconnected: ") ||
	       idle < 2) {
		bool all = true;

		CHECK(test_now_ns() - t0 < 5000000000ull);
		usleep(10000);
		for (unsigned i = 0; i < LANES; i++)
			all = all && process_state(lanes[i]) == 'S';
		idle = all ? idle + 1 : 0;
	}
}

static unsigned lanes_of(pid_t *lanes)
{
	return daemon_children_named(&dmn, "kvpoold-courier", lanes, LANES + 1);
}

int main(void)
{
	pid_t lanes[LANES + 1], left[LANES + 1];
	struct kvp_client *held;
	uint64_t t0;

	watchdog_start("test_courier", 60);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);

	CHECK_EQ(lanes_of(lanes), LANES);
	for (unsigned i = 0; i < LANES; i++)
		same_table(lanes[i]);

	/* What a terminal or a unit's stop sends the group: the couriers wait for the daemon's word. */
	for (unsigned i = 0; i < LANES; i++) {
		CHECK_EQ(kill(lanes[i], SIGTERM), 0);
		CHECK_EQ(kill(lanes[i], SIGINT), 0);
		CHECK_EQ(kill(lanes[i], SIGHUP), 0);
	}
	usleep(100000);
	for (unsigned i = 0; i < LANES; i++)
		CHECK(strchr("RS", process_state(lanes[i])));
	nop_round();
	CHECK_EQ(lines_with(dmn.log, "courier lane"), 0);

	/*
	 * One killed: the first parcel its lane takes (a setup reply, a close) finds it gone,
	 * unread; that lane's thread delivers it, and the others go on with their processes.
	 */
	couriers_idle(lanes);
	CHECK_EQ(kill(lanes[0], SIGKILL), 0);
	usleep(100000);
	t0 = test_now_ns();
	while (lines_with(dmn.log, LOST_LINE) == 0) {
		CHECK(test_now_ns() - t0 < 10000000000ull);
		nop_round();
	}
	nop_round();
	nop_round();
	CHECK_EQ(lines_with(dmn.log, LOST_LINE), 1);
	CHECK_EQ(lines_with(dmn.log, "courier lane"), 1);
	CHECK_EQ(lanes_of(left), LANES - 1); /* reaped */
	for (unsigned i = 0; i < LANES - 1; i++)
		CHECK(left[i] != lanes[0]);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);

	/* A clean exit reaps them: no process of those numbers is left. */
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	CHECK_EQ(lanes_of(lanes), LANES);
	nop_round();
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	for (unsigned i = 0; i < LANES; i++)
		CHECK(kill(lanes[i], 0) == -1 && errno == ESRCH);

	/* A killed daemon takes them along, and with them the last hold on its clients' sockets. */
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	CHECK_EQ(lanes_of(lanes), LANES);
	held = connect_or_die(&dmn, "", "", false);
	CHECK_EQ(kvp_nop(held), 0);
	watchdog_watch(NULL);
	CHECK_EQ(kill(dmn.pid, SIGKILL), 0);
	CHECK_EQ(wait_child(dmn.pid), 128 + SIGKILL);
	for (unsigned i = 0; i < LANES; i++) {
		t0 = test_now_ns();
		while (!strchr("ZX", process_state(lanes[i])) && test_now_ns() - t0 < 2000000000ull)
			usleep(1000);
		CHECK(strchr("ZX", process_state(lanes[i])));
	}
	CHECK_EQ(kvp_nop(held), -ECONNRESET);
	kvp_close(held);
	/* What a killed daemon leaves: its socket, lock file and log. */
	char lock[160];

	snprintf(lock, sizeof(lock), "%s.lock", dmn.socket);
	CHECK_EQ(unlink(dmn.socket), 0);
	CHECK_EQ(unlink(lock), 0);
	CHECK_EQ(unlink(dmn.log), 0);
	CHECK_EQ(rmdir(dmn.dir), 0);
	return 0;
}
