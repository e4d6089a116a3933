/* SPDX-License-Identifier: MIT */
/* kvctl: operate a running kvpoold (stats, pools). */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
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
	"                                  clients and monitors; operations with p50/p99\n"
	"                                  latency (upper bounds of power-of-two buckets)\n"
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
	"                                  they may map the pool), tier_host_bytes=N (a\n"
	"                                  host-memory tier), tier_disk_bytes=N and\n"
	"                                  tier_disk_path=DIR (a disk tier),\n"
	"                                  tier_policy=lru|second_sight, kv_events=on|ENDPOINT\n"
	"                                  snapshot_every=N (cyclic groups' window snapshots:\n"
	"                                  every N tokens and at prompt ends; 0: ends only),\n"
	"                                  (KV events for routers) and kv_events_*; a refusal\n"
	"                                  says why\n"
	"  pool destroy NAME [--drop-tier] destroy a pool nobody uses (admin); its disk\n"
	"                                  tier's file too with --drop-tier\n"
	"  pool sync NAME                  wait for the copies into the pool's tier (admin)\n"
	"  pool reset NAME                 forget the pool's prefix cache (admin)\n"
	"  pool purge-remote NAME          delete the pool's keys from its cluster tier\n"
	"                                  (admin): SCAN every master, UNLINK each\n"
	"  daemon restart [--exec PATH]    restart the daemon in place, its cache handed\n"
	"                                  over (admin): the binary it was started from,\n"
	"                                  or PATH; done once the next run answers\n"
	"  health [--timeout MS]           exit 0 when the daemon answers a NOP, 1 with\n"
	"                                  the reason (scripts, container probes)\n"
	"  exporter [--listen ADDR:PORT]   serve /metrics (the stats, for Prometheus) and\n"
	"                                  /healthz over HTTP (default 127.0.0.1:9464)\n"
	"  version                         kvctl's, libkvpool's and the running daemon's\n"
	"                                  releases, ABI and features\n"
	"\n"
	"Options:\n"
	SOCKET_HELP
	"  -V, --version       print \"kvctl VERSION\" and exit\n"
	"\n"
	"Options go before or after the command. 'kvctl COMMAND --help' shows a\n"
	"command's own options and what its output means.\n"
	"\n"
	"stats, clients, top and exporter read the daemon's read-only stats page: they\n"
	"never slow it down. Root and the daemon's uid see every client; anyone else\n"
	"sees the clients of their own uid, the others only counted (\"other clients:\n"
	"N\").\n"
	"kvctl connects as a monitor (KVP_FEAT_MONITOR): it is not listed among the\n"
	"clients, only counted (\"monitors: N\"). Admin commands need root or the\n"
	"daemon's uid. Exit status: 0 on success, 1 when the daemon refuses or cannot\n"
	"be reached, 2 for a usage error.\n";

static const char stats_help[] =
	"Usage: kvctl stats [--json | --prometheus] [--socket PATH]\n"
	"The daemon's counters, read from its stats page (which never slows it down).\n"
	"\n"
	"Per pool: block size, blocks TOTAL (the null block included), FREE, USED and\n"
	"CACHED, USAGE (USED of the blocks it can hand out), CLIENTS attached, SEQS open;\n"
	"then its prefix cache (tokens asked and hit at admission and in lookups),\n"
	"evictions by cause, ALLOCs refused for want of blocks (nospace) and per group\n"
	"of layers: blocks held, blocks its window dropped, token slots the running\n"
	"sequences' blocks hold (TOKENS_HELD) and tokens their masks need\n"
	"(TOKENS_NEEDED), FRAG = 1 - TOKENS_NEEDED / TOKENS_HELD (0.0% when nothing\n"
	"is held). Then the clients and quotas (as kvctl clients), per operation its\n"
	"count, errors and latency percentiles, and the totals:\n"
	"  clients: N connected, N disconnected, N killed with sequences open; monitors: N\n"
	"(clients since the daemon started; monitors, such as kvctl, connected now).\n"
	"\n"
	"CACHED blocks hold a prefix-cache entry: each is counted in FREE (evictable)\n"
	"or in USED, CACHED is not a third part. p50<= and p99<= are upper bounds: the\n"
	"upper edge of the power-of-two bucket holding that percentile (a 300 ns\n"
	"request counts as 512 ns).\n"
	"\n"
	"Options:\n"
	"      --json          the same as one JSON document (libkvpool's kvp_stats_json)\n"
	"      --prometheus    the same in the Prometheus text format 0.0.4\n"
	SOCKET_HELP;

