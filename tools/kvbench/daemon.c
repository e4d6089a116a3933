/* SPDX-License-Identifier: MIT */
/* Benchmarks that go through kvpoold start their own, on a private socket. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "kvbench.h"

/* kvpoold beside this binary, as every build puts them (build/bin/, build/VARIANT/bin/). */
void bench_default_daemon(char *out, size_t len)
{
	char exe[PATH_MAX / 2];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	snprintf(out, len, "build/bin/kvpoold");
	if (n <= 0)
		return;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return;
	*slash = '\0';
	snprintf(out, len, "%s/kvpoold", exe);
}

void bench_daemon_path(const char *given, char *out, size_t len)
{
	if (given)
		snprintf(out, len, "%s", given);
	else
		bench_default_daemon(out, len);
}

int bench_daemon_start(struct bench_daemon *d, const char *bin, unsigned spin_us,
		       const char *event_loop, int cpu)
{
	pid_t parent;
	char spin[16];

	strcpy(d->dir, "/tmp/kvbench-XXXXXX");
	if (!mkdtemp(d->dir))
		return -errno;
	snprintf(d->socket, sizeof(d->socket), "%s/kvpool.sock", d->dir);
	snprintf(spin, sizeof(spin), "%u", spin_us);
	parent = getpid();
	d->pid = fork();
	if (d->pid == 0) {
		cpu_set_t set;

		/* A kvbench killed (a SIGPIPE from `| head`) takes its daemon with it. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent)
			_exit(1);
		CPU_ZERO(&set);
		if (cpu >= 0) {
			CPU_SET(cpu, &set);
			sched_setaffinity(0, sizeof(set), &set); /* its threads inherit it */
		}
		if (d->log[0]) {
			int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

			if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
				_exit(1);
		}
		if (event_loop)
			execl(bin, bin, d->log[0] ? "-v" : "-q", "--socket", d->socket, "--spin-us",
			      spin, "--event-loop",
			      event_loop, (char *)NULL);
		else
			execl(bin, bin, d->log[0] ? "-v" : "-q", "--socket", d->socket, "--spin-us",
			      spin, (char *)NULL);
		fprintf(stderr, "kvbench: exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	for (int i = 0; d->pid > 0 && i < 500; i++) {
		struct kvp_connect_opts o = { .socket_path = d->socket };
		struct kvp_client *c;
		int status;

		if (waitpid(d->pid, &status, WNOHANG) == d->pid)
			break;
		if (kvp_connect(&o, &c) == 0) {
			kvp_close(c);
			return 0;
		}
		usleep(10000);
	}
	bench_daemon_stop(d);
	return -ECHILD;
}

void bench_daemon_stop(struct bench_daemon *d)
{
	int status;

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		waitpid(d->pid, &status, 0);
	}
	d->pid = 0;
	rmdir(d->dir);
}

int bench_store(struct kvp_client *c, const uint32_t *tokens, uint32_t n, uint32_t layers,
		uint32_t chunk, const void *kv)
{
	uint64_t h;
	uint32_t hit;
	int ret;

	ret = kvp_seq_open(c, tokens, n, NULL, 0, -1, &h) ?: kvp_alloc(c, h, n, 0, false, &hit,
								      NULL, 0);
	for (uint32_t l = 0; !ret && l < layers; l++)
		for (uint32_t at = 0; !ret && at < n; at += chunk)
			ret = kvp_write_kv(c, h, 0, l, at, chunk, kv, kv);
	if (!ret)
		ret = kvp_commit(c, h, n);
	kvp_seq_close(c, h);
	return ret;
}

int bench_pool_drop(struct kvp_client *admin, const char *name)
{
	int ret = -EBUSY;

	for (int i = 0; i < 200 && ret == -EBUSY; i++) {
		ret = kvp_pool_destroy_flags(admin, name, KVP_POOL_DESTROY_DROP_TIER);
		if (ret == -EBUSY)
			usleep(10000);
	}
	return ret;
}
