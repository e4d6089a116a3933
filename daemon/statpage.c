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

#include "kvpoold.h"
#include "probes.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/*
 * A pool's fragmentation is counted again at the end of a bracket of writes
 * that changed its sequences, unless the last count was so recent that this
 * one would take more than 1/FRAG_COST_SHARE of the loop's time: then at the
 * first bracket after that, or at the once-a-second refresh, whichever first.
 */
#define FRAG_COST_SHARE 50

static void frag_due(struct kvpd *d, uint64_t now);

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

	sp->bytes = (tenants_off + max_tenants(d) * sizeof(struct kvp_stats_tenant) + 4095) &
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

int kvpd_statpage_init(struct kvpd *d)
{
	return kvpd_statpage_make(d, &d->stats, "kvpool-stats");
}

void kvpd_statpage_fini(struct kvpd *d)
{
	while (d->stat_views) {
		d->stat_views->readers = 1;
		kvpd_statview_put(d, d->stat_views);
	}
	kvpd_statpage_unmake(&d->stats);
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
	if (d->stats.depth++ == 0) {
		seq_open(&d->stats);
		for (struct kvpd_statview *v = d->stat_views; v; v = v->next)
			seq_open(&v->pg);
	}
}

static void batch_fire(struct kvpd_client *c)
{
	struct kvpd_op_batch *b = &c->batch;

	KVPD_PROBE(op_batch, c->gen, b->ops, b->errors, (uint64_t)(uintptr_t)b->hist);
	b->ops = b->errors = 0;
	memset(b->hist, 0, sizeof(b->hist));
}

/* Drained whether or not a tracer is still attached, so no client stays listed. */
static void batches_fire(struct kvpd *d)
{
	struct kvpd_client *c;

	while ((c = d->batch_pending)) {
		d->batch_pending = c->batch.next;
		batch_fire(c);
	}
}

void kvpd_stats_batch_flush(struct kvpd *d, struct kvpd_client *c)
{
	struct kvpd_client **link = &d->batch_pending;

	if (!c->batch.ops)
		return;
	while (*link != c)
		link = &(*link)->batch.next;
	*link = c->batch.next;
	batch_fire(c);
}

void kvpd_stats_end(struct kvpd *d)
{
	uint64_t now;

	if (d->stats.depth > 1) {
		d->stats.depth--;
		return;
	}
	now = kvpd_now_ns();
	/* Still inside the bracket: what it changed of the pools' sequences goes in with it. */
	frag_due(d, now);
	d->stats.depth = 0;
	kvpd_statviews_sync(d);
	for (struct kvpd_statview *v = d->stat_views; v; v = v->next)
		seq_close(&v->pg, now);
	seq_close(&d->stats, now);
	batches_fire(d);
}

static unsigned bucket_of(uint64_t ns)
{
	unsigned b = ns ? 63u - (unsigned)__builtin_clzll(ns) : 0;

	return b < KVP_HIST_BUCKETS ? b : KVP_HIST_BUCKETS - 1;
}

static void batch_add(struct kvpd *d, struct kvpd_client *c, int32_t res, unsigned bucket)
{
	struct kvpd_op_batch *b = &c->batch;

	if (b->ops++ == 0) {
		b->next = d->batch_pending;
		d->batch_pending = c;
	}
	b->errors += res < 0;
	b->hist[bucket]++;
}

void kvpd_stats_op(struct kvpd *d, struct kvpd_client *c, uint8_t opcode, int32_t res,
		   uint64_t ns)
{
	struct kvp_stats_op *op = &d->stats.ops[opcode];
	unsigned bucket = bucket_of(ns);

	kvpd_stats_dirty(d->stats.ops_dirty, opcode);
	op->count++;
	op->errors += res < 0;
	op->sum_ns += ns;
	op->hist[bucket]++;
	c->ops++;
	d->stats.clients[c->slot].ops = c->ops;
	KVPD_PROBE(op, c->gen, (uint32_t)opcode, res, ns);
	if (KVPD_PROBE_ENABLED(op_batch))
		batch_add(d, c, res, bucket);
}

