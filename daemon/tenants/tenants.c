/* SPDX-License-Identifier: MIT */
/* Tenants and their quotas (tenants.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tenants/tenants.h"

/*
 * The limits that apply: a [uid.N] key where the section sets it, else
 * [quota]'s; root and the daemon's own uid (the administrators, whom the
 * reserved slots are for too) have none but what a [uid.N] section sets.
 */
static void uid_quota(const struct kvpd_config *cfg, uid_t uid, struct kvpd_quota *q)
{
	if (uid == 0 || uid == geteuid())
		for (unsigned k = 0; k < KVPD_QUOTA_KEYS; k++)
			q->limit[k] = KVP_QUOTA_UNLIMITED;
	else
		*q = cfg->quota;
	for (unsigned i = 0; i < cfg->nuid_quotas; i++) {
		const struct kvpd_uid_quota *u = &cfg->uid_quotas[i];

		if (u->uid != uid)
			continue;
		for (unsigned k = 0; k < KVPD_QUOTA_KEYS; k++)
			if (u->set & (1u << k))
				q->limit[k] = u->quota.limit[k];
	}
}

/* A namespace's own: what its section sets, no limit elsewhere. */
static void ns_quota(const struct kvpd_config *cfg, const char *ns, struct kvpd_quota *q)
{
	for (unsigned k = 0; k < KVPD_QUOTA_KEYS; k++)
		q->limit[k] = KVP_QUOTA_UNLIMITED;
	for (unsigned i = 0; i < cfg->nnamespaces; i++)
		if (!strcmp(cfg->namespaces[i].name, ns))
			*q = cfg->namespaces[i].quota;
}

struct kvpd_tenant *kvpd_tenant_get(struct kvpd *d, uint32_t kind, uid_t uid, const char *ns)
{
	struct kvpd_tenant *t;

	for (t = d->tenants; t; t = t->next)
		if (t->kind == kind && (kind == KVP_TENANT_UID ? t->uid == uid : !strcmp(t->ns, ns)))
			break;
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return NULL;
		t->kind = kind;
		t->uid = uid;
		if (kind == KVP_TENANT_UID)
			uid_quota(&d->cfg, uid, &t->quota);
		else {
			strncpy(t->ns, ns, KVP_NAME_MAX - 1);
			ns_quota(&d->cfg, ns, &t->quota);
		}
		t->next = d->tenants;
		d->tenants = t;
		kvpd_stats_tenant_add(d, t);
	}
	t->refs++;
	return t;
}

/*
 * A reload changed the quotas: every tenant takes its new limits. What it
 * already holds past a lowered limit stays; it only takes no more.
 */
void kvpd_tenants_requota(struct kvpd *d)
{
	for (struct kvpd_tenant *t = d->tenants; t; t = t->next) {
		if (t->kind == KVP_TENANT_UID)
			uid_quota(&d->cfg, t->uid, &t->quota);
		else
			ns_quota(&d->cfg, t->ns, &t->quota);
		for (unsigned p = 0; p < KVPD_MAX_POOLS; p++)
			if (t->blocks[p])
				t->blocks[p]->limit = t->quota.limit[KVP_QUOTA_BLOCKS];
		kvpd_stats_tenant(d, t);
	}
}

void kvpd_tenant_put(struct kvpd *d, struct kvpd_tenant *t)
{
	struct kvpd_tenant **link;

	if (!t || --t->refs)
		return;
	for (link = &d->tenants; *link != t; link = &(*link)->next)
		;
	*link = t->next;
	kvpd_stats_tenant_remove(d, t);
	for (unsigned p = 0; p < KVPD_MAX_POOLS; p++) {
		if (t->blocks[p])
			kvpd_charge_release(t->blocks[p]);
		free(t->blocks[p]);
	}
	free(t);
}

