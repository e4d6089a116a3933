/* SPDX-License-Identifier: MIT */
/*
 * kvbench load: running the engines. Through a daemon, each engine is a
 * process of its own with its own connection; they start together (a pipe
 * closed at once), send their figures down a pipe each when done, and keep
 * their connections open until the parent has read the pool's stats page:
 * blocks still in use then are the engines' own leak, not something the
 * daemon would have cleaned up at their hang-up. In process, the same
 * engines take their steps in turn on one core allocator pool.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "load.h"
#include "kvbench.h"

#define MAX_ENGINES 64
#define SAMPLE_MS 2                       /* how often the parent reads the pool's usage */
#define STARVED_US 500                    /* an engine with no room waits this long to retry */
#define STARVED_LIMIT_NS 10000000000ull   /* and gives up after this long with nothing running */
#define IDLE_ROUNDS 8                     /* in process: rounds with no engine running, a stall */

_Static_assert((int)KVC_FULL == (int)KVP_KIND_FULL && (int)KVC_SWA == (int)KVP_KIND_SWA &&
	       (int)KVC_RSWA == (int)KVP_KIND_RSWA,
	       "the core's kinds are the protocol's");

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Blocks until the other end of @fd is closed: the barriers. */
static void wait_eof(int fd)
{
	char b;

	while (read(fd, &b, 1) > 0 || errno == EINTR)
		;
}

/* What an engine process sends its parent: this, then each kind's samples. */
struct report {
	int32_t err;
	char why[200];
	struct ld_counts n;
	uint64_t samples[LD_NKINDS];
};

static int send_report(int fd, int err, const char *why, const struct ld_stats *st)
{
	struct report rep = { .err = err };
	int ret;

	snprintf(rep.why, sizeof(rep.why), "%s", why);
	if (st) {
		rep.n = st->n;
		for (int k = 0; k < LD_NKINDS; k++)
			rep.samples[k] = st->lat[k].n;
	}
	ret = write_all(fd, &rep, sizeof(rep));
	for (int k = 0; st && k < LD_NKINDS && !ret; k++)
		ret = write_all(fd, st->lat[k].v, st->lat[k].n * sizeof(uint64_t));
	return ret;
}

static int recv_report(int fd, struct report *rep, struct ld_stats *st)
{
	int ret = read_all(fd, rep, sizeof(*rep));

	st->n = rep->n;
	for (int k = 0; k < LD_NKINDS && !ret; k++) {
		struct ld_samples *s = &st->lat[k];

		if (rep->samples[k] > (1ull << 32))
			return -EPROTO;
		s->v = malloc(rep->samples[k] * sizeof(uint64_t) + 1);
		if (!s->v)
			return -ENOMEM;
		s->n = s->cap = rep->samples[k];
		ret = read_all(fd, s->v, s->n * sizeof(uint64_t));
	}
	return ret;
}

/* An engine steps until its requests are done; starved, it leaves the cores to the others. */
static int drive(struct ld_engine *e, uint64_t starved_limit_ns, char *why, size_t len)
{
	struct ld_stats *st = ld_engine_stats(e);
	uint64_t idle_since = 0;

	st->n.start_ns = bench_now_ns();
	while (!ld_engine_done(e)) {
		int ret = ld_engine_step(e);
		uint64_t now;

		if (ret < 0) {
			snprintf(why, len, "%s", ld_engine_error(e));
			return ret;
		}
		if (ld_engine_busy(e)) {
			idle_since = 0;
			continue;
		}
		now = bench_now_ns();
		if (!idle_since)
			idle_since = now;
		if (now - idle_since > starved_limit_ns) {
			snprintf(why, len, "no room in the pool for %llu s with nothing of its own running",
				 (unsigned long long)(starved_limit_ns / 1000000000ull));
			return -ENOSPC;
		}
		if (ret == 0)
			usleep(STARVED_US);
	}
	st->n.end_ns = bench_now_ns();
	return 0;
}

