/* SPDX-License-Identifier: MIT */
/*
 * Tenant rows of the stats page: the full page has them all; a uid's view,
 * those of its uid and of the namespaces it may join.
 */
#include <string.h>

#include "observe/statpage.h"
#include "tenants/tenants.h"

static bool tenant_visible(const struct kvpd *d, const struct kvpd_tenant *t, uid_t uid)
{
	return t->kind == KVP_TENANT_UID ? t->uid == uid : kvpd_namespace_allowed(&d->cfg, t->ns, uid);
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
	if (!memcmp(&row, &d->stats->tenants[t->stat_idx], sizeof(row)))
		return;
	kvpd_stats_begin(d);
	d->stats->tenants[t->stat_idx] = row;
	for (struct kvpd_statview *v = d->stat_views; v; v = v->next)
		if (tenant_visible(d, t, v->uid))
			v->pg.tenants[t->stat_idx] = row;
	kvpd_stats_end(d);
}

/* A tenant has a client counting towards it, a client two tenants at most: a row is free. */
void kvpd_stats_tenant_add(struct kvpd *d, struct kvpd_tenant *t)
{
	unsigned i;

	for (i = 0; d->stats->tenants[i].in_use; i++)
		;
	t->stat_idx = i;
	kvpd_stats_begin(d);
	kvpd_stats_tenant(d, t);
	kvpd_stats_end(d);
}

void kvpd_stats_tenant_remove(struct kvpd *d, struct kvpd_tenant *t)
{
	kvpd_stats_begin(d);
	memset(&d->stats->tenants[t->stat_idx], 0, sizeof(struct kvp_stats_tenant));
	for (struct kvpd_statview *v = d->stat_views; v; v = v->next)
		memset(&v->pg.tenants[t->stat_idx], 0, sizeof(struct kvp_stats_tenant));
	kvpd_stats_end(d);
}

/* A new view (struct kvpd_stats_hooks.view_fill): the rows its uid may see, as the full page has them. */
void kvpd_tenants_view_fill(struct kvpd *d, struct kvpd_statview *v)
{
	const struct kvpd_statpage *full = d->stats;

	for (const struct kvpd_tenant *t = d->tenants; t; t = t->next)
		if (tenant_visible(d, t, v->uid))
			v->pg.tenants[t->stat_idx] = full->tenants[t->stat_idx];
}