static int room(const struct kvpd_tenant *t, unsigned key, uint64_t n)
{
	if (t->used[key] > t->quota.limit[key] || n > t->quota.limit[key] - t->used[key])
		return key == KVP_QUOTA_CLIENTS ? -EUSERS : -EDQUOT;
	return 0;
}

int kvpd_tenant_take(struct kvpd_tenant *t, unsigned key, uint64_t n)
{
	int ret = room(t, key, n);

	if (!ret)
		t->used[key] += n;
	return ret;
}

int kvpd_quota_take(struct kvpd_tenant *const tenant[2], unsigned key, uint64_t n)
{
	for (unsigned i = 0; i < 2; i++) {
		int ret = tenant[i] ? room(tenant[i], key, n) : 0;

		if (ret)
			return ret;
	}
	for (unsigned i = 0; i < 2; i++)
		if (tenant[i])
			tenant[i]->used[key] += n;
	return 0;
}

void kvpd_quota_give(struct kvpd_tenant *const tenant[2], unsigned key, uint64_t n)
{
	for (unsigned i = 0; i < 2; i++)
		if (tenant[i])
			tenant[i]->used[key] -= n;
}

int kvpd_tenants_attach(struct kvpd_tenant *const tenant[2], struct kvpd_charge *charge,
			unsigned pool_idx)
{
	for (unsigned i = 0; i < 2; i++) {
		struct kvpd_tenant *t = tenant[i];

		charge->also[i] = NULL;
		if (!t)
			continue;
		if (!t->blocks[pool_idx]) {
			t->blocks[pool_idx] = calloc(1, sizeof(struct kvpd_charge));
			if (!t->blocks[pool_idx])
				return -ENOMEM;
			t->pools |= 1ull << pool_idx;
		}
		t->blocks[pool_idx]->limit = t->quota.limit[KVP_QUOTA_BLOCKS];
		charge->also[i] = t->blocks[pool_idx];
	}
	return 0;
}

void kvpd_tenants_detach(struct kvpd_charge *charge)
{
	charge->also[0] = charge->also[1] = NULL;
}

void kvpd_tenants_pool_gone(struct kvpd *d, unsigned pool_idx)
{
	for (struct kvpd_tenant *t = d->tenants; t; t = t->next) {
		if (!t->blocks[pool_idx])
			continue;
		kvpd_charge_release(t->blocks[pool_idx]);
		free(t->blocks[pool_idx]);
		t->blocks[pool_idx] = NULL;
		t->pools &= ~(1ull << pool_idx);
	}
}

uint64_t kvpd_tenant_blocks(const struct kvpd_tenant *t)
{
	uint64_t most = 0;

	for (uint64_t bits = t->pools; bits; bits &= bits - 1) {
		const struct kvpd_charge *ch = t->blocks[__builtin_ctzll(bits)];

		most = ch->blocks > most ? ch->blocks : most;
	}
	return most;
}

/*
 * The blocks the allocation adds to a tenant: every popped one, and every hit
 * block it does not hold yet. Window drops have been counted already.
 */
int kvpd_tenants_admit(void *owner, const struct kvc_admit *a)
{
	const struct kvpd_charge *client = owner;

	for (unsigned i = 0; client && i < 2; i++) {
		const struct kvpd_charge *ch = client->also[i];
		uint64_t adds;

		if (!ch || ch->limit == KVP_QUOTA_UNLIMITED)
			continue;
		adds = a->popped;
		for (uint32_t g = 0; g < KVC_MAX_GROUPS; g++)
			for (uint32_t p = a->hit_first[g]; p < a->hit_end[g]; p++)
				adds += a->hit_ids[g][p] != KVC_NULL_BLOCK &&
					a->hit_ids[g][p] != KVC_TIER_BLOCK &&
					!kvpd_charge_holds(ch, a->hit_ids[g][p]);
		if (ch->blocks > ch->limit || adds > ch->limit - ch->blocks)
			return -EDQUOT;
	}
	return 0;
}
