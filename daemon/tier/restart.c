/* SPDX-License-Identifier: MIT */
/*
 * A host tier carried across a planned restart (the handover room writes and
 * reads the state): its memory is a sealed memfd the next run maps again, so
 * what is handed on is its index: every entry that counts against its
 * capacity, least recently used first, with the tenant it is charged to, and
 * whose ALLOC last took each pool block. A window's copy is not: its block is
 * still in the pool, and the next run's walk copies it again if it must.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tier/tier_internal.h"

static bool host_tier(const struct kvpd_pool *pool)
{
	return pool->tier && !pool->tier->disk;
}

static bool handed_on(const struct tier_entry *x)
{
	return x->state == TIER_VALID && !x->window;
}

uint32_t kvpd_tier_saved_count(const struct kvpd_pool *pool, uint32_t *owners)
{
	const struct kvpd_tier *t = pool->tier;
	uint32_t n = 0;

	*owners = 0;
	if (!host_tier(pool))
		return 0;
	for (uint32_t i = t->e[t->nslots].lru_next; i != t->nslots; i = t->e[i].lru_next)
		n += handed_on(&t->e[i]);
	*owners = t->nowners - 1;
	return n;
}

int kvpd_tier_memfd(const struct kvpd_pool *pool)
{
	return host_tier(pool) ? pool->tier->mem_fd : -1;
}

bool kvpd_tier_keeps(const struct kvpd_pool *pool, uint32_t group, const struct kvc_hash *key)
{
	const struct kvpd_tier *t = pool->tier;
	uint32_t i = t ? kvpd_tier_find(t, group, key) : TIER_END;

	return i != TIER_END && handed_on(&t->e[i]);
}

void kvpd_tier_save(const struct kvpd_pool *pool, struct kvpd_tier_saved *out,
		    struct kvpd_tier_saved_owner *owners, uint32_t *block_owner)
{
	const struct kvpd_tier *t = pool->tier;
	uint32_t n = 0;

	if (!host_tier(pool))
		return;
	for (uint32_t i = t->e[t->nslots].lru_next; i != t->nslots; i = t->e[i].lru_next)
		if (handed_on(&t->e[i]))
			out[n++] = (struct kvpd_tier_saved){ .key = t->e[i].key, .slot = i,
							     .group = t->e[i].group,
							     .owner = t->e[i].owner };
	for (uint32_t i = 1; i < t->nowners; i++) {
		const struct kvpd_tenant *tn = t->owners[i].names ? t->owners[i].tenant : NULL;

		owners[i - 1] = (struct kvpd_tier_saved_owner){ .kind = tn ? tn->kind : 0,
								 .uid = tn ? (uint32_t)tn->uid : 0 };
		if (tn)
			memcpy(owners[i - 1].ns, tn->ns, sizeof(tn->ns));
	}
	memcpy(block_owner, t->block_owner, (size_t)pool->layout.num_blocks * sizeof(*block_owner));
}

/* The next run's view of the last's memory: a memfd of the size it maps, sealed at it. */
static int adopt_memory(struct kvpd_tier *t, int fd, char *why, size_t why_len)
{
	size_t bytes = (size_t)t->nslots * t->slot_bytes;
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;
	void *mem;

	if (fstat(fd, &st) || (size_t)st.st_size != bytes || seals < 0 ||
	    (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return kvpd_refuse(why, why_len, -EINVAL, "the tier's memory handed over is not "
				   "a sealed memfd of %zu bytes", bytes);
	mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (mem == MAP_FAILED)
		return kvpd_refuse(why, why_len, -errno, "the tier's memory handed over: mmap: %s",
				   strerror(errno));
	munmap(t->mem, bytes);
	close(t->mem_fd);
	fcntl(fd, F_SETFD, FD_CLOEXEC); /* inherited for this run alone */
	t->mem = mem;
	t->mem_fd = fd;
	return 0;
}

/* Every index the saved entries and owners name is in range, every slot and key once. */
static int check_saved(const struct kvpd_tier *t, const struct kvpd_tier_saved *e, uint32_t n,
		       const struct kvpd_tier_saved_owner *o, uint32_t nowners,
		       const uint32_t *block_owner, uint32_t num_blocks, uint32_t num_groups)
{
	uint8_t *seen = calloc(t->nslots, 1);
	int ret = 0;

	if (!seen)
		return -ENOMEM;
	if (n > t->capacity)
		ret = -EINVAL;
	for (uint32_t i = 0; i < nowners && !ret; i++)
		if (o[i].kind > KVP_TENANT_NAMESPACE || memchr(o[i].ns, 0, sizeof(o[i].ns)) == NULL)
			ret = -EINVAL;
	for (uint32_t i = 0; i < n && !ret; i++) {
		if (e[i].slot >= t->nslots || seen[e[i].slot] || e[i].group >= num_groups ||
		    e[i].owner > nowners || (e[i].owner && !o[e[i].owner - 1].kind))
			ret = -EINVAL;
		else
			seen[e[i].slot] = 1;
	}
	for (uint32_t b = 0; b < num_blocks && !ret; b++)
		if (block_owner[b] > nowners || (block_owner[b] && !o[block_owner[b] - 1].kind))
			ret = -EINVAL;
	free(seen);
	return ret;
}

/* Owner record @i again, for the tenant @o names (0 when it cannot be had). */
static uint32_t owner_again(struct kvpd_tier *t, const struct kvpd_tier_saved_owner *o)
{
	struct kvpd_tenant *tenant;
	uint32_t i;

	if (!o->kind)
		return 0;
	tenant = kvpd_tenant_get(t->d, o->kind, (uid_t)o->uid, o->ns);
	if (!tenant)
		return 0;
	for (i = 1; i < t->nowners && t->owners[i].tenant != tenant; i++)
		;
	if (i == t->nowners) {
		struct tier_owner *p = realloc(t->owners, (t->nowners + 1) * sizeof(*p));

		if (!p) {
			kvpd_tenant_put(t->d, tenant);
			return 0;
		}
		t->owners = p;
		t->nowners++;
		t->owners[i] = (struct tier_owner){ .tenant = tenant, .head = TIER_END,
						    .tail = TIER_END };
	}
	/* A record's first name holds its one reference on the tenant: this one, or its own. */
	if (t->owners[i].names++)
		kvpd_tenant_put(t->d, tenant);
	return i;
}

static void owner_drop(struct kvpd_tier *t, uint32_t i)
{
	struct tier_owner *o = &t->owners[i];

	if (!i || --o->names)
		return;
	kvpd_tenant_put(t->d, o->tenant);
	*o = (struct tier_owner){ 0 };
}

int kvpd_tier_load(struct kvpd_pool *pool, int fd, const struct kvpd_tier_saved *e, uint32_t n,
		   const struct kvpd_tier_saved_owner *o, uint32_t nowners,
		   const uint32_t *block_owner, char *why, size_t why_len)
{
	struct kvpd_tier *t = pool->tier;
	uint32_t *map;
	int ret;

	if (!host_tier(pool) || t->st.held)
		return kvpd_refuse(why, why_len, -EINVAL, "the pool has no empty host tier");
	ret = check_saved(t, e, n, o, nowners, block_owner, pool->layout.num_blocks,
			  pool->params.num_groups);
	if (ret)
		return kvpd_refuse(why, why_len, ret, "the tier's index handed over is not "
				   "consistent");
	map = calloc((size_t)nowners + 1, sizeof(*map));
	if (!map)
		return -ENOMEM;
	ret = adopt_memory(t, fd, why, why_len);
	if (ret)
		goto free_map;
	for (uint32_t i = 0; i < nowners; i++)
		map[i + 1] = owner_again(t, &o[i]);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t slot = e[i].slot, owner = map[e[i].owner];
		uint32_t *head;

		if (kvpd_tier_find(t, e[i].group, &e[i].key) != TIER_END)
			continue; /* a key twice: the first kept */
		kvpd_tier_slot_take_at(t, slot);
		head = &t->buckets[kvpd_tier_bucket(t, e[i].group, &e[i].key)];
		t->e[slot] = (struct tier_entry){ .key = e[i].key, .group = e[i].group,
						  .state = TIER_COPYING, .lru_prev = TIER_END,
						  .lru_next = TIER_END, .own_prev = TIER_END,
						  .own_next = TIER_END, .hnext = *head,
						  .owner = owner, .block = TIER_END };
		*head = slot;
		t->regular++;
		if (owner) {
			t->owners[owner].names++;
			t->owners[owner].bytes += t->slot_bytes;
		}
		kvpd_tier_use(t, slot); /* VALID, most recently used of those so far */
	}
	for (uint32_t b = 0; b < pool->layout.num_blocks; b++)
		if (map[block_owner[b]])
			kvpd_tier_block_owner(t, b, map[block_owner[b]]);
	for (uint32_t i = 1; i <= nowners; i++)
		owner_drop(t, map[i]);
	t->dirty = true;
free_map:
	free(map);
	return ret;
}
