/* SPDX-License-Identifier: MIT */
/*
 * Private stats: a client without the admin feature maps its uid's view of
 * the stats page, not the daemon's. A view has the full page's layout, pools
 * and operations (copied from the full page when a bracket of writes ends,
 * only the entries that changed), but client rows of its uid only, the other
 * clients counted in other_clients, and the tenant rows of its uid and of the
 * namespaces the uid may join. Views exist while a client holds one: most
 * daemons, whose readers are root, have none and pay nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "observe/statpage.h"

struct kvpd_statview *kvpd_statview_of(struct kvpd *d, uid_t uid)
{
	struct kvpd_statview *v;

	for (v = d->stat_views; v && v->uid != uid; v = v->next)
		;
	return v;
}

static void header_copy(struct kvp_stats_page *to, const struct kvp_stats_page *from)
{
	to->clients_connected = from->clients_connected;
	to->clients_disconnected = from->clients_disconnected;
	to->clients_killed = from->clients_killed;
	to->event_loop = from->event_loop;
	to->monitors = from->monitors;
}

/* A new view: everything the uid may see, as the full page has it now. */
static void view_fill(struct kvpd *d, struct kvpd_statview *v)
{
	const struct kvpd_statpage *full = d->stats;

	header_copy(v->pg.page, full->page);
	v->pg.page->start_realtime_ns = full->page->start_realtime_ns;
	memcpy(v->pg.pools, full->pools, KVPD_MAX_POOLS * sizeof(*v->pg.pools));
	memcpy(v->pg.tiers, full->tiers, KVPD_MAX_POOLS * sizeof(*v->pg.tiers));
	memcpy(v->pg.events, full->events, KVPD_MAX_POOLS * sizeof(*v->pg.events));
	memcpy(v->pg.snapshots, full->snapshots, KVPD_MAX_POOLS * sizeof(*v->pg.snapshots));
	memcpy(v->pg.remote, full->remote, KVPD_MAX_POOLS * sizeof(*v->pg.remote));
	memcpy(v->pg.ops, full->ops, KVP_STATS_OPS * sizeof(*v->pg.ops));
	for (unsigned i = 0; i < d->cfg.max_clients; i++) {
		if (!full->clients[i].in_use || full->clients[i].uid != v->uid)
			continue;
		v->pg.clients[i] = full->clients[i];
		v->own_clients++;
	}
	if (full->hooks && full->hooks->view_fill)
		full->hooks->view_fill(d, v);
	v->pg.page->other_clients = d->nactive - d->nmonitors - v->own_clients;
}

struct kvpd_statview *kvpd_statview_get(struct kvpd *d, uid_t uid)
{
	struct kvpd_statview *v = kvpd_statview_of(d, uid);

	if (v) {
		v->readers++;
		return v;
	}
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	v->uid = uid;
	if (kvpd_statpage_make(d, &v->pg, "kvpool-stats-uid")) {
		free(v);
		return NULL;
	}
	view_fill(d, v);
	/* Made inside a bracket of writes: its seqlock joins it, odd until the bracket ends. */
	if (d->stats->depth)
		__atomic_store_n(&v->pg.page->seq, 1, __ATOMIC_RELEASE);
	v->readers = 1;
	v->next = d->stat_views;
	d->stat_views = v;
	return v;
}

void kvpd_statview_put(struct kvpd *d, struct kvpd_statview *v)
{
	struct kvpd_statview **link;

	if (!v || --v->readers)
		return;
	for (link = &d->stat_views; *link != v; link = &(*link)->next)
		;
	*link = v->next;
	kvpd_statpage_unmake(&v->pg);
	free(v);
}

/* What changed in the full page since the last bracket, into every view. */
void kvpd_statviews_sync(struct kvpd *d)
{
	struct kvpd_statpage *full = d->stats;

	for (struct kvpd_statview *v = d->stat_views; v; v = v->next) {
		header_copy(v->pg.page, full->page);
		v->pg.page->other_clients = d->nactive - d->nmonitors - v->own_clients;
		for (unsigned w = 0; w < KVPD_STATS_OPS_WORDS; w++)
			for (uint64_t bits = full->ops_dirty[w]; bits; bits &= bits - 1) {
				unsigned op = w * 64 + (unsigned)__builtin_ctzll(bits);

				v->pg.ops[op] = full->ops[op];
			}
		for (uint64_t bits = full->pools_dirty; bits; bits &= bits - 1) {
			unsigned p = (unsigned)__builtin_ctzll(bits);

			v->pg.pools[p] = full->pools[p];
			v->pg.tiers[p] = full->tiers[p];
			v->pg.events[p] = full->events[p];
			v->pg.snapshots[p] = full->snapshots[p];
			v->pg.remote[p] = full->remote[p];
		}
	}
	memset(full->ops_dirty, 0, sizeof(full->ops_dirty));
	full->pools_dirty = 0;
}
