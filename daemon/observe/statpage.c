/* SPDX-License-Identifier: MIT */
/*
 * The stats page: the daemon's counters live in a sealed memfd that clients
 * map read-only (F_SEAL_FUTURE_WRITE), so reading stats costs serving nothing.
 * The event loop is the only writer; a seqlock brackets each batch of updates.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "observe/statpage.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* Entries of the tenants' table: each client counts towards a uid and at most one namespace. */
static unsigned max_tenants(const struct kvpd *d)
{
	return 2 * d->cfg.max_clients;
}

int kvpd_statpage_make(struct kvpd *d, struct kvpd_statpage *sp, const char *name)
{
	struct timespec rt;
	size_t pools_off = sizeof(struct kvp_stats_page);
	size_t clients_off = pools_off + KVPD_MAX_POOLS * sizeof(struct kvp_stats_pool);
	size_t ops_off = clients_off + d->cfg.max_clients * sizeof(struct kvp_stats_client);
	size_t tenants_off = ops_off + KVP_STATS_OPS * sizeof(struct kvp_stats_op);
	uint8_t *m;
	int ret;

	size_t tiers_off = tenants_off + max_tenants(d) * sizeof(struct kvp_stats_tenant);

	size_t events_off = tiers_off + KVPD_MAX_POOLS * sizeof(struct kvp_stats_tier);

	size_t snapshots_off = events_off + KVPD_MAX_POOLS * sizeof(struct kvp_stats_events);

	size_t remote_off = snapshots_off + KVPD_MAX_POOLS * sizeof(struct kvp_stats_snapshots);

	sp->bytes = (remote_off + KVPD_MAX_POOLS * sizeof(struct kvp_stats_remote) + 4095) &
		    ~(size_t)4095;
	sp->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (sp->fd < 0)
		return -errno;
	if (ftruncate(sp->fd, (off_t)sp->bytes))
		goto err_close;
	m = mmap(NULL, sp->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, sp->fd, 0);
	if (m == MAP_FAILED)
		goto err_close;
	/* Our mapping stays writable; every later one can only read. */
	if (fcntl(sp->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)) {
		munmap(m, sp->bytes);
		goto err_close;
	}
	sp->page = (struct kvp_stats_page *)m;
	sp->pools = (struct kvp_stats_pool *)(m + pools_off);
	sp->clients = (struct kvp_stats_client *)(m + clients_off);
	sp->ops = (struct kvp_stats_op *)(m + ops_off);
	sp->tenants = (struct kvp_stats_tenant *)(m + tenants_off);
	sp->tiers = (struct kvp_stats_tier *)(m + tiers_off);
	sp->events = (struct kvp_stats_events *)(m + events_off);
	sp->snapshots = (struct kvp_stats_snapshots *)(m + snapshots_off);
	sp->remote = (struct kvp_stats_remote *)(m + remote_off);
	clock_gettime(CLOCK_REALTIME, &rt);
	*sp->page = (struct kvp_stats_page){
		.magic = KVP_STATS_MAGIC,
		.version = KVP_STATS_VERSION,
		.max_pools = KVPD_MAX_POOLS,
		.max_clients = d->cfg.max_clients,
		.hist_buckets = KVP_HIST_BUCKETS,
		.page_bytes = sp->bytes,
		.pools_off = pools_off,
		.clients_off = clients_off,
		.ops_off = ops_off,
		.tenants_off = tenants_off,
		.tiers_off = tiers_off,
		.events_off = events_off,
		.snapshots_off = snapshots_off,
		.remote_off = remote_off,
		.max_tenants = max_tenants(d),
		.start_realtime_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec,
		.daemon_pid = getpid(),
	};
	return 0;

err_close:
	ret = -errno;
	close(sp->fd);
	sp->fd = -1;
	return ret;
}

void kvpd_statpage_unmake(struct kvpd_statpage *sp)
{
	if (sp->page)
		munmap(sp->page, sp->bytes);
	if (sp->fd >= 0)
		close(sp->fd);
	sp->page = NULL;
	sp->fd = -1;
}

int kvpd_statpage_init(struct kvpd *d, const struct kvpd_stats_hooks *hooks)
{
	d->stats->hooks = hooks;
	return kvpd_statpage_make(d, d->stats, "kvpool-stats");
}

void kvpd_statpage_fini(struct kvpd *d)
{
	while (d->stat_views) {
		d->stat_views->readers = 1;
		kvpd_statview_put(d, d->stat_views);
	}
	kvpd_statpage_unmake(d->stats);
}

static void seq_open(struct kvpd_statpage *sp)
{
	__atomic_store_n(&sp->page->seq, sp->page->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void seq_close(struct kvpd_statpage *sp, uint64_t now)
{
	sp->page->update_ns = now;
	__atomic_store_n(&sp->page->seq, sp->page->seq + 1, __ATOMIC_RELEASE);
}

/* Writers nest; only the outermost pair moves the sequence number. */
void kvpd_stats_begin(struct kvpd *d)
{
	if (d->stats->depth++ == 0) {
		seq_open(d->stats);
		for (struct kvpd_statview *v = d->stat_views; v; v = v->next)
			seq_open(&v->pg);
	}
}

void kvpd_stats_end(struct kvpd *d)
{
	const struct kvpd_stats_hooks *hooks = d->stats->hooks;
	uint64_t now;

	if (d->stats->depth > 1) {
		d->stats->depth--;
		return;
	}
	now = kvpd_now_ns();
	/* Still inside the bracket: what it changed of the pools' sequences goes in with it. */
	if (hooks && hooks->bracket_end)
		hooks->bracket_end(d, now);
	d->stats->depth = 0;
	kvpd_statviews_sync(d);
	for (struct kvpd_statview *v = d->stat_views; v; v = v->next)
		seq_close(&v->pg, now);
	seq_close(d->stats, now);
	if (hooks && hooks->sealed)
		hooks->sealed(d);
}

unsigned kvpd_stats_bucket(uint64_t ns)
{
	unsigned b = ns ? 63u - (unsigned)__builtin_clzll(ns) : 0;

	return b < KVP_HIST_BUCKETS ? b : KVP_HIST_BUCKETS - 1;
}

unsigned kvpd_stats_count_op(struct kvpd *d, uint8_t opcode, int32_t res, uint64_t ns)
{
	struct kvp_stats_op *op = &d->stats->ops[opcode];
	unsigned bucket = kvpd_stats_bucket(ns);

	kvpd_stats_dirty(d->stats->ops_dirty, opcode);
	op->count++;
	op->errors += res < 0;
	op->sum_ns += ns;
	op->hist[bucket]++;
	return bucket;
}
