/* SPDX-License-Identifier: MIT */
/*
 * A client's rows of the stats page (the full page's and its uid's view), its
 * operations' counters and op_batch probes, and the pools' fragmentation,
 * counted over their clients' sequences.
 */
#include <string.h>

#include "observe/probes.h"
#include "session/session.h"

/*
 * A pool's fragmentation is counted again at the end of a bracket of writes
 * that changed its sequences, unless the last count was so recent that this
 * one would take more than 1/FRAG_COST_SHARE of the loop's time: then at the
 * first bracket after that, or at the once-a-second refresh, whichever first.
 */
#define FRAG_COST_SHARE 50

static void batch_fire(struct kvpd_client *c)
{
	struct kvpd_op_batch *b = &c->batch;

	KVPD_PROBE(op_batch, c->gen, b->ops, b->errors, (uint64_t)(uintptr_t)b->hist);
	b->ops = b->errors = 0;
	memset(b->hist, 0, sizeof(b->hist));
}

/* Drained whether or not a tracer is still attached, so no client stays listed. */
void kvpd_stats_batches_fire(struct kvpd *d)
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
	unsigned bucket;

	kvpd_stats_begin(d);
	bucket = kvpd_stats_count_op(d, opcode, res, ns);
	c->ops++;
	d->stats->clients[c->slot].ops = c->ops;
	kvpd_stats_end(d);
	KVPD_PROBE(op, c->gen, (uint32_t)opcode, res, ns);
	if (KVPD_PROBE_ENABLED(op_batch))
		batch_add(d, c, res, bucket);
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
	struct kvp_stats_client *e = &d->stats->clients[c->slot];
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
	kvpd_stats_begin(d);
	/* A monitor has no row (the page counts it in monitors); its tenants' use counts. */
	if (!c->monitor)
		client_rows(d, c);
	for (unsigned i = 0; i < 2; i++)
		if (c->tenant[i])
			kvpd_stats_tenant(d, c->tenant[i]);
	kvpd_stats_end(d);
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

	memset(&d->stats->clients[c->slot], 0, sizeof(struct kvp_stats_client));
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
void kvpd_stats_bracket_end(struct kvpd *d, uint64_t now)
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