static const char clients_help[] =
	"Usage: kvctl clients [--json] [--socket PATH]\n"
	"The connected clients: CLIENT id, PID, UID, NAMESPACE, POOL attached, SEQS\n"
	"open, BLOCKS held (distinct: what its uid is charged) and OPS completed; then\n"
	"per uid and namespace its use of each quota against its limit, and\n"
	"\"monitors: N\": connections that only watch (kvctl among them), never listed.\n"
	"Root and the daemon's uid see every client; anyone else the clients of their\n"
	"own uid, the others only counted (\"other clients: N\").\n"
	"\n"
	"Options:\n"
	"      --json          the same as one JSON document\n"
	SOCKET_HELP;

static const char top_help[] =
	"Usage: kvctl top [--json] [--interval MS] [--count N] [--socket PATH]\n"
	"kvctl stats, refreshed, with each operation's rate since the last refresh;\n"
	"q quits (on a terminal).\n"
	"\n"
	"Options:\n"
	"      --json          one JSON document per refresh (as kvctl stats --json)\n"
	"      --interval MS   milliseconds between refreshes, at least 1 (default 1000)\n"
	"      --count N       stop after N refreshes (default: until q or a signal)\n"
	SOCKET_HELP;

static const char version_help[] =
	"Usage: kvctl version [--socket PATH]\n"
	"Three lines: kvctl's release, libkvpool's release and ABI, and the running\n"
	"daemon's release, ABI and the KVP_FEAT_* bits it grants kvctl's connection\n"
	"(in hex); \"kvpoold: not running at PATH\" and exit status 1 when no daemon\n"
	"answers there.\n"
	"\n"
	"Options:\n"
	SOCKET_HELP;

int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvctl: %s%s", cmd, *cmd ? ": " : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'kvctl%s%s --help' for more information.\n", *cmd ? " " : "", cmd);
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

int parse_cmd(const char *cmd, const char *help, unsigned takes, int argc, char **argv,
		     struct cmd_opts *o)
{
	static const struct option all[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "prometheus", no_argument, NULL, OPT_PROM },
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "drop-tier", no_argument, NULL, OPT_DROP_TIER },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "exec", required_argument, NULL, OPT_EXEC },
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
	};
	struct option opts[sizeof(all) / sizeof(all[0]) + 1] = { { NULL, 0, NULL, 0 } };
	unsigned n = 0;
	int c;

	for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (all[i].val < OPT_JSON || (takes & TAKES(all[i].val)))
			opts[n++] = all[i];
	optind = 0; /* a fresh scan: main's getopt ran over another argv */
	opterr = 0;
	/* '-': operands come back in order (as 1), whatever POSIXLY_CORRECT says. */
	while ((c = getopt_long(argc, argv, "-:s:h", opts, NULL)) != -1) {
		switch (c) {
		case 1:
			o->args[o->nargs++] = optarg;
			break;
		case 's':
			o->socket = optarg;
			break;
		case 'h':
			fputs(help, stdout);
			return HELP_SHOWN;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_PROM:
			o->prom = true;
			break;
		case OPT_DROP_TIER:
			o->drop_tier = true;
			break;
		case OPT_INTERVAL:
			if (parse_uint(optarg, &o->interval) || !o->interval)
				return usage_error(cmd, "bad value for --interval: '%s' (milliseconds, "
						   "at least 1)", optarg);
			break;
		case OPT_COUNT:
			if (parse_uint(optarg, &o->count))
				return usage_error(cmd, "bad value for --count: '%s'", optarg);
			break;
		case OPT_TIMEOUT:
			if (parse_uint(optarg, &o->timeout_ms) || !o->timeout_ms)
				return usage_error(cmd, "bad value for --timeout: '%s' (milliseconds, "
						   "at least 1)", optarg);
			break;
		case OPT_LISTEN:
			o->listen = optarg;
			break;
		case OPT_EXEC:
			o->exec = optarg;
			break;
		case ':':
			return usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
		default:
			if (optopt > 0 && optopt < OPT_JSON && argv[optind - 1][1] != '-') {
				char opt[3] = { '-', (char)optopt, '\0' };

				return usage_error(cmd, "unknown option '%s'", opt);
			}
			return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
		}
	}
	/* Past "--": operands all. */
	while (optind < argc)
		o->args[o->nargs++] = argv[optind++];
	return 0;
}

const char *socket_path(const char *socket)
{
	const char *path = socket ? socket : getenv("KVPOOL_SOCKET");

	return path ? path : KVP_DEFAULT_SOCKET;
}

/*
 * Root and the daemon's uid (the socket's owner) read the whole stats page
 * as admin; anyone else is given their own uid's clients only.
 */
