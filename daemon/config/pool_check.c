/* SPDX-License-Identifier: MIT */
/*
 * POOL_CREATE's parameters checked one by one, each refusal naming the
 * parameter and its limit: what kvpoold prints for a config pool and what
 * the client reads in its output buffer. The core checks the same limits
 * again (it trusts no caller); these are the ones a person reads.
 */
#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "config/config.h"

static bool all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

static int check_groups(const struct kvp_pool_params *p, char *why, size_t len)
{
	static const char *const kinds[] = { "full", "swa", "rswa", "chunked", "cyclic" };

	if (p->num_groups == 0 || p->num_groups > KVP_MAX_GROUPS)
		return kvpd_refuse(why, len, -EINVAL, "num_groups %u: must be 1..%u", p->num_groups,
			      KVP_MAX_GROUPS);
	for (unsigned g = 0; g < p->num_groups; g++) {
		uint32_t kind = p->group_kind[g], param = p->group_param[g];
		uint32_t min = kind == KVP_KIND_FULL ? 0 : kind == KVP_KIND_SWA ? 2 : 1;

		if (kind > KVP_KIND_CYCLIC)
			return kvpd_refuse(why, len, -EINVAL, "group %u: kind %u: must be 0..%u", g, kind,
				      KVP_KIND_CYCLIC);
		if (kind != KVP_KIND_FULL && (param < min || param > KVC_MAX_TOKENS))
			return kvpd_refuse(why, len, -EINVAL, "group %u (%s): %s %u: must be %u..%u", g,
				      kinds[kind], kind == KVP_KIND_CHUNKED ? "chunk" : "window",
				      param, min, KVC_MAX_TOKENS);
	}
	return 0;
}

static int check_kv(const struct kvp_pool_params *p, char *why, size_t len)
{
	bool none = !p->kv_heads && !p->head_dim && !p->layers_per_group;

	if (p->dtype > KVP_DTYPE_BF16)
		return kvpd_refuse(why, len, -EINVAL, "dtype %u: must be 0 (f32), 1 (f16) or 2 (bf16)", p->dtype);
	if (none)
		return 0;
	if (!p->kv_heads || p->kv_heads > 1024)
		return kvpd_refuse(why, len, -EINVAL, "kv_heads %u: must be 1..1024 (or kv_heads, head_dim and "
			      "layers_per_group all 0)", p->kv_heads);
	if (!p->head_dim || p->head_dim > 1024)
		return kvpd_refuse(why, len, -EINVAL, "head_dim %u: must be 1..1024", p->head_dim);
	if (!p->layers_per_group || p->layers_per_group > 1024)
		return kvpd_refuse(why, len, -EINVAL, "layers_per_group %u: must be 1..1024", p->layers_per_group);
	/* Another sequence could hit blocks whose KV is not written yet. */
	if (p->publish)
		return kvpd_refuse(why, len, -EINVAL, "publish alloc: must be commit for a pool with KV");
	return 0;
}

/* What is wrong with endpoint @ep of key @key; NULL when nothing is (ZMQ's bind says the rest). */
static const char *endpoint_problem(const char *ep)
{
	/* sun_path's 108 bytes, its NUL included. */
	if (!strncmp(ep, "ipc://", 6))
		return !ep[6] ? "no path after ipc://" :
		       strlen(ep + 6) > 107 ? "the path is over 107 bytes (a socket's most)" : NULL;
	if (!strncmp(ep, "tcp://", 6))
		return strchr(ep + 6, ':') ? NULL : "no :PORT after tcp://HOST";
	return "not on, off, ipc://PATH or tcp://HOST:PORT";
}

