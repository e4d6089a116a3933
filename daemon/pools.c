/* SPDX-License-Identifier: MIT */
/* The daemon's named pools: each wraps one kvcore pool. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvpoold.h"

static int to_core_config(const struct kvp_pool_params *p, struct kvc_pool_config *cfg)
{
	if (p->num_groups == 0 || p->num_groups > KVP_MAX_GROUPS || p->free_order > 1 ||
	    p->publish > 1 || p->caching > 1 || p->dtype > KVP_DTYPE_BF16 || p->resv0 ||
	    p->resv[0] || p->resv[1])
		return -EINVAL;
	kvc_pool_config_init(cfg, p->num_blocks, p->block_size);
	cfg->caching = p->caching;
	cfg->free_order = p->free_order ? KVC_FREE_APPEND : KVC_FREE_SPLIT;
	cfg->publish = p->publish ? KVC_PUBLISH_ALLOC : KVC_PUBLISH_COMMIT;
	cfg->max_len = p->max_len;
	cfg->max_step_tokens = p->max_step_tokens;
	cfg->num_groups = p->num_groups;
	for (unsigned g = 0; g < p->num_groups; g++) {
		static const enum kvc_kind kinds[] = {
			[KVP_KIND_FULL] = KVC_FULL,       [KVP_KIND_SWA] = KVC_SWA,
			[KVP_KIND_RSWA] = KVC_RSWA,       [KVP_KIND_CHUNKED] = KVC_CHUNKED,
			[KVP_KIND_CYCLIC] = KVC_CYCLIC,
		};

		if (p->group_kind[g] > KVP_KIND_CYCLIC)
			return -EINVAL;
		cfg->groups[g] = (struct kvc_group_spec){ kinds[p->group_kind[g]], p->group_param[g] };
	}
	return 0;
}

bool kvpd_name_valid(const char *name)
{
	size_t len = strnlen(name, KVP_NAME_MAX);

	if (len == 0 || len == KVP_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (name[i] <= ' ' || name[i] > '~')
			return false;
	return true;
}

/* KV memory, when the pool has a geometry: all of kv_heads, head_dim and layers or none. */
static int init_kv(struct kvpd *d, struct kvpd_pool *pool, const struct kvp_pool_params *p)
{
	struct kvpd_kv_layout *l = &pool->layout;
	static const enum attn_dtype dtypes[] = { [KVP_DTYPE_F32] = ATTN_F32,
						  [KVP_DTYPE_F16] = ATTN_F16,
						  [KVP_DTYPE_BF16] = ATTN_BF16 };

	if (!p->kv_heads && !p->head_dim && !p->layers_per_group)
		return 0;
	if (!p->kv_heads || !p->head_dim || !p->layers_per_group || p->kv_heads > 1024 ||
	    p->head_dim > 1024 || p->layers_per_group > 1024)
		return -EINVAL;
	/* publish=alloc would let another sequence hit blocks whose KV is not written yet. */
	if (p->publish)
		return -EINVAL;
	*l = (struct kvpd_kv_layout){
		.num_blocks = p->num_blocks,
		.block_size = p->block_size,
		.layers = p->layers_per_group,
		.kv_heads = p->kv_heads,
		.head_dim = p->head_dim,
		.dtype = dtypes[p->dtype],
	};
	l->row_bytes = (size_t)l->head_dim * attn_dtype_size(l->dtype);
	l->head_bytes = l->block_size * l->row_bytes;
	l->layer_bytes = 2 * l->kv_heads * l->head_bytes;
	l->slot_bytes = l->layers * l->layer_bytes;
	return d->backend->pool_init(l, &pool->mem);
}

struct kvpd_pool *kvpd_pool_find(struct kvpd *d, const char *name)
{
	for (unsigned i = 0; i < d->npools; i++)
		if (!strncmp(d->pools[i]->name, name, KVP_NAME_MAX))
			return d->pools[i];
	return NULL;
}

