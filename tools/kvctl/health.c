/* SPDX-License-Identifier: MIT */
/* kvctl health: does kvpoold answer? For scripts and container probes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvctl.h"

#define HEALTH_TIMEOUT_MS 1000

static const char health_help[] =
	"Usage: kvctl health [--timeout MS] [--socket PATH]\n"
	"Check that kvpoold answers: connect as a monitor and send one NOP. Prints\n"
	"  kvpoold at PATH answered in N us\n"
	"and exits 0; otherwise says why on stderr (no daemon at PATH, permission,\n"
	"no answer within MS, hung up) and exits 1. For scripts and container\n"
	"probes; kvctl exporter's /healthz asks the same of its own connection.\n"
	"\n"
	"Options:\n"
	"      --timeout MS    how long the connection, and then the NOP, may each\n"
	"                      wait for the daemon (default 1000; a stopped daemon\n"
	"                      makes the check take about MS)\n"
	SOCKET_HELP;

void nop_error(int err, const char *socket, unsigned timeout_ms, char *buf, size_t len)
{
	const char *path = socket_path(socket);

	if (err == -ETIMEDOUT)
		snprintf(buf, len, "kvpoold at %s did not answer a NOP within %u ms (stopped, or "
			 "swamped?)", path, timeout_ms);
	else if (err == -ECONNRESET)
		snprintf(buf, len, "kvpoold at %s hung up", path);
	else
		snprintf(buf, len, "kvpoold at %s: NOP failed: %s", path, strerror(-err));
}

int cmd_health(int argc, char **argv, struct cmd_opts *o)
{
	unsigned timeout = HEALTH_TIMEOUT_MS;
	struct kvp_client *c;
	uint64_t t0;
	char msg[512];
	int ret;

	ret = parse_cmd("health", health_help, TAKES(OPT_TIMEOUT), argc, argv, o);
	if (ret)
		return ret;
	if (o->nargs)
		return usage_error("health", "unexpected argument '%s'", o->args[0]);
	if (o->timeout_ms)
		timeout = o->timeout_ms;
	t0 = kvctl_now_ns();
	ret = monitor_connect(o->socket, false, timeout, &c, msg, sizeof(msg));
	if (ret) {
		fprintf(stderr, "kvctl: health: %s\n", msg);
		return 1;
	}
	ret = kvp_nop(c);
	kvp_close(c);
	if (ret) {
		nop_error(ret, o->socket, timeout, msg, sizeof(msg));
		fprintf(stderr, "kvctl: health: %s\n", msg);
		return 1;
	}
	printf("kvpoold at %s answered in %llu us\n", socket_path(o->socket),
	       (unsigned long long)(kvctl_now_ns() - t0) / 1000);
	return 0;
}
