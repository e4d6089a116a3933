/* SPDX-License-Identifier: MIT */
/*
 * kvctl acct: per-client accounting of a running kvpoold through BPF on its
 * USDT probes (kvacct.h): blocks held, block-seconds, ops, op latency p50/p99,
 * cache evictions caused, printed every interval as a table or JSON lines.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "../../uapi/kvpool.h"
#include "bpf/kvacct.h"

static const char acct_usage[] =
	"Usage: kvctl [--socket PATH] acct [--json] [--pid PID] [--interval SEC] [--count N]\n"
	"Per-client accounting of a running kvpoold from its USDT probes, with BPF\n"
	"(root only): blocks held now, block-seconds (blocks held integrated over\n"
	"time), requests completed, their latency p50/p99 (upper bound of a log2\n"
	"bucket) and the prefix-cache entries each client's requests evicted, by\n"
	"cause (reuse of a cached free block, admin evict, admin reset). Counts start\n"
	"when acct attaches. A client that disconnected is shown in the next one or\n"
	"two reports, then dropped.\n"
	"\n"
	"Options:\n"
	"      --json          one JSON object per interval, on one line:\n"
	"                      {\"clients\": [{\"client_id\", \"pid\", \"uid\", \"blocks_held\",\n"
	"                      \"block_seconds\", \"ops\", \"latency_log2_ns\" (requests by\n"
	"                      log2 of their latency: element s counts [2^s, 2^(s+1)) ns),\n"
	"                      \"evictions_reuse\", ...}], \"daemon_pid\", ...}\n"
	"      --pid PID       the daemon's pid (default: the one its stats page gives)\n"
	"      --interval SEC  seconds between reports (default 1)\n"
	"      --count N       stop after N reports (default: until SIGINT)\n"
	"  -s, --socket PATH   the daemon's socket (default $KVPOOL_SOCKET, else\n"
	"                      " KVP_DEFAULT_SOCKET ")\n"
	"  -h, --help          show this help and exit\n"
	"\n"
	"p50<=, p99<=: upper bounds of the power-of-two latency buckets holding them.\n";

/*
 * The daemon's pid, from its stats page: a connection's peer credentials
 * would be the listener's, which is systemd when it passed the socket.
 */