/* Copies the core's view of @pool into its entry; probes what changed, charged to @c. */
void kvpd_stats_pool(struct kvpd *d, struct kvpd_pool *pool, struct kvpd_client *c)
{
	struct kvp_stats_pool *e = kvpd_stats_pool_entry(d, pool);
	uint32_t client = c ? c->gen : 0, groups = pool->params.num_groups;
	struct kvc_pool_counters now;
	struct kvc_pool_stats st;

	kvc_pool_stats(pool->core, &st);
	kvc_pool_counters(pool->core, &now);
	e->blocks_free = st.free;
	e->blocks_used = st.used;
	e->blocks_cached = st.cached;
	e->clients = pool->clients;
	e->sequences = pool->sequences;
	e->evictions_reuse = now.evicted_reuse;
	e->evictions_evict = now.evicted_admin;
	e->evictions_reset = now.evicted_reset;
	/* No block in use, so none in a sequence's table: the gauge is exactly zero, for free. */
	pool->frag_dirty = st.used != 0;
	for (uint32_t g = 0; g < groups; g++) {
		if (!st.used)
			e->groups[g].tokens_held = e->groups[g].tokens_needed = 0;
		e->groups[g].blocks_held = now.in_use[g];
		e->groups[g].window_drops = now.dropped[g];
		if (now.dropped[g] != pool->seen.dropped[g])
			KVPD_PROBE(window_drop, client, g,
				   (uint32_t)(now.dropped[g] - pool->seen.dropped[g]));
	}
	if (now.evicted_reuse != pool->seen.evicted_reuse)
		KVPD_PROBE(cache_evict, client, 0u, (uint32_t)(now.evicted_reuse - pool->seen.evicted_reuse));
	if (now.evicted_admin != pool->seen.evicted_admin)
		KVPD_PROBE(cache_evict, client, 1u, (uint32_t)(now.evicted_admin - pool->seen.evicted_admin));
	if (now.evicted_reset != pool->seen.evicted_reset)
		KVPD_PROBE(cache_evict, client, 2u, (uint32_t)(now.evicted_reset - pool->seen.evicted_reset));
	pool->seen = now;
}

void kvpd_stats_pool_add(struct kvpd *d, struct kvpd_pool *pool)
{
	struct kvp_stats_pool *e;
	unsigned i;

	for (i = 0; i < KVPD_MAX_POOLS && d->stats.pools[i].in_use; i++)
		;
	pool->stat_idx = i; /* a free entry exists: there are at most KVPD_MAX_POOLS pools */
	e = kvpd_stats_pool_entry(d, pool);
	kvpd_stats_begin(d);
	memset(e, 0, sizeof(*e));
	e->in_use = 1;
	e->block_size = pool->params.block_size;
	memcpy(e->name, pool->name, sizeof(e->name));
	e->blocks_total = pool->params.num_blocks;
	e->num_groups = pool->params.num_groups;
	for (uint32_t g = 0; g < pool->params.num_groups; g++) {
		e->groups[g].kind = pool->params.group_kind[g];
		e->groups[g].param = pool->params.group_param[g];
	}
	kvpd_stats_pool(d, pool, NULL);
	kvpd_stats_end(d);
}

void kvpd_stats_pool_remove(struct kvpd *d, struct kvpd_pool *pool)
{
	kvpd_stats_begin(d);
	memset(kvpd_stats_pool_entry(d, pool), 0, sizeof(struct kvp_stats_pool));
	kvpd_stats_end(d);
}

static void client_row(struct kvp_stats_client *e, const struct kvpd_client *c)
{
	if (!e->in_use) {
		e->in_use = 1;
		e->client_id = c->gen;
		e->pid = c->pid;
		e->uid = c->uid;
		memcpy(e->namespace_, c->namespace_, sizeof(e->namespace_));
	}
	memset(e->pool, 0, sizeof(e->pool));
	if (c->pool)
		memcpy(e->pool, c->pool->name, sizeof(e->pool));
	e->sequences = c->seqs_open;
	e->ops = c->ops;
	e->blocks_held = c->charge.blocks;
}

/* The client's entry, in the full page and its uid's; probes its charge when it changed. */
static void client_rows(struct kvpd *d, struct kvpd_client *c)
{
	struct kvp_stats_client *e = &d->stats.clients[c->slot];
	struct kvpd_statview *v = kvpd_statview_of(d, c->uid);

	if (e->blocks_held != c->charge.blocks)
		KVPD_PROBE(blocks_held, c->gen, (uint64_t)c->charge.blocks);
	client_row(e, c);
	if (v) {
		v->own_clients += !v->pg.clients[c->slot].in_use;
		client_row(&v->pg.clients[c->slot], c);
	}
}

