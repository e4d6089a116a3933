/* SPDX-License-Identifier: MIT */
/*
 * kvbench replay's run: on each node a pool of its own (on a kvpoold it
 * starts, or at --socket) and --engines processes, a node's requests going to
 * its engines in turn, in trace order, each as an engine serves it: the
 * prompt opened, LOOKUP, ALLOC with the cache (timed, and marked when it
 * waited for a tier), the missed tokens' KV written and committed, the output
 * decoded a token at a time, then closed. With --restart-at, the daemon
 * restarted midway (replay_restart.c).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "replay.h"
#include "kvbench.h"

#define CHUNK 8192            /* tokens a WRITE_KV carries */
#define MAX_SAMPLES (1u << 22) /* decode ALLOCs, and the bystander's NOPs, timed at most */
#define BYSTANDER_GAP_NS 200000 /* the bystander's pause between NOPs */

/* What the engines and the bystander write for the parent (shared memory). */
struct samples {
	uint64_t decode_ns[MAX_SAMPLES];
	uint64_t nop_ns[MAX_SAMPLES];
	uint32_t nops;
	uint32_t stop;        /* the engines are done: the bystander stops */
};
#define NOSPACE_WAIT_NS (30ull * 1000000000ull) /* a request waits this long for room */

struct engine {
	struct kvp_client *c;
	struct kvp_connect_opts co;
	const struct replay_opts *o;
	uint32_t head_dim;
	float *zeros;             /* K (and V) of CHUNK tokens */
	uint32_t *tokens;
	uint64_t start_ns;
	uint32_t decoded;         /* generated tokens so far: each one unique */
	uint32_t ngroups;         /* the pool's: every group's KV is written */
	struct samples *samples;
	uint64_t sample_at;       /* this request's first decode sample */
	unsigned node;            /* whose requests it serves: node_of[i] == node... */
	const uint8_t *node_of;
	const uint32_t *turn;     /* ...and turn[i] % engines == its index */
};

/* ALLOC through the ring, for its flags: 0 and the hit, or -errno. */
static int alloc(struct engine *e, uint64_t h, uint32_t n, bool cache, uint32_t *hit,
		 bool *tier)
{
	struct kvp_sqe *sqe = kvp_get_sqe(e->c);
	struct kvp_cqe *cqe;
	int ret;

	if (!sqe)
		return -EBUSY;
	kvp_prep_alloc(sqe, h, n, 0, cache);
	ret = kvp_submit(e->c);
	if (ret < 0)
		return ret;
	ret = kvp_wait_cqe(e->c, &cqe);
	if (ret)
		return ret;
	ret = cqe->res;
	if (hit)
		*hit = (uint32_t)cqe->aux;
	if (tier)
		*tier = cqe->flags & KVP_CQE_F_TIER;
	kvp_cqe_seen(e->c, cqe);
	return ret;
}

/* A pool short of room frees up as other engines finish: wait for it, up to a bound. */
static int alloc_waiting(struct engine *e, uint64_t h, uint32_t n, bool cache, uint32_t *hit,
			 bool *tier, uint64_t *ns)
{
	uint64_t t0 = bench_now_ns();
	int ret;

	for (;;) {
		uint64_t t = bench_now_ns();

		ret = alloc(e, h, n, cache, hit, tier);
		*ns = bench_now_ns() - t;
		if (ret != -ENOSPC || bench_now_ns() - t0 > NOSPACE_WAIT_NS)
			return ret;
		nanosleep(&(struct timespec){ 0, 200000 }, NULL);
	}
}

static int write_kv(struct engine *e, uint64_t h, uint32_t first, uint32_t count)
{
	for (uint32_t g = 0; g < e->ngroups; g++)
		for (uint32_t at = first; at < first + count; at += CHUNK) {
			uint32_t n = first + count - at < CHUNK ? first + count - at : CHUNK;
			int ret = kvp_write_kv(e->c, h, g, 0, at, n, e->zeros, e->zeros);

			if (ret)
				return ret;
		}
	return 0;
}

/* The prompt from @computed on, in steps of at most max_step tokens (a cyclic ring's bound). */
static int prefill(struct engine *e, uint64_t h, uint32_t computed, uint32_t allocated,
		   uint32_t in_len)
{
	int ret = 0;

	while (!ret && computed < in_len) {
		uint32_t n = in_len - computed < e->o->max_step ? in_len - computed : e->o->max_step;

		if (computed + n > allocated) {
			ret = alloc_waiting(e, h, n, false, NULL, NULL, &(uint64_t){ 0 });
			allocated = computed + n;
		}
		if (!ret)
			ret = write_kv(e, h, computed, n) ?: kvp_commit(e->c, h, computed + n);
		computed += n;
	}
	return ret;
}

