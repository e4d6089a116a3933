/* SPDX-License-Identifier: MIT */
/*
 * SIGHUP: the config file read again, without dropping a client. New pools
 * are created; namespaces, grants and quotas apply to new requests at once; a
 * pool gone from the file is destroyed once nothing uses it; a pool whose
 * parameters changed keeps the ones it has (its blocks are in use: they cannot
 * change under its clients), with a line naming the key. Of [daemon], only
 * log_level applies: the others shape what start-up built (the socket, the
 * threads, the event loop). A file that does not load changes nothing.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "data/data.h"
#include "events/events.h"
#include "handover/handover.h"
#include "pools/pools.h"
#include "tenants/tenants.h"
#include "tier/tier.h"

static bool same_string(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/* [daemon] settings the file changed that only a restart applies. */
static void note_restart_settings(struct kvpd *d, const struct kvpd_config *next)
{
	const struct kvpd_config *now = &d->cfg;
	const char *changed[8];
	unsigned n = 0;

	/* A socket systemd passed is the unit's, whatever the file says. */
	if (!d->inherited_path && !same_string(now->socket_path, next->socket_path))
		changed[n++] = "socket";
	if (!same_string(now->socket_group, next->socket_group))
		changed[n++] = "socket_group";
	if (!same_string(now->plugin_dir, next->plugin_dir))
		changed[n++] = "plugin_dir";
	if (now->spin_us != next->spin_us)
		changed[n++] = "spin_us";
	if (now->budget != next->budget)
		changed[n++] = "budget";
	if (now->max_clients != next->max_clients)
		changed[n++] = "max_clients";
	/* threads 0 is "the online cores", which start-up resolved. */
	if (next->threads && now->threads != next->threads)
		changed[n++] = "threads";
	if (now->event_loop != next->event_loop)
		changed[n++] = "event_loop";
	for (unsigned i = 0; i < n; i++)
		kvpd_log(d, KVPD_LOG_WARNING, "reload: [daemon] %s changed: applies at the next start",
			 changed[i]);
}

/* The first key whose value differs, in the config's words; NULL when none does. */
static const char *changed_key(const struct kvpd_pool_spec *sa, const struct kvpd_pool_spec *sb)
{
	const struct kvp_pool_params_v2 *a = &sa->v2, *b = &sb->v2;
	const struct kvp_pool_params *x = &a->v1, *y = &b->v1;
	const char *shape = kvpd_pool_shape_changed(sa, sb);

	if (shape)
		return shape;
	if (x->free_order != y->free_order)
		return "free_order";
	if (x->publish != y->publish)
		return "publish";
	if (x->max_len != y->max_len)
		return "max_len";
	if (x->max_step_tokens != y->max_step_tokens)
		return "max_step_tokens";
	if (a->device != b->device)
		return "device";
	if (strncmp(a->namespace_, b->namespace_, KVP_NAME_MAX))
		return "namespace";
	if (sa->snapshot_every_set != sb->snapshot_every_set ||
	    sa->snapshot_every != sb->snapshot_every)
		return "snapshot_every";
	if (sa->tier_policy != sb->tier_policy)
		return "tier_policy";
	if (sa->tier_disk_bytes != sb->tier_disk_bytes)
		return "tier_disk_bytes";
	if (strcmp(sa->tier_remote, sb->tier_remote))
		return "tier_remote";
	if (strcmp(sa->tier_remote_prefix, sb->tier_remote_prefix))
		return "tier_remote_prefix";
	if (sa->tier_remote_timeout_ms != sb->tier_remote_timeout_ms)
		return "tier_remote_timeout_ms";
	if (sa->tier_remote_ttl_set != sb->tier_remote_ttl_set ||
	    sa->tier_remote_ttl_s != sb->tier_remote_ttl_s)
		return "tier_remote_ttl_s";
	if (sa->tier_remote_insecure != sb->tier_remote_insecure)
		return "tier_remote_insecure";
	/* The files' paths; what they hold is read again at every SIGHUP (a rotation). */
	if (strcmp(sa->tier_remote_auth_file, sb->tier_remote_auth_file))
		return "tier_remote_auth_file";
	if (strcmp(sa->tier_remote_key_file, sb->tier_remote_key_file))
		return "tier_remote_key_file";
	if (strcmp(sa->tier_remote_ca_file, sb->tier_remote_ca_file))
		return "tier_remote_ca_file";
	if (strcmp(sa->tier_remote_cert_file, sb->tier_remote_cert_file))
		return "tier_remote_cert_file";
	if (strcmp(sa->tier_remote_cert_key_file, sb->tier_remote_cert_key_file))
		return "tier_remote_cert_key_file";
	if (strcmp(sa->tier_disk_path, sb->tier_disk_path))
		return "tier_disk_path";
	if (strcmp(sa->kv_events, sb->kv_events))
		return "kv_events";
	if (strcmp(sa->kv_events_topic, sb->kv_events_topic))
		return "kv_events_topic";
	if (strcmp(sa->kv_events_replay, sb->kv_events_replay))
		return "kv_events_replay";
	if (sa->kv_events_buffer_set != sb->kv_events_buffer_set ||
	    sa->kv_events_buffer != sb->kv_events_buffer)
		return "kv_events_buffer";
	if (sa->kv_events_format != sb->kv_events_format)
		return "kv_events_format";
	return NULL;
}

