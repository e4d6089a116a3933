/* SPDX-License-Identifier: MIT */
/*
 * A host tier carried across a planned restart (the handover room writes and
 * reads the state). Its memory and its index (entries and buckets) are
 * memfds, so the next run maps them as they are: the entries, their hash
 * chains, the LRU and free lists, each owner's LRU, all come back in the time
 * a mapping takes, where rebuilding them costs a cache miss an entry. The state
 * adds what lives outside them: their shape and counts, the tenants behind
 * the owner records, each pool block's owner, and the walk's mark on each
 * block it looked at in the free queue. The next run's pool has the same
 * queue, so the walk goes on from where it was and the window's copies stay
 * its own; a mark is current while the block's use count is the one it saw,
 * and every count starts again at 0 (kvc_pool_restore).
 *
 * The index is the daemon's own memory, never a client's: its shape is
 * checked, not every link.
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

/* A block's mark the state carries: the slot the walk noted, or not looked at. */
#define WALK_UNSEEN (TIER_END - 3)

/* Whether the walk's mark on block @id is current (it looked at the block where it is now). */
static bool looked_at(const struct kvpd_tier *t, uint32_t id)
{
	struct kvc_block_state st;

	return !kvc_block_state(t->pool->core, id, &st) && st.queued &&
	       t->blk[id].uses1 == st.uses + 1;
}

bool kvpd_tier_save_head(const struct kvpd_pool *pool, struct kvpd_tier_head *head, int *mem_fd,
			 int *index_fd)
{
	const struct kvpd_tier *t = pool->tier;

	if (!host_tier(pool))
		return false;
	*head = (struct kvpd_tier_head){ .nslots = t->nslots, .nbuckets = t->mask + 1,
					 .entry_bytes = sizeof(struct tier_entry),
					 .capacity = t->capacity, .held = t->st.held,
					 .regular = t->regular, .nfree = t->nfree,
					 .nowners = t->nowners, .front = t->front,
					 .ahead = t->ahead };
	*mem_fd = t->mem_fd;
	*index_fd = t->index_fd;
	return true;
}

void kvpd_tier_leave_mapped(struct kvpd_pool *pool)
{
	if (pool->tier)
		pool->tier->leave_mapped = true;
}

bool kvpd_tier_keeps(const struct kvpd_pool *pool, uint32_t group, const struct kvc_hash *key)
{
	const struct kvpd_tier *t = pool->tier;
	uint32_t i = t ? kvpd_tier_find(t, group, key) : TIER_END;

	return i != TIER_END && t->e[i].state == TIER_VALID && !t->e[i].window;
}

void kvpd_tier_save(const struct kvpd_pool *pool, struct kvpd_tier_saved_owner *owners,
		    uint32_t *block_owner, uint32_t *walk)
{
	const struct kvpd_tier *t = pool->tier;

	for (uint32_t i = 1; i < t->nowners; i++) {
		const struct tier_owner *o = &t->owners[i];
		const struct kvpd_tenant *tn = o->names ? o->tenant : NULL;

		owners[i - 1] = (struct kvpd_tier_saved_owner){
			.kind = tn ? tn->kind : 0, .uid = tn ? (uint32_t)tn->uid : 0,
			.bytes = tn ? o->bytes : 0, .head = tn ? o->head : TIER_END,
			.tail = tn ? o->tail : TIER_END, .names = tn ? o->names : 0 };
		if (tn)
			memcpy(owners[i - 1].ns, tn->ns, sizeof(tn->ns));
	}
	memcpy(block_owner, t->block_owner, (size_t)pool->layout.num_blocks * sizeof(*block_owner));
	for (uint32_t id = 0; id < pool->layout.num_blocks; id++)
		walk[id] = id && looked_at(t, id) ? t->blk[id].slot : WALK_UNSEEN;
}

static bool sealed_of_size(int fd, size_t bytes)
{
	int seals = fd >= 0 ? fcntl(fd, F_GET_SEALS) : -1;
	struct stat st;

	return seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW) &&
	       !fstat(fd, &st) && (size_t)st.st_size == bytes;
}

