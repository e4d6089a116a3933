/* SPDX-License-Identifier: MIT */
/* kvctl daemon restart: a planned restart that keeps the cache, done once the next run answers. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kvctl.h"

#define RESTART_TIMEOUT_MS 60000

static const char daemon_help[] =
	"Usage: kvctl daemon restart [--exec PATH] [--timeout MS] [--socket PATH]\n"
	"Restart kvpoold without losing its cache (admin: root or the daemon's uid).\n"
	"The daemon checks the binary it will run (a kvpoold that runs here: it must\n"
	"print its version), stops accepting and taking requests, finishes the ones\n"
	"it took, closes every connection (clients reconnect; their sequences end as\n"
	"FREE ends them, cached blocks stay cached) and execs, in the same process,\n"
	"the binary it was started from (as it is on disk now: an upgrade installed\n"
	"over it runs) or PATH, handing over its pools' KV memory, prefix cache, host\n"
	"tiers and generation, its listening socket and its lock. Connections made\n"
	"meanwhile wait for the next run. A pool whose shape changed in the config\n"
	"(blocks, block_size, groups, KV geometry, tier size) starts empty, logged.\n"
	"Prints\n"
	"  kvpoold at SOCKET restarted in N ms\n"
	"once the next run answers a NOP, and exits 0; exits 1 saying why when the\n"
	"daemon refuses (the binary is missing, not executable, not a kvpoold: the\n"
	"daemon goes on serving) or the next run does not answer within MS.\n"
	"See docs/reliability.md, \"A planned restart\".\n"
	"\n"
	"Options:\n"
	"      --exec PATH     the binary to run instead of the one the daemon was\n"
	"                      started from (the daemon resolves it: absolute, or\n"
	"                      relative to its working directory)\n"
	"      --timeout MS    how long to wait for the next run to answer (default\n"
	"                      60000)\n"
	SOCKET_HELP;

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { 0, (long)ms * 1000000L };

	nanosleep(&ts, NULL);
}

/* Connect until a run other than @old answers a NOP: 0, or -errno with @msg. */
static int await_next_run(const char *socket, uint64_t old, uint64_t deadline, char *msg,
			  size_t len)
{
	int ret = -ETIMEDOUT;

	snprintf(msg, len, "no answer");
	for (uint64_t now = kvctl_now_ns(); now < deadline; now = kvctl_now_ns()) {
		unsigned left = (unsigned)((deadline - now) / 1000000) + 1;
		struct kvp_client *c;

		ret = monitor_connect(socket, false, left, &c, msg, len);
		if (!ret) {
			bool next = kvp_boot_id(c) != old;

			ret = next ? kvp_nop(c) : -EAGAIN;
			kvp_close(c);
			if (!ret)
				return 0;
			if (next)
				nop_error(ret, socket, left, msg, len);
		}
		sleep_ms(2); /* the old run closing, or the socket between runs */
	}
	return ret;
}

int cmd_daemon(int argc, char **argv, struct cmd_opts *o)
{
	unsigned timeout = RESTART_TIMEOUT_MS;
	char why[KVP_REASON_MAX] = "", msg[512];
	struct kvp_client *c;
	uint64_t t0, old;
	int ret;

	ret = parse_cmd("daemon restart", daemon_help, TAKES(OPT_TIMEOUT) | TAKES(OPT_EXEC), argc,
			argv, o);
	if (ret)
		return ret;
	if (!o->nargs)
		return usage_error("daemon", "missing command: restart");
	if (strcmp(o->args[0], "restart"))
		return usage_error("daemon", "unknown command '%s'", o->args[0]);
	if (o->nargs > 1)
		return usage_error("daemon restart", "unexpected argument '%s'", o->args[1]);
	if (o->timeout_ms)
		timeout = o->timeout_ms;
	if (connect_to(o->socket, true, &c))
		return 1;
	t0 = kvctl_now_ns();
	old = kvp_boot_id(c);
	ret = kvp_daemon_restart(c, o->exec, why, sizeof(why));
	kvp_close(c);
	if (ret == -EINVAL && !*why) {
		fprintf(stderr, "kvctl: daemon restart: kvpoold at %s does not restart on request "
			"(an older kvpoold)\n", socket_path(o->socket));
		return 1;
	}
	if (ret) {
		fprintf(stderr, "kvctl: daemon restart: %s\n", *why ? why : strerror(-ret));
		return 1;
	}
	ret = await_next_run(o->socket, old, t0 + (uint64_t)timeout * 1000000ull, msg, sizeof(msg));
	if (ret) {
		fprintf(stderr, "kvctl: daemon restart: the next run did not answer within %u ms: "
			"%s\n", timeout, msg);
		return 1;
	}
	printf("kvpoold at %s restarted in %.1f ms\n", socket_path(o->socket),
	       (kvctl_now_ns() - t0) / 1e6);
	return 0;
}