static int serve(struct engine *e, const struct replay_req *r, struct replay_result *res)
{
	uint32_t hit = 0, want, first;
	bool tier = false;
	uint64_t h, t0;
	int ret;

	for (uint32_t j = 0; j < r->in_len; j++)
		e->tokens[j] = replay_token(r->ids, j);
	ret = kvp_seq_open(e->c, e->tokens, r->in_len, NULL, 0, -1, &h);
	if (ret)
		return ret;
	t0 = bench_now_ns();
	want = (uint32_t)kvp_lookup(e->c, h, NULL, 0);
	res->lookup_ns = bench_now_ns() - t0;
	first = r->in_len - want < e->o->max_step ? r->in_len - want : e->o->max_step;
	ret = alloc_waiting(e, h, first, true, &hit, &tier, &res->alloc_ns);
	/* Served again after a restart: the hit is the first try's, as a run without it saw. */
	if (!ret && !res->measured) {
		res->hit_tokens = hit;
		res->tier = tier;
		res->measured = 1;
	}
	/*
	 * Another engine's ALLOC may have evicted some of the hit since the LOOKUP:
	 * slots run to computed + new tokens, so the prompt's end needs more ALLOCs.
	 */
	if (!ret)
		ret = prefill(e, h, hit, hit + first, r->in_len);
	for (uint32_t t = 0; !ret && e->o->decode && t < r->out_len; t++) {
		/* High bit set: never a prompt token of the trace's (those are mixed ids). */
		uint32_t tok = 0x80000000u | (uint32_t)(getpid() << 20) | (e->decoded++ & 0xfffff);

		uint64_t ns = 0;

		ret = kvp_append(e->c, h, &tok, 1) ?:
		      alloc_waiting(e, h, 1, false, NULL, NULL, &ns) ?:
		      write_kv(e, h, r->in_len + t, 1) ?: kvp_commit(e->c, h, r->in_len + t + 1);
		if (e->sample_at + t < MAX_SAMPLES)
			e->samples->decode_ns[e->sample_at + t] = ns;
	}
	kvp_seq_close(e->c, h);
	return ret;
}

/* A new connection with the engine's settings, the daemon given a minute to come back. */
static int reconnect(struct engine *e)
{
	uint64_t t0 = bench_now_ns();
	int ret;

	kvp_close(e->c);
	e->c = NULL;
	while ((ret = kvp_connect(&e->co, &e->c)) && bench_now_ns() - t0 < 60000000000ull)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	return ret;
}

static int engine_main(struct engine *e, unsigned k, const struct replay_req *reqs, uint32_t n,
		       struct replay_result *res)
{
	uint64_t at = 0;

	for (uint32_t i = 0; i < n; i++) {
		e->sample_at = at;
		at += e->o->decode ? reqs[i].out_len : 0;
		if (e->node_of[i] != e->node || e->turn[i] % e->o->engines != k)
			continue;
		if (e->o->speed > 0) {
			uint64_t due = e->start_ns + (uint64_t)((double)(reqs[i].ts_ms - reqs[0].ts_ms) *
								1e6 / e->o->speed);
			uint64_t now = bench_now_ns();

			if (due > now)
				nanosleep(&(struct timespec){ (time_t)((due - now) / 1000000000ull),
							      (long)((due - now) % 1000000000ull) }, NULL);
		}
		/* Longer than the whole pool: it would wait for room that never comes. */
		if (reqs[i].in_len + (uint64_t)(e->o->decode ? reqs[i].out_len : 0) >
		    e->o->pool_tokens) {
			res[i].error = -ENOSPC;
			fprintf(stderr, "kvbench replay: request %u: %u tokens, more than the "
				"pool's %llu: not served\n", i, reqs[i].in_len +
				(e->o->decode ? reqs[i].out_len : 0),
				(unsigned long long)e->o->pool_tokens);
		} else {
			res[i].error = serve(e, &reqs[i], &res[i]);
			/* The daemon restarted (--restart-at): connected again, served again. */
			while (e->o->restart_at > 0 && (res[i].error == -ECONNRESET ||
							res[i].error == -EPIPE ||
							res[i].error == -ENOTCONN) && !reconnect(e))
				res[i].error = serve(e, &reqs[i], &res[i]);
			if (res[i].error)
				fprintf(stderr, "kvbench replay: request %u: %s\n", i,
					strerror(-res[i].error));
		}
		res[i].done = 1;
	}
	return 0;
}