/* A saved owner record the next run can take: a tenant's name, its lists in range. */
static bool owner_fits(const struct kvpd_tier *t, const struct kvpd_tier_saved_owner *o)
{
	return o->kind <= KVP_TENANT_NAMESPACE && memchr(o->ns, 0, sizeof(o->ns)) &&
	       (o->head == TIER_END || o->head < t->nslots) &&
	       (o->tail == TIER_END || o->tail < t->nslots);
}

bool kvpd_tier_adoptable(const struct kvpd_tier *t, const struct kvpd_tier_handed *h,
			 uint32_t nbuckets)
{
	const struct kvpd_tier_head *x = &h->head;

	for (uint32_t i = 1; i < x->nowners; i++)
		if (!owner_fits(t, &h->owners[i - 1]))
			return false;
	for (uint32_t b = 0; b < t->pool->layout.num_blocks; b++) {
		uint32_t m = h->walk[b];

		if (h->block_owner[b] >= x->nowners ||
		    (m >= t->nslots && m != WALK_UNSEEN && m != TIER_END && m != TIER_DECLINED &&
		     m != TIER_OVER_QUOTA))
			return false;
	}
	return x->front < t->pool->layout.num_blocks && x->ahead < t->pool->layout.num_blocks &&
	       x->nslots == t->nslots && x->nbuckets == nbuckets && x->capacity == t->capacity &&
	       x->entry_bytes == sizeof(struct tier_entry) && x->held <= t->nslots &&
	       x->nfree <= t->nslots && x->regular <= t->capacity && x->nowners >= 1 &&
	       x->held + x->nfree <= t->nslots &&
	       sealed_of_size(h->mem_fd, (size_t)t->nslots * t->slot_bytes) &&
	       sealed_of_size(h->index_fd, kvpd_tier_index_bytes(t, nbuckets));
}

uint8_t *kvpd_tier_memory_adopt(struct kvpd_tier *t, int fd)
{
	void *mem = mmap(NULL, (size_t)t->nslots * t->slot_bytes, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_NORESERVE, fd, 0);

	if (mem == MAP_FAILED)
		return NULL;
	fcntl(fd, F_SETFD, FD_CLOEXEC); /* inherited for this run alone */
	t->mem_fd = fd;
	return mem;
}

/* Owner record @i again, for the tenant the saved record names (its names hold one reference). */
static int owner_again(struct kvpd_tier *t, uint32_t i, const struct kvpd_tier_saved_owner *o)
{
	struct kvpd_tenant *tenant;

	t->owners[i] = (struct tier_owner){ .head = TIER_END, .tail = TIER_END };
	if (!o->kind || !o->names)
		return 0;
	tenant = kvpd_tenant_get(t->d, o->kind, (uid_t)o->uid, o->ns);
	if (!tenant)
		return -ENOMEM;
	t->owners[i] = (struct tier_owner){ .tenant = tenant, .bytes = o->bytes, .head = o->head,
					    .tail = o->tail, .names = o->names };
	return 0;
}

int kvpd_tier_adopted(struct kvpd_tier *t, struct kvpd_tier_handed *h)
{
	const struct kvpd_tier_head *x = &h->head;
	struct tier_owner *owners = calloc(x->nowners, sizeof(*owners));
	int ret = 0;

	if (!owners)
		return -ENOMEM;
	free(t->owners);
	t->owners = owners;
	t->nowners = x->nowners;
	h->taken = true; /* the descriptors are the tier's from here, whatever follows */
	for (uint32_t i = 1; i < x->nowners && !ret; i++)
		ret = owner_again(t, i, &h->owners[i - 1]);
	if (ret)
		return ret; /* out of memory at start, as a tier made new would be */
	memcpy(t->block_owner, h->block_owner,
	       (size_t)t->pool->layout.num_blocks * sizeof(*t->block_owner));
	t->st.held = x->held;
	t->regular = x->regular;
	t->nfree = x->nfree;
	t->current = TIER_END;
	/* The walk where it was: every use count is 0 in the restored pool. */
	for (uint32_t id = 0; id < t->pool->layout.num_blocks; id++) {
		if (h->walk[id] == WALK_UNSEEN)
			continue;
		t->blk[id].uses1 = 1;
		t->blk[id].slot = h->walk[id];
	}
	t->front = x->front;
	t->ahead = x->ahead;
	t->queue_ops = 0; /* walked again at the first turn, from the front */
	t->dirty = true;
	return 0;
}