/* The kv_events keys: each needs kv_events, which needs the prefix cache. */
static int events_check(const struct kvpd_pool_spec *spec, char *why, size_t len)
{
	const char *bad;

	if (!*spec->kv_events) {
		const char *key = *spec->kv_events_topic ? "kv_events_topic" :
				  *spec->kv_events_replay ? "kv_events_replay" :
				  spec->kv_events_buffer_set ? "kv_events_buffer" :
				  spec->kv_events_format ? "kv_events_format" : NULL;

		return key ? kvpd_refuse(why, len, -EINVAL, "%s: set without kv_events (the events' "
					 "endpoint)", key) : 0;
	}
	if (!spec->v2.v1.caching)
		return kvpd_refuse(why, len, -EINVAL, "kv_events: caching is off, so no block is "
				   "ever announced");
	if (strcmp(spec->kv_events, "on") && (bad = endpoint_problem(spec->kv_events)))
		return kvpd_refuse(why, len, -EINVAL, "kv_events = %.60s: %s", spec->kv_events, bad);
	if (*spec->kv_events_replay && strcmp(spec->kv_events_replay, "off") &&
	    (bad = endpoint_problem(spec->kv_events_replay)))
		return kvpd_refuse(why, len, -EINVAL, "kv_events_replay = %.60s: %s",
				   spec->kv_events_replay, bad);
	if (spec->kv_events_format > KVPD_EVENTS_FORM_ARRAY)
		return kvpd_refuse(why, len, -EINVAL, "kv_events_format %u: must be 0 (map) or 1 "
				   "(array)", spec->kv_events_format);
	return 0;
}

/* A TLS file of the cluster tier's set (the first such in @spec), or NULL. */
static const char *remote_tls_key_set(const struct kvpd_pool_spec *spec)
{
	return *spec->tier_remote_ca_file ? "tier_remote_ca_file" :
	       *spec->tier_remote_cert_file ? "tier_remote_cert_file" :
	       *spec->tier_remote_cert_key_file ? "tier_remote_cert_key_file" : NULL;
}

/* A key of the cluster tier's set (the first such in @spec), for "set without" reasons. */
static const char *remote_key_set(const struct kvpd_pool_spec *spec)
{
	if (*spec->tier_remote_prefix)
		return "tier_remote_prefix";
	if (spec->tier_remote_timeout_ms)
		return "tier_remote_timeout_ms";
	if (spec->tier_remote_ttl_set)
		return "tier_remote_ttl_s";
	if (spec->tier_remote_insecure)
		return "tier_remote_insecure";
	if (*spec->tier_remote_auth_file)
		return "tier_remote_auth_file";
	if (*spec->tier_remote_key_file)
		return "tier_remote_key_file";
	return remote_tls_key_set(spec);
}

/* TLS's files: only with rediss://, a certificate only with its key. */
static int remote_tls_check(const struct kvpd_pool_spec *spec, bool tls, char *why, size_t len)
{
	const char *set = remote_tls_key_set(spec);

	if (!tls && set)
		return kvpd_refuse(why, len, -EINVAL, "%s: set with redis:// (TLS is rediss://)", set);
	if (!*spec->tier_remote_cert_file != !*spec->tier_remote_cert_key_file)
		return kvpd_refuse(why, len, -EINVAL, "%s: set without %s",
				   *spec->tier_remote_cert_file ? "tier_remote_cert_file" :
				   "tier_remote_cert_key_file",
				   *spec->tier_remote_cert_file ? "tier_remote_cert_key_file" :
				   "tier_remote_cert_file");
	return 0;
}