int kvpd_pool_create(struct kvpd *d, const struct kvp_pool_params *params,
		     const struct kvpd_client *owner)
{
	struct kvc_pool_config cfg;
	struct kvpd_pool *pool;
	int ret;

	if (!kvpd_name_valid(params->name))
		return -EINVAL;
	ret = to_core_config(params, &cfg);
	if (ret)
		return ret;
	if (kvpd_pool_find(d, params->name))
		return -EEXIST;
	if (d->npools == KVPD_MAX_POOLS)
		return -ENOSPC;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	ret = kvc_pool_create(&cfg, &pool->core);
	if (ret)
		goto err_free_pool;
	ret = init_kv(d, pool, params);
	if (ret)
		goto err_destroy_core;
	pool->params = *params;
	/* Every client gets these params: no stray bytes of the creator's past num_groups. */
	for (unsigned g = params->num_groups; g < KVP_MAX_GROUPS; g++)
		pool->params.group_kind[g] = pool->params.group_param[g] = 0;
	if (owner) {
		pool->owned = true;
		pool->owner = owner->gen;
		pool->owner_uid = owner->uid;
	}
	memcpy(pool->name, params->name, KVP_NAME_MAX);
	pool->name[KVP_NAME_MAX - 1] = '\0';
	kvc_pool_set_hold_hook(pool->core, kvpd_charge_hold);
	kvc_pool_set_admit_hook(pool->core, kvpd_tenants_admit);
	d->pools[d->npools++] = pool;
	kvpd_stats_pool_add(d, pool);
	kvpd_log(d, 1, "pool %s created: %u blocks of %u tokens, %u groups, KV %zu MiB in %zu KiB pages",
		 pool->name, cfg.num_blocks, cfg.block_size, cfg.num_groups,
		 pool->layout.map_bytes >> 20, pool->layout.page_bytes >> 10);
	return 0;

err_destroy_core:
	kvc_pool_destroy(pool->core);
err_free_pool:
	free(pool);
	return ret;
}

static void pool_free(struct kvpd *d, struct kvpd_pool *pool)
{
	if (pool->mem)
		d->backend->pool_fini(&pool->layout, pool->mem);
	kvc_pool_destroy(pool->core);
	free(pool);
}

/* Refused while a client other than @by is attached or any sequence is open. */
int kvpd_pool_destroy(struct kvpd *d, const char *name, struct kvpd_client *by)
{
	struct kvpd_pool *pool = kvpd_pool_find(d, name);
	unsigned i;

	if (!pool)
		return -ENOENT;
	if (pool->sequences || pool->inflight || pool->clients > (by && by->pool == pool ? 1u : 0u))
		return -EBUSY;
	if (by && by->pool == pool) {
		kvpd_tenants_detach(by); /* its tenants' charges for the pool go below */
		by->pool = NULL;
		pool->clients--;
	}
	kvpd_stats_pool_remove(d, pool);
	kvpd_tenants_pool_gone(d, pool->stat_idx);
	for (i = 0; d->pools[i] != pool; i++)
		;
	d->pools[i] = d->pools[--d->npools];
	kvpd_log(d, 1, "pool %s destroyed", pool->name);
	pool_free(d, pool);
	return 0;
}

/* Visits from the end: a destroy moves the last pool into the slot just visited. */
void kvpd_pools_reap(struct kvpd *d)
{
	for (unsigned i = d->npools; i-- > 0;)
		if (d->pools[i]->orphaned)
			kvpd_pool_destroy(d, d->pools[i]->name, NULL);
}

void kvpd_pools_owner_gone(struct kvpd *d, uint32_t owner)
{
	for (unsigned i = 0; i < d->npools; i++) {
		if (d->pools[i]->owner != owner)
			continue;
		d->pools[i]->owner = 0;
		d->pools[i]->orphaned = true;
	}
	kvpd_pools_reap(d);
}

void kvpd_pools_release(struct kvpd *d)
{
	while (d->npools)
		pool_free(d, d->pools[--d->npools]);
}