/* An engine process: connect, say so, wait for the start, run, report, wait for the check. */
static int engine_proc(const struct ld_workload *w, const struct ld_run_opts *o, const char *pool,
		       unsigned index, int start_fd, int go_fd, int out_fd)
{
	struct kvp_connect_opts co = {
		.socket_path = o->socket, .pool = pool, .spin_us = o->spin ? LD_SPIN_US : 0,
		.sq_entries = ld_sq_entries(w), .arena_bytes = ld_arena_bytes(w),
	};
	char why[200] = "";
	struct ld_engine *e = NULL;
	struct kvp_client *c = NULL;
	int32_t ready;
	int ret;

	ret = kvp_connect(&co, &c);
	if (ret)
		kvp_connect_error(&co, ret, why, sizeof(why));
	else if ((ret = ld_engine_new(w, index, (struct ld_backend){ .c = c }, &e)))
		snprintf(why, sizeof(why), "%s", strerror(-ret));
	ready = ret;
	if (write_all(out_fd, &ready, sizeof(ready)) == 0 && !ret) {
		wait_eof(start_fd);
		ret = drive(e, STARVED_LIMIT_NS, why, sizeof(why));
		if (send_report(out_fd, ret, why, ld_engine_stats(e)) == 0)
			wait_eof(go_fd);
	}
	ld_engine_free(e);
	if (c)
		kvp_close(c);
	return ret;
}

/* The pool's entry in a stats view, by name. */
static const struct kvp_stats_pool *find_pool(const struct kvp_stats_view *v, const char *name)
{
	KVP_STATS_FOR_EACH_POOL(v, p)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
}

static int make_pool(struct kvp_client *admin, const struct ld_workload *w, const char *name)
{
	struct kvp_pool_params p;

	kvp_pool_params_init(&p, name);
	p.num_blocks = w->pool_blocks;
	p.block_size = w->block_size;
	p.num_groups = (uint8_t)w->num_groups;
	for (uint32_t g = 0; g < w->num_groups; g++) {
		p.group_kind[g] = (uint8_t)w->groups[g].kind;
		p.group_param[g] = w->groups[g].param;
	}
	/* Owned: gone with this connection, whatever happens to the run. */
	return kvp_pool_create_owned(admin, &p);
}

struct engines {
	unsigned n;
	pid_t pid[MAX_ENGINES];
	int out[MAX_ENGINES];   /* read ends of their report pipes, -1 once read */
	int start[2], go[2];
};

static int fork_engines(struct engines *g, const struct ld_workload *w,
			const struct ld_run_opts *o, const char *pool)
{
	if (pipe2(g->start, O_CLOEXEC) || pipe2(g->go, O_CLOEXEC))
		return -errno;
	for (unsigned i = 0; i < o->engines; i++) {
		int out[2];

		if (pipe2(out, O_CLOEXEC))
			return -errno;
		fflush(NULL);
		g->pid[i] = fork();
		if (g->pid[i] < 0) {
			close(out[0]);
			close(out[1]);
			return -errno;
		}
		if (g->pid[i] == 0) {
			close(g->start[1]);
			close(g->go[1]);
			close(out[0]);
			_exit(engine_proc(w, o, pool, i, g->start[0], g->go[0], out[1]) ? 1 : 0);
		}
		close(out[1]);
		g->out[g->n++] = out[0];
	}
	return 0;
}

