/* SPDX-License-Identifier: MIT */
/* A client and its pool: ATTACH's checks, leaving it, the geometry it is told, a refusal's reason. */
#include <errno.h>
#include <string.h>

#include "session/session.h"

int kvpd_client_attach(struct kvpd *d, struct kvpd_client *c, const char *name, char *why,
		       size_t why_len)
{
	struct kvpd_pool *pool = *name ? kvpd_pool_find(d, name) : NULL;
	int ret;

	/* Monitors are counted apart: one attached would be in the pool's clients. */
	if (*name && c->monitor)
		return kvpd_refuse(why, why_len, -EINVAL, "a monitor attaches to no pool");
	if (*name && !pool && kvpd_pool_building(d, name))
		return kvpd_refuse(why, why_len, -ENODEV, "pool '%s' is being created", name);
	if (*name && !pool)
		return kvpd_refuse(why, why_len, -ENODEV, "no pool '%s'", name);
	/* Gone from the config at a reload: it lives on only for the clients it has. */
	if (pool && pool->removed)
		return kvpd_refuse(why, why_len, -ENODEV, "pool '%s' is being removed (no longer "
				   "in the config)", name);
	/* An owned pool is its creator's: its uid's clients (and root's) only. */
	if (pool && pool->owned && c->uid != 0 && c->uid != pool->owner_uid)
		return kvpd_refuse(why, why_len, -EPERM, "pool '%s' is owned by uid %u", name,
				   (unsigned)pool->owner_uid);
	/* A restricted pool's blocks and memory are its namespace's: no one else's, root's neither. */
	if (pool && *pool->namespace_ && strcmp(pool->namespace_, c->namespace_))
		return kvpd_refuse(why, why_len, -EPERM,
				   "pool '%s' is restricted to namespace '%s'", name,
				   pool->namespace_);
	if (c->seqs_open)
		return kvpd_refuse(why, why_len, -EBUSY, "%u sequences are open", c->seqs_open);
	ret = pool ? kvpd_tenants_attach(c->tenant, &c->charge, pool->stat_idx) : 0;
	if (ret)
		return kvpd_refuse(why, why_len, ret, "out of memory");
	if (!pool)
		kvpd_tenants_detach(&c->charge);
	/* Both pools' client counts change: publish both (a batch republishes only the new one). */
	kvpd_stats_begin(d);
	if (c->pool) {
		c->pool->clients--;
		kvpd_stats_pool(d, c->pool, c->gen);
	}
	c->pool = pool;
	c->charge.pool = pool ? pool->core : NULL;
	if (pool) {
		pool->clients++;
		kvpd_stats_pool(d, pool, c->gen);
	}
	kvpd_stats_end(d);
	return 0;
}

void kvpd_client_reason(const struct kvpd_client *c, uint64_t out_addr, uint32_t out_len,
			const char *why, struct kvp_cqe *cqe)
{
	size_t len = strnlen(why, KVP_REASON_MAX - 1);
	char *out;

	if (!len || !out_len)
		return;
	if (len >= out_len)
		len = out_len - 1;
	out = kvpd_arena_range(c, out_addr, len + 1);
	if (!out)
		return;
	memcpy(out, why, len);
	out[len] = '\0';
	cqe->aux = len;
}

void kvpd_client_detach(struct kvpd_client *c)
{
	if (!c->pool)
		return;
	kvpd_tenants_detach(&c->charge); /* its tenants' charges for the pool go with the pool */
	c->pool->clients--;
	c->pool = NULL;
	c->charge.pool = NULL;
}

void kvpd_fill_pool_info(const struct kvpd_client *c, struct kvp_pool_info *info)
{
	const struct kvp_pool_params *p;

	memset(info, 0, sizeof(*info));
	if (!c->pool)
		return;
	p = &c->pool->params;
	info->num_blocks = p->num_blocks;
	info->block_size = p->block_size;
	info->num_groups = p->num_groups;
	info->max_len = p->max_len;
	memcpy(info->group_kind, p->group_kind, sizeof(info->group_kind));
	memcpy(info->group_param, p->group_param, sizeof(info->group_param));
	info->kv_heads = p->kv_heads;
	info->head_dim = p->head_dim;
	info->dtype = p->dtype;
	info->layers_per_group = p->layers_per_group;
}