void kvpd_stats_client(struct kvpd *d, struct kvpd_client *c)
{
	/* A monitor has no row (the page counts it in monitors); its tenants' use counts. */
	if (!c->monitor)
		client_rows(d, c);
	for (unsigned i = 0; i < 2; i++)
		if (c->tenant[i])
			kvpd_stats_tenant(d, c->tenant[i]);
	if (c->charge.failed && !c->charge.failure_logged) {
		c->charge.failure_logged = true;
		kvpd_log(d, KVPD_LOG_WARNING, "client %u (pid %d): out of memory counting its blocks: its blocks_held "
			  "stays at %llu, no longer exact", c->gen, (int)c->pid,
			  (unsigned long long)c->charge.blocks);
	}
}

void kvpd_stats_client_remove(struct kvpd *d, struct kvpd_client *c)
{
	struct kvpd_statview *v = kvpd_statview_of(d, c->uid);

	memset(&d->stats.clients[c->slot], 0, sizeof(struct kvp_stats_client));
	if (v && v->pg.clients[c->slot].in_use) {
		v->own_clients--;
		memset(&v->pg.clients[c->slot], 0, sizeof(struct kvp_stats_client));
	}
}

/* One running sequence's share of its pool's fragmentation gauge. */
static void frag_add(struct kvp_stats_pool *e, const struct kvc_pool_config *cfg,
		     const struct kvc_seq *seq)
{
	struct kvc_seq_info info;

	kvc_seq_info(seq, &info);
	for (uint32_t g = 0; info.running && g < cfg->num_groups; g++) {
		struct kvpd_mask m = { cfg->groups[g].kind, cfg->groups[g].param, info.prefix };
		uint32_t len, lo[2], hi[2], n = kvpd_mask_ranges(&m, info.computed, lo, hi);
		const uint32_t *ids = kvc_seq_table(seq, g, &len);

		for (uint32_t k = 0; k < len; k++)
			e->groups[g].tokens_held += ids[k] != KVC_NULL_BLOCK ? cfg->block_size : 0;
		for (uint32_t r = 0; r < n; r++)
			if (lo[r] < info.computed)
				e->groups[g].tokens_needed +=
					(hi[r] < info.computed ? hi[r] : info.computed) - lo[r];
	}
}

/*
 * Fragmentation: per group, the token slots of the blocks running sequences
 * hold against the tokens their masks need for the next query (padding in
 * partial blocks, R-SWA's extra token, window alignment). O(the pool's
 * sequences and their blocks); inside a bracket of writes.
 */
static void frag_count(struct kvpd *d, struct kvpd_pool *pool)
{
	const struct kvc_pool_config *cfg = kvc_pool_config(pool->core);
	struct kvp_stats_pool *e = kvpd_stats_pool_entry(d, pool);
	uint64_t start = kvpd_now_ns(), end;

	for (uint32_t g = 0; g < KVP_MAX_GROUPS; g++)
		e->groups[g].tokens_held = e->groups[g].tokens_needed = 0;
	for (unsigned i = 0; i < d->nactive; i++) {
		struct kvpd_client *c = d->active[i];

		if (c->pool != pool)
			continue;
		for (uint32_t s = 0; s < c->seqs_cap; s++)
			if (c->seqs[s].seq)
				frag_add(e, cfg, c->seqs[s].seq);
	}
	end = kvpd_now_ns();
	pool->frag_dirty = false;
	pool->frag_next_ns = end + FRAG_COST_SHARE * (end - start);
}

/* At a bracket's end: the pools whose sequences changed, unless counted too recently. */
static void frag_due(struct kvpd *d, uint64_t now)
{
	for (unsigned p = 0; p < d->npools; p++)
		if (d->pools[p]->frag_dirty && now >= d->pools[p]->frag_next_ns)
			frag_count(d, d->pools[p]);
}

/* Once a second (housekeeping): every pool, whatever the last bracket left. */
void kvpd_stats_fragmentation(struct kvpd *d)
{
	kvpd_stats_begin(d);
	for (unsigned p = 0; p < d->npools; p++)
		frag_count(d, d->pools[p]);
	kvpd_stats_end(d);
}
