/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

int daemon_start(struct daemon *d, const char *const *extra_args)
{
	return daemon_start_nofile(d, extra_args, 0);
}

const char *daemon_binary(void)
{
	return getenv("KVPOOLD") ? getenv("KVPOOLD") : "build/bin/kvpoold";
}

bool daemon_plugin_dir(char *dir, size_t len)
{
	char bin[PATH_MAX], path[PATH_MAX + 32];

	CHECK(realpath(daemon_binary(), bin) != NULL);
	snprintf(dir, len, "%s/gpu", dirname(dirname(bin)));
	snprintf(path, sizeof(path), "%s/libkvpool_cuda.so", dir);
	return access(path, F_OK) == 0;
}

/* Runs kvpoold on d->socket, its stderr appended to d->log; waits until it serves. */
static int spawn(struct daemon *d, const char *const *extra_args, unsigned nofile)
{
	const char *bin = daemon_binary();
	const char *event_loop = getenv("KVPOOL_EVENT_LOOP");
	const char *argv[32] = { bin, "--socket", d->socket, "-v" };
	unsigned argc = 4;

	/* The suite runs again with --event-loop epoll: what io_uring-less containers run. */
	if (event_loop && *event_loop) {
		argv[argc++] = "--event-loop";
		argv[argc++] = event_loop;
	}
	for (unsigned i = 0; extra_args && extra_args[i] && argc < 30; i++)
		argv[argc++] = extra_args[i];
	argv[argc] = NULL;

	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		struct rlimit rl = { nofile, nofile };

		if (!freopen(d->log, "a", stderr) || (nofile && setrlimit(RLIMIT_NOFILE, &rl)))
			_exit(127);
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		/* Short: a dying daemon's socket may still take the connection, never the setup. */
		struct kvp_connect_opts o = { .socket_path = d->socket, .timeout_ms = 200 };
		struct kvp_client *c;
		int status;

		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			fprintf(stderr, "kvpoold exited at start; log %s\n", d->log);
			return -ECHILD;
		}
		if (kvp_connect(&o, &c) == 0) {
			kvp_close(c);
			return 0;
		}
		usleep(10000);
	}
	return -ETIMEDOUT;
}

int daemon_start_nofile(struct daemon *d, const char *const *extra_args, unsigned nofile)
{
	strcpy(d->dir, "/tmp/kvpool-test-XXXXXX");
	if (!mkdtemp(d->dir))
		return -errno;
	snprintf(d->socket, sizeof(d->socket), "%s/kvpool.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvpoold.log", d->dir);
	return spawn(d, extra_args, nofile);
}

int daemon_restart(struct daemon *d, const char *const *extra_args)
{
	return spawn(d, extra_args, 0);
}

int daemon_stop(struct daemon *d)
{
	int status;

	if (kill(d->pid, SIGTERM) || waitpid(d->pid, &status, 0) != d->pid)
		return -1;
	if (!WIFEXITED(status)) {
		fprintf(stderr, "kvpoold died of signal %d; log %s\n", WTERMSIG(status), d->log);
		return -1;
	}
	if (WEXITSTATUS(status) == 0) {
		unlink(d->log);
		rmdir(d->dir);
	} else {
		fprintf(stderr, "kvpoold exited %d; log %s\n", WEXITSTATUS(status), d->log);
	}
	return WEXITSTATUS(status);
}

void daemon_open_to_all(const struct daemon *d)
{
	CHECK_EQ(chmod(d->dir, 0711), 0);
	CHECK_EQ(chmod(d->socket, 0666), 0);
}

