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

#include "kvpoold.h"

struct kvpd_statview *kvpd_statview_of(struct kvpd *d, uid_t uid)
{
	struct kvpd_statview *v;

	for (v = d->stat_views; v && v->uid != uid; v = v->next)
		;
	return v;
}

static bool tenant_visible(const struct kvpd *d, const struct kvpd_tenant *t, uid_t uid)
{
	return t->kind == KVP_TENANT_UID ? t->uid == uid : kvpd_namespace_allowed(d, t->ns, uid);
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
	const struct kvpd_statpage *full = &d->stats;

	header_copy(v->pg.page, full->page);
	v->pg.page->start_realtime_ns = full->page->start_realtime_ns;
	memcpy(v->pg.pools, full->pools, KVPD_MAX_POOLS * sizeof(*v->pg.pools));
	memcpy(v->pg.ops, full->ops, KVP_STATS_OPS * sizeof(*v->pg.ops));
	for (unsigned i = 0; i < d->cfg.max_clients; i++) {
		if (!full->clients[i].in_use || full->clients[i].uid != v->uid)
			continue;
		v->pg.clients[i] = full->clients[i];
		v->own_clients++;
	}
	for (const struct kvpd_tenant *t = d->tenants; t; t = t->next)
		if (tenant_visible(d, t, v->uid))
			v->pg.tenants[t->stat_idx] = full->tenants[t->stat_idx];
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
	if (d->stats.depth)
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
	struct kvpd_statpage *full = &d->stats;

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
		}
	}
	memset(full->ops_dirty, 0, sizeof(full->ops_dirty));
	full->pools_dirty = 0;
}

/* Tenant rows: the full page has them all; a view, those tenant_visible() to its uid. */
static void tenant_row(struct kvp_stats_tenant *e, const struct kvpd_tenant *t)
{
	e->in_use = 1;
	e->kind = t->kind;
	e->uid = t->kind == KVP_TENANT_UID ? (uint32_t)t->uid : 0;
	memcpy(e->namespace_, t->ns, sizeof(e->namespace_));
	for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++) {
		e->used[k] = k == KVP_QUOTA_BLOCKS ? kvpd_tenant_blocks(t) : t->used[k];
		e->limit[k] = t->quota.limit[k];
	}
}

/* Called after every batch of a client's requests: it costs a compare when nothing moved. */
void kvpd_stats_tenant(struct kvpd *d, struct kvpd_tenant *t)
{
	struct kvp_stats_tenant row = { 0 };

	tenant_row(&row, t);
	if (!memcmp(&row, &d->stats.tenants[t->stat_idx], sizeof(row)))
		return;
	d->stats.tenants[t->stat_idx] = row;
	for (struct kvpd_statview *v = d->stat_views; v; v = v->next)
		if (tenant_visible(d, t, v->uid))
			v->pg.tenants[t->stat_idx] = row;
}

/* A tenant has a client counting towards it, a client two tenants at most: a row is free. */
void kvpd_stats_tenant_add(struct kvpd *d, struct kvpd_tenant *t)
{
	unsigned i;

	for (i = 0; d->stats.tenants[i].in_use; i++)
		;
	t->stat_idx = i;
	kvpd_stats_begin(d);
	kvpd_stats_tenant(d, t);
	kvpd_stats_end(d);
}

void kvpd_stats_tenant_remove(struct kvpd *d, struct kvpd_tenant *t)
{
	kvpd_stats_begin(d);
	memset(&d->stats.tenants[t->stat_idx], 0, sizeof(struct kvp_stats_tenant));
	for (struct kvpd_statview *v = d->stat_views; v; v = v->next)
		memset(&v->pg.tenants[t->stat_idx], 0, sizeof(struct kvp_stats_tenant));
	kvpd_stats_end(d);
}