/* The cluster tier's keys: where, under which prefix, and what the pool must be. */
static int remote_check(const struct kvpd_pool_spec *spec, char *why, size_t len)
{
	const struct kvp_pool_params *p = &spec->v2.v1;
	struct kvpd_remote_addr seeds[KVPD_REMOTE_MAX_SEEDS];
	char bad[KVP_REASON_MAX];
	bool all_cyclic = true, tls;
	int n, ret;

	if (!*spec->tier_remote) {
		const char *set = remote_key_set(spec);

		if (set)
			return kvpd_refuse(why, len, -EINVAL, "%s: set without tier_remote", set);
		return 0;
	}
	n = kvpd_remote_url_parse(spec->tier_remote, seeds, &tls, bad, sizeof(bad));
	if (n < 0)
		return kvpd_refuse(why, len, -EINVAL, "tier_remote: %s", bad);
	for (const char *c = spec->tier_remote_prefix; *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr("_-.", *c))
			return kvpd_refuse(why, len, -EINVAL, "tier_remote_prefix '%s': letters, "
					   "digits, '_', '-' and '.' only", spec->tier_remote_prefix);
	for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++)
		all_cyclic &= p->group_kind[g] == KVP_KIND_CYCLIC;
	if (!p->kv_heads)
		return kvpd_refuse(why, len, -EINVAL, "tier_remote: the pool holds no KV (kv_heads, "
				   "head_dim, layers_per_group) for a tier to keep");
	if (!p->caching)
		return kvpd_refuse(why, len, -EINVAL, "tier_remote: caching is off, so no block is "
				   "ever hit from a tier");
	if (all_cyclic)
		return kvpd_refuse(why, len, -EINVAL, "tier_remote: a pool of cyclic groups only "
				   "has no block to share (its windows' snapshots stay here)");
	if (spec->v2.backend == KVP_BACKEND_CUDA)
		return kvpd_refuse(why, len, -EINVAL, "tier_remote: a cuda pool's cluster tier is "
				   "not built yet (its GPU path has not run)");
	ret = remote_tls_check(spec, tls, why, len);
	if (ret)
		return ret;
	/* KV reveals the prompts it was computed from: it leaves the machine encrypted, or knowingly. */
	for (int i = 0; i < n && !tls && !spec->tier_remote_insecure; i++)
		if (!kvpd_remote_host_loopback(seeds[i].host))
			return kvpd_refuse(why, len, -EINVAL, "tier_remote: %.24s is not loopback: KV "
					   "reveals prompts; use rediss:// or tier_remote_insecure = yes",
					   seeds[i].host);
	return 0;
}

int kvpd_pool_spec_check(const struct kvpd_pool_spec *spec, char *why, size_t len)
{
	const struct kvp_pool_params *p = &spec->v2.v1;
	const char *key = spec->tier_disk_bytes ? "tier_disk_bytes" : "tier_host_bytes";
	int ret = kvpd_pool_params_check(&spec->v2, why, len) ?: events_check(spec, why, len) ?:
		  remote_check(spec, why, len);

	if (!ret && *spec->tier_disk_path && !spec->tier_disk_bytes)
		return kvpd_refuse(why, len, -EINVAL, "tier_disk_path: set without tier_disk_bytes "
				   "(the disk tier's size)");
	if (ret || (!spec->tier_host_bytes && !spec->tier_disk_bytes))
		return ret;
	/* One lower level under the cache: a host tier over a disk tier is not built. */
	if (spec->tier_host_bytes && spec->tier_disk_bytes)
		return kvpd_refuse(why, len, -EINVAL, "tier_host_bytes and tier_disk_bytes: a "
				   "pool has one tier, in host memory or on disk");
	/* A tier keeps blocks by their cache key and holds their KV: it needs both. */
	if (!p->kv_heads)
		return kvpd_refuse(why, len, -EINVAL, "%s: the pool holds no KV (kv_heads, "
				   "head_dim, layers_per_group) for a tier to keep", key);
	if (!p->caching)
		return kvpd_refuse(why, len, -EINVAL, "%s: caching is off, so no block is ever "
				   "hit from a tier", key);
	if (spec->tier_disk_bytes && (strchr(p->name, '/') || p->name[0] == '.'))
		return kvpd_refuse(why, len, -EINVAL, "tier_disk_bytes: the tier's file is named "
				   "after the pool (NAME.kvtier), and '%s' holds a '/' or starts "
				   "with '.'", p->name);
	if (spec->tier_disk_bytes && spec->v2.backend == KVP_BACKEND_CUDA)
		return kvpd_refuse(why, len, -EINVAL, "tier_disk_bytes: a cuda pool's disk tier "
				   "is not built (a host tier is: tier_host_bytes)");
	if (spec->tier_policy > KVPD_TIER_SECOND_SIGHT)
		return kvpd_refuse(why, len, -EINVAL, "tier_policy %u: must be 0 (lru) or 1 "
				   "(second_sight)", spec->tier_policy);
	return 0;
}