static bool may_admin(const char *socket)
{
	struct stat st;

	if (geteuid() == 0)
		return true;
	return !stat(socket_path(socket), &st) && st.st_uid == geteuid();
}

int monitor_connect(const char *socket, bool admin, unsigned timeout_ms, struct kvp_client **c,
		    char *msg, size_t len)
{
	char why[KVP_REASON_MAX] = "";
	struct kvp_connect_opts opts = { .socket_path = socket, .admin = admin || may_admin(socket),
					 .stats_page = true, .monitor = true, .sq_entries = 4,
					 .arena_bytes = 4096, .timeout_ms = timeout_ms, .why = why,
					 .why_len = sizeof(why) };
	int ret = kvp_connect(&opts, c);

	if (ret)
		kvp_connect_error(&opts, ret, msg, len);
	return ret;
}

int connect_to(const char *socket, bool admin, struct kvp_client **c)
{
	char msg[512];
	int ret = monitor_connect(socket, admin, 0, c, msg, sizeof(msg));

	if (ret)
		fprintf(stderr, "kvctl: %s\n", msg);
	return ret;
}

/*
 * kvctl version: three lines, the last from the daemon (the features it grants this
 * client: admin for root and the daemon's uid). 1 when no daemon answers.
 */
static int cmd_version(const char *socket)
{
	char why[KVP_REASON_MAX] = "", msg[512];
	struct kvp_connect_opts opts = { .socket_path = socket, .admin = may_admin(socket),
					 .stats_page = true, .pool_map = true, .monitor = true,
					 .sq_entries = 4, .arena_bytes = 4096, .why = why,
					 .why_len = sizeof(why) };
	struct kvp_client *c;
	uint32_t v;
	int ret;

	printf("kvctl %s\nlibkvpool %s abi %u\n", KVPOOL_VERSION, kvp_version(), KVP_ABI_VERSION);
	ret = kvp_connect(&opts, &c);
	if (ret == -EPERM && opts.admin) { /* an admin the daemon does not grant: ask for less */
		opts.admin = false;
		ret = kvp_connect(&opts, &c);
	}
	if (ret == -ENOENT || ret == -ECONNREFUSED) {
		printf("kvpoold: not running at %s\n", socket_path(socket));
		return 1;
	}
	if (ret) {
		printf("kvpoold: %s\n", kvp_connect_error(&opts, ret, msg, sizeof(msg)));
		return 1;
	}
	v = kvp_daemon_version(c);
	printf("kvpoold %u.%u.%u abi %u features 0x%llx\n", v >> 16, v >> 8 & 0xff, v & 0xff,
	       KVP_ABI_VERSION, (unsigned long long)kvp_features(c));
	kvp_close(c);
	return 0;
}

void snapshot_error(int err, const char *socket, char *buf, size_t len)
{
	const char *path = socket_path(socket);

	if (err == -ECONNRESET)
		snprintf(buf, len, "kvpoold at %s hung up", path);
	else if (err == -EPROTO)
		snprintf(buf, len, "the stats page of kvpoold at %s is of another version", path);
	else if (err == -EAGAIN)
		snprintf(buf, len, "kvpoold at %s kept writing its stats page for 5 s", path);
	else
		snprintf(buf, len, "reading the stats of kvpoold at %s: %s", path, strerror(-err));
}

