/* SPDX-License-Identifier: MIT */
/*
 * Tenants' bytes in the cluster: a block written there counts against the
 * max_tier_bytes of the tenant whose request made it (the client committing
 * it, or whose ALLOC promoted it from the local tier), until its TTL has
 * passed: what this daemon wrote and has not seen expire. A tenant at its
 * limit has its blocks not sent (skipped), as a local tier keeps a tenant's
 * entries to its limit; the cluster is not asked what it evicted, so the
 * count is an upper bound. Each tenant's writes are counted in 64 spans of
 * time covering the TTL; a span older than the TTL is dropped whole. Runs on
 * the loop.
 */
#include <stdlib.h>
#include <string.h>

#include "tier/tier_internal.h"
#include "tier/remote.h"

/* The span of time @r's writes are counted in now: a 64th of the TTL, a second at least. */
static uint64_t span_now(const struct kvpd_remote *r)
{
	uint32_t span_s = r->ttl_s ? (r->ttl_s + REMOTE_CHARGE_SPANS - 1) / REMOTE_CHARGE_SPANS : 1;

	return kvpd_now_ns() / 1000000000ull / span_s;
}

static uint64_t charged(const struct kvpd_remote *r, const struct remote_charge *ch, uint64_t now)
{
	uint64_t sum = 0;

	for (unsigned b = 0; b < REMOTE_CHARGE_SPANS; b++)
		if (!r->ttl_s || ch->span[b] + REMOTE_CHARGE_SPANS > now)
			sum += ch->bytes[b];
	return sum;
}

/* @tenant's record, made (and a reference taken) on first use: its index + 1, or 0. */
static uint32_t charge_of(struct kvpd_remote *r, struct kvpd_tenant *tenant)
{
	struct remote_charge *p;

	for (uint32_t i = 0; i < r->ncharges; i++)
		if (r->charges[i].tenant == tenant)
			return i + 1;
	p = realloc(r->charges, (r->ncharges + 1) * sizeof(*p));
	if (!p)
		return 0;
	r->charges = p;
	memset(&p[r->ncharges], 0, sizeof(*p));
	p[r->ncharges].tenant = tenant;
	tenant->refs++;
	return ++r->ncharges;
}

uint32_t remote_charge_take(struct kvpd_remote *r, const struct kvpd_client *c, uint64_t bytes)
{
	struct kvpd_tenant *tenant = c ? (c->tenant[1] ? c->tenant[1] : c->tenant[0]) : NULL;
	uint64_t now = span_now(r), limit;
	struct remote_charge *ch;
	uint32_t i;
	unsigned b = (unsigned)(now % REMOTE_CHARGE_SPANS);

	if (!tenant || !(i = charge_of(r, tenant)))
		return REMOTE_CHARGE_NONE;
	ch = &r->charges[i - 1];
	limit = tenant->quota.limit[KVPD_QUOTA_TIER_BYTES];
	if (charged(r, ch, now) + bytes > limit)
		return REMOTE_CHARGE_OVER;
	if (r->ttl_s && ch->span[b] != now) {
		ch->span[b] = now;
		ch->bytes[b] = 0;
	}
	ch->bytes[b] += bytes;
	return i;
}

void remote_charge_give(struct kvpd_remote *r, uint32_t charge, uint64_t bytes)
{
	struct remote_charge *ch;
	unsigned b;

	if (!charge || charge > r->ncharges)
		return;
	/* Back into the span it was taken in, if that span is still counted. */
	ch = &r->charges[charge - 1];
	b = (unsigned)(span_now(r) % REMOTE_CHARGE_SPANS);
	for (unsigned k = 0; k < REMOTE_CHARGE_SPANS; k++, b = (b + REMOTE_CHARGE_SPANS - 1) %
							      REMOTE_CHARGE_SPANS)
		if (ch->bytes[b] >= bytes) {
			ch->bytes[b] -= bytes;
			return;
		}
}

uint64_t remote_charged(const struct kvpd_remote *r, const struct kvpd_tenant *tenant)
{
	for (uint32_t i = 0; i < r->ncharges; i++)
		if (r->charges[i].tenant == tenant)
			return charged(r, &r->charges[i], span_now(r));
	return 0;
}

void remote_charges_clear(struct kvpd_remote *r)
{
	for (uint32_t i = 0; i < r->ncharges; i++) {
		memset(r->charges[i].bytes, 0, sizeof(r->charges[i].bytes));
		memset(r->charges[i].span, 0, sizeof(r->charges[i].span));
	}
}

void remote_charges_free(struct kvpd_remote *r)
{
	for (uint32_t i = 0; i < r->ncharges; i++)
		kvpd_tenant_put(r->d, r->charges[i].tenant);
	free(r->charges);
	r->charges = NULL;
	r->ncharges = 0;
}