void daemon_copy_program(const struct daemon *d, const char *bin, char *path, size_t len)
{
	const char *name = strrchr(bin, '/') ? strrchr(bin, '/') + 1 : bin;
	char buf[65536];
	ssize_t n;
	int in, out;

	CHECK((size_t)snprintf(path, len, "%s/%s", d->dir, name) < len);
	in = open(bin, O_RDONLY | O_CLOEXEC);
	CHECK(in >= 0);
	out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	CHECK(out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		CHECK_EQ(write(out, buf, (size_t)n), n);
	CHECK_EQ(n, 0);
	CHECK_EQ(fchmod(out, 0755), 0); /* whatever the umask */
	close(in);
	CHECK_EQ(close(out), 0);
}

void drop_to_uid(uid_t uid)
{
	CHECK_EQ(setgroups(0, NULL), 0);
	CHECK_EQ(setgid(uid), 0);
	CHECK_EQ(setuid(uid), 0);
	CHECK_EQ(geteuid(), uid);
	CHECK(uid == 0 || setuid(0) != 0); /* really dropped */
	/* A change of credentials clears the parent-death signal fork_child set. */
	CHECK_EQ(prctl(PR_SET_PDEATHSIG, SIGKILL), 0);
}

static char config_dir[64];
static pid_t config_owner;

/* At the exit of the process that made it, not of a forked child's. */
static void config_remove(void)
{
	char path[96];

	if (!*config_dir || getpid() != config_owner)
		return;
	snprintf(path, sizeof(path), "%s/kvpoold.ini", config_dir);
	unlink(path);
	rmdir(config_dir);
}

const char *config_file(const char *text)
{
	static char path[96];
	FILE *f;

	if (!*config_dir) {
		strcpy(config_dir, "/tmp/kvpool-config-XXXXXX");
		CHECK(mkdtemp(config_dir) != NULL);
		CHECK_EQ(chmod(config_dir, 0755), 0);
		config_owner = getpid();
		atexit(config_remove);
	}
	snprintf(path, sizeof(path), "%s/kvpoold.ini", config_dir);
	f = fopen(path, "w");
	CHECK(f != NULL);
	CHECK(fputs(text, f) >= 0);
	CHECK_EQ(fclose(f), 0);
	return path;
}

uint64_t test_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

long daemon_cpu_ticks(const struct daemon *d)
{
	char path[64], buf[1024], *p;
	unsigned long utime, stime;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)d->pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	/* Fields 14 and 15, counted after the ')' that ends the command name. */
	p = p ? strrchr(buf, ')') : NULL;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
			 &stime) != 2)
		return -1;
	return (long)(utime + stime);
}

long proc_field(const char *path, const char *format)
{
	char line[256];
	long v = -1;
	FILE *f = fopen(path, "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, format, &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

long daemon_rss_kib(const struct daemon *d)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
	return proc_field(path, "VmRSS: %ld kB");
}

long lines_with(const char *path, const char *text)
{
	char line[512];
	long n = 0;
	FILE *f = fopen(path, "r");

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, text) != NULL;
	if (f)
		fclose(f);
	return n;
}

unsigned daemon_children_named(const struct daemon *d, const char *name, pid_t *out,
			       unsigned max)
{
	DIR *proc = opendir("/proc");
	struct dirent *e;
	unsigned found = 0;

	if (!proc)
		return 0;
	while (found < max && (e = readdir(proc))) {
		char path[300], comm[32];
		int ppid;
		FILE *f;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		/* "PID (COMM) STATE PPID": the daemon's names have no space nor parenthesis. */
		if (fscanf(f, "%*d (%31[^)]) %*c %d", comm, &ppid) == 2 && ppid == d->pid &&
		    !strcmp(comm, name))
			out[found++] = (pid_t)atoi(e->d_name);
		fclose(f);
	}
	closedir(proc);
	return found;
}

pid_t daemon_child_named(const struct daemon *d, const char *name)
{
	pid_t first = 0;

	daemon_children_named(d, name, &first, 1);
	return first;
}

/* Read by the SIGALRM handler, hence volatile and the message built ahead. */
static struct daemon *volatile watched;
static pid_t watchdog_pid;
static char timeout_msg[128];
static size_t timeout_len;

static void watchdog_exit(void)
{
	struct daemon *d = watched;

	/* A forked child exits through here too; the daemon is the main process's. */
	if (d && getpid() == watchdog_pid) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		fprintf(stderr, "kvpoold killed; its log: %s\n", d->log);
	}
}

/* Async-signal-safe only: the test may be stuck anywhere, malloc and stdio included. */
static void watchdog_alarm(int sig)
{
	struct daemon *d = watched;

	(void)sig;
	if (write(2, timeout_msg, timeout_len) < 0)
		_exit(2);
	if (d && getpid() == watchdog_pid)
		kill(d->pid, SIGKILL);
	_exit(1);
}

