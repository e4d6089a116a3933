/* SPDX-License-Identifier: MIT */
/*
 * Every counter of `kvctl stats --json` that a quiet workload leaves at zero,
 * made non-zero by a scripted one whose results are derived by hand (the same
 * steps replay in process as tests/traces/50-stats-counters.trace):
 *
 *   pool w: 10 blocks of 4 tokens, one group swa 4 (skipped(n) = n - 3)
 *   a: 16 tokens, ALLOC 16 with the cache (miss) -> [1,2,3,4]; COMMIT 16 hashes 4
 *      blocks, drops positions 0..2 (3 window drops): a holds [0,0,0,4]
 *   b: a's 16 tokens, ALLOC 1 with the cache: swa needs one cached block, finds
 *      block index 2 (block 3): hit 12 tokens, table [0,0,3,5]
 *      -> prefix cache: 32 tokens asked at admission, 12 hit
 *   fragmentation, summed per sequence: a holds 1 block (4 slots) and its next
 *      query needs tokens 13..15; b holds 2 (8 slots) and needs 9..11: [12, 6]
 *   EVICT 1 2 4: three cached blocks (two free, one a's)          -> evict 3
 *   FREE b; c: 32 new tokens, ALLOC 32 takes all 8 free blocks, the last one
 *      block 3, still cached                                     -> reuse 1
 *   d: ALLOC 1 with no block free                                -> nospace 1
 *   COMMIT c 32: 8 blocks hashed, positions 0..6 dropped         -> 7 window drops
 *   close c, a, d; RESET clears c's 8 hashes                      -> reset 8
 * and a forked client killed with a sequence open counts as killed.
 * Usage: KVPOOLD=... KVCTL=... test_stats_counters (default build/bin/kvpoold, build/bin/kvctl).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static const char *kvctl_bin;
static const struct daemon *dmn;

/* Runs `kvctl stats --json` (or clients) into @path. */
static void kvctl_json(const char *what, const char *path)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "%s --socket %s %s --json >%s", kvctl_bin, dmn->socket, what,
		 path);
	CHECK(system(cmd) == 0);
}

/* The compact jq rendering of @filter over @path. */
static void jq(const char *path, const char *filter, char *out, size_t len)
{
	char cmd[1024];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "jq -c '%s' %s", filter, path);
	p = popen(cmd, "r");
	CHECK(p);
	if (!fgets(out, (int)len, p))
		out[0] = '\0';
	out[strcspn(out, "\n")] = '\0';
	CHECK(pclose(p) == 0);
}

static int failures;

static void expect(const char *path, const char *filter, const char *want)
{
	char got[1024];

	jq(path, filter, got, sizeof(got));
	if (strcmp(got, want)) {
		fprintf(stderr, "%s: got %s, expected %s\n", filter, got, want);
		failures++;
	}
}

static uint64_t open_seq(struct kvp_client *c, const uint32_t *tokens, uint32_t n)
{
	uint64_t h;

	CHECK_EQ(kvp_seq_open(c, tokens, n, NULL, 0, -1, &h), 0);
	return h;
}

/* A client that opens a sequence, holds a block, and waits to be killed. */
static int victim(void *arg)
{
	const struct daemon *d = arg;
	struct kvp_client *c = connect_or_die(d, "w", "", false);
	uint32_t t = 9;
	uint64_t h = open_seq(c, &t, 1);

	CHECK_EQ(kvp_alloc(c, h, 1, 0, false, NULL, NULL, 0), 0);
	printf("ready\n");
	fflush(stdout);
	pause();
	return 0;
}

/* Waits (bounded) for the once-a-second fragmentation refresh to show @held token slots. */
static void wait_fragmentation(const char *path, const char *held)
{
	char got[64] = "";

	for (int i = 0; i < 60; i++) {
		kvctl_json("stats", path);
		jq(path, ".pools[0].groups[0].fragmentation.tokens_held", got, sizeof(got));
		if (!strcmp(got, held))
			return;
		usleep(100 * 1000);
	}
	fprintf(stderr, "fragmentation never showed %s token slots held (last %s)\n", held, got);
	failures++;
}