static int engine_process(struct engine e, const char *sock, const char *pool, unsigned k,
			  const struct replay_req *reqs, uint32_t n, struct replay_result *res,
			  uint32_t max_in)
{
	const struct replay_opts *o = e.o;
	int ret;

	e.co = (struct kvp_connect_opts){ .socket_path = sock, .pool = pool,
					  .arena_bytes = (uint64_t)max_in * 4 +
							 (uint64_t)CHUNK * o->kv_bytes_per_token +
							 (1u << 20) };
	e.zeros = calloc((size_t)CHUNK * e.head_dim, sizeof(float));
	e.tokens = calloc(max_in, sizeof(*e.tokens));
	ret = e.zeros && e.tokens ? kvp_connect(&e.co, &e.c) : -ENOMEM;
	if (ret) {
		fprintf(stderr, "kvbench replay: engine %u: connect to %s: %s\n", k, sock, strerror(-ret));
		return 1;
	}
	e.ngroups = kvp_pool_info(e.c)->num_groups;
	engine_main(&e, k, reqs, n, res);
	kvp_close(e.c);
	free(e.zeros);
	free(e.tokens);
	return 0;
}

/* A client of another pool, a NOP every 200 us while the engines run: what they cost others. */
static int bystander(const char *sock, const char *pool, struct samples *s)
{
	struct kvp_connect_opts co = { .socket_path = sock, .pool = pool };
	struct kvp_client *c;

	if (kvp_connect(&co, &c))
		return 1;
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE) && s->nops < MAX_SAMPLES) {
		uint64_t t0 = bench_now_ns();

		if (kvp_nop(c))
			break;
		s->nop_ns[s->nops++] = bench_now_ns() - t0;
		nanosleep(&(struct timespec){ 0, BYSTANDER_GAP_NS }, NULL);
	}
	kvp_close(c);
	return 0;
}

static int make_bystander_pool(struct kvp_client *admin, const char *name)
{
	struct kvp_pool_params_v2 p;
	char why[KVP_REASON_MAX] = "";
	int ret;

	kvp_pool_params_v2_init(&p, name);
	ret = kvp_pool_create_v3(admin, &p, "blocks = 8\nblock_size = 16\ngroups = full\n", 0, why,
				 sizeof(why));
	if (ret)
		fprintf(stderr, "kvbench replay: pool %s: %s\n", name, *why ? why : strerror(-ret));
	return ret;
}

static void latencies(struct samples *s, const struct replay_opts *o, const struct replay_req *reqs,
		      uint32_t n, struct replay_lat *lat)
{
	uint64_t total = 0;

	for (uint32_t i = 0; i < n && o->decode; i++)
		total += reqs[i].out_len;
	lat->decode_n = total < MAX_SAMPLES ? total : MAX_SAMPLES;
	if (lat->decode_n)
		bench_percentiles(s->decode_ns, lat->decode_n, &lat->decode);
	lat->nop_n = s->nops;
	if (lat->nop_n)
		bench_percentiles(s->nop_ns, lat->nop_n, &lat->nop);
}

/* A disk tier of @tokens: its blocks times a block's KV (the file adds its records, its pages). */
static uint64_t disk_bytes(const struct replay_opts *o)
{
	return o->tier_disk_tokens / o->block_size * o->block_size * o->kv_bytes_per_token;
}

/*
 * Without --tier-disk-path, the disk tier's file goes in a directory of the
 * run's own under $TMPDIR (else /var/tmp), removed on every way out: the
 * signals that end a run remove it too (the file first, which the daemon may
 * still hold open: its blocks go when it closes it).
 */
static char own_dir[PATH_MAX - 64], own_file[PATH_MAX];

static void remove_own(void)
{
	if (*own_file)
		unlink(own_file);
	if (*own_dir)
		rmdir(own_dir);
}

/* A forked engine or bystander goes with kvbench (a SIGINT to kvbench alone, as kill sends it,
 * would leave them replaying against a daemon that is gone). 0, or its exit status. */
static int dies_with(pid_t parent)
{
	return prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent ? 1 : 0;
}

