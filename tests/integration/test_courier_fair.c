/* SPDX-License-Identifier: MIT */
/*
 * No uid can delay another's POOL_MAP (the courier's lanes, daemon/loop/courier.h).
 * uid 65534 hangs WATCHES epoll watches on each of its ATTACKERS clients'
 * sockets and maps its pool from each without pause: every map message the
 * daemon sends it walks those watches with interrupts off, ~20 ms a send.
 * Meanwhile root maps its own pool ROUNDS times: each kvp_map_pool, from the
 * request to the descriptors mapped, takes under 50 ms (about one walk at
 * worst: the time a wake-up the scheduler queued on the walking core waits),
 * all but the slowest of them: on a loaded machine (CI's, under ASan) one map
 * in 40 may wait out a second walk, so the slowest gets twice the bound.
 * The attacker's walks hold at most about a quarter of one core (its key
 * rests three times as long as a dear parcel took). With one queue for every
 * client (before the lanes), root's maps waited behind the attacker's sends:
 * median 52 ms, max 72-78 ms, and the walks held a core all the time.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness.h"
#include "../../lib/client.h"

#define DUPS 100          /* each epoll set watches DUPS descriptors of the socket */
#define SETS 1000
#define WATCHES (DUPS * SETS)
#define ATTACKERS 6
#define ROUNDS 40
#define BOUND_NS (50ull * 1000000ull)
#define SLOWEST_BOUND_NS (2 * BOUND_NS)

static struct daemon dmn;

static const char config[] =
	"[pool.a]\nblocks = 64\nblock_size = 4\ngroups = full\nkv_heads = 1\nhead_dim = 8\n"
	"layers_per_group = 1\nnamespace = nsa\n\n"
	"[pool.b]\nblocks = 64\nblock_size = 4\ngroups = full\nkv_heads = 1\nhead_dim = 8\n"
	"layers_per_group = 1\nnamespace = nsb\n\n"
	"[namespace.nsa]\nuids = 65534\n";

static struct kvp_client *map_client(const char *pool, const char *ns)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = pool, .namespace_ = ns,
				      .pool_map = true };
	struct kvp_client *c;

	CHECK_EQ(kvp_connect(&o, &c), 0);
	return c;
}

/* WATCHES epoll watches, for reading and for writing, on @fd's file. */
static void watch_hard(int fd)
{
	int dups[DUPS];

	for (unsigned i = 0; i < DUPS; i++) {
		dups[i] = dup(fd);
		CHECK(dups[i] >= 0);
	}
	for (unsigned s = 0; s < SETS; s++) {
		int ep = epoll_create1(EPOLL_CLOEXEC);

		CHECK(ep >= 0);
		for (unsigned i = 0; i < DUPS; i++) {
			struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT };

			CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, dups[i], &ev) == 0);
		}
	}
}

/* uid 65534's client: its socket watched WATCHES times, mapping its pool until killed. */
static int attacker(void *arg)
{
	struct kvp_client *c;

	(void)arg;
	drop_to_uid(65534);
	c = map_client("a", "nsa");
	watch_hard(c->sock);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		struct kvp_pool_map m;

		CHECK_EQ(kvp_map_pool(c, &m), 0);
		kvp_unmap_pool(&m);
	}
}

static uint64_t lanes_run_ns(void)
{
	pid_t lanes[16];
	unsigned n = daemon_children_named(&dmn, "kvpoold-courier", lanes, 16);
	uint64_t ns = 0;

	for (unsigned i = 0; i < n; i++) {
		char path[64];
		unsigned long long t = 0;
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)lanes[i]);
		f = fopen(path, "r");
		CHECK(f && fscanf(f, "%llu", &t) == 1);
		fclose(f);
		ns += t;
	}
	return ns;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(void)
{
	const char *args[3] = { "--config", NULL, NULL };
	uint64_t lat[ROUNDS], lanes0, t0, walked_ns, window_ns;
	struct kvp_client *b;
	pid_t att[ATTACKERS];
	struct rlimit rl;

	watchdog_start("test_courier_fair", 120);
	if (geteuid() != 0) {
		printf("needs root: the test runs the attacker as uid 65534\n");
		return 77;
	}
	/* The attackers' descriptors: inherited, as an unprivileged uid cannot raise its hard limit. */
	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_max < DUPS + SETS + 64) {
		rl.rlim_max = DUPS + SETS + 64;
		CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	}
	rl.rlim_cur = rl.rlim_max;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	args[1] = config_file(config);
	CHECK_EQ(daemon_start(&dmn, args), 0);
	watchdog_watch(&dmn);
	daemon_open_to_all(&dmn);

	b = map_client("b", "nsb");
	for (unsigned i = 0; i < ATTACKERS; i++)
		att[i] = fork_child_ready(attacker, NULL);
	usleep(200000); /* every attacker mapping */

	lanes0 = lanes_run_ns();
	t0 = test_now_ns();
	for (unsigned i = 0; i < ROUNDS; i++) {
		struct kvp_pool_map m;
		uint64_t start = test_now_ns();

		CHECK_EQ(kvp_map_pool(b, &m), 0);
		lat[i] = test_now_ns() - start;
		kvp_unmap_pool(&m);
		usleep(10000 + (unsigned)rand() % 20000);
	}
	window_ns = test_now_ns() - t0;
	walked_ns = lanes_run_ns() - lanes0;
	for (unsigned i = 0; i < ATTACKERS; i++)
		CHECK_EQ(kill(att[i], SIGKILL), 0);
	for (unsigned i = 0; i < ATTACKERS; i++)
		CHECK_EQ(wait_child(att[i]), 128 + SIGKILL);
	qsort(lat, ROUNDS, sizeof(lat[0]), cmp_u64);
	fprintf(stderr, "root's POOL_MAPs beside uid 65534's %u clients with %u watches each: "
		"median %llu us, max %llu us; the courier's lanes walked %llu of %llu ms\n",
		ATTACKERS, WATCHES, (unsigned long long)lat[ROUNDS / 2] / 1000,
		(unsigned long long)lat[ROUNDS - 1] / 1000, (unsigned long long)walked_ns / 1000000,
		(unsigned long long)window_ns / 1000000);
	/*
	 * The attack was real: a lane walked the attacker's watches, but as a key
	 * whose parcels are dear rests three times as long, a quarter of the time
	 * (and a little more: the rest starts once the lane has heard the time).
	 */
	CHECK(walked_ns >= window_ns / 8);
	CHECK(walked_ns <= window_ns * 3 / 10);
	CHECK(lat[ROUNDS - 2] < BOUND_NS);
	CHECK(lat[ROUNDS - 1] < SLOWEST_BOUND_NS);

	kvp_close(b);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
