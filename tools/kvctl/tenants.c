/* SPDX-License-Identifier: MIT */
/* kvctl: each uid's and namespace's use of its quotas, as text and Prometheus samples. */
#include <stdio.h>
#include <string.h>

#include "kvctl.h"

/* "uid 1000" or "namespace NAME". */
static void tenant_name(const struct kvp_stats_tenant *t, char *buf, size_t len)
{
	if (t->kind == KVP_TENANT_UID)
		snprintf(buf, len, "uid %u", t->uid);
	else
		snprintf(buf, len, "namespace %.*s", KVP_NAME_MAX, t->namespace_);
}

static void used_of(const struct kvp_stats_tenant *t, unsigned k, char *buf, size_t len)
{
	if (t->limit[k] == KVP_QUOTA_UNLIMITED)
		snprintf(buf, len, "%llu/unlimited", (unsigned long long)t->used[k]);
	else
		snprintf(buf, len, "%llu/%llu", (unsigned long long)t->used[k],
			 (unsigned long long)t->limit[k]);
}

void print_tenants_table(const struct kvp_stats_view *s)
{
	char name[KVP_NAME_MAX + 16], cell[48];

	if (s->page->other_clients)
		printf("other clients: %u (other uids': not shown)\n", s->page->other_clients);
	printf("\n%-26s", "QUOTAS (USED/LIMIT)");
	for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++)
		printf(" %-22s", kvp_quota_name(k));
	printf("\n");
	KVP_STATS_FOR_EACH_TENANT(s, t) {
		tenant_name(t, name, sizeof(name));
		printf("%-26s", name);
		for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++) {
			used_of(t, k, cell, sizeof(cell));
			printf(" %-22s", cell);
		}
		printf("\n");
	}
}

static void sample(FILE *out, const char *metric, const struct kvp_stats_tenant *t, unsigned k,
		   uint64_t v)
{
	fprintf(out, "%s{", metric);
	if (t->kind == KVP_TENANT_UID)
		fprintf(out, "uid=\"%u\"", t->uid);
	else
		prom_label(out, "namespace", t->namespace_, KVP_NAME_MAX, true);
	fprintf(out, ",quota=\"%s\"} %llu\n", kvp_quota_name(k), (unsigned long long)v);
}

void print_tenants_prometheus(FILE *out, const struct kvp_stats_view *s)
{
	fprintf(out, "# HELP kvpool_quota_used What a uid or a namespace holds of a quota.\n"
	       "# TYPE kvpool_quota_used gauge\n");
	KVP_STATS_FOR_EACH_TENANT(s, t)
		for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++)
			sample(out, "kvpool_quota_used", t, k, t->used[k]);
	fprintf(out, "# HELP kvpool_quota_limit A uid's or a namespace's quota (absent: unlimited).\n"
	       "# TYPE kvpool_quota_limit gauge\n");
	KVP_STATS_FOR_EACH_TENANT(s, t)
		for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++)
			if (t->limit[k] != KVP_QUOTA_UNLIMITED)
				sample(out, "kvpool_quota_limit", t, k, t->limit[k]);
	fprintf(out, "# HELP kvpool_other_clients Clients of other uids, left out of what this reader sees.\n"
	       "# TYPE kvpool_other_clients gauge\nkvpool_other_clients %u\n",
	       s->page->other_clients);
}