void watchdog_start(const char *test_name, unsigned seconds)
{
	int n = snprintf(timeout_msg, sizeof(timeout_msg), "%s: timed out\n", test_name);

	CHECK(n > 0 && (size_t)n < sizeof(timeout_msg));
	timeout_len = (size_t)n;
	watchdog_pid = getpid();
	atexit(watchdog_exit);
	signal(SIGALRM, watchdog_alarm);
	alarm(seconds);
}

void watchdog_watch(struct daemon *d)
{
	watched = d;
}

struct kvp_client *connect_or_die(const struct daemon *d, const char *pool, const char *ns,
				  bool admin)
{
	struct kvp_connect_opts o = {
		.socket_path = d->socket, .pool = pool, .namespace_ = ns, .admin = admin,
		.arena_bytes = 4u << 20,
	};
	struct kvp_client *c;
	int ret = kvp_connect(&o, &c);

	if (ret) {
		fprintf(stderr, "connect to %s (pool '%s', ns '%s'): %s\n", d->socket, pool ? pool : "",
			ns ? ns : "", strerror(-ret));
		exit(1);
	}
	return c;
}

void pool_params_or_die(struct kvp_pool_params_v2 *p, const char *name, const char *const *kv)
{
	kvp_pool_params_v2_init(p, name);
	for (unsigned i = 0; kv[i]; i++) {
		char key[64];
		const char *eq = strchr(kv[i], '=');

		CHECK(eq && (size_t)(eq - kv[i]) < sizeof(key));
		memcpy(key, kv[i], (size_t)(eq - kv[i]));
		key[eq - kv[i]] = '\0';
		if (kvp_pool_params_v2_set(p, key, eq + 1)) {
			fprintf(stderr, "pool %s: bad parameter %s\n", name, kv[i]);
			exit(1);
		}
	}
}

void create_pool_or_die(const struct daemon *d, const char *name, const char *const *kv)
{
	struct kvp_client *c = connect_or_die(d, "", "", true);
	struct kvp_pool_params_v2 p;
	char why[KVP_REASON_MAX];
	int ret;

	pool_params_or_die(&p, name, kv);
	ret = kvp_pool_create_v2(c, &p, 0, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "pool create %s: %s: %s\n", name, strerror(-ret), why);
		exit(1);
	}
	kvp_close(c);
}

void create_tiered_pool_or_die(struct kvp_client *admin, const char *name, const char *const *kv,
			       uint64_t tier_bytes)
{
	struct kvp_pool_params_v2 p;
	char keys[64], why[KVP_REASON_MAX] = "";
	int ret;

	pool_params_or_die(&p, name, kv);
	snprintf(keys, sizeof(keys), "tier_host_bytes = %llu\n", (unsigned long long)tier_bytes);
	ret = kvp_pool_create_v3(admin, &p, keys, 0, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "pool create %s: %s: %s\n", name, strerror(-ret), why);
		exit(1);
	}
}

void check_pool_or_die(const struct daemon *d, const char *pool, struct kvp_pool_stats *st)
{
	struct kvp_client *c = connect_or_die(d, pool, "", true);
	char why[256];
	int ret = kvp_check(c, why, sizeof(why));

	if (ret) {
		fprintf(stderr, "pool %s: invariants broken: %s\n", pool, why);
		exit(1);
	}
	if (st)
		CHECK_EQ(kvp_pool_stats(c, st), 0);
	kvp_close(c);
}

/* A child outlives no failed test: it would hold the runner's output pipe open. */
static void die_with_parent(pid_t parent)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(1);
}

pid_t fork_child(int (*fn)(void *arg), void *arg)
{
	pid_t parent = getpid(), pid = fork();

	if (pid == 0) {
		die_with_parent(parent);
		_exit(fn(arg));
	}
	return pid;
}

pid_t fork_child_ready(int (*fn)(void *arg), void *arg)
{
	pid_t parent = getpid(), pid;
	int fds[2];
	char c;

	CHECK(pipe(fds) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		die_with_parent(parent);
		close(fds[0]);
		dup2(fds[1], STDOUT_FILENO);
		close(fds[1]);
		_exit(fn(arg));
	}
	close(fds[1]);
	CHECK(read(fds[0], &c, 1) == 1);
	close(fds[0]);
	return pid;
}

int wait_child(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