/* Ends the engines: at once (@kill) or by closing the last barrier; 0 if every one exited 0. */
static int reap_engines(struct engines *g, bool kill_them)
{
	int ret = 0;

	for (int i = 0; i < 2; i++) {
		if (g->start[i] >= 0)
			close(g->start[i]);
		if (g->go[i] >= 0)
			close(g->go[i]);
	}
	for (unsigned i = 0; i < g->n; i++) {
		int status;

		if (kill_them)
			kill(g->pid[i], SIGKILL);
		if (g->out[i] >= 0)
			close(g->out[i]);
		if (waitpid(g->pid[i], &status, 0) != g->pid[i] || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			ret = -ECHILD;
	}
	return ret;
}

static void sample_usage(struct kvp_client *mon, struct kvp_stats_view *v, const char *pool,
			 uint64_t *sum_used, uint64_t *samples, uint32_t *peak)
{
	const struct kvp_stats_pool *p;

	if (kvp_stats_view_take(mon, v) || !(p = find_pool(v, pool)))
		return;
	*sum_used += p->blocks_used;
	(*samples)++;
	if (p->blocks_used > *peak)
		*peak = p->blocks_used;
}

/* The reports, as they come, sampling the pool's usage meanwhile; then the leak check. */
static int collect(struct engines *g, struct kvp_client *mon, const char *pool,
		   struct ld_stats *all, struct ld_result *r, uint32_t usable)
{
	struct kvp_stats_view v = { 0 };
	const struct kvp_stats_pool *p;
	uint64_t sum_used = 0, samples = 0;
	unsigned left = g->n;
	int ret = 0;

	while (left) {
		struct pollfd fds[MAX_ENGINES];

		for (unsigned i = 0; i < g->n; i++)
			fds[i] = (struct pollfd){ .fd = g->out[i], .events = POLLIN };
		if (poll(fds, g->n, SAMPLE_MS) <= 0) {
			sample_usage(mon, &v, pool, &sum_used, &samples, &r->peak_used);
			continue;
		}
		for (unsigned i = 0; i < g->n; i++) {
			struct ld_stats st = { 0 };
			struct report rep;
			int err;

			if (g->out[i] < 0 || !fds[i].revents)
				continue;
			err = recv_report(g->out[i], &rep, &st) ?: ld_stats_merge(all, &st);
			ld_stats_free(&st);
			close(g->out[i]);
			g->out[i] = -1;
			left--;
			if (!err && rep.err) {
				err = rep.err;
				snprintf(r->why, sizeof(r->why), "engine %u: %s", i, rep.why);
			} else if (err) {
				snprintf(r->why, sizeof(r->why), "engine %u's report: %s", i, strerror(-err));
			}
			ret = ret ?: err;
		}
	}
	r->mean_usage = samples ? (double)sum_used / (double)samples / usable : 0;
	if (!ret) {
		ret = kvp_stats_view_take(mon, &v);
		p = ret ? NULL : find_pool(&v, pool);
		if (ret || !p) {
			ret = ret ?: -ENODEV;
			snprintf(r->why, sizeof(r->why), "the stats page after the run: %s",
				 ret == -ENODEV ? "pool not found" : strerror(-ret));
		} else {
			r->blocks_leaked = p->blocks_used;
			if (p->blocks_used || p->sequences) {
				ret = -EUCLEAN;
				snprintf(r->why, sizeof(r->why),
					 "%u blocks still in use, %u sequences open, after the engines finished",
					 p->blocks_used, p->sequences);
			}
		}
	}
	kvp_stats_view_release(&v);
	return ret;
}

static void result_of(struct ld_stats *all, struct ld_result *r);

int ld_run_daemon(const struct ld_workload *w, const struct ld_run_opts *o, struct ld_result *r)
{
	static unsigned serial;
	struct kvp_connect_opts ao = { .socket_path = o->socket, .admin = true };
	struct kvp_connect_opts mo = { .socket_path = o->socket, .monitor = true, .stats_page = true };
	struct engines g = { .start = { -1, -1 }, .go = { -1, -1 } };
	struct kvp_client *admin = NULL, *mon = NULL;
	struct ld_stats all = { 0 };
	char pool[KVP_NAME_MAX];
	int ret, reaped;

	memset(r, 0, sizeof(*r));
	r->blocks_leaked = -1;
	if (o->engines > MAX_ENGINES)
		return -EINVAL;
	snprintf(pool, sizeof(pool), "kvbench-load-%d-%u", (int)getpid(), serial++);
	ret = kvp_connect(&ao, &admin);
	if (ret) {
		kvp_connect_error(&ao, ret, r->why, sizeof(r->why));
		goto out;
	}
	ret = make_pool(admin, w, pool);
	if (ret) {
		snprintf(r->why, sizeof(r->why), "creating pool %s: %s%s", pool, strerror(-ret),
			 ret == -EPERM ? " (needs root or the daemon's uid)" : "");
		goto out;
	}
	ret = kvp_connect(&mo, &mon);
	if (ret) {
		kvp_connect_error(&mo, ret, r->why, sizeof(r->why));
		goto out;
	}
	ret = fork_engines(&g, w, o, pool);
	for (unsigned i = 0; i < g.n && !ret; i++) {
		int32_t ready;

		ret = read_all(g.out[i], &ready, sizeof(ready)) ?: ready;
	}
	if (ret) {
		snprintf(r->why, sizeof(r->why), "starting the engines: %s", strerror(-ret));
		goto out_engines;
	}
	close(g.start[1]); /* go */
	g.start[1] = -1;
	ret = collect(&g, mon, pool, &all, r, w->pool_blocks - 1);
out_engines:
	reaped = reap_engines(&g, ret != 0);
	if (!ret && reaped) {
		ret = reaped;
		snprintf(r->why, sizeof(r->why), "an engine process failed");
	}
	if (!ret)
		result_of(&all, r);
out:
	ld_stats_free(&all);
	if (mon)
		kvp_close(mon);
	if (admin) {
		kvp_pool_destroy(admin, pool); /* -EBUSY until the daemon saw them go: owned, then */
		kvp_close(admin);
	}
	r->err = ret;
	return ret;
}

int ld_run_in_process(const struct ld_workload *w, unsigned engines, struct ld_result *r)
{
	struct ld_engine *e[MAX_ENGINES] = { 0 };
	struct kvc_pool_config cfg;
	struct kvc_pool *pool = NULL;
	struct kvc_pool_stats ps;
	struct ld_stats all = { 0 };
	uint64_t sum_used = 0, rounds = 0, idle = 0, start, end;
	unsigned left = engines;
	int ret;

	memset(r, 0, sizeof(*r));
	r->blocks_leaked = -1;
	if (engines > MAX_ENGINES)
		return -EINVAL;
	kvc_pool_config_init(&cfg, w->pool_blocks, w->block_size);
	cfg.num_groups = w->num_groups;
	memcpy(cfg.groups, w->groups, w->num_groups * sizeof(*w->groups));
	ret = kvc_pool_create(&cfg, &pool);
	for (unsigned i = 0; i < engines && !ret; i++)
		ret = ld_engine_new(w, i, (struct ld_backend){ .pool = pool }, &e[i]);
	if (ret) {
		snprintf(r->why, sizeof(r->why), "setting up: %s", strerror(-ret));
		goto out;
	}
	start = bench_now_ns();
	while (left && !ret) {
		bool busy = false;

		for (unsigned i = 0; i < engines && !ret; i++) {
			if (ld_engine_done(e[i]))
				continue;
			ret = ld_engine_step(e[i]);
			if (ret < 0) {
				snprintf(r->why, sizeof(r->why), "engine %u: %s", i, ld_engine_error(e[i]));
				break;
			}
			ret = 0;
			busy |= ld_engine_busy(e[i]) != 0;
			left -= ld_engine_done(e[i]);
		}
		kvc_pool_stats(pool, &ps);
		sum_used += ps.used;
		rounds++;
		r->peak_used = ps.used > r->peak_used ? ps.used : r->peak_used;
		/* Nothing running anywhere, round after round: what waits can never fit. */
		idle = busy || !left ? 0 : idle + 1;
		if (idle > IDLE_ROUNDS) {
			ret = -ENOSPC;
			snprintf(r->why, sizeof(r->why), "a request needs more blocks than the pool's %u",
				 w->pool_blocks - 1);
		}
	}
	end = bench_now_ns();
	for (unsigned i = 0; i < engines && !ret; i++)
		ret = ld_stats_merge(&all, ld_engine_stats(e[i]));
	if (ret)
		goto out;
	all.n.start_ns = start;
	all.n.end_ns = end;
	r->mean_usage = (double)sum_used / (double)rounds / (w->pool_blocks - 1);
	kvc_pool_stats(pool, &ps);
	r->blocks_leaked = ps.used;
	if (ps.used) {
		ret = -EUCLEAN;
		snprintf(r->why, sizeof(r->why), "%u blocks still in use after the engines finished",
			 ps.used);
	} else if ((ret = kvc_pool_check(pool, r->why, sizeof(r->why)))) {
		goto out;
	}
	if (!ret)
		result_of(&all, r);
out:
	for (unsigned i = 0; i < engines; i++)
		ld_engine_free(e[i]);
	if (pool)
		kvc_pool_destroy(pool);
	ld_stats_free(&all);
	r->err = ret;
	return ret;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void result_of(struct ld_stats *all, struct ld_result *r)
{
	r->n = all->n;
	r->seconds = (double)(all->n.end_ns - all->n.start_ns) / 1e9;
	for (int k = 0; k < LD_NKINDS; k++) {
		struct ld_samples *s = &all->lat[k];
		struct ld_pct *p = &r->lat[k];

		p->count = s->n;
		if (!s->n)
			continue;
		qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
		p->median = s->v[s->n / 2];
		p->p99 = s->v[s->n * 99 / 100];
		p->p999 = s->v[s->n * 999 / 1000];
	}
}
