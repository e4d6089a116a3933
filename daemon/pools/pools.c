/* SPDX-License-Identifier: MIT */
/* The daemon's named pools: each wraps one kvcore pool. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "pools/pools.h"
#include "tenants/tenants.h"
#include "../../lib/libkvpool.h"

/* From parameters kvpd_pool_params_check passed; the core checks its limits again. */
static void to_core_config(const struct kvp_pool_params *p, struct kvc_pool_config *cfg)
{
	static const enum kvc_kind kinds[] = {
		[KVP_KIND_FULL] = KVC_FULL,       [KVP_KIND_SWA] = KVC_SWA,
		[KVP_KIND_RSWA] = KVC_RSWA,       [KVP_KIND_CHUNKED] = KVC_CHUNKED,
		[KVP_KIND_CYCLIC] = KVC_CYCLIC,
	};

	kvc_pool_config_init(cfg, p->num_blocks, p->block_size);
	cfg->caching = p->caching;
	cfg->free_order = p->free_order ? KVC_FREE_APPEND : KVC_FREE_SPLIT;
	cfg->publish = p->publish ? KVC_PUBLISH_ALLOC : KVC_PUBLISH_COMMIT;
	cfg->max_len = p->max_len;
	cfg->max_step_tokens = p->max_step_tokens;
	cfg->num_groups = p->num_groups;
	for (unsigned g = 0; g < p->num_groups; g++)
		cfg->groups[g] = (struct kvc_group_spec){ kinds[p->group_kind[g]], p->group_param[g] };
}

/* The strides of @kind (kvpd_kv_layout); -EOVERFLOW when the pool does not fit a size_t. */
static int set_strides(struct kvpd_kv_layout *l, uint32_t kind)
{
	size_t block_bytes; /* K (or V) of one layer of one block: every head, every token */

	l->kind = kind;
	l->row_bytes = (size_t)l->head_dim * attn_dtype_size(l->dtype);
	block_bytes = l->block_size * l->row_bytes * l->kv_heads;
	l->slot_bytes = 2 * l->layers * block_bytes;
	if (__builtin_mul_overflow(l->slot_bytes, (size_t)l->num_blocks, &l->total_bytes))
		return -EOVERFLOW;
	if (kind == KVP_LAYOUT_BLOCK) {
		l->head_stride = l->block_size * l->row_bytes;
		l->token_stride = l->row_bytes;
		l->v_delta = block_bytes;
		l->layer_stride = 2 * block_bytes;
		l->block_stride = l->slot_bytes;
	} else {
		l->head_stride = l->row_bytes;
		l->token_stride = l->kv_heads * l->row_bytes;
		l->block_stride = block_bytes;
		l->v_delta = l->num_blocks * block_bytes;
		l->layer_stride = 2 * l->v_delta;
	}
	return 0;
}

/* What a pool takes of the host's memory: its KV when it is a host pool, and its tier's. */
static uint64_t host_bytes_of(const struct kvpd_pool *pool)
{
	uint64_t slot = 2ull * pool->layout.layers * kvpd_block_chunk_bytes(&pool->layout);
	uint64_t tier = pool->spec.tier_host_bytes;

	if (tier && slot)
		tier += kvpd_tier_window_slots(tier / slot, slot) * slot;
	return (pool->backend == &kvpd_host_backend ? pool->layout.total_bytes : 0) + tier;
}

/*
 * The host pools' KV memory and the tiers together, this pool's included,
 * against kvpd_host_bytes_max: each pool alone under the RAM was not enough,
 * as 64 sparse memfds each nearly the RAM's size were all accepted.
 */
