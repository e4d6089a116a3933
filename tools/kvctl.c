/* SPDX-License-Identifier: MIT */
/* kvctl: operate a running kvpoold (stats, pools). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvctl.h"

static const char usage[] =
	"Usage: kvctl [--socket PATH] COMMAND [ARG]...\n"
	"Inspect and operate a running kvpoold.\n"
	"\n"
	"Commands:\n"
	"  stats [--json | --prometheus]   per pool: blocks total/free/used/cached, usage,\n"
	"                                  prefix-cache queries and hits (tokens, at admission\n"
	"                                  and in lookups), evictions by cause, nospace; per\n"
	"                                  group: blocks held, window drops, fragmentation;\n"
	"                                  clients; operations with p50/p99 latency\n"
	"  clients [--json]                per client: id, pid, uid, namespace, pool,\n"
	"                                  sequences, blocks held (distinct), requests;\n"
	"                                  per uid and namespace: its use of each quota\n"
	"                                  against its limit\n"
	"  top [--json] [--interval MS] [--count N]\n"
	"                                  the same, refreshed (default every 1000 ms); q quits\n"
	"  acct [--json] [--pid PID] [--interval SEC] [--count N]\n"
	"                                  per-client accounting by a BPF program attached to\n"
	"                                  the daemon's probes: blocks held, block-seconds,\n"
	"                                  operations, latency, evictions caused (root)\n"
	"  pool create NAME KEY=VALUE...   create a pool (admin); keys: blocks, block_size,\n"
	"                                  groups (e.g. \"full swa:128\"), caching=on|off,\n"
	"                                  free_order=split|append, publish=commit|alloc,\n"
	"                                  max_len, max_step_tokens, kv_heads, head_dim,\n"
	"                                  dtype=f32|f16|bf16, layers_per_group,\n"
	"                                  backend=host|cuda, device=N, layout=block|layer,\n"
	"                                  namespace=NAME (only its clients attach, and\n"
	"                                  they may map the pool); a refusal says why\n"
	"  pool destroy NAME               destroy a pool nobody uses (admin)\n"
	"  version                         kvctl's, libkvpool's and the running daemon's\n"
	"                                  releases, ABI and features\n"
	"\n"
	"Options:\n"
	"  -s, --socket PATH   the daemon's socket (default $KVPOOL_SOCKET, else\n"
	"                      " KVP_DEFAULT_SOCKET ")\n"
	"  -h, --help          show this help and exit\n"
	"  -V, --version       print \"kvctl VERSION\" and exit\n"
	"\n"
	"stats, clients and top read the daemon's read-only stats page: they never slow\n"
	"it down. Root and the daemon's uid see every client; anyone else sees the\n"
	"clients of their own uid, the others only counted (\"other clients: N\").\n"
	"Admin commands need root or the daemon's uid. Exit status: 0 on success, 1\n"
	"when the daemon refuses or cannot be reached, 2 for a usage error.\n";

/*
 * Root and the daemon's uid (the socket's owner) read the whole stats page
 * as admin; anyone else is given their own uid's clients only.
 */
static bool may_admin(const char *socket)
{
	const char *path = socket ? socket : getenv("KVPOOL_SOCKET");
	struct stat st;

	if (geteuid() == 0)
		return true;
	return !stat(path ? path : KVP_DEFAULT_SOCKET, &st) && st.st_uid == geteuid();
}

static int connect_to(const char *socket, bool admin, struct kvp_client **c)
{
	char why[KVP_REASON_MAX] = "";
	struct kvp_connect_opts opts = { .socket_path = socket, .admin = admin || may_admin(socket),
					 .stats_page = !admin, .sq_entries = 4, .arena_bytes = 4096,
					 .why = why, .why_len = sizeof(why) };
	int ret = kvp_connect(&opts, c);

	if (ret)
		fprintf(stderr, "kvctl: %s: %s%s%s%s\n", socket ? socket : "kvpoold", strerror(-ret),
			*why ? ": " : "", why,
			ret == -EPERM && admin ? " (admin commands need root or the daemon's uid)" : "");
	return ret;
}

/*
 * kvctl version: three lines, the last from the daemon (the features it grants this
 * client: admin for root and the daemon's uid). 1 when no daemon answers.
 */
static int cmd_version(const char *socket)
{
	const char *path = socket ? socket : getenv("KVPOOL_SOCKET");
	char why[KVP_REASON_MAX] = "";
	struct kvp_connect_opts opts = { .socket_path = socket, .admin = may_admin(socket),
					 .stats_page = true, .pool_map = true, .sq_entries = 4,
					 .arena_bytes = 4096, .why = why, .why_len = sizeof(why) };
	struct kvp_client *c;
	uint32_t v;
	int ret;

	printf("kvctl %s\nlibkvpool %s abi %u\n", KVPOOL_VERSION, kvp_version(), KVP_ABI_VERSION);
	path = path ? path : KVP_DEFAULT_SOCKET;
	ret = kvp_connect(&opts, &c);
	if (ret == -EPERM && opts.admin) { /* an admin the daemon does not grant: ask for less */
		opts.admin = false;
		ret = kvp_connect(&opts, &c);
	}
	if (ret == -ENOENT || ret == -ECONNREFUSED) {
		printf("kvpoold: not running at %s\n", path);
		return 1;
	}
	if (ret) {
		printf("kvpoold: %s: %s%s%s\n", path, strerror(-ret), *why ? ": " : "", why);
		return 1;
	}
	v = kvp_daemon_version(c);
	printf("kvpoold %u.%u.%u abi %u features 0x%llx\n", v >> 16, v >> 8 & 0xff, v & 0xff,
	       KVP_ABI_VERSION, (unsigned long long)kvp_features(c));
	kvp_close(c);
	return 0;
}

