/* SPDX-License-Identifier: MIT */
/*
 * The tenants room: tenants (tenants.c), the charging rule (charge.c) and
 * their rows of the stats page (tenant_stats.c). It may use the observe, loop
 * and config rooms, the core and the shared headers; it knows a client only
 * by its tenants and its charge, which the session passes.
 *
 * Tenants: what one uid's clients hold together, and one named namespace's,
 * against their quotas (config: [quota], [uid.N], [namespace.NAME]). A client
 * counts towards its uid's tenant and, in a named namespace, that
 * namespace's: a request is refused (-EDQUOT) when it would take either past
 * a limit, before anything else is checked that could refuse it for want of
 * room. Blocks are counted per pool as distinct blocks (charge.h): a block
 * two tenants share through a prefix hit counts for both.
 */
#ifndef KVPOOLD_TENANTS_H
#define KVPOOLD_TENANTS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpoold.h"
#include "core/kvcore.h"
#include "tenants/charge.h"

struct kvpd_statview;

struct kvpd_tenant {
	struct kvpd_tenant *next;      /* in kvpd.tenants */
	uint32_t kind;                 /* KVP_TENANT_UID, KVP_TENANT_NAMESPACE */
	uid_t uid;
	char ns[KVP_NAME_MAX];
	struct kvpd_quota quota;
	uint64_t used[KVP_QUOTA_KEYS]; /* blocks: kept per pool, below */
	struct kvpd_charge *blocks[KVPD_MAX_POOLS]; /* by the pool's stat_idx, made when needed */
	uint64_t pools;                /* bit p: blocks[p] is made */
	unsigned refs;                 /* clients counting towards it */
	unsigned stat_idx;             /* its row in the stats page */
};

/* The tenant of @uid (kind UID) or of namespace @ns (kind NAMESPACE), made on first use. */
struct kvpd_tenant *kvpd_tenant_get(struct kvpd *d, uint32_t kind, uid_t uid, const char *ns);
void kvpd_tenant_put(struct kvpd *d, struct kvpd_tenant *t);
/* After a reload: every tenant's limits from the config now in force. */
void kvpd_tenants_requota(struct kvpd *d);

/* Takes @n of @key from @t: -EDQUOT (-EUSERS for clients) past its limit, nothing taken. */
int kvpd_tenant_take(struct kvpd_tenant *t, unsigned key, uint64_t n);
/*
 * Takes @n of @key for each of a client's tenants (its uid's; its namespace's
 * or NULL), or for none: -EDQUOT (or -EUSERS for clients) when one would go
 * past its limit.
 */
int kvpd_quota_take(struct kvpd_tenant *const tenant[2], unsigned key, uint64_t n);
void kvpd_quota_give(struct kvpd_tenant *const tenant[2], unsigned key, uint64_t n);

/*
 * A client of @tenant attaches to the pool at @pool_idx (or detaches): its
 * @charge feeds its tenants' there.
 */
int kvpd_tenants_attach(struct kvpd_tenant *const tenant[2], struct kvpd_charge *charge,
			unsigned pool_idx);
void kvpd_tenants_detach(struct kvpd_charge *charge);
/* The pool at @pool_idx is gone: its (empty) charges go with it. */
void kvpd_tenants_pool_gone(struct kvpd *d, unsigned pool_idx);
/* The most blocks a tenant holds in any one pool (what its max_blocks is held against). */
uint64_t kvpd_tenant_blocks(const struct kvpd_tenant *t);

/* The core's admission hook: an ALLOC that would take a tenant past max_blocks gets -EDQUOT. */
int kvpd_tenants_admit(void *owner, const struct kvc_admit *a);

/* tenant_stats.c: a tenant's row, in the full page and in the views that may see it. */
void kvpd_stats_tenant_add(struct kvpd *d, struct kvpd_tenant *t);
void kvpd_stats_tenant(struct kvpd *d, struct kvpd_tenant *t);
void kvpd_stats_tenant_remove(struct kvpd *d, struct kvpd_tenant *t);
/* struct kvpd_stats_hooks.view_fill: a new view's tenant rows. */
void kvpd_tenants_view_fill(struct kvpd *d, struct kvpd_statview *v);

#endif
