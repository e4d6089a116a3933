/* SPDX-License-Identifier: MIT */
/*
 * KVP_POOL_OWNED: a pool that belongs to the connection that created it.
 *   - its creator closes: the pool is gone;
 *   - its creator is killed mid-work: the pool is gone;
 *   - another client still uses it when the creator leaves: it stays, with
 *     that client's sequences, until that client leaves too;
 *   - a pool created without the flag outlives its creator;
 *   - kvtrace --socket creates its private pool owned: no replay leaks one;
 *   - only its creator's uid and root may attach to it (-EPERM for others, at
 *     setup and by ATTACH), so no other uid can pin it alive and make its
 *     owner's POOL_DESTROY fail with -EBUSY; with root, as uid 65534.
 * "Gone" is seen through ATTACH (-ENODEV for a pool that does not exist),
 * polled for a bounded time: the daemon learns of a hang-up on its own loop.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct daemon dmn;

static struct kvp_pool_params params(const char *name)
{
	struct kvp_pool_params p;

	kvp_pool_params_init(&p, name);
	CHECK_EQ(kvp_pool_params_set(&p, "blocks", "16"), 0);
	CHECK_EQ(kvp_pool_params_set(&p, "block_size", "4"), 0);
	CHECK_EQ(kvp_pool_params_set(&p, "groups", "full"), 0);
	return p;
}

/* Whether @name exists, as an attach by @probe tells (detaching again at once). */
static bool pool_exists(struct kvp_client *probe, const char *name)
{
	int ret = kvp_attach(probe, name);

	CHECK(ret == 0 || ret == -ENODEV);
	if (ret == 0)
		CHECK_EQ(kvp_attach(probe, ""), 0);
	return ret == 0;
}

/* Waits (at most 2 s) until @name is gone. */
static bool gone(struct kvp_client *probe, const char *name)
{
	for (int i = 0; i < 200; i++) {
		if (!pool_exists(probe, name))
			return true;
		usleep(10 * 1000);
	}
	return false;
}

/* uid 65534 is refused the owned pool both ways, and the plain one is not. */
static int stranger(void *arg)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = "private" };
	struct kvp_client *c;

	(void)arg;
	drop_to_uid(65534);
	CHECK_EQ(kvp_connect(&o, &c), -EPERM);
	o.pool = "";
	CHECK_EQ(kvp_connect(&o, &c), 0);
	CHECK_EQ(kvp_attach(c, "private"), -EPERM);
	CHECK_EQ(kvp_attach(c, "kept"), 0);
	kvp_close(c);
	return 0;
}

static void owned_by_uid(struct kvp_client *probe)
{
	struct kvp_client *owner = connect_or_die(&dmn, "", "", true), *same_uid;
	struct kvp_pool_params p = params("private");

	CHECK_EQ(kvp_pool_create_owned(owner, &p), 0);
	daemon_open_to_all(&dmn);
	CHECK_EQ(wait_child(fork_child(stranger, NULL)), 0);
	/* The owner's own uid may attach; its destroy is not blocked by the stranger. */
	same_uid = connect_or_die(&dmn, "private", "", false);
	kvp_close(same_uid);
	CHECK(pool_exists(probe, "private"));
	for (int tries = 0; kvp_pool_destroy(owner, "private") == -EBUSY; tries++) {
		CHECK(tries < 100); /* same_uid's hang-up reaches the loop soon */
		usleep(10000);
	}
	CHECK(!pool_exists(probe, "private"));
	kvp_close(owner);
}

static int create_owned_and_wait(void *arg)
{
	struct kvp_client *c = connect_or_die(arg, "", "", true);
	struct kvp_pool_params p = params("killed");

	CHECK_EQ(kvp_pool_create_owned(c, &p), 0);
	printf("created\n");
	fflush(stdout);
	pause();
	return 0;
}

int main(void)
{
	struct kvp_client *probe, *owner, *user;
	struct kvp_pool_params p;
	uint32_t tokens[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint64_t h;
	pid_t child;

	watchdog_start("test_pool_owned", 30);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	probe = connect_or_die(&dmn, "", "", true);

	/* Closed by its creator. */
	owner = connect_or_die(&dmn, "", "", true);
	p = params("owned");
	CHECK_EQ(kvp_pool_create_owned(owner, &p), 0);
	CHECK(pool_exists(probe, "owned"));
	kvp_close(owner);
	CHECK(gone(probe, "owned"));

	/* Without the flag: it stays. */
	owner = connect_or_die(&dmn, "", "", true);
	p = params("kept");
	CHECK_EQ(kvp_pool_create(owner, &p), 0);
	kvp_close(owner);
	usleep(100 * 1000);
	CHECK(pool_exists(probe, "kept"));

	/* In use by another client when the creator leaves: it waits for that client. */
	owner = connect_or_die(&dmn, "", "", true);
	p = params("shared");
	CHECK_EQ(kvp_pool_create_owned(owner, &p), 0);
	user = connect_or_die(&dmn, "shared", "", false);
	CHECK_EQ(kvp_seq_open(user, tokens, 8, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(user, h, 8, 0, false, NULL, NULL, 0), 0);
	kvp_close(owner);
	usleep(100 * 1000);
	CHECK_EQ(kvp_commit(user, h, 8), 0); /* the pool and the sequence are still there */
	CHECK(pool_exists(probe, "shared"));
	kvp_close(user);
	CHECK(gone(probe, "shared"));

	/* Its creator killed. */
	child = fork_child_ready(create_owned_and_wait, &dmn);
	CHECK(pool_exists(probe, "killed"));
	kill(child, SIGKILL);
	CHECK_EQ(wait_child(child), 128 + SIGKILL);
	CHECK(gone(probe, "killed"));

	if (geteuid() == 0)
		owned_by_uid(probe);
	else
		printf("not root: the attach by another uid is not tried\n");

	/* The pool the config-less daemon still has is the unowned one. */
	CHECK(pool_exists(probe, "kept"));
	CHECK_EQ(kvp_pool_destroy(probe, "kept"), 0);
	kvp_close(probe);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