static int host_bytes_check(struct kvpd *d, const struct kvpd_pool *pool, char *why,
			    size_t why_len)
{
	uint64_t ram, most = kvpd_host_bytes_max(&d->cfg, &ram), held = 0;
	uint64_t mine = host_bytes_of(pool);
	const char *what = pool->spec.tier_host_bytes ? "KV memory and tier" : "KV memory";

	for (unsigned i = 0; i < d->npools; i++)
		held += host_bytes_of(d->pools[i]);
	for (const struct kvpd_pool *b = d->pools_building; b; b = b->next_building)
		held += host_bytes_of(b);
	if (mine <= most && held <= most - mine)
		return 0;
	if (d->cfg.max_host_bytes)
		return kvpd_refuse(why, why_len, -ENOMEM, "%s of %.1f MiB: with the host "
				   "pools' %.1f MiB, past max_host_bytes %llu (%.1f MiB)", what,
				   mine / 1048576.0, held / 1048576.0,
				   (unsigned long long)most, most / 1048576.0);
	return kvpd_refuse(why, why_len, -ENOMEM, "%s of %.1f MiB: with the host pools' "
			   "%.1f MiB, past %.1f MiB (RAM %.1f MiB less a margin; max_host_bytes)",
			   what, mine / 1048576.0, held / 1048576.0, most / 1048576.0,
			   ram / 1048576.0);
}

/* Where the pool's KV will lie (its strides), before any of it is made. */
static int kv_layout(struct kvpd *d, struct kvpd_pool *pool, const struct kvp_pool_params_v2 *p,
		     char *why, size_t why_len)
{
	static const enum attn_dtype dtypes[] = { [KVP_DTYPE_F32] = ATTN_F32,
						  [KVP_DTYPE_F16] = ATTN_F16,
						  [KVP_DTYPE_BF16] = ATTN_BF16 };
	struct kvpd_kv_layout *l = &pool->layout;
	uint32_t kind = p->layout;
	int ret;

	l->mem_fd = -1;
	if (!p->v1.kv_heads)
		return 0;
	if (kind == KVP_LAYOUT_DEFAULT)
		kind = p->backend == KVP_BACKEND_CUDA ? KVP_LAYOUT_LAYER : KVP_LAYOUT_BLOCK;
	l->num_blocks = p->v1.num_blocks;
	l->block_size = p->v1.block_size;
	l->layers = p->v1.layers_per_group;
	l->kv_heads = p->v1.kv_heads;
	l->head_dim = p->v1.head_dim;
	l->dtype = dtypes[p->v1.dtype];
	ret = set_strides(l, kind);
	if (ret) {
		snprintf(why, why_len, "KV memory: %u blocks of %zu bytes do not fit in memory",
			 l->num_blocks, l->slot_bytes);
		return ret;
	}
	return host_bytes_check(d, pool, why, why_len);
}

/* The backend a pool asks for; the CUDA plugin is loaded by the first pool that wants it. */
static int pick_backend(struct kvpd *d, struct kvpd_pool *pool, const struct kvp_pool_params_v2 *p,
			char *why, size_t why_len)
{
	int ret;

	pool->device = p->device;
	if (p->backend == KVP_BACKEND_HOST) {
		pool->backend = &kvpd_host_backend;
		return 0;
	}
	ret = kvpd_plugin_load(d->cuda, d->cfg.plugin_dir, why, why_len);
	if (ret)
		return ret;
	pool->backend = d->cuda->ops;
	return 0;
}

struct kvpd_pool *kvpd_pool_find(struct kvpd *d, const char *name)
{
	for (unsigned i = 0; i < d->npools; i++)
		if (!strncmp(d->pools[i]->name, name, KVP_NAME_MAX))
			return d->pools[i];
	return NULL;
}

static void pool_free(struct kvpd_pool *pool, bool drop_tier)
{
	if (pool->remote)
		pool->remote_free(pool->remote);
	if (pool->tier)
		pool->tier_free(pool->tier, drop_tier);
	if (pool->events)
		pool->events_free(pool->events);
	if (pool->mem)
		pool->backend->pool_fini(&pool->layout, pool->leave_mapped ? NULL : pool->mem);
	if (pool->core)
		kvc_pool_destroy(pool->core);
	free(pool);
}