struct reload_counts {
	unsigned created, kept, refused, removed, failed;
};

static void reload_pool(struct kvpd *d, const struct kvpd_pool_spec *spec,
			struct reload_counts *n)
{
	const struct kvp_pool_params_v2 *p = &spec->v2;
	struct kvpd_pool *pool = kvpd_pool_find(d, p->v1.name);
	char why[KVP_REASON_MAX];
	const char *key;
	int ret;

	if (!pool && kvpd_pool_building(d, p->v1.name)) {
		n->kept++; /* an earlier reload's, or POOL_CREATE's: it takes its own course */
		return;
	}
	if (!pool) {
		/* Built on a worker: the pool's own line ("created", or why not) is logged then. */
		ret = kvpd_pool_prepare(d, spec, NULL, &pool, why, sizeof(why));
		if (!ret) {
			pool->configured = true;
			ret = kvpd_pool_build_start(d, NULL, NULL, pool);
			if (ret)
				kvpd_pool_discard(d, pool);
		}
		if (ret) {
			kvpd_log(d, KVPD_LOG_ERR, "reload: pool %s not created: %s", p->v1.name,
				 *why ? why : strerror(-ret));
			n->failed++;
			return;
		}
		n->created++;
		return;
	}
	key = changed_key(&pool->spec, spec);
	if (key) {
		kvpd_log(d, KVPD_LOG_WARNING, "reload: pool %s: %s changed: refused, the pool keeps "
			 "its parameters (destroy it, or restart, to change them)", pool->name, key);
		n->refused++;
	} else {
		n->kept++;
	}
	/* An owned pool stays its creator's, whatever the file says of its name. */
	if (pool->owned)
		return;
	pool->configured = true;
	if (pool->removed)
		kvpd_log(d, KVPD_LOG_INFO, "reload: pool %s is in the config again: kept",
			 pool->name);
	pool->removed = false;
}

static void reload_pools(struct kvpd *d, const struct kvpd_config *next, struct reload_counts *n)
{
	for (unsigned i = 0; i < next->npools; i++)
		reload_pool(d, &next->pools[i], n);
	for (unsigned i = 0; i < d->npools; i++) {
		struct kvpd_pool *pool = d->pools[i];
		bool listed = false;

		for (unsigned j = 0; j < next->npools && !listed; j++)
			listed = !strncmp(next->pools[j].v2.v1.name, pool->name, KVP_NAME_MAX);
		if (listed || !pool->configured || pool->removed)
			continue;
		pool->removed = true;
		n->removed++;
		if (pool->clients || pool->sequences || pool->inflight)
			kvpd_log(d, KVPD_LOG_INFO, "reload: pool %s is no longer in the config: "
				 "destroyed once its %u clients have left", pool->name, pool->clients);
	}
	kvpd_pools_reap(d);
}

