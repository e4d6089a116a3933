/* SPDX-License-Identifier: MIT */
/*
 * Monitors and the stats kvctl shows, with exact numbers:
 *   - KVP_FEAT_MONITOR: granted; a monitor is in no client row (STATS, the
 *     stats page), in no pool's clients and not in clients_connected or
 *     clients_disconnected, only counted in monitors (STATS header, page);
 *     a monitor naming a pool, or ATTACHing one, is refused -EINVAL with the
 *     daemon's reason; monitors still take their uid's max_clients (-EUSERS
 *     past it: root only, run as uid 65534); kvctl is one (counted in
 *     "monitors: N", never listed; tests/kvctl_cli.sh checks its log lines);
 *   - fragmentation, current while sequences run (read within 20 ms of the
 *     change, where the old once-a-second refresh would be stale 98% of the
 *     time) and exactly 0 once none holds a block. Pool f: 4-token blocks,
 *     groups full and swa:8. A: 5 tokens committed: full holds 2 blocks (8
 *     slots) for 5 needed; swa the same (window 8 > 5). B: 10 tokens: full
 *     3 blocks (12 slots), 10 needed; swa 3 blocks (its first holds position
 *     3, which the window of the query at 10, 3..10, still reads), 7 needed.
 *     Both: full 20/15 (25.0%), swa 20/12 (40.0%); B alone: 12/10 (16.7%),
 *     12/7 (41.7%); none: 0/0 (0.0%);
 *   - kvctl stats' text: the CACHED note, p50<= and p99<= with their note,
 *     "clients: N connected, ...; monitors: 1".
 * Usage: KVPOOLD=... KVCTL=... test_kvctl_stats.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define CACHED_NOTE "CACHED: blocks holding a prefix-cache entry, counted in FREE (evictable) " \
		    "or USED; not a third part\n"
#define LATENCY_NOTE "p50<=, p99<=: upper bounds of the power-of-two latency buckets " \
		     "holding them\n"

static const struct daemon *dmn;

/* `kvctl -s SOCKET @args` (stdout), into a static buffer. */
static const char *kvctl(const char *args)
{
	static char out[65536];
	char cmd[512];
	size_t len;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s %s -s %s", getenv("KVCTL") ? getenv("KVCTL") : "build/bin/kvctl",
		 args, dmn->socket);
	p = popen(cmd, "r");
	CHECK(p != NULL);
	len = fread(out, 1, sizeof(out) - 1, p);
	out[len] = '\0';
	CHECK_EQ(pclose(p), 0);
	return out;
}

static void has_line(int line, const char *out, const char *want)
{
	if (!strstr(out, want)) {
		fprintf(stderr, "line %d: no \"%s\" in:\n%s\n", line, want, out);
		exit(1);
	}
}
#define HAS(out, want) has_line(__LINE__, out, want)

/* The group lines of `kvctl stats` for pool f: full's, then swa's. */
static void frag_is(int line, const char *full, const char *swa)
{
	const char *out = kvctl("stats");

	has_line(line, out, full);
	has_line(line, out, swa);
}
#define FRAG_IS(full, swa) frag_is(__LINE__, full, swa)