static pid_t daemon_pid(const char *path)
{
	char why[KVP_REASON_MAX] = "", msg[2 * KVP_REASON_MAX];
	struct kvp_connect_opts opts = { .socket_path = path, .monitor = true, .stats_page = true,
					 .sq_entries = 4, .arena_bytes = 4096, .why = why,
					 .why_len = sizeof(why) };
	struct kvp_stats_view v = { 0 };
	struct kvp_client *c;
	pid_t pid;
	int ret;

	ret = kvp_connect(&opts, &c);
	if (ret) {
		fprintf(stderr, "kvctl: acct: %s\n", kvp_connect_error(&opts, ret, msg, sizeof(msg)));
		return -1;
	}
	ret = kvp_stats_view_take(c, &v);
	pid = ret < 0 ? -1 : v.page->daemon_pid;
	if (ret < 0)
		fprintf(stderr, "kvctl: acct: the stats page of %s: %s\n", path ? path : KVP_DEFAULT_SOCKET,
			strerror(-ret));
	kvp_stats_view_release(&v);
	kvp_close(c);
	return pid;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits until the monotonic time `until`; false when SIGINT or SIGTERM came (they are blocked). */
static bool wait_until(double until, const sigset_t *sigs)
{
	for (;;) {
		double left = until - mono_s();
		struct timespec ts;

		if (left <= 0)
			return true;
		ts.tv_sec = (time_t)left;
		ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
		if (sigtimedwait(sigs, NULL, &ts) >= 0)
			return false;
		if (errno != EAGAIN && errno != EINTR)
			return true;
	}
}

static const char *fmt_ns(char *buf, size_t len, __u64 ns)
{
	if (!ns)
		snprintf(buf, len, "-");
	else if (ns < 10000)
		snprintf(buf, len, "%lluns", (unsigned long long)ns);
	else if (ns < 10000000)
		snprintf(buf, len, "%.1fus", ns / 1e3);
	else if (ns < 10000000000ull)
		snprintf(buf, len, "%.1fms", ns / 1e6);
	else
		snprintf(buf, len, "%.1fs", ns / 1e9);
	return buf;
}

static void print_table(pid_t pid, double elapsed, const struct kvacct_client *rows, int n)
{
	printf("kvpoold pid %d, %.1f s attached, %d client%s\n", (int)pid, elapsed, n,
	       n == 1 ? "" : "s");
	printf("%8s %8s %8s %12s %10s %8s %8s %9s %9s %9s\n", "CLIENT", "PID", "BLOCKS",
	       "BLOCK-SEC", "OPS", "p50<=", "p99<=", "EV-REUSE", "EV-EVICT", "EV-RESET");
	for (int i = 0; i < n; i++) {
		const struct kvacct_client *r = &rows[i];
		char p50[16], p99[16], pidbuf[16];

		if (r->pid)
			snprintf(pidbuf, sizeof(pidbuf), "%d", (int)r->pid);
		else
			snprintf(pidbuf, sizeof(pidbuf), "?");
		printf("%8u %8s %8llu %12.3f %10llu %8s %8s %9llu %9llu %9llu%s\n", r->client_id,
		       pidbuf, (unsigned long long)r->blocks_held, r->block_seconds,
		       (unsigned long long)r->ops, fmt_ns(p50, sizeof(p50), r->latency_p50_ns),
		       fmt_ns(p99, sizeof(p99), r->latency_p99_ns),
		       (unsigned long long)r->evictions[0], (unsigned long long)r->evictions[1],
		       (unsigned long long)r->evictions[2], r->connected ? "" : "  (gone)");
	}
	printf("\n");
}

static void print_json(pid_t pid, double elapsed, __u64 missed, const struct kvacct_client *rows,
		       int n)
{
	printf("{\"clients\": [");
	for (int i = 0; i < n; i++) {
		const struct kvacct_client *r = &rows[i];

		printf("%s{\"client_id\": %u, \"pid\": %d, \"uid\": %u, \"connected\": %s, "
		       "\"blocks_held\": %llu, \"block_seconds\": %.6f, \"ops\": %llu, "
		       "\"op_errors\": %llu, \"latency_p50_ns\": %llu, \"latency_p99_ns\": %llu, "
		       "\"evictions_reuse\": %llu, \"evictions_evict\": %llu, \"evictions_reset\": %llu, "
		       "\"latency_log2_ns\": [",
		       i ? ", " : "", r->client_id, (int)r->pid, r->uid, r->connected ? "true" : "false",
		       (unsigned long long)r->blocks_held, r->block_seconds,
		       (unsigned long long)r->ops, (unsigned long long)r->op_errors,
		       (unsigned long long)r->latency_p50_ns, (unsigned long long)r->latency_p99_ns,
		       (unsigned long long)r->evictions[0], (unsigned long long)r->evictions[1],
		       (unsigned long long)r->evictions[2]);
		/* Slot s counts requests that took [2^s, 2^(s+1)) ns; trailing empty slots are left out. */
		int last = KVACCT_HIST_SLOTS - 1;

		while (last >= 0 && !r->lat_hist[last])
			last--;
		for (int s = 0; s <= last; s++)
			printf("%s%llu", s ? ", " : "", (unsigned long long)r->lat_hist[s]);
		printf("]}");
	}
	printf("], \"daemon_pid\": %d, \"elapsed_s\": %.3f, \"missed\": %llu}\n", (int)pid, elapsed,
	       (unsigned long long)missed);
}

static int parse_args(int argc, char **argv, bool *json, long *pid, double *interval, long *count,
		      const char **socket)
{
	enum { OPT_JSON = 256, OPT_PID, OPT_INTERVAL, OPT_COUNT };
	static const struct option opts[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "pid", required_argument, NULL, OPT_PID },
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	optind = 0; /* kvctl's own getopt ran before: start afresh, argv[0] is "acct" */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:s:h", opts, NULL)) != -1) {
		char *end = NULL;

		errno = 0;
		switch (c) {
		case OPT_JSON:
			*json = true;
			break;
		case OPT_PID:
			*pid = strtol(optarg, &end, 10);
			if (errno || *end || *pid <= 0 || *pid > 0x7fffffff)
				goto bad;
			break;
		case OPT_INTERVAL:
			*interval = strtod(optarg, &end);
			if (errno || *end || !(*interval > 0 && *interval <= 86400))
				goto bad;
			break;
		case OPT_COUNT:
			*count = strtol(optarg, &end, 10);
			if (errno || *end || *count <= 0)
				goto bad;
			break;
		case 's':
			*socket = optarg;
			break;
		case 'h':
			fputs(acct_usage, stdout);
			return 1;
		default:
			fprintf(stderr, "kvctl: acct: %s '%s'\n",
				c == ':' ? "missing value for" : "unknown option", argv[optind - 1]);
			fputs("Try 'kvctl acct --help' for more information.\n", stderr);
			return 2;
		}
		continue;
bad:
		fprintf(stderr, "kvctl: acct: bad value '%s'\n", optarg);
		return 2;
	}
	if (optind != argc) {
		fprintf(stderr, "kvctl: acct: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	return 0;
}

int kvctl_acct(int argc, char **argv, const char *socket_path)
{
	enum { MAX_ROWS = KVACCT_MAX_CLIENTS };
	struct kvacct_client *rows;
	struct kvacct *a;
	sigset_t sigs, old;
	bool json = false;
	double interval = 1.0, start;
	long pid = 0, count = 0;
	__u64 prev_read_ns = 0;
	char why[512] = "";
	int ret;

	ret = parse_args(argc, argv, &json, &pid, &interval, &count, &socket_path);
	if (ret)
		return ret == 1 ? 0 : ret;
	/* Before the socket: a user without the rights should hear why, not a socket error. */
	if (!kvacct_privileged()) {
		fputs("kvctl: acct: " KVACCT_NEEDS_ROOT "\n", stderr);
		return 1;
	}
	if (!pid) {
		pid = daemon_pid(socket_path);
		if (pid <= 0) {
			if (!pid)
				fputs("kvctl: acct: the daemon does not say its pid (older than "
				      "0.2.0); use --pid\n", stderr);
			return 1;
		}
	}
	rows = calloc(MAX_ROWS, sizeof(*rows));
	if (!rows) {
		fputs("kvctl: acct: out of memory\n", stderr);
		return 1;
	}
	ret = kvacct_open((pid_t)pid, &a, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "kvctl: acct: %s\n", why[0] ? why : strerror(-ret));
		free(rows);
		return 1;
	}
	if (!json)
		fprintf(stderr, "kvctl: acct: attached to kvpoold pid %ld, every %g s%s\n", pid,
			interval, count ? "" : " until SIGINT");

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigprocmask(SIG_BLOCK, &sigs, &old);
	start = mono_s();
	ret = 0;
	for (long i = 1; !count || i <= count; i++) {
		bool more = wait_until(start + (double)i * interval, &sigs);
		bool alive = kill((pid_t)pid, 0) == 0 || errno != ESRCH;
		struct timespec read_at;
		int n;

		clock_gettime(CLOCK_MONOTONIC, &read_at);
		n = kvacct_read(a, rows, MAX_ROWS);
		if (n < 0) {
			fprintf(stderr, "kvctl: acct: reading the BPF map: %s\n", strerror(-n));
			ret = 1;
			break;
		}
		if (n > MAX_ROWS)
			n = MAX_ROWS;
		if (json)
			print_json((pid_t)pid, mono_s() - start, kvacct_missed(a), rows, n);
		else
			print_table((pid_t)pid, mono_s() - start, rows, n);
		fflush(stdout);
		/* Clients gone before the previous report were in it and in this one: forget them. */
		kvacct_prune(a, prev_read_ns);
		prev_read_ns = (__u64)read_at.tv_sec * 1000000000ull + (__u64)read_at.tv_nsec;
		if (!alive) {
			fprintf(stderr, "kvctl: acct: kvpoold (pid %ld) exited\n", pid);
			break;
		}
		if (!more)
			break;
	}
	if (kvacct_missed(a))
		fprintf(stderr, "kvctl: acct: %llu events lost: the client map was full\n",
			(unsigned long long)kvacct_missed(a));
	sigprocmask(SIG_SETMASK, &old, NULL);
	kvacct_close(a);
	free(rows);
	return ret;
}
