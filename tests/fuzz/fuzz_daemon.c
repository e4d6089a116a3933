/* SPDX-License-Identifier: MIT */
/*
 * The in-process kvpoold of fuzz_session and fuzz_config (fuzz_daemon.h).
 *
 * What lives per process: the daemon context, its config (quotas, namespaces),
 * the stats page and two worker threads. They are what kvpoold sets up once at
 * start, they hold no state of a session once its clients are gone, and making
 * them per input (a memfd, thread start and join) would cost more than the
 * session itself.
 *
 * What lives per input: the pools, the clients and everything they make
 * (tenants, stats views, owned pools). Pools carry a prefix cache whose
 * content would make one input's outcome depend on the inputs before it; a
 * fresh pool per input keeps every crash reproducible from its input alone.
 * At the end of each input, fz_teardown checks that the daemon is back where
 * it started (no client, job, tenant, view or descriptor left) before it
 * frees the pools, so a leak of any of those fails the input that caused it.
 *
 * Clients connect through a real socketpair and the real setup handshake
 * (kvpd_client_accept, kvpd_client_event), and map the memfd from the reply
 * as a client process would: the harness writes only to that mapping.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sanitizer/common_interface_defs.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_daemon.h"
#include "observe/probes.h"
#include "../../lib/libkvpool.h"

bool fz_fail_client_watch, fz_fail_doorbell_watch;
bool fz_verbose;

/*
 * Descriptors open when the input started: not a count kept from the first
 * input, since between inputs libFuzzer may start the symbolizer (two pipes).
 */
static unsigned fds_baseline;

/*
 * Through the sanitizers' report channel: libFuzzer's -close_fd_mask closes
 * stderr (config.c complains there about every bad line), not that.
 */
void fz_fail(const char *fmt, ...)
{
	char msg[512] = "fuzz: ";
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg + 6, sizeof(msg) - 6, fmt, ap);
	va_end(ap);
	__sanitizer_report_error_summary(msg);
	abort();
}

/*
 * The event loop: nothing to watch, nothing to wait for; the harness calls
 * what the loop would. Releasing a client closes its descriptors through the
 * courier, which (never started) closes them at once, as at daemon exit.
 */
static int ev_init(struct kvpd *d, char *why, size_t why_len)
{
	(void)d, (void)why, (void)why_len;
	return 0;
}

static void ev_fini(struct kvpd *d)
{
	(void)d;
}

static int ev_watch(struct kvpd *d, int fd, enum kvpd_event ev)
{
	(void)d, (void)fd, (void)ev;
	return 0;
}

static int ev_accept_start(struct kvpd *d)
{
	(void)d;
	return 0;
}

static void ev_accept_stop(struct kvpd *d)
{
	(void)d;
}

static int ev_client_watch(struct kvpd *d, struct kvpd_conn *conn)
{
	(void)d, (void)conn;
	return fz_fail_client_watch ? -ENOMEM : 0;
}

static int ev_doorbell_watch(struct kvpd *d, struct kvpd_conn *conn)
{
	(void)d, (void)conn;
	return fz_fail_doorbell_watch ? -ENOMEM : 0;
}

static void ev_client_release(struct kvpd *d, struct kvpd_conn *conn)
{
	kvpd_courier_close(&d->courier, conn->owner, conn->sock);
	kvpd_courier_close(&d->courier, conn->owner, conn->bell);
	conn->sock = conn->bell = -1;
}

static int ev_wait(struct kvpd *d, int timeout_ms, kvpd_event_fn *fn)
{
	(void)d, (void)timeout_ms, (void)fn;
	return 0;
}

static const struct kvpd_evloop_ops fz_evloop = {
	.name = "fuzz", .kind = KVP_EVENT_LOOP_EPOLL, .init = ev_init, .fini = ev_fini,
	.watch = ev_watch, .accept_start = ev_accept_start, .accept_stop = ev_accept_stop,
	.client_watch = ev_client_watch, .doorbell_watch = ev_doorbell_watch,
	.client_release = ev_client_release, .wait = ev_wait,
};

static unsigned fds_open(void)
{
	DIR *dir = opendir("/proc/self/fd");
	unsigned n = 0;

	if (!dir)
		fz_fail("/proc/self/fd: %s", strerror(errno));
	while (readdir(dir))
		n++;
	closedir(dir);
	return n;
}

/*
 * Quotas small enough for a few requests to reach them: [quota] for every
 * uid, [uid.N] for uid 1000 and for the daemon's own (which has none
 * otherwise), and two namespaces.
 */
