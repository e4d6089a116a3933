/* SPDX-License-Identifier: MIT */
/* The STATS snapshot: header, one entry per pool, one per connected client. */
#include <errno.h>
#include <string.h>

#include "kvpoold.h"

/* Distinct blocks held by a client's sequences: a block shared by two of them counts once. */
static uint64_t blocks_held(struct kvpd_client *c)
{
	struct kvpd_pool *pool = c->pool;
	uint32_t groups = kvc_pool_config(pool->core)->num_groups;
	uint64_t held = 0;

	if (++pool->mark_epoch == 0) {
		memset(pool->mark, 0, kvc_pool_config(pool->core)->num_blocks * sizeof(*pool->mark));
		pool->mark_epoch = 1;
	}
	for (uint32_t s = 0; s < c->seqs_cap; s++) {
		if (!c->seqs[s].seq)
			continue;
		for (uint32_t g = 0; g < groups; g++) {
			uint32_t len;
			const uint32_t *ids = kvc_seq_table(c->seqs[s].seq, g, &len);

			for (uint32_t i = 0; i < len; i++) {
				if (ids[i] == KVC_NULL_BLOCK || pool->mark[ids[i]] == pool->mark_epoch)
					continue;
				pool->mark[ids[i]] = pool->mark_epoch;
				held++;
			}
		}
	}
	return held;
}

int kvpd_stats(struct kvpd *d, uint8_t *out, uint32_t out_len, __u64 *needed)
{
	struct kvp_stats_header h = {
		.num_pools = d->npools,
		.clients_connected = d->connected,
		.clients_disconnected = d->disconnected,
		.clients_killed = d->killed,
	};
	size_t off = sizeof(h);

	for (unsigned i = 0; i < d->cfg.max_clients; i++)
		h.num_clients += d->clients[i] && d->clients[i]->ready;
	*needed = sizeof(h) + (uint64_t)h.num_pools * sizeof(struct kvp_pool_entry) +
		  (uint64_t)h.num_clients * sizeof(struct kvp_client_entry);
	if (*needed > out_len)
		return -EOVERFLOW;

	for (unsigned i = 0; i < d->npools; i++) {
		const struct kvpd_pool *p = d->pools[i];
		struct kvp_pool_entry e = { .clients = p->clients, .sequences = p->sequences };
		struct kvc_pool_stats st;

		memcpy(e.name, p->name, sizeof(e.name));
		e.block_size = p->params.block_size;
		kvc_pool_stats(p->core, &st);
		e.stats = (struct kvp_pool_stats){ p->params.num_blocks, st.free, st.used, st.cached };
		memcpy(out + off, &e, sizeof(e));
		off += sizeof(e);
	}
	for (unsigned i = 0; i < d->cfg.max_clients; i++) {
		struct kvpd_client *c = d->clients[i];
		struct kvp_client_entry e = { 0 };

		if (!c || !c->ready)
			continue;
		e.client_id = c->gen;
		e.pid = c->pid;
		e.uid = c->uid;
		e.sequences = c->seqs_open;
		memcpy(e.namespace_, c->namespace_, sizeof(e.namespace_));
		if (c->pool) {
			memcpy(e.pool, c->pool->name, sizeof(e.pool));
			e.blocks_held = blocks_held(c);
		}
		e.ops = c->ops;
		memcpy(out + off, &e, sizeof(e));
		off += sizeof(e);
	}
	memcpy(out, &h, sizeof(h));
	return (int)off;
}