/* Namespaces, grants and quotas: the new ones for every request from now on. */
static void reload_tenants(struct kvpd *d, struct kvpd_config *next)
{
	struct kvpd_uid_quota *old = d->cfg.uid_quotas;
	unsigned nold = d->cfg.nuid_quotas;

	memcpy(d->cfg.namespaces, next->namespaces, sizeof(next->namespaces));
	d->cfg.nnamespaces = next->nnamespaces;
	d->cfg.quota = next->quota;
	d->cfg.uid_quotas = next->uid_quotas;
	d->cfg.nuid_quotas = next->nuid_quotas;
	/* next's release frees the old table. */
	next->uid_quotas = old;
	next->nuid_quotas = nold;
	kvpd_tenants_requota(d);
}

void kvpd_reload(struct kvpd *d)
{
	struct reload_counts n = { 0 };
	struct kvpd_config next;
	int ret;

	if (!d->config_path) {
		kvpd_log(d, KVPD_LOG_NOTICE, "SIGHUP: no config file to read again (no --config)");
		return;
	}
	kvpd_config_defaults(&next);
	ret = kvpd_config_load(&next, d->config_path, &d->log);
	if (ret) {
		kvpd_log(d, KVPD_LOG_ERR, "reload: %s does not load (above): nothing changed",
			 d->config_path);
		goto out_release;
	}
	kvpd_cli_apply(&next, &d->cli);
	note_restart_settings(d, &next);
	d->cfg.log_level = next.log_level;
	d->log.level = next.log_level ?: KVPD_LOG_DEFAULT;
	d->cfg.max_host_bytes = next.max_host_bytes; /* a check, for the pools created from now */
	reload_pools(d, &next, &n);
	reload_tenants(d, &next);
	for (unsigned i = 0; i < d->npools; i++)
		kvpd_tier_reload(d, d->pools[i]);
	kvpd_log(d, KVPD_LOG_NOTICE, "reload: %s: pools %u being created, %u kept, %u refused a change, "
		 "%u removed, %u failed; %u namespaces, %u uid quotas", d->config_path, n.created,
		 n.kept, n.refused, n.removed, n.failed, d->cfg.nnamespaces, d->cfg.nuid_quotas);
out_release:
	kvpd_config_release(&next);
}

int kvpd_pools_start(struct kvpd *d)
{
	for (unsigned i = 0; i < d->cfg.npools; i++) {
		const char *name = d->cfg.pools[i].v2.v1.name;
		char why[KVP_REASON_MAX] = "";
		int ret = kvpd_pool_create(d, &d->cfg.pools[i], NULL, why, sizeof(why));

		if (!ret) {
			struct kvpd_pool *pool = kvpd_pool_find(d, name);

			pool->configured = true;
			ret = kvpd_tier_probe(pool, why, sizeof(why)) ?:
			      kvpd_events_attach(d, pool, why, sizeof(why));
			if (!ret) {
				kvpd_handover_prepare(d, pool); /* after a planned restart */
				ret = kvpd_tier_attach(d, pool, why, sizeof(why));
				kvpd_handover_pool(d, pool);
			}
		}
		if (ret) {
			kvpd_log(d, KVPD_LOG_ERR, "pool %s: %s", name, *why ? why : strerror(-ret));
			return ret;
		}
	}
	kvpd_handover_finish(d); /* the pools kvctl made, the descriptors left over */
	kvpd_tier_turn(d); /* the tiers' stats rows, before any client reads the page */
	kvpd_events_turn(d); /* a disk tier's blocks, announced first */
	kvpd_events_stats(d);
	return 0;
}
