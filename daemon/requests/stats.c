/* SPDX-License-Identifier: MIT */
/*
 * The STATS snapshot: header, one entry per pool, one per connected client;
 * for a reader without the admin feature only its own uid's clients, the
 * others counted in other_clients. Monitors (kvctl) are only counted.
 */
#include <errno.h>
#include <string.h>

#include "requests/requests.h"

static bool shown(const struct kvpd_client *reader, const struct kvpd_client *c)
{
	return c && c->ready && !c->monitor && (reader->admin || c->uid == reader->uid);
}

int kvpd_stats(struct kvpd *d, const struct kvpd_client *reader, uint8_t *out, uint32_t out_len,
	       __u64 *needed)
{
	struct kvp_stats_header h = {
		.num_pools = d->npools,
		.clients_connected = d->connected,
		.clients_disconnected = d->disconnected,
		.clients_killed = d->killed,
		.monitors = d->nmonitors,
	};
	size_t off = sizeof(h);

	for (unsigned i = 0; i < d->cfg.max_clients; i++)
		h.num_clients += shown(reader, d->clients[i]);
	h.other_clients = d->nactive - d->nmonitors - h.num_clients;
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

		if (!shown(reader, c))
			continue;
		e.client_id = c->gen;
		e.pid = c->pid;
		e.uid = c->uid;
		e.sequences = c->seqs_open;
		memcpy(e.namespace_, c->namespace_, sizeof(e.namespace_));
		if (c->pool) {
			memcpy(e.pool, c->pool->name, sizeof(e.pool));
			e.blocks_held = c->charge.blocks;
		}
		e.ops = c->ops;
		memcpy(out + off, &e, sizeof(e));
		off += sizeof(e);
	}
	memcpy(out, &h, sizeof(h));
	return (int)off;
}
