/* SPDX-License-Identifier: MIT */
/* A pool's row of the stats page: what its core counts, and the probes of what changed. */
#include <string.h>

#include "observe/probes.h"
#include "pools/pools.h"

void kvpd_stats_pool(struct kvpd *d, struct kvpd_pool *pool, uint32_t client)
{
	struct kvp_stats_pool *e = kvpd_stats_pool_entry(d, pool);
	uint32_t groups = pool->params.num_groups;
	struct kvc_pool_counters now;
	struct kvc_pool_stats st;

	kvc_pool_stats(pool->core, &st);
	kvc_pool_counters(pool->core, &now);
	kvpd_stats_begin(d);
	e->blocks_free = st.free;
	e->blocks_used = st.used;
	e->blocks_cached = st.cached;
	e->clients = pool->clients;
	e->sequences = pool->sequences;
	e->evictions_reuse = now.evicted_reuse;
	e->evictions_evict = now.evicted_admin;
	e->evictions_reset = now.evicted_reset;
	if (d->stats->snapshots[pool->stat_idx].in_use)
		d->stats->snapshots[pool->stat_idx] = (struct kvp_stats_snapshots){
			.in_use = 1, .held = now.snap_held, .made = now.snap_made, .hit = now.snap_hit,
			.evicted = now.snap_evicted, .skipped = now.snap_skipped,
		};
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
	kvpd_stats_end(d);
	pool->seen = now;
}

void kvpd_stats_pool_add(struct kvpd *d, struct kvpd_pool *pool)
{
	struct kvp_stats_pool *e;
	unsigned i;

	for (i = 0; i < KVPD_MAX_POOLS && d->stats->pools[i].in_use; i++)
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
		/* Its cyclic groups hit by window snapshots: the row that counts them. */
		if (pool->params.caching && pool->params.group_kind[g] == KVP_KIND_CYCLIC)
			d->stats->snapshots[pool->stat_idx].in_use = 1;
	}
	kvpd_stats_pool(d, pool, 0);
	kvpd_stats_end(d);
}

void kvpd_stats_pool_remove(struct kvpd *d, struct kvpd_pool *pool)
{
	kvpd_stats_begin(d);
	memset(kvpd_stats_pool_entry(d, pool), 0, sizeof(struct kvp_stats_pool));
	memset(&d->stats->tiers[pool->stat_idx], 0, sizeof(struct kvp_stats_tier));
	memset(&d->stats->events[pool->stat_idx], 0, sizeof(struct kvp_stats_events));
	memset(&d->stats->snapshots[pool->stat_idx], 0, sizeof(struct kvp_stats_snapshots));
	memset(&d->stats->remote[pool->stat_idx], 0, sizeof(struct kvp_stats_remote));
	kvpd_stats_end(d);
}
