/* SPDX-License-Identifier: MIT */
/*
 * A client killed with SIGKILL while it holds blocks and has requests in
 * flight: the daemon closes its sequences, every block returns to the free
 * queue (published ones stay cached), the invariants hold, and STATS counts
 * the client as killed.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define POOL "p"

static struct daemon dmn;

struct child {
	int ready_wr; /* child -> parent: "h" holds blocks, "s" streaming */
	int go_rd;    /* parent -> child: start streaming */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fill(uint32_t *t, uint32_t n, uint32_t base)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = base + i;
}

/*
 * Three sequences: 12 tokens committed (3 blocks, 3 published), 10 tokens with
 * 8 committed (3 blocks, 2 published), 7 tokens never committed (2 blocks).
 * Then a fourth sequence cycles ALLOC/FREE, pipelined, until the kill.
 */
static int victim(void *arg)
{
	const struct child *ch = arg;
	struct kvp_client *c = connect_or_die(&dmn, POOL, "", false);
	uint32_t t[16];
	uint64_t h[4];
	uint64_t inflight = 0, completed = 0;
	bool told = false;
	char b;

	fill(t, 12, 100);
	CHECK_EQ(kvp_seq_open(c, t, 12, NULL, 0, -1, &h[0]), 0);
	CHECK_EQ(kvp_alloc(c, h[0], 12, 0, true, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_commit(c, h[0], 12), 0);
	fill(t, 10, 200);
	CHECK_EQ(kvp_seq_open(c, t, 10, NULL, 0, -1, &h[1]), 0);
	CHECK_EQ(kvp_alloc(c, h[1], 10, 0, true, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_commit(c, h[1], 8), 0);
	fill(t, 7, 300);
	CHECK_EQ(kvp_seq_open(c, t, 7, NULL, 0, -1, &h[2]), 0);
	CHECK_EQ(kvp_alloc(c, h[2], 7, 0, true, NULL, NULL, 0), 0);
	fill(t, 9, 400);
	CHECK_EQ(kvp_seq_open(c, t, 9, NULL, 0, -1, &h[3]), 0);
	CHECK_EQ(write(ch->ready_wr, "h", 1), 1);
	CHECK_EQ(read(ch->go_rd, &b, 1), 1);

	/* Mid-stream: ALLOC then FREE of sequence 4, never waiting for a completion first. */
	for (;;) {
		struct kvp_sqe *sqe;
		struct kvp_cqe *cqe;

		while ((sqe = kvp_get_sqe(c)) != NULL) {
			sqe->opcode = (inflight & 1) ? KVP_OP_FREE : KVP_OP_ALLOC;
			sqe->handle = h[3];
			sqe->len = (inflight & 1) ? 0 : 9;
			sqe->user_data = inflight++;
		}
		CHECK(kvp_submit(c) >= 0);
		while (kvp_peek_cqe(c, &cqe) == 0) {
			CHECK_EQ(cqe->res, 0);
			CHECK_EQ(cqe->user_data, completed);
			completed++;
			kvp_cqe_seen(c, cqe);
		}
		if (!told && completed >= 200) {
			CHECK_EQ(write(ch->ready_wr, "s", 1), 1);
			told = true;
		}
	}
	return 1;
}

static void pool_stats(uint32_t free_, uint32_t used, uint32_t cached)
{
	struct kvp_pool_stats st;

	check_pool_or_die(&dmn, POOL, &st);
	CHECK_EQ(st.blocks_total, 64);
	CHECK_EQ(st.blocks_free, free_);
	CHECK_EQ(st.blocks_used, used);
	CHECK_EQ(st.blocks_cached, cached);
}

/* The stats snapshot, with the pool's entry and (if @pid) that client's entry. */
static void snapshot(struct kvp_client *c, struct kvp_stats_header *h, struct kvp_pool_entry *pe,
		     pid_t pid, struct kvp_client_entry *ce, int *found)
{
	static uint8_t buf[16384];
	int n = kvp_stats(c, buf, sizeof(buf));

	CHECK(n >= (int)sizeof(*h));
	memcpy(h, buf, sizeof(*h));
	CHECK_EQ(n, sizeof(*h) + h->num_pools * sizeof(*pe) + h->num_clients * sizeof(*ce));
	CHECK_EQ(h->num_pools, 1);
	memcpy(pe, buf + sizeof(*h), sizeof(*pe));
	CHECK_EQ(strcmp(pe->name, POOL), 0);
	*found = 0;
	for (uint32_t i = 0; i < h->num_clients; i++) {
		struct kvp_client_entry e;

		memcpy(&e, buf + sizeof(*h) + sizeof(*pe) + i * sizeof(e), sizeof(e));
		if (pid && e.pid == pid) {
			*ce = e;
			(*found)++;
		}
	}
}

int main(void)
{
	static const char *const pool_kv[] = { "blocks=64", "block_size=4", "groups=full", NULL };
	struct kvp_stats_header h0, h;
	struct kvp_pool_entry pe;
	struct kvp_client_entry ce;
	struct kvp_client *obs;
	struct child ch;
	int pipefd[2], gofd[2], found;
	uint64_t deadline;
	pid_t pid;
	char b;

	watchdog_start("test_fault_kill", 30);

	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, POOL, pool_kv);
	pool_stats(63, 0, 0);
	obs = connect_or_die(&dmn, POOL, "", false);
	snapshot(obs, &h0, &pe, 0, &ce, &found);
	CHECK_EQ(h0.clients_killed, 0);

	CHECK_EQ(pipe(pipefd), 0);
	CHECK_EQ(pipe(gofd), 0);
	ch.ready_wr = pipefd[1];
	ch.go_rd = gofd[0];
	fflush(NULL);
	pid = fork_child(victim, &ch);
	CHECK(pid > 0);
	close(pipefd[1]);
	close(gofd[0]);

	/* It holds 3 + 3 + 2 blocks, 5 of them published. */
	CHECK_EQ(read(pipefd[0], &b, 1), 1);
	CHECK_EQ(b, 'h');
	pool_stats(55, 8, 5);
	snapshot(obs, &h, &pe, pid, &ce, &found);
	CHECK_EQ(found, 1);
	CHECK_EQ(ce.sequences, 4);
	CHECK_EQ(ce.blocks_held, 8);
	CHECK_EQ(pe.sequences, 4);

	/* Kill it while it streams. */
	CHECK_EQ(write(gofd[1], "g", 1), 1);
	CHECK_EQ(read(pipefd[0], &b, 1), 1);
	CHECK_EQ(b, 's');
	CHECK_EQ(kill(pid, SIGKILL), 0);
	CHECK_EQ(wait_child(pid), 128 + SIGKILL);
	close(pipefd[0]);
	close(gofd[1]);

	/* Its socket is closed now; the daemon sees the hang-up in its own time. */
	deadline = now_ns() + 3000000000ull;
	do {
		snapshot(obs, &h, &pe, pid, &ce, &found);
	} while ((found || pe.sequences || pe.clients != 1) && now_ns() < deadline);
	CHECK_EQ(found, 0);
	CHECK_EQ(pe.sequences, 0);
	CHECK_EQ(pe.clients, 1); /* obs alone */
	CHECK_EQ(h.clients_killed, h0.clients_killed + 1);
	CHECK_EQ(h.clients_disconnected - h0.clients_disconnected,
		 h.clients_connected - h0.clients_connected - (h.num_clients - h0.num_clients));

	/* Every block is back: exactly the initial free count, the 5 published still cached. */
	CHECK_EQ(pe.stats.blocks_free, 63);
	CHECK_EQ(pe.stats.blocks_used, 0);
	CHECK_EQ(pe.stats.blocks_cached, 5);
	pool_stats(63, 0, 5);

	/* The published blocks are really there: the 12-token prompt hits 2 blocks (M = 11). */
	{
		uint32_t t[12], hit = 0;
		uint64_t hs;

		fill(t, 12, 100);
		CHECK_EQ(kvp_seq_open(obs, t, 12, NULL, 0, -1, &hs), 0);
		CHECK_EQ(kvp_alloc(obs, hs, 4, 0, true, &hit, NULL, 0), 0);
		CHECK_EQ(hit, 8);
		CHECK_EQ(kvp_seq_close(obs, hs), 0);
	}
	pool_stats(63, 0, 5);
	kvp_close(obs);

	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