static const char *own_disk_dir(const char *pool)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(own_dir, sizeof(own_dir), "%s/kvbench-tier.XXXXXX", tmp && *tmp ? tmp : "/var/tmp");
	if (!mkdtemp(own_dir)) {
		fprintf(stderr, "kvbench replay: making a directory for the disk tier, %s: %s\n",
			own_dir, strerror(errno));
		*own_dir = '\0';
		return NULL;
	}
	snprintf(own_file, sizeof(own_file), "%s/%s.kvtier", own_dir, pool);
	replay_on_signal(remove_own);
	return own_dir;
}

static int make_pool(struct kvp_client *admin, const struct replay_opts *o, const char *name,
		     const char *disk_dir)
{
	struct kvp_pool_params_v2 p;
	char keys[1024 + PATH_MAX], why[KVP_REASON_MAX] = "";
	int n, ret;

	kvp_pool_params_v2_init(&p, name);
	n = snprintf(keys, sizeof(keys), "blocks = %llu\nblock_size = %u\ngroups = %s\n"
		     "max_step_tokens = %u\n"
		     "kv_heads = 1\nhead_dim = %u\ndtype = f32\nlayers_per_group = 1\n"
		     "tier_host_bytes = %llu\ntier_policy = %s\n",
		     (unsigned long long)(o->pool_tokens / o->block_size + 1), o->block_size,
		     o->groups, o->max_step, o->kv_bytes_per_token / 8,
		     (unsigned long long)(o->tier_host_tokens / o->block_size * o->block_size *
					  o->kv_bytes_per_token), o->tier_policy);
	if (o->snapshot_every >= 0)
		n += snprintf(keys + n, sizeof(keys) - (size_t)n, "snapshot_every = %lld\n",
			      (long long)o->snapshot_every);
	if (o->tier_remote)
		n += snprintf(keys + n, sizeof(keys) - (size_t)n, "tier_remote = %s\n", o->tier_remote);
	if (o->tier_remote_timeout_ms)
		n += snprintf(keys + n, sizeof(keys) - (size_t)n, "tier_remote_timeout_ms = %u\n",
			      o->tier_remote_timeout_ms);
	if (o->tier_disk_tokens)
		snprintf(keys + n, sizeof(keys) - (size_t)n, "tier_disk_bytes = %llu\n"
			 "tier_disk_path = %s\n", (unsigned long long)disk_bytes(o), disk_dir);
	ret = kvp_pool_create_v3(admin, &p, keys, 0, why, sizeof(why));
	if (ret)
		fprintf(stderr, "kvbench replay: pool %s: %s\n", name, *why ? why : strerror(-ret));
	return ret;
}

/* Pool @name's row in @v, or NULL. */
static const struct kvp_stats_pool *pool_row(const struct kvp_stats_view *v, const char *name)
{
	KVP_STATS_FOR_EACH_POOL(v, p)
		if (!strncmp(p->name, name, KVP_NAME_MAX))
			return p;
	return NULL;
}

/* One sample of the blocks each of the pool's groups holds, into the running means. */
static void sample_held(struct kvp_client *admin, const char *name, struct replay_held *h)
{
	struct kvp_stats_view v = { 0 };
	const struct kvp_stats_pool *p;

	if (kvp_stats_view_take(admin, &v))
		return;
	if ((p = pool_row(&v, name))) {
		h->ngroups = p->num_groups < KVP_MAX_GROUPS ? p->num_groups : KVP_MAX_GROUPS;
		h->samples++;
		for (uint32_t g = 0; g < h->ngroups; g++) {
			uint64_t b = p->groups[g].blocks_held;

			h->mean[g] += ((double)b - h->mean[g]) / (double)h->samples;
			h->max[g] = b > h->max[g] ? b : h->max[g];
		}
	}
	kvp_stats_view_release(&v);
}

static void snapshot_counters(struct kvp_client *admin, const char *name, struct replay_held *h)
{
	struct kvp_stats_view v = { 0 };
	const struct kvp_stats_pool *p;
	const struct kvp_stats_snapshots *s;

	if (kvp_stats_view_take(admin, &v))
		return;
	if ((p = pool_row(&v, name)) && (s = kvp_stats_snapshots_of(&v, p))) {
		h->snapshots = true;
		h->snap_made = s->made;
		h->snap_hit = s->hit;
		h->snap_evicted = s->evicted;
		h->snap_held = s->held;
	}
	kvp_stats_view_release(&v);
}