static int usage_error(const char *msg)
{
	fprintf(stderr, "kvctl: usage: %s\nTry 'kvctl --help' for more information.\n", msg);
	return 2;
}

static int parse_uint(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v > 1000000000ul)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/* stats, clients, top: all views of one stats-page snapshot. */
static int cmd_view(const char *socket, int argc, char **argv)
{
	enum { STATS, CLIENTS, TOP } cmd = !strcmp(argv[0], "stats") ? STATS :
					   !strcmp(argv[0], "clients") ? CLIENTS : TOP;
	bool json = false, prom = false;
	unsigned interval = 1000, count = 0;
	struct kvp_stats_view s = { 0 };
	struct kvp_client *c;
	int ret;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (cmd == STATS && !strcmp(argv[i], "--prometheus"))
			prom = true;
		else if (cmd == TOP && !strcmp(argv[i], "--interval") && i + 1 < argc &&
			 !parse_uint(argv[i + 1], &interval) && interval)
			i++;
		else if (cmd == TOP && !strcmp(argv[i], "--count") && i + 1 < argc &&
			 !parse_uint(argv[i + 1], &count))
			i++;
		else
			return usage_error(cmd == STATS ? "kvctl stats [--json | --prometheus]" :
					   cmd == CLIENTS ? "kvctl clients [--json]" :
					   "kvctl top [--json] [--interval MS] [--count N]");
	}
	if (json && prom)
		return usage_error("kvctl stats [--json | --prometheus]");
	if (connect_to(socket, false, &c))
		return 1;
	if (cmd == TOP) {
		ret = kvctl_top(c, json, interval, count);
	} else {
		ret = kvp_stats_view_take(c, &s);
		if (!ret && prom)
			print_prometheus(&s);
		else if (!ret && json)
			print_stats_json(&s, cmd == CLIENTS);
		else if (!ret && cmd == CLIENTS) {
			print_clients_table(&s);
			print_tenants_table(&s);
		}
		else if (!ret)
			print_stats_table(&s);
		kvp_stats_view_release(&s);
	}
	kvp_close(c);
	if (ret) {
		fprintf(stderr, "kvctl: %s: %s\n", argv[0], strerror(-ret));
		return 1;
	}
	return 0;
}

static int cmd_pool(const char *socket, int argc, char **argv)
{
	struct kvp_pool_params_v2 params;
	char why[KVP_REASON_MAX] = "";
	struct kvp_client *c;
	int ret;

	if (argc < 3 || (strcmp(argv[1], "create") && strcmp(argv[1], "destroy")) ||
	    (!strcmp(argv[1], "destroy") && argc != 3)) {
		return usage_error("kvctl pool create NAME KEY=VALUE... | kvctl pool destroy NAME");
	}
	if (strlen(argv[2]) >= KVP_NAME_MAX) {
		fprintf(stderr, "kvctl: pool name longer than %d bytes\n", KVP_NAME_MAX - 1);
		return 2;
	}
	if (!strcmp(argv[1], "create")) {
		kvp_pool_params_v2_init(&params, argv[2]);
		for (int i = 3; i < argc; i++) {
			char *eq = strchr(argv[i], '=');

			if (eq)
				*eq = '\0';
			if (!eq || kvp_pool_params_v2_set(&params, argv[i], eq + 1)) {
				fprintf(stderr, "kvctl: bad pool setting '%s%s%s'\n", argv[i], eq ? "=" : "",
					eq ? eq + 1 : "");
				return 2;
			}
		}
		if (!params.v1.num_blocks || !params.v1.block_size || !params.v1.num_groups) {
			fputs("kvctl: pool create needs blocks=, block_size= and groups=\n", stderr);
			return 2;
		}
	}
	if (connect_to(socket, true, &c))
		return 1;
	ret = !strcmp(argv[1], "create") ? kvp_pool_create_v2(c, &params, 0, why, sizeof(why))
					 : kvp_pool_destroy(c, argv[2]);
	kvp_close(c);
	if (ret) {
		fprintf(stderr, "kvctl: pool %s %s: %s\n", argv[1], argv[2],
			*why ? why : ret == -EBUSY ? "in use" : strerror(-ret));
		return 1;
	}
	return 0;
}

/* -h or --help anywhere after the command: the full help, as for kvctl --help. */
static bool wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *socket = NULL;
	int c;

	/* '+': options after the command belong to the command. */
	while ((c = getopt_long(argc, argv, "+s:hV", opts, NULL)) != -1) {
		if (c == 's') {
			socket = optarg;
		} else if (c == 'V') {
			puts("kvctl " KVPOOL_VERSION);
			return 0;
		} else if (c == 'h') {
			fputs(usage, stdout);
			return 0;
		} else {
			fputs("Try 'kvctl --help' for more information.\n", stderr);
			return 2;
		}
	}
	argc -= optind;
	argv += optind;
	if (argc >= 1 && strcmp(argv[0], "acct") && wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc >= 1 && (!strcmp(argv[0], "stats") || !strcmp(argv[0], "clients") ||
			  !strcmp(argv[0], "top")))
		return cmd_view(socket, argc, argv);
	if (argc >= 1 && !strcmp(argv[0], "acct"))
		return kvctl_acct(argc, argv, socket);
	if (argc >= 1 && !strcmp(argv[0], "pool"))
		return cmd_pool(socket, argc, argv);
	if (argc == 1 && !strcmp(argv[0], "version"))
		return cmd_version(socket);
	if (argc > 1 && !strcmp(argv[0], "version"))
		return usage_error("version");
	fprintf(stderr, argc ? "kvctl: unknown command '%s'\n" : "kvctl: no command%s\n",
		argc ? argv[0] : "");
	fputs("Try 'kvctl --help' for more information.\n", stderr);
	return 2;
}