/* stats, clients, top: all views of one stats-page snapshot. */
static int cmd_view(const char *cmd, const struct cmd_opts *o)
{
	struct kvp_stats_view s = { 0 };
	struct kvp_client *c;
	int ret;

	if (o->nargs)
		return usage_error(cmd, "unexpected argument '%s'", o->args[0]);
	if (o->json && o->prom)
		return usage_error(cmd, "--json and --prometheus exclude each other");
	if (connect_to(o->socket, false, &c))
		return 1;
	if (!strcmp(cmd, "top")) {
		ret = kvctl_top(c, o->json, o->interval ? o->interval : 1000, o->count);
	} else {
		ret = kvp_stats_view_take(c, &s);
		if (!ret && o->prom)
			print_prometheus(stdout, &s);
		else if (!ret && o->json)
			print_stats_json(&s, !strcmp(cmd, "clients"));
		else if (!ret && !strcmp(cmd, "clients"))
			print_clients_view(&s);
		else if (!ret)
			print_stats_table(&s);
		kvp_stats_view_release(&s);
	}
	kvp_close(c);
	if (ret) {
		char msg[512];

		snapshot_error(ret, o->socket, msg, sizeof(msg));
		fprintf(stderr, "kvctl: %s: %s\n", cmd, msg);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	enum { PASS_ON = 1 };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		/* The commands' own: handed on, the command says whether it takes them. */
		{ "json", no_argument, NULL, PASS_ON },
		{ "prometheus", no_argument, NULL, PASS_ON },
		{ "interval", required_argument, NULL, PASS_ON },
		{ "count", required_argument, NULL, PASS_ON },
		{ "pid", required_argument, NULL, PASS_ON },
		{ "timeout", required_argument, NULL, PASS_ON },
		{ "listen", required_argument, NULL, PASS_ON },
		{ "exec", required_argument, NULL, PASS_ON },
		{ NULL, 0, NULL, 0 },
	};
	struct cmd_opts o = { 0 };
	const char *socket = NULL, *unknown = NULL;
	char **cmdv;
	int c, ret, cmdc = 1, prev = optind;

	/*
	 * The command's argv: its name, then the options given before it, then the
	 * words after it; so "kvctl --json stats" is "kvctl stats --json".
	 */
	cmdv = calloc((size_t)argc + 1, sizeof(*cmdv));
	o.args = calloc((size_t)argc + 1, sizeof(*o.args));
	if (!cmdv || !o.args) {
		fputs("kvctl: out of memory\n", stderr);
		ret = 1;
		goto free_argv;
	}
	opterr = 0;
	/* '+': stop at the command; the words after it are the command's. */
	while ((c = getopt_long(argc, argv, "+:s:hV", opts, NULL)) != -1) {
		/* An unknown word too: the command names itself in the refusal. */
		if (c == PASS_ON || (c == '?' && optind > prev)) {
			if (c == '?' && !unknown)
				unknown = argv[prev];
			while (prev < optind)
				cmdv[cmdc++] = argv[prev++];
		} else if (c == 's') {
			socket = optarg;
		} else if (c == 'V') {
			puts("kvctl " KVPOOL_VERSION);
			ret = 0;
			goto free_argv;
		} else if (c == 'h') {
			fputs(usage, stdout);
			ret = 0;
			goto free_argv;
		} else if (c == ':') {
			ret = usage_error("", "option '%s' needs a value", argv[optind - 1]);
			goto free_argv;
		} else if (optopt > 0 && optopt < 128 && argv[prev][1] != '-') {
			/* Inside "-xs P": the word is not the option. */
			ret = usage_error("", "unknown option '-%c'", optopt);
			goto free_argv;
		} else {
			ret = usage_error("", "unknown option '%s'", argv[prev]);
			goto free_argv;
		}
		prev = optind;
	}
	if (optind == argc) {
		ret = unknown ? usage_error("", "unknown option '%s'", unknown) :
				usage_error("", "no command");
		goto free_argv;
	}
	cmdv[0] = argv[optind];
	while (++optind < argc)
		cmdv[cmdc++] = argv[optind];
	argc = cmdc;
	argv = cmdv;
	o.socket = socket;
	if (!strcmp(argv[0], "stats"))
		ret = parse_cmd("stats", stats_help, TAKES(OPT_JSON) | TAKES(OPT_PROM), argc, argv, &o) ?:
		      cmd_view("stats", &o);
	else if (!strcmp(argv[0], "clients"))
		ret = parse_cmd("clients", clients_help, TAKES(OPT_JSON), argc, argv, &o) ?:
		      cmd_view("clients", &o);
	else if (!strcmp(argv[0], "top"))
		ret = parse_cmd("top", top_help, TAKES(OPT_JSON) | TAKES(OPT_INTERVAL) |
			       TAKES(OPT_COUNT), argc, argv, &o) ?: cmd_view("top", &o);
	else if (!strcmp(argv[0], "version"))
		ret = parse_cmd("version", version_help, 0, argc, argv, &o) ?:
		      (o.nargs ? usage_error("version", "unexpected argument '%s'", o.args[0]) :
				 cmd_version(o.socket));
	else if (!strcmp(argv[0], "health"))
		ret = cmd_health(argc, argv, &o);
	else if (!strcmp(argv[0], "exporter"))
		ret = cmd_exporter(argc, argv, &o);
	else if (!strcmp(argv[0], "pool"))
		ret = cmd_pool(argc, argv, &o);
	else if (!strcmp(argv[0], "daemon"))
		ret = cmd_daemon(argc, argv, &o);
	else if (!strcmp(argv[0], "acct"))
		ret = kvctl_acct(argc, argv, socket); /* it parses its options, -s too */
	else
		ret = usage_error("", "unknown command '%s'", argv[0]);
free_argv:
	free(o.args);
	free(cmdv);
	return ret == HELP_SHOWN ? 0 : ret;
}