struct kvpd_pool *kvpd_pool_building(struct kvpd *d, const char *name)
{
	for (struct kvpd_pool *b = d->pools_building; b; b = b->next_building)
		if (!strncmp(b->name, name, KVP_NAME_MAX))
			return b;
	return NULL;
}

int kvpd_pool_prepare(struct kvpd *d, const struct kvpd_pool_spec *spec,
		      const struct kvpd_pool_owner *owner, struct kvpd_pool **out, char *why,
		      size_t why_len)
{
	const struct kvp_pool_params_v2 *params = &spec->v2;
	const struct kvp_pool_params *p1 = &params->v1;
	struct kvpd_pool *pool;
	int ret;

	*why = '\0';
	ret = kvpd_pool_spec_check(spec, why, why_len);
	if (ret)
		return ret;
	if (kvpd_pool_find(d, p1->name))
		return kvpd_refuse(why, why_len, -EEXIST, "a pool named %s exists", p1->name);
	if (kvpd_pool_building(d, p1->name))
		return kvpd_refuse(why, why_len, -EEXIST, "a pool named %s is being created",
				   p1->name);
	if (d->npools + d->npools_building >= KVPD_MAX_POOLS)
		return kvpd_refuse(why, why_len, -ENOSPC, "the daemon has %u pools, its most",
				   KVPD_MAX_POOLS);
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	while (!pool->generation)
		if (getrandom(&pool->generation, sizeof(pool->generation), 0) !=
		    (ssize_t)sizeof(pool->generation)) {
			free(pool);
			return -EIO;
		}
	pool->params = *p1;
	pool->spec = *spec;
	/* Every client gets these params: no stray bytes of the creator's past num_groups. */
	for (unsigned g = p1->num_groups; g < KVP_MAX_GROUPS; g++)
		pool->params.group_kind[g] = pool->params.group_param[g] = 0;
	memcpy(pool->namespace_, params->namespace_, KVP_NAME_MAX);
	if (owner) {
		pool->owned = true;
		pool->owner = owner->id;
		pool->owner_uid = owner->uid;
	}
	memcpy(pool->name, p1->name, KVP_NAME_MAX);
	pool->name[KVP_NAME_MAX - 1] = '\0';
	ret = pick_backend(d, pool, params, why, why_len) ?: kv_layout(d, pool, params, why, why_len);
	if (ret) {
		free(pool);
		return ret;
	}
	pool->next_building = d->pools_building;
	d->pools_building = pool;
	d->npools_building++;
	*out = pool;
	return 0;
}

int kvpd_pool_build(struct kvpd_pool *pool, char *why, size_t why_len)
{
	struct kvc_pool_config cfg;
	int ret;

	to_core_config(&pool->params, &cfg);
	if (pool->spec.snapshot_every_set)
		cfg.snapshot_every = pool->spec.snapshot_every;
	ret = kvc_pool_create(&cfg, &pool->core);
	if (ret)
		return kvpd_refuse(why, why_len, ret, "the block manager refused it: %s",
				   strerror(-ret));
	if (!pool->layout.slot_bytes)
		return 0;
	ret = pool->backend->pool_init(&pool->layout, pool->device, &pool->mem, why, why_len);
	if (ret && !*why)
		snprintf(why, why_len, "%s backend: KV memory of %zu bytes: %s",
			 pool->backend->name, pool->layout.total_bytes, strerror(-ret));
	return ret;
}

static void building_unlink(struct kvpd *d, struct kvpd_pool *pool)
{
	struct kvpd_pool **link;

	for (link = &d->pools_building; *link != pool; link = &(*link)->next_building)
		;
	*link = pool->next_building;
	d->npools_building--;
}