static void configure(struct kvpd_config *cfg)
{
	static struct kvpd_uid_quota uids[2];
	struct kvpd_namespace *ns;

	cfg->socket_path = "fuzz";
	cfg->budget = 64;
	cfg->max_clients = 8;
	cfg->threads = 2;
	kvpd_quota_defaults(&cfg->quota);
	cfg->quota.limit[KVP_QUOTA_CLIENTS] = 2;
	cfg->quota.limit[KVP_QUOTA_SEQUENCES] = 24;
	cfg->quota.limit[KVP_QUOTA_TOKENS] = 4096;
	cfg->quota.limit[KVP_QUOTA_ARENA_BYTES] = 2u << 20;
	cfg->quota.limit[KVP_QUOTA_BLOCKS] = 40;
	uids[0].uid = 1000;
	uids[0].set = 1u << KVP_QUOTA_BLOCKS | 1u << KVP_QUOTA_TOKENS;
	uids[0].quota.limit[KVP_QUOTA_BLOCKS] = 24;
	uids[0].quota.limit[KVP_QUOTA_TOKENS] = KVP_QUOTA_UNLIMITED;
	uids[1].uid = geteuid();
	uids[1].set = 1u << KVP_QUOTA_SEQUENCES | 1u << KVP_QUOTA_ARENA_BYTES;
	uids[1].quota.limit[KVP_QUOTA_SEQUENCES] = 512;
	uids[1].quota.limit[KVP_QUOTA_ARENA_BYTES] = 8u << 20;
	cfg->uid_quotas = uids;
	cfg->nuid_quotas = 2;

	ns = &cfg->namespaces[cfg->nnamespaces++];
	strcpy(ns->name, "team");
	ns->uids[ns->nuids++] = 1000;
	for (unsigned k = 0; k < KVPD_QUOTA_KEYS; k++)
		ns->quota.limit[k] = KVP_QUOTA_UNLIMITED;
	ns->quota.limit[KVP_QUOTA_SEQUENCES] = 8;
	ns = &cfg->namespaces[cfg->nnamespaces++];
	strcpy(ns->name, "open");
	ns->uids[ns->nuids++] = 1000;
	ns->uids[ns->nuids++] = 1001;
	for (unsigned k = 0; k < KVPD_QUOTA_KEYS; k++)
		ns->quota.limit[k] = KVP_QUOTA_UNLIMITED;
	ns->quota.limit[KVP_QUOTA_CLIENTS] = 1;
}

struct kvpd *fz_daemon(void)
{
	static struct kvpd_workers workers;
	static struct kvpd_plugin cuda;
	static struct kvpd_statpage stats = { .fd = -1 };
	static struct kvpd d = { .listen_fd = -1, .lock_fd = -1, .signal_fd = -1, .timer_fd = -1,
				 .workers = &workers, .cuda = &cuda, .stats = &stats };
	static bool made;
	int ret;

	if (made)
		return &d;
	fz_verbose = getenv("FUZZ_VERBOSE") != NULL;
	d.log.level = fz_verbose ? KVPD_LOG_DEBUG : 0;
	configure(&d.cfg);
	d.ncpus = 2;
	d.ev = &fz_evloop;
	d.clients = calloc(d.cfg.max_clients, sizeof(*d.clients));
	d.active = calloc(d.cfg.max_clients, sizeof(*d.active));
	if (!d.clients || !d.active)
		fz_fail("out of memory");
	ret = kvpd_statpage_init(&d, &kvpd_stats_hooks);
	if (ret)
		fz_fail("stats page: %s", strerror(-ret));
	d.stats->page->event_loop = d.ev->kind;
	/* Threads, as in kvpoold: split-K and the loop's help only happen with two or more. */
	ret = kvpd_workers_start(d.workers, d.cfg.threads, 0, kvpd_job_run);
	if (ret)
		fz_fail("workers: %s", strerror(-ret));
	made = true;
	return &d;
}

/* Pool shapes, as kvctl's key=value words; "kv" shapes start from 2 heads x 8 dims x 2 layers. */
static const char *const kv_shapes[8] = {
	"blocks=64 block_size=4 groups=full max_len=256",
	"blocks=64 block_size=4 groups=full,swa:8 max_len=256",
	"blocks=64 block_size=4 groups=full,rswa:6 max_step_tokens=8 max_len=256",
	"blocks=48 block_size=8 groups=chunked:16 max_len=256",
	"blocks=64 block_size=4 groups=cyclic:8,full max_step_tokens=8 max_len=256",
	("blocks=64 block_size=4 groups=full caching=off free_order=append kv_heads=1 head_dim=4 "
	 "layers_per_group=1"),
	"blocks=64 block_size=2 groups=swa:4,swa:12 kv_heads=4 head_dim=16",
	"blocks=8 block_size=2 groups=full max_len=64",
};
static const char *const plain_shapes[4] = {
	"blocks=32 block_size=2 groups=full,swa:4 publish=alloc max_len=128",
	"blocks=16 block_size=16 groups=full free_order=append max_len=512",
	"blocks=32 block_size=2 groups=cyclic:4,chunked:4 max_step_tokens=4 caching=off",
	"blocks=128 block_size=1 groups=rswa:3,full max_len=256",
};

/* What a pool the input makes may have at most: 8K token positions, 128 KiB slots. */
#define CLAMP_BLOCKS 128u
#define CLAMP_BLOCK_SIZE 64u
#define CLAMP_TOKENS 4096u
#define CLAMP_HEADS 4u
#define CLAMP_HEAD_DIM 32u
#define CLAMP_LAYERS 2u

