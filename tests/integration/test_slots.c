/* SPDX-License-Identifier: MIT */
/*
 * Connection slots cannot be hoarded (the defect: one uid held all 128 slots
 * with idle sessions or half-open connections, and a legitimate client
 * connected 0 times out of 30):
 *   - a uid at its max_clients (32 by default) is refused with -EUSERS, and
 *     another uid still connects, 30 times out of 30;
 *   - the last 4 of --max-clients slots are root's and the daemon's uid's:
 *     with --max-clients 12 an unprivileged uid gets 8, root the other 4;
 *   - a connection that sends no setup is dropped after 1 s (it held a slot
 *     of its uid's and a slot of the daemon's until then).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

#define ATTACKER 65534
#define VICTIM 65533

static struct daemon dmn;

static int try_connect(struct kvp_client **c)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .arena_bytes = 4096,
				      .sq_entries = 4 };

	*c = NULL;
	return kvp_connect(&o, c);
}

/* A connection that never sends its setup. */
static int half_open(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	strcpy(sa.sun_path, dmn.socket);
	CHECK_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

struct hoard {
	uid_t uid;
	int n;          /* connections to hold */
	bool half;      /* half-open ones instead of sessions */
	int expect_next; /* what the next one gets */
};

/* Holds its connections, says so on stdout, and waits to be killed. */
static int hoarder(void *arg)
{
	const struct hoard *h = arg;
	struct kvp_client *c;

	drop_to_uid(h->uid);
	for (int i = 0; i < h->n; i++) {
		if (h->half)
			half_open();
		else
			CHECK_EQ(try_connect(&c), 0);
	}
	if (!h->half)
		CHECK_EQ(try_connect(&c), h->expect_next);
	printf("holding %d\n", h->n);
	fflush(stdout);
	for (;;)
		pause();
	return 1;
}

struct attempts {
	uid_t uid;
	int n;      /* connections tried, one after the other */
	int expect; /* every one's result */
};

static int connector(void *arg)
{
	const struct attempts *a = arg;
	struct kvp_client *c;

	drop_to_uid(a->uid);
	for (int i = 0; i < a->n; i++) {
		CHECK_EQ(try_connect(&c), a->expect);
		if (c)
			kvp_close(c);
	}
	return 0;
}

/* Exit status 0: the victim got in; 1: -EUSERS; 2: anything else. */
static int victim_try(void *arg)
{
	struct kvp_client *c;
	int ret;

	(void)arg;
	drop_to_uid(VICTIM);
	ret = try_connect(&c);
	if (ret && ret != -EUSERS)
		fprintf(stderr, "victim: %s\n", strerror(-ret));
	if (c)
		kvp_close(c);
	return ret == 0 ? 0 : ret == -EUSERS ? 1 : 2;
}

static void attempt(uid_t uid, int n, int expect)
{
	struct attempts a = { uid, n, expect };

	CHECK_EQ(wait_child(fork_child(connector, &a)), 0);
}

static void stop_hoarder(pid_t pid)
{
	kill(pid, SIGKILL);
	CHECK_EQ(wait_child(pid), 128 + SIGKILL);
}

/* --max-clients 64: the attacker's uid stops at 32; the victim's connects every time. */
static void per_uid_limit(void)
{
	struct hoard h = { ATTACKER, 32, false, -EUSERS };
	pid_t pid = fork_child_ready(hoarder, &h);

	attempt(VICTIM, 30, 0);
	stop_hoarder(pid);
}

/* --max-clients 12: 8 slots for anyone, 4 more for root (and the daemon's uid). */
static void reserved_slots(void)
{
	struct hoard h = { ATTACKER, 8, false, -EUSERS };
	struct kvp_client *root[5];
	pid_t pid = fork_child_ready(hoarder, &h);

	attempt(VICTIM, 1, -EUSERS);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(try_connect(&root[i]), 0);
	CHECK_EQ(try_connect(&root[4]), -EUSERS);
	for (int i = 0; i < 4; i++)
		kvp_close(root[i]);
	stop_hoarder(pid);
}

/* Half-open connections hold slots for 1 s at most, then the victim gets in. */
static void setup_deadline(void)
{
	struct hoard h = { ATTACKER, 8, true, 0 };
	pid_t pid;
	uint64_t t0, waited;
	struct kvp_client *c;
	int ret;

	/* The previous phase's connections may take the loop a moment to see go. */
	for (int tries = 0; (ret = try_connect(&c)) != 0; tries++) {
		CHECK(tries < 100);
		usleep(10000);
	}
	kvp_close(c);
	t0 = test_now_ns();
	pid = fork_child_ready(hoarder, &h);
	attempt(VICTIM, 1, -EUSERS);
	do {
		usleep(20000);
		waited = test_now_ns() - t0;
		CHECK(waited < 2000000000ull);
	} while ((ret = wait_child(fork_child(victim_try, NULL))) == 1);
	CHECK_EQ(ret, 0);
	fprintf(stderr, "half-open connections dropped %.0f ms after they were made\n",
		(double)waited / 1e6);
	CHECK(waited >= 900000000ull);
	stop_hoarder(pid);
}

int main(void)
{
	const char *wide[] = { "--max-clients", "64", NULL };
	const char *narrow[] = { "--max-clients", "12", NULL };
	FILE *log;
	char line[256];
	bool dropped = false;

	watchdog_start("test_slots", 60);
	if (geteuid() != 0) {
		printf("needs root: the test runs clients as uids 65533 and 65534\n");
		return 77;
	}
	CHECK_EQ(daemon_start(&dmn, wide), 0);
	watchdog_watch(&dmn);
	daemon_open_to_all(&dmn);
	per_uid_limit();
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);

	CHECK_EQ(daemon_start(&dmn, narrow), 0);
	watchdog_watch(&dmn);
	daemon_open_to_all(&dmn);
	reserved_slots();
	setup_deadline();
	log = fopen(dmn.log, "r");
	CHECK(log != NULL);
	while (fgets(line, sizeof(line), log))
		dropped |= strstr(line, "refused: pid ") && strstr(line, ": no setup message within 1 s;") != NULL;
	fclose(log);
	CHECK(dropped);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("test_slots: per-uid max_clients, reserved slots and the 1 s setup deadline hold\n");
	return 0;
}