void kvpd_pool_install(struct kvpd *d, struct kvpd_pool *pool)
{
	char groups[KVP_MAX_GROUPS * 20], kv[96];

	building_unlink(d, pool);
	kvc_pool_set_hold_hook(pool->core, kvpd_charge_hold);
	kvc_pool_set_admit_hook(pool->core, kvpd_tenants_admit);
	d->pools[d->npools++] = pool;
	kvpd_stats_pool_add(d, pool);
	kvp_pool_params_groups(&pool->params, groups, sizeof(groups));
	if (pool->layout.map_bytes)
		snprintf(kv, sizeof(kv), "%s KV %.1f MiB in %zu KiB pages", pool->backend->name,
			 pool->layout.map_bytes / 1048576.0, pool->layout.page_bytes >> 10);
	else
		snprintf(kv, sizeof(kv), "no KV (allocation only)");
	kvpd_log(d, KVPD_LOG_INFO, "pool %s created: %u blocks of %u tokens, groups %s, %s%s%s",
		 pool->name, pool->params.num_blocks, pool->params.block_size, groups, kv,
		 *pool->namespace_ ? ", namespace " : "", pool->namespace_);
}

void kvpd_pool_discard(struct kvpd *d, struct kvpd_pool *pool)
{
	building_unlink(d, pool);
	pool_free(pool, false);
}

int kvpd_pool_create(struct kvpd *d, const struct kvpd_pool_spec *spec,
		     const struct kvpd_pool_owner *owner, char *why, size_t why_len)
{
	struct kvpd_pool *pool;
	int ret = kvpd_pool_prepare(d, spec, owner, &pool, why, why_len);

	if (ret)
		return ret;
	ret = kvpd_pool_build(pool, why, why_len);
	if (ret) {
		kvpd_pool_discard(d, pool);
		return ret;
	}
	kvpd_pool_install(d, pool);
	return 0;
}

int kvpd_pool_adopt_kv(struct kvpd_pool *pool, int fd, char *why, size_t why_len)
{
	if (pool->backend != &kvpd_host_backend || !pool->mem)
		return kvpd_refuse(why, why_len, -EINVAL, "only a host pool's KV memory is handed "
				   "over");
	return kvpd_host_pool_adopt(&pool->layout, &pool->mem, fd, why, why_len);
}

bool kvpd_pool_busy(const struct kvpd_pool *pool, uint32_t own_attachments)
{
	return pool->sequences || pool->inflight || pool->clients > own_attachments;
}

int kvpd_pool_destroy(struct kvpd *d, const char *name, bool drop_tier)
{
	struct kvpd_pool *pool = kvpd_pool_find(d, name);
	unsigned i;

	if (!pool)
		return -ENOENT;
	if (kvpd_pool_busy(pool, 0))
		return -EBUSY;
	kvpd_stats_pool_remove(d, pool);
	kvpd_tenants_pool_gone(d, pool->stat_idx);
	for (i = 0; d->pools[i] != pool; i++)
		;
	d->pools[i] = d->pools[--d->npools];
	kvpd_log(d, KVPD_LOG_INFO, "pool %s destroyed", pool->name);
	pool_free(pool, drop_tier);
	return 0;
}

/* Visits from the end: a destroy moves the last pool into the slot just visited. */
void kvpd_pools_reap(struct kvpd *d)
{
	for (unsigned i = d->npools; i-- > 0;)
		if (d->pools[i]->orphaned || d->pools[i]->removed)
			kvpd_pool_destroy(d, d->pools[i]->name, false);
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
		pool_free(d->pools[--d->npools], false);
}

int kvpd_job_run(struct kvpd_job *job, uint32_t task)
{
	int ret;

	if (job->type != KVPD_JOB_POOL)
		return job->pool->backend->run_task(job, task);
	ret = kvpd_pool_build(job->pool, job->why, sizeof(job->why));
	if (!ret && job->prepare)
		ret = job->prepare(job->pool, job->why, sizeof(job->why));
	if (ret)
		__atomic_store_n(&job->error, ret, __ATOMIC_RELEASE);
	return 0;
}