static uint64_t open_committed(struct kvp_client *c, uint32_t first, uint32_t n)
{
	uint32_t tokens[16];
	uint64_t h;

	for (uint32_t i = 0; i < n; i++)
		tokens[i] = first + i;
	CHECK_EQ(kvp_seq_open(c, tokens, n, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, n, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_commit(c, h, n), 0);
	return h;
}

static struct kvp_client *monitor(const char *pool, bool admin, int want, char *why)
{
	struct kvp_connect_opts o = { .socket_path = dmn->socket, .pool = pool, .admin = admin,
				      .stats_page = true, .monitor = true, .why = why,
				      .why_len = KVP_REASON_MAX };
	struct kvp_client *c = NULL;

	CHECK_EQ(kvp_connect(&o, &c), want);
	if (!want)
		CHECK(kvp_features(c) & KVP_FEAT_MONITOR);
	return c;
}

/* STATS and the page, as monitor @m sees them: client rows, monitors, pool f's clients. */
static void counts_are(int line, struct kvp_client *m, unsigned rows, unsigned monitors,
		       uint64_t connected)
{
	union { struct kvp_stats_header h; uint8_t b[8192]; } st;
	struct kvp_stats_view v = { 0 };
	const struct kvp_pool_entry *pe = (const void *)(st.b + sizeof(st.h));
	unsigned page_rows = 0;

	CHECK(kvp_stats(m, &st, sizeof(st)) > 0);
	CHECK_EQ(kvp_stats_view_take(m, &v), 0);
	KVP_STATS_FOR_EACH_CLIENT(&v, c)
		page_rows++;
	if (st.h.num_clients != rows || st.h.monitors != monitors || page_rows != rows ||
	    v.page->monitors != monitors || st.h.clients_connected != connected ||
	    v.page->clients_connected != connected || st.h.num_pools != 1 || pe->clients != rows) {
		fprintf(stderr, "line %d: STATS %u rows, %u monitors, %llu connected, pool clients "
			"%u; page %u rows, %u monitors, %llu connected; want %u, %u, %llu\n", line,
			st.h.num_clients, st.h.monitors, (unsigned long long)st.h.clients_connected,
			pe->clients, page_rows, v.page->monitors,
			(unsigned long long)v.page->clients_connected, rows, monitors,
			(unsigned long long)connected);
		exit(1);
	}
	kvp_stats_view_release(&v);
}
#define COUNTS_ARE(m, rows, monitors, connected) counts_are(__LINE__, m, rows, monitors, connected)

/* As uid 65534, whose max_clients is 2: two monitors, and a third is turned away. */
static int quota_child(void *arg)
{
	char why[KVP_REASON_MAX];

	(void)arg;
	drop_to_uid(65534);
	monitor("", false, 0, why);
	monitor("", false, 0, why);
	monitor("", false, -EUSERS, why);
	CHECK(!strcmp(why, "its uid has max_clients connections"));
	return 0;
}

static void monitors(void)
{
	struct kvp_client *m, *m2;
	char why[KVP_REASON_MAX];
	const char *out;

	m = monitor("", true, 0, why);
	/* Three clients connected (as above), e is listed; m is counted. */
	COUNTS_ARE(m, 1, 1, 3);
	m2 = monitor("", false, 0, why);
	COUNTS_ARE(m, 1, 2, 3);
	kvp_close(m2);
	monitor("f", true, -EINVAL, why);
	CHECK(!strcmp(why, "a monitor attaches to no pool (pool 'f')"));
	CHECK_EQ(kvp_attach(m, "f"), -EINVAL);
	/* kvctl: itself counted, not listed; e only. */
	out = kvctl("clients");
	HAS(out, "\nmonitors: 2 (connections that only watch, kvctl among them: not listed)\n");
	out = kvctl("clients --json");
	HAS(out, "\"monitors\":2\n");
	out = kvctl("stats --prometheus");
	HAS(out, "\nkvpool_monitors 2\n");
	HAS(out, "\nkvpool_clients 1\n");
	/* m2 and the kvctl runs are gone: no connection of theirs was counted. */
	COUNTS_ARE(m, 1, 1, 3);
	kvp_close(m);
}

int main(void)
{
	static const char cfg[] = "[uid.65534]\nmax_clients = 2\n";
	const char *args[] = { "--config", NULL, NULL };
	const char *kv[] = { "blocks=32", "block_size=4", "groups=full swa:8", NULL };
	uint64_t a, b;
	struct kvp_client *e;
	struct daemon d;
	const char *out, *rows;

	watchdog_start("test_kvctl_stats", 60);
	args[1] = config_file(cfg);
	CHECK_EQ(daemon_start(&d, args), 0);
	watchdog_watch(&d);
	dmn = &d;
	create_pool_or_die(&d, "f", kv);
	e = connect_or_die(&d, "f", "", false);

	/* Fragmentation: each reading 20 ms after the change. */
	FRAG_IS("  0     full           0         0            0             0             0   0.0%",
		"  1     swa            8         0            0             0             0   0.0%");
	a = open_committed(e, 100, 5);
	b = open_committed(e, 200, 10);
	usleep(20000);
	FRAG_IS("  0     full           0         5            0            20            15  25.0%",
		"  1     swa            8         5            0            20            12  40.0%");
	CHECK_EQ(kvp_seq_close(e, a), 0);
	usleep(20000);
	FRAG_IS("  0     full           0         3            0            12            10  16.7%",
		"  1     swa            8         3            0            12             7  41.7%");
	CHECK_EQ(kvp_free(e, b), 0); /* a preemption: B runs no more, holds nothing */
	usleep(20000);
	FRAG_IS("  0     full           0         0            0             0             0   0.0%",
		"  1     swa            8         0            0             0             0   0.0%");
	a = open_committed(e, 300, 5);
	CHECK_EQ(kvp_seq_close(e, a), 0);
	CHECK_EQ(kvp_seq_close(e, b), 0);
	/* No block held: zero at once, no wait. */
	FRAG_IS("  0     full           0         0            0             0             0   0.0%",
		"  1     swa            8         0            0             0             0   0.0%");

	/* The text around the numbers. */
	out = kvctl("stats");
	HAS(out, "USAGE CLIENTS  SEQS\nf                         4        32");
	HAS(out, "    0.0%       1     0\n" CACHED_NOTE "\npool f:");
	HAS(out, "\nOPERATION             COUNT   ERRORS      p50<=      p99<=\n");
	/* Connected: the harness's check that the daemon accepts, the pool's creator, e. */
	HAS(out, " ns\n" LATENCY_NOTE "\nclients: 3 connected, 2 disconnected, 0 killed with "
		 "sequences open; monitors: 1\n");
	/* One client row, e's (client 3): not kvctl's. */
	rows = strstr(out, "\nCLIENT ");
	CHECK(rows != NULL);
	rows = strchr(rows + 1, '\n') + 1;
	CHECK(!strncmp(rows, "3        ", 9) && !strncmp(strchr(rows, '\n'), "\n\nQUOTAS", 8));

	monitors();
	if (geteuid() == 0) {
		daemon_open_to_all(&d);
		CHECK_EQ(wait_child(fork_child(quota_child, NULL)), 0);
	} else {
		printf("not root: the max_clients check of monitors (as uid 65534) is skipped\n");
	}
	kvp_close(e);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	printf("ok: monitors counted, not listed; fragmentation current and zero when freed\n");
	return 0;
}