int main(void)
{
	const char *kv[] = { "blocks=10", "block_size=4", "groups=swa:4", NULL };
	char path[192];
	uint32_t prompt[16], c_tokens[32], d_token = 7, evict_ids[] = { 1, 2, 4 }, hit = 99;
	struct kvp_client *adm;
	uint64_t a, b, cs, ds;
	struct daemon d;
	pid_t child;

	kvctl_bin = getenv("KVCTL") ? getenv("KVCTL") : "build/bin/kvctl";
	if (system("command -v jq >/dev/null")) {
		printf("jq is not installed\n");
		return 77;
	}
	CHECK_EQ(daemon_start(&d, NULL), 0);
	dmn = &d;
	snprintf(path, sizeof(path), "%s/stats.json", d.dir);
	create_pool_or_die(&d, "w", kv);
	adm = connect_or_die(&d, "w", "", true);
	for (uint32_t i = 0; i < 16; i++)
		prompt[i] = i + 1;
	for (uint32_t i = 0; i < 32; i++)
		c_tokens[i] = 100;

	a = open_seq(adm, prompt, 16);
	CHECK_EQ(kvp_alloc(adm, a, 16, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, 0);
	CHECK_EQ(kvp_commit(adm, a, 16), 0);
	b = open_seq(adm, prompt, 16);
	CHECK_EQ(kvp_alloc(adm, b, 1, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, 12);

	/* Per sequence: a holds 1 block (4 slots) and needs 3 tokens; b 2 blocks and 3 tokens. */
	wait_fragmentation(path, "12");
	expect(path, ".pools[0].groups[0].fragmentation | [.tokens_held, .tokens_needed]", "[12,6]");
	expect(path, ".pools[0].groups[0] | [.blocks_held, .window_drops]", "[3,3]");

	CHECK_EQ(kvp_evict(adm, evict_ids, 3), 3);
	CHECK_EQ(kvp_free(adm, b), 0);
	cs = open_seq(adm, c_tokens, 32);
	CHECK_EQ(kvp_alloc(adm, cs, 32, 0, false, NULL, NULL, 0), 0);
	ds = open_seq(adm, &d_token, 1);
	CHECK_EQ(kvp_alloc(adm, ds, 1, 0, false, NULL, NULL, 0), -ENOSPC);
	CHECK_EQ(kvp_commit(adm, cs, 32), 0);
	CHECK_EQ(kvp_seq_close(adm, cs), 0);
	CHECK_EQ(kvp_seq_close(adm, a), 0);
	CHECK_EQ(kvp_seq_close(adm, ds), 0);
	CHECK_EQ(kvp_seq_close(adm, b), 0);
	CHECK_EQ(kvp_reset(adm), 0);

	/* A client killed with a sequence open: counted as killed, its block back in the queue. */
	child = fork_child_ready(victim, &d);
	kill(child, SIGKILL);
	CHECK_EQ(wait_child(child), 128 + SIGKILL);
	/* The hang-up is seen on the daemon's loop: wait (bounded) until it is counted. */
	for (int i = 0; i < 100; i++) {
		char got[16];

		kvctl_json("stats", path);
		jq(path, ".clients_killed", got, sizeof(got));
		if (!strcmp(got, "1"))
			break;
		usleep(20 * 1000);
	}

	kvctl_json("stats", path);
	expect(path, ".pools[0] | [.blocks_total, .blocks_free, .blocks_used, .blocks_cached]",
	       "[10,9,0,0]");
	expect(path, ".pools[0].evictions | [.reuse, .evict, .reset]", "[1,3,8]");
	expect(path, ".pools[0] | [.nospace, .sequences, .clients]", "[1,0,1]");
	expect(path, ".pools[0].prefix_cache | [.queries_tokens, .hits_tokens]", "[32,12]");
	expect(path, ".pools[0].groups[0] | [.kind, .blocks_held, .window_drops]", "[\"swa\",0,10]");
	expect(path, ".operations | [.ALLOC.count, .ALLOC.errors, .COMMIT.count, .EVICT.count, .RESET.count]",
	       "[5,1,2,1,1]");
	/*
	 * The harness's check, pool create, adm and the victim: only adm remains. kvctl is a
	 * monitor, never counted among them.
	 */
	expect(path, "[.clients_disconnected - .clients_connected + 1, .clients_killed]", "[0,1]");
	kvctl_json("clients", path);
	expect(path, "[.clients[] | select(.pool == \"w\") | {sequences, blocks_held}]",
	       "[{\"sequences\":0,\"blocks_held\":0}]");

	kvp_close(adm);
	CHECK_EQ(daemon_stop(&d), 0);
	return failures ? 1 : 0;
}