static void tier_counters(struct kvp_client *admin, const char *name, struct replay_tier *t)
{
	struct kvp_stats_view v = { 0 };

	if (kvp_stats_view_take(admin, &v) == 0) {
		KVP_STATS_FOR_EACH_POOL(&v, p) {
			const struct kvp_stats_tier *row = kvp_stats_tier_of(&v, p);
			const struct kvp_stats_remote *r = kvp_stats_remote_of(&v, p);

			if (strncmp(p->name, name, KVP_NAME_MAX))
				continue;
			t->pool_evicted = p->evictions_reuse;
			if (r) {
				t->remote_hit_tokens = r->hit_tokens;
				t->remote_bytes_in = r->bytes_in;
				t->remote_bytes_out = r->bytes_out;
				t->remote_round_p50_ns = r->round_p50_ns;
				t->remote_round_p99_ns = r->round_p99_ns;
				t->remote_timeouts = r->timeouts;
			}
			if (!row)
				continue;
			t->hit_tokens = row->hit_tokens;
			t->bytes_down = row->bytes_down;
			t->bytes_up = row->bytes_up;
			t->promoted = row->promoted;
			t->stored = row->stored;
			t->skipped = row->skipped;
			t->abandoned = row->abandoned;
			t->disk = row->kind == KVP_TIER_DISK;
			t->declined = row->declined;
			memcpy(t->unoffered, row->unoffered, sizeof(t->unoffered));
			t->ns_down = row->ns_down;
			t->ns_up = row->ns_up;
			t->slots = row->slots;
		}
	}
	kvp_stats_view_release(&v);
}

/* One node of the run: its kvpoold (started, or --socket's), its admin client, its pool. */
struct node {
	struct bench_daemon dmn;
	const char *sock;
	struct kvp_client *admin;
	char pool[KVP_NAME_MAX];
	bool made;
};

/* Node @k's daemon (the one at --socket, or one it starts), its admin client and its pool. */
static int node_start(const struct replay_opts *o, struct node *nd, unsigned k, const char *dir)
{
	char bin[PATH_MAX];
	int ret;

	nd->dmn.pid = -1;
	nd->sock = o->socket;
	if (!nd->sock) {
		bench_daemon_path(o->daemon, bin, sizeof(bin));
		ret = bench_daemon_start(&nd->dmn, bin, 50, NULL, -1);
		if (ret) {
			fprintf(stderr, "kvbench replay: kvpoold %s: %s\n", bin, strerror(-ret));
			return ret;
		}
		nd->sock = nd->dmn.socket;
	}
	ret = kvp_connect(&(struct kvp_connect_opts){ .socket_path = nd->sock, .admin = true,
						     .stats_page = true, .monitor = true },
			  &nd->admin);
	if (ret) {
		fprintf(stderr, "kvbench replay: connect to %s as admin: %s\n", nd->sock,
			strerror(-ret));
		return ret;
	}
	/* One name a node: their disk tiers' files share a directory. */
	if (o->nodes > 1)
		snprintf(nd->pool, sizeof(nd->pool), "replay-%d-%u", (int)getpid(), k);
	else
		snprintf(nd->pool, sizeof(nd->pool), "replay-%d", (int)getpid());
	ret = o->tier_disk_tokens && !dir ? -EIO : make_pool(nd->admin, o, nd->pool, dir);
	nd->made = !ret;
	return ret;
}

static void node_stop(const struct replay_opts *o, struct node *nd, const char *dir)
{
	/* A disk tier's file is the run's own: it goes with the pool. */
	if (nd->made && nd->admin && bench_pool_drop(nd->admin, nd->pool) && o->tier_disk_tokens && !*own_dir)
		fprintf(stderr, "kvbench replay: %s/%s.kvtier left behind\n", dir, nd->pool);
	kvp_close(nd->admin);
	if (nd->dmn.pid > 0)
		bench_daemon_stop(&nd->dmn);
}

int replay_run(const struct replay_opts *o, const struct replay_req *reqs, uint32_t n,
	       const uint8_t *node_of, struct replay_result *res, struct replay_tier *tiers,
	       struct replay_lat *lat, struct replay_held *held, uint64_t *elapsed_ns)
{
	struct node nodes[REPLAY_MAX_NODES] = { 0 };
	char by_pool[KVP_NAME_MAX];
	const char *disk_dir = NULL;
	unsigned nengines = o->nodes * o->engines, started = 0;
	uint32_t *turn = calloc(n ? n : 1, sizeof(*turn)), seen[REPLAY_MAX_NODES] = { 0 };
	struct samples *samples;
	struct replay_tier before = { 0 };
	pid_t *pids, by = -1, parent;
	uint32_t max_in = 1;
	bool restarted = false;
	uint64_t t0;
	int ret = 0;