static uint32_t clamp(uint32_t v, uint32_t cap, uint32_t valid_max)
{
	return v > cap && v <= valid_max ? cap : v;
}

void fz_clamp_pool_params(struct kvp_pool_params *p)
{
	p->num_blocks = clamp(p->num_blocks, CLAMP_BLOCKS, 1u << 24);
	p->block_size = clamp(p->block_size, CLAMP_BLOCK_SIZE, 1u << 30);
	p->max_step_tokens = clamp(p->max_step_tokens, CLAMP_TOKENS, ~0u);
	for (unsigned g = 0; g < KVP_MAX_GROUPS; g++)
		p->group_param[g] = clamp(p->group_param[g], CLAMP_TOKENS, 1u << 30);
	p->kv_heads = clamp(p->kv_heads, CLAMP_HEADS, 1024);
	p->head_dim = clamp(p->head_dim, CLAMP_HEAD_DIM, 1024);
	p->layers_per_group = clamp(p->layers_per_group, CLAMP_LAYERS, 1024);
}

/* And a tier at most 64 MiB: the fuzzer's memory is not the daemon's concern here. */
void fz_clamp_pool_spec(struct kvpd_pool_spec *spec)
{
	fz_clamp_pool_params(&spec->v2.v1);
	if (spec->tier_host_bytes > (64u << 20))
		spec->tier_host_bytes = 64u << 20;
}

static void make_pool(struct kvpd *d, const char *name, const char *words)
{
	char buf[256], *save = NULL;
	struct kvpd_pool_spec p = { 0 };
	char why[KVP_REASON_MAX];
	int ret;

	kvp_pool_params_v2_init(&p.v2, name);
	snprintf(buf, sizeof(buf), "%s", words);
	for (char *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(w, '=');

		*eq = '\0';
		if (kvp_pool_params_v2_set(&p.v2, w, eq + 1))
			fz_fail("pool %s: bad word %s=%s", name, w, eq + 1);
	}
	ret = kvpd_pool_create(d, &p, NULL, why, sizeof(why));
	if (ret)
		fz_fail("pool %s: %s", name, *why ? why : strerror(-ret));
}

void fz_begin(bool tracing)
{
	/* As a tracer attached to every probe would: the probes' arguments, op_batch's lists. */
#define FZ_SET_SEMAPHORE(name) kvpool_##name##_semaphore = tracing;
	KVPD_PROBES(FZ_SET_SEMAPHORE)
#undef FZ_SET_SEMAPHORE
	fds_baseline = fds_open();
}

void fz_pools_create(struct kvpd *d, unsigned kv_shape, unsigned dtype, unsigned plain_shape)
{
	static const char *const dtypes[4] = { "f32", "f16", "bf16", "f32" };
	char words[256];

	snprintf(words, sizeof(words), "kv_heads=2 head_dim=8 layers_per_group=2 dtype=%s %s",
		 dtypes[dtype & 3], kv_shapes[kv_shape & 7]);
	make_pool(d, "kv", words);
	make_pool(d, "plain", plain_shapes[plain_shape & 3]);
}

void fz_drain(struct kvpd *d)
{
	uint64_t deadline = kvpd_now_ns() + 5000000000ull;

	while (d->jobs_inflight) {
		kvpd_jobs_complete(d);
		if (!d->jobs_inflight)
			break;
		if (!kvpd_workers_help(d->workers))
			sched_yield();
		if (kvpd_now_ns() > deadline)
			fz_fail("%u jobs still in flight after 5 s", d->jobs_inflight);
	}
}

static void check_pool(struct kvpd_pool *pool)
{
	struct kvc_pool_stats st;
	char why[256] = "";

	if (kvc_pool_check(pool->core, why, sizeof(why)))
		fz_fail("pool %s: invariant broken: %s", pool->name, why);
	kvc_pool_stats(pool->core, &st);
	if (pool->clients || pool->sequences || pool->inflight || st.used)
		fz_fail("pool %s: %u clients, %u sequences, %u jobs, %u blocks used with no client",
			pool->name, pool->clients, pool->sequences, pool->inflight, st.used);
}

void fz_teardown(struct kvpd *d)
{
	unsigned fds;

	fz_drain(d);
	if (d->nclients || d->nactive || d->tenants || d->stat_views || d->batch_pending ||
	    d->stats->depth)
		fz_fail("not back to idle: %u clients, %u active, tenants %p, views %p, depth %u",
			d->nclients, d->nactive, (void *)d->tenants, (void *)d->stat_views,
			d->stats->depth);
	kvpd_pools_reap(d);
	for (unsigned i = 0; i < d->npools; i++)
		check_pool(d->pools[i]);
	while (d->npools) {
		int ret = kvpd_pool_destroy(d, d->pools[d->npools - 1]->name, false);

		if (ret)
			fz_fail("pool %s cannot be destroyed: %s", d->pools[d->npools - 1]->name,
				strerror(-ret));
	}
	fds = fds_open();
	if (fds != fds_baseline)
		fz_fail("%u descriptors open, %u before the input", fds, fds_baseline);
	d->client_gen = 0; /* the next input's handles do not depend on this one */
}