int kvpd_pool_params_check(const struct kvp_pool_params_v2 *v2, char *why, size_t len)
{
	const struct kvp_pool_params *p = &v2->v1;
	int ret;

	if (!memchr(p->name, '\0', sizeof(p->name)) || !kvpd_name_valid(p->name))
		return kvpd_refuse(why, len, -EINVAL, "name: must be 1..%u printable characters without blanks",
			      KVP_NAME_MAX - 1);
	if (p->num_blocks < 2 || p->num_blocks > KVC_MAX_BLOCKS)
		return kvpd_refuse(why, len, -EINVAL, "num_blocks %u: must be 2..%u", p->num_blocks,
			      KVC_MAX_BLOCKS);
	if (p->block_size == 0 || p->block_size > KVC_MAX_TOKENS)
		return kvpd_refuse(why, len, -EINVAL, "block_size %u: must be 1..%u", p->block_size,
			      KVC_MAX_TOKENS);
	if (p->caching > 1)
		return kvpd_refuse(why, len, -EINVAL, "caching %u: must be 0 or 1", p->caching);
	if (p->free_order > 1)
		return kvpd_refuse(why, len, -EINVAL, "free_order %u: must be 0 (split) or 1 (append)",
			      p->free_order);
	if (p->publish > 1)
		return kvpd_refuse(why, len, -EINVAL, "publish %u: must be 0 (commit) or 1 (alloc)", p->publish);
	if (p->max_len == 0)
		return kvpd_refuse(why, len, -EINVAL, "max_len 0: must be at least 1");
	if (p->max_step_tokens == 0 || p->max_step_tokens > KVC_MAX_TOKENS)
		return kvpd_refuse(why, len, -EINVAL, "max_step_tokens %u: must be 1..%u", p->max_step_tokens,
			      KVC_MAX_TOKENS);
	ret = check_groups(p, why, len) ?: check_kv(p, why, len);
	if (ret)
		return ret;
	if (p->resv0 || p->resv[0] || p->resv[1] || v2->resv0 || !all_zero(v2->resv, sizeof(v2->resv)))
		return kvpd_refuse(why, len, -EINVAL, "reserved fields: must be zero");
	if (v2->backend > KVP_BACKEND_CUDA)
		return kvpd_refuse(why, len, -EINVAL, "backend %u: must be 0 (host) or 1 (cuda)", v2->backend);
	if (v2->backend == KVP_BACKEND_HOST && v2->device)
		return kvpd_refuse(why, len, -EINVAL, "device %u: must be 0 for a host pool", v2->device);
	/* GPU memory is what a cuda pool is for: one without KV would hold none. */
	if (v2->backend == KVP_BACKEND_CUDA && !p->kv_heads)
		return kvpd_refuse(why, len, -EINVAL, "backend cuda: needs KV (kv_heads, head_dim, "
			      "layers_per_group)");
	if (v2->layout > KVP_LAYOUT_LAYER)
		return kvpd_refuse(why, len, -EINVAL, "layout %u: must be 0 (default), 1 (block) or 2 (layer)",
			      v2->layout);
	if (!memchr(v2->namespace_, '\0', sizeof(v2->namespace_)) ||
	    (*v2->namespace_ && !kvpd_name_valid(v2->namespace_)))
		return kvpd_refuse(why, len, -EINVAL, "namespace: must be \"\" or 1..%u printable characters "
			      "without blanks", KVP_NAME_MAX - 1);
	return 0;
}

const char *kvpd_pool_shape_changed(const struct kvpd_pool_spec *sa, const struct kvpd_pool_spec *sb)
{
	const struct kvp_pool_params_v2 *a = &sa->v2, *b = &sb->v2;
	const struct kvp_pool_params *x = &a->v1, *y = &b->v1;

	if (x->num_blocks != y->num_blocks)
		return "blocks";
	if (x->block_size != y->block_size)
		return "block_size";
	if (x->num_groups != y->num_groups ||
	    memcmp(x->group_kind, y->group_kind, x->num_groups) ||
	    memcmp(x->group_param, y->group_param, x->num_groups * sizeof(x->group_param[0])))
		return "groups";
	if (x->caching != y->caching)
		return "caching";
	if (x->kv_heads != y->kv_heads)
		return "kv_heads";
	if (x->head_dim != y->head_dim)
		return "head_dim";
	if (x->dtype != y->dtype)
		return "dtype";
	if (x->layers_per_group != y->layers_per_group)
		return "layers_per_group";
	if (a->backend != b->backend)
		return "backend";
	if (a->layout != b->layout)
		return "layout";
	if (sa->tier_host_bytes != sb->tier_host_bytes)
		return "tier_host_bytes";
	return NULL;
}