	for (uint32_t i = 0; i < n; i++) {
		max_in = reqs[i].in_len > max_in ? reqs[i].in_len : max_in;
		turn[i] = turn ? seen[node_of[i]]++ : 0;
	}
	pids = calloc(nengines, sizeof(*pids));
	/* Shared with the engines and the bystander; untouched pages cost nothing. */
	samples = mmap(NULL, sizeof(*samples), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		       -1, 0);
	if (!pids || !turn || samples == MAP_FAILED) {
		ret = -ENOMEM;
		goto out_free;
	}
	snprintf(by_pool, sizeof(by_pool), "replay-%d-by", (int)getpid());
	/* The first node's file is removed on a signal; the others' by their pools' drop. */
	snprintf(nodes[0].pool, sizeof(nodes[0].pool), o->nodes > 1 ? "replay-%d-0" : "replay-%d",
		 (int)getpid());
	disk_dir = o->tier_disk_tokens && !o->tier_disk_path ? own_disk_dir(nodes[0].pool) :
		   o->tier_disk_path;
	for (; started < o->nodes && !ret; started++)
		ret = node_start(o, &nodes[started], started, disk_dir);
	if (!ret && o->bystander)
		ret = make_bystander_pool(nodes[0].admin, by_pool);
	if (ret)
		goto out_nodes;
	fflush(NULL);
	parent = getpid();
	if (o->bystander) {
		by = fork();
		if (by == 0)
			_exit(dies_with(parent) ?: bystander(nodes[0].sock, by_pool, samples));
	}
	t0 = bench_now_ns();
	for (unsigned k = 0; k < nengines; k++) {
		unsigned node = k / o->engines;
		struct engine e = { .o = o, .head_dim = o->kv_bytes_per_token / 8, .start_ns = t0,
				    .samples = samples, .node = node, .node_of = node_of,
				    .turn = turn };

		pids[k] = fork();
		if (pids[k] == 0)
			_exit(dies_with(parent) ?:
			      engine_process(e, nodes[node].sock, nodes[node].pool, k % o->engines,
					     reqs, n, res, max_in));
	}
	/* Meanwhile, every 20 ms, the blocks each group of the first node's pool holds. */
	for (unsigned left = nengines; left;) {
		left = 0;
		for (unsigned k = 0; k < nengines; k++) {
			int status = 0;
			pid_t got;

			if (pids[k] <= 0)
				continue;
			got = waitpid(pids[k], &status, WNOHANG);
			if (got == 0) {
				left++;
				continue;
			}
			if (got == pids[k] && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
				ret = -ECHILD;
			pids[k] = -1;
		}
		if (left && !restarted && replay_restart_due(o, res, n)) {
			restarted = true;
			tier_counters(nodes[0].admin, nodes[0].pool, &before);
			if (replay_restart(&nodes[0].admin, nodes[0].sock, nodes[0].pool, reqs, res, n,
					   &lat->restart_s))
				ret = -EIO;
		}
		if (left && nodes[0].admin) {
			sample_held(nodes[0].admin, nodes[0].pool, held);
			nanosleep(&(struct timespec){ 0, 20000000 }, NULL);
		}
	}
	*elapsed_ns = bench_now_ns() - t0;
	__atomic_store_n(&samples->stop, 1, __ATOMIC_RELEASE);
	if (by > 0)
		waitpid(by, NULL, 0);
	for (uint32_t i = 0; i < n; i++)
		if (!res[i].done)
			ret = -ECHILD;
	if (ret)
		fprintf(stderr, "kvbench replay: an engine did not finish its requests\n");
	latencies(samples, o, reqs, n, lat);
	for (unsigned k = 0; k < o->nodes && nodes[k].admin; k++) {
		kvp_pool_sync(nodes[k].admin, nodes[k].pool);
		tier_counters(nodes[k].admin, nodes[k].pool, &tiers[k]);
	}
	if (restarted)
		replay_tier_add(&tiers[0], &before);
	if (nodes[0].admin)
		snapshot_counters(nodes[0].admin, nodes[0].pool, held);
out_nodes:
	if (o->bystander && nodes[0].admin)
		kvp_pool_destroy(nodes[0].admin, by_pool);
	while (started--)
		node_stop(o, &nodes[started], disk_dir);
	remove_own();
out_free:
	if (samples != MAP_FAILED)
		munmap(samples, sizeof(*samples));
	free(pids);
	free(turn);
	return ret;
}
