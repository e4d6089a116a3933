/* SPDX-License-Identifier: MIT */
/* kvctl: each uid's and namespace's use of its quotas, as text, JSON and Prometheus samples. */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "kvctl.h"

static const char *const quota_names[KVP_QUOTA_KEYS] = {
	[KVP_QUOTA_CLIENTS] = "clients",     [KVP_QUOTA_SEQUENCES] = "sequences",
	[KVP_QUOTA_TOKENS] = "tokens",       [KVP_QUOTA_ARENA_BYTES] = "arena_bytes",
	[KVP_QUOTA_BLOCKS] = "blocks",
};

#define FOR_EACH_TENANT(s, t)                                                               \
	for (const struct kvp_stats_tenant *t = (s)->tenants;                              \
	     t < (s)->tenants + (s)->max_tenants; t++)                                    \
		if (t->in_use)

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

void print_tenants_table(const struct snapshot *s)
{
	char name[KVP_NAME_MAX + 16], cell[48];

	if (s->page->other_clients)
		printf("other clients: %u (other uids': not shown)\n", s->page->other_clients);
	printf("\n%-26s", "QUOTAS (USED/LIMIT)");
	for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++)
		printf(" %-22s", quota_names[k]);
	printf("\n");
	FOR_EACH_TENANT(s, t) {
		tenant_name(t, name, sizeof(name));
		printf("%-26s", name);
		for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++) {
			used_of(t, k, cell, sizeof(cell));
			printf(" %-22s", cell);
		}
		printf("\n");
	}
}

void tenants_json(const struct snapshot *s, json_object *root)
{
	json_object *arr = json_object_new_array();

	FOR_EACH_TENANT(s, t) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "kind", json_object_new_string(
			t->kind == KVP_TENANT_UID ? "uid" : "namespace"));
		if (t->kind == KVP_TENANT_UID)
			json_object_object_add(o, "uid", json_object_new_int64(t->uid));
		else
			json_object_object_add(o, "namespace", json_object_new_string_len(
				t->namespace_, (int)strnlen(t->namespace_, KVP_NAME_MAX)));
		for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++) {
			json_object *q = json_object_new_object();

			json_object_object_add(q, "used", json_object_new_int64((int64_t)t->used[k]));
			json_object_object_add(q, "limit", t->limit[k] == KVP_QUOTA_UNLIMITED ? NULL :
					       json_object_new_int64((int64_t)t->limit[k]));
			json_object_object_add(o, quota_names[k], q);
		}
		json_object_array_add(arr, o);
	}
	json_object_object_add(root, "tenants", arr);
	json_object_object_add(root, "other_clients", json_object_new_int64(s->page->other_clients));
}

static void sample(const char *metric, const struct kvp_stats_tenant *t, unsigned k, uint64_t v)
{
	printf("%s{", metric);
	if (t->kind == KVP_TENANT_UID)
		printf("uid=\"%u\"", t->uid);
	else
		prom_label("namespace", t->namespace_, KVP_NAME_MAX, true);
	printf(",quota=\"%s\"} %llu\n", quota_names[k], (unsigned long long)v);
}

void print_tenants_prometheus(const struct snapshot *s)
{
	printf("# HELP kvpool_quota_used What a uid or a namespace holds of a quota.\n"
	       "# TYPE kvpool_quota_used gauge\n");
	FOR_EACH_TENANT(s, t)
		for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++)
			sample("kvpool_quota_used", t, k, t->used[k]);
	printf("# HELP kvpool_quota_limit A uid's or a namespace's quota (absent: unlimited).\n"
	       "# TYPE kvpool_quota_limit gauge\n");
	FOR_EACH_TENANT(s, t)
		for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++)
			if (t->limit[k] != KVP_QUOTA_UNLIMITED)
				sample("kvpool_quota_limit", t, k, t->limit[k]);
	printf("# HELP kvpool_other_clients Clients of other uids, left out of what this reader sees.\n"
	       "# TYPE kvpool_other_clients gauge\nkvpool_other_clients %u\n",
	       s->page->other_clients);
}
