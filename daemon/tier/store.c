/* SPDX-License-Identifier: MIT */
/*
 * A tier's store: slots of one block each, in host memory or in a file
 * (disk_file.c), an index by (group, chained hash), and an LRU list of the
 * entries that may go to make room. An entry being filled (COPYING) is found,
 * so a block is never copied twice, but not hit; one being read by a
 * promotion is pinned, out of the LRU.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "observe/probes.h"
#include "tier/disk.h"

/*
 * Copies down in flight at most (at least 16 blocks): a host tier's 512 MiB of
 * KV, enough for a long prompt's burst of rescues (a copy in flight costs its
 * slot, no buffer); a disk tier's 64 MiB, as its lanes stage what they write.
 * In jobs of up to 8 MiB or 1024 blocks, so that the first blocks of a long
 * run are hittable (and safe from abandonment) before the last are copied.
 */
#define TIER_QUEUE_BYTES (512u << 20)
#define TIER_DISK_QUEUE_BYTES (64u << 20)
#define TIER_JOB_BYTES (8u << 20)
#define TIER_JOB_BLOCKS 1024u

static uint32_t bucket_of(const struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key)
{
	return (uint32_t)(key->lo ^ (key->hi >> 23) ^ ((uint64_t)group * 0x9e3779b97f4a7c15ull)) &
	       t->mask;
}

uint32_t kvpd_tier_find(const struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key)
{
	uint32_t i = t->buckets[bucket_of(t, group, key)];

	while (i != TIER_END && !(t->e[i].group == group && t->e[i].key.lo == key->lo &&
				  t->e[i].key.hi == key->hi))
		i = t->e[i].hnext;
	return i;
}

bool kvpd_tier_holds(const struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key)
{
	uint32_t i = t ? kvpd_tier_find(t, group, key) : TIER_END;

	return i != TIER_END && t->e[i].state == TIER_VALID;
}

/* The core's view of a pool's tiers: the local one's entries, then what the cluster answered. */
static bool tiers_have(void *ctx, uint32_t group, const struct kvc_hash *key)
{
	const struct kvpd_pool *pool = ctx;

	return kvpd_tier_holds(pool->tier, group, key) ||
	       (pool->remote && kvpd_remote_answered(pool->remote, group, key));
}

static void tiers_leaving(void *ctx, uint32_t id, bool handed_out)
{
	const struct kvpd_pool *pool = ctx;

	if (pool->tier)
		kvpd_tier_leaving(pool->tier, id, handed_out);
}

static const struct kvc_tier_ops tier_ops = { .has = tiers_have, .leaving = tiers_leaving };

static void lru_unlink(struct kvpd_tier *t, uint32_t i)
{
	struct tier_entry *x = &t->e[i];

	t->e[x->lru_prev].lru_next = x->lru_next;
	t->e[x->lru_next].lru_prev = x->lru_prev;
	x->lru_prev = x->lru_next = TIER_END;
	if (x->owner) {
		struct tier_owner *o = &t->owners[x->owner];

		*(x->own_prev == TIER_END ? &o->head : &t->e[x->own_prev].own_next) = x->own_next;
		*(x->own_next == TIER_END ? &o->tail : &t->e[x->own_next].own_prev) = x->own_prev;
		x->own_prev = x->own_next = TIER_END;
	}
}

static void lru_append(struct kvpd_tier *t, uint32_t i)
{
	struct tier_entry *x = &t->e[i];
	uint32_t s = t->nslots;

	x->lru_prev = t->e[s].lru_prev;
	x->lru_next = s;
	t->e[t->e[s].lru_prev].lru_next = i;
	t->e[s].lru_prev = i;
	if (x->owner) {
		struct tier_owner *o = &t->owners[x->owner];

		x->own_prev = o->tail;
		x->own_next = TIER_END;
		*(o->tail == TIER_END ? &o->head : &t->e[o->tail].own_next) = i;
		o->tail = i;
	}
}

void kvpd_tier_restore(struct kvpd_tier *t, uint32_t slot, uint32_t group,
		       const struct kvc_hash *key, uint64_t sum,
		       const struct kvpd_block_origin *origin)
{
	uint32_t *head = &t->buckets[bucket_of(t, group, key)];
	uint32_t s = t->nslots;

	t->e[slot] = (struct tier_entry){ .key = *key, .group = group, .state = TIER_VALID,
					  .own_prev = TIER_END, .own_next = TIER_END,
					  .hnext = *head, .sum = sum, .block = TIER_END };
	*head = slot;
	/* Restored newest first: each goes before the others, least recently used. */
	t->e[slot].lru_next = t->e[s].lru_next;
	t->e[slot].lru_prev = s;
	t->e[t->e[s].lru_next].lru_prev = slot;
	t->e[s].lru_next = slot;
	t->st.held++;
	t->regular++;
	kvpd_tier_slot_held(t, slot);
	kvpd_events_tier_restored(t->pool->events, group, key, origin);
}

void kvpd_tier_free_rest(struct kvpd_tier *t)
{
	kvpd_tier_slots_rest(t);
}

/* A name more on owner @i: the first holds a reference on its tenant. */
static void name(struct kvpd_tier *t, uint32_t i)
{
	if (i && t->owners[i].names++ == 0)
		t->owners[i].tenant->refs++;
}

/* A name less on owner @i: the record, and its reference on the tenant, go with the last. */
static void unname(struct kvpd_tier *t, uint32_t i)
{
	struct tier_owner *o = &t->owners[i];

	if (!i || --o->names)
		return;
	kvpd_tenant_put(t->d, o->tenant);
	*o = (struct tier_owner){ 0 };
}

uint32_t kvpd_tier_owner_of(struct kvpd_tier *t, const struct kvpd_client *c)
{
	struct kvpd_tenant *tenant = c->tenant[1] ? c->tenant[1] : c->tenant[0];
	uint32_t i, free_at = 0;

	if (!tenant)
		return 0;
	for (i = 1; i < t->nowners; i++) {
		if (t->owners[i].tenant == tenant)
			return i;
		if (!t->owners[i].names && !free_at)
			free_at = i;
	}
	if (!free_at) {
		struct tier_owner *p = realloc(t->owners, (t->nowners + 1) * sizeof(*p));

		if (!p)
			return 0;
		t->owners = p;
		free_at = t->nowners++;
	}
	/* Named by nothing yet: the reference on the tenant comes with the first name. */
	t->owners[free_at] = (struct tier_owner){ .tenant = tenant, .head = TIER_END,
						  .tail = TIER_END };
	return free_at;
}

void kvpd_tier_block_owner(struct kvpd_tier *t, uint32_t block, uint32_t owner)
{
	uint32_t old = t->block_owner[block];

	if (old == owner)
		return;
	name(t, owner);
	t->block_owner[block] = owner;
	unname(t, old);
}

void kvpd_tier_owned_by(struct kvpd_pool *pool, const struct kvpd_client *c, const uint32_t *ids,
			uint32_t n)
{
	struct kvpd_tier *t = pool->tier;
	uint32_t owner;

	if (!t || !n)
		return;
	owner = kvpd_tier_owner_of(t, c);
	for (uint32_t i = 0; i < n; i++)
		kvpd_tier_block_owner(t, ids[i], owner);
}

void kvpd_tier_drop(struct kvpd_tier *t, uint32_t i)
{
	struct tier_entry *x = &t->e[i];
	uint32_t *link = &t->buckets[bucket_of(t, x->group, &x->key)];
	uint32_t owner = x->owner;

	while (*link != i)
		link = &t->e[*link].hnext;
	*link = x->hnext;
	if (x->state == TIER_VALID) {
		if (!x->pins)
			lru_unlink(t, i);
		t->st.held--;
	}
	if (x->state == TIER_VALID || x->promised)
		kvpd_events_tier_gone(t->pool->events, x->group, &x->key);
	t->regular -= !x->window;
	*x = (struct tier_entry){ .state = TIER_FREE, .own_prev = TIER_END, .own_next = TIER_END,
				  .hnext = TIER_END, .block = TIER_END };
	kvpd_tier_slot_free(t, i);
	if (owner) {
		t->owners[owner].bytes -= t->slot_bytes;
		unname(t, owner);
	}
}

/* The entry to drop for room: the least recently used of the owner's, or of all. */
static uint32_t victim(struct kvpd_tier *t, uint32_t owner, bool own)
{
	uint32_t i = own ? t->owners[owner].head : t->e[t->nslots].lru_next;

	return i == t->nslots ? TIER_END : i;
}

/* The least recently used entry that is not a window's copy (TIER_END: none). */
static uint32_t regular_victim(struct kvpd_tier *t)
{
	uint32_t i = t->e[t->nslots].lru_next;

	while (i != t->nslots && t->e[i].window)
		i = t->e[i].lru_next;
	return i == t->nslots ? TIER_END : i;
}

static void evict(struct kvpd_tier *t, uint32_t i)
{
	KVPD_PROBE(tier_evict, t->pool->name, t->e[i].group, t->e[i].key.lo);
	kvpd_tier_drop(t, i);
	t->st.evicted++;
}

/* Entries that count against the tier's capacity down to @keep; false when the rest are busy. */
static bool trim(struct kvpd_tier *t, uint32_t keep)
{
	while (t->regular > keep) {
		uint32_t old = regular_victim(t);

		if (old == TIER_END)
			return false;
		evict(t, old);
	}
	return true;
}

void kvpd_tier_settle(struct kvpd_tier *t, uint32_t i)
{
	struct tier_entry *x = &t->e[i];

	x->window = false;
	x->block = TIER_END;
	t->regular++;
	/* Out of the pool now: the tier's most recent, as one LRU cache would have it. */
	if (x->state == TIER_VALID)
		kvpd_tier_use(t, i);
}

void kvpd_tier_trim(struct kvpd_tier *t)
{
	trim(t, t->capacity);
}

uint32_t kvpd_tier_take(struct kvpd_tier *t, uint32_t group, const struct kvc_hash *key,
			uint32_t owner, uint32_t window_of)
{
	uint64_t limit = owner ? t->owners[owner].tenant->quota.limit[KVPD_QUOTA_TIER_BYTES] :
				 KVP_QUOTA_UNLIMITED;
	bool window = window_of != TIER_END;
	uint32_t i, *head;

	/* One tenant may flush its own entries, not another's, past its max_tier_bytes. */
	while (owner && t->owners[owner].bytes + t->slot_bytes > limit) {
		uint32_t old = victim(t, owner, true);

		if (old == TIER_END)
			return TIER_OVER_QUOTA; /* the rest of its bytes are being filled or read */
		evict(t, old);
	}
	/*
	 * A window's copy takes the window's room while it lasts (the pool holds
	 * the block too: counted once the pool lets it go, kvpd_tier_settle); any
	 * other entry counts against the capacity at once.
	 */
	if (!window && !trim(t, t->capacity - 1))
		return TIER_END; /* every slot is being filled or read */
	if (!t->nfree) {
		/* A host tier's window waits for its room (promotions in flight hold some of it). */
		uint32_t old = window && t->nslots > t->capacity ? TIER_END : regular_victim(t);

		if (old == TIER_END)
			return TIER_END;
		evict(t, old);
	}
	i = kvpd_tier_slot_take(t);
	head = &t->buckets[bucket_of(t, group, key)];
	t->e[i] = (struct tier_entry){ .key = *key, .group = group, .state = TIER_COPYING,
				       .lru_prev = TIER_END, .lru_next = TIER_END,
				       .own_prev = TIER_END, .own_next = TIER_END, .hnext = *head,
				       .owner = owner, .window = window, .block = window_of };
	*head = i;
	t->regular += !window;
	name(t, owner);
	if (owner)
		t->owners[owner].bytes += t->slot_bytes;
	return i;
}

bool kvpd_tier_rekey(struct kvpd_tier *t, uint32_t i, uint32_t group, const struct kvc_hash *key,
		     uint32_t owner)
{
	uint64_t limit = owner ? t->owners[owner].tenant->quota.limit[KVPD_QUOTA_TIER_BYTES] :
				 KVP_QUOTA_UNLIMITED;
	uint32_t *head;

	if (kvpd_tier_find(t, group, key) != TIER_END ||
	    (owner && owner != t->e[i].owner && t->owners[owner].bytes + t->slot_bytes > limit)) {
		kvpd_tier_drop(t, i);
		return false;
	}
	/*
	 * Out under its old key, as a drop takes it; in under the new one, as a
	 * store. Named first: the old owner may be the new.
	 */
	name(t, owner);
	kvpd_tier_drop(t, i);
	kvpd_tier_slot_take_at(t, i);
	head = &t->buckets[bucket_of(t, group, key)];
	t->e[i] = (struct tier_entry){ .key = *key, .group = group, .state = TIER_COPYING,
				       .lru_prev = TIER_END, .lru_next = TIER_END,
				       .own_prev = TIER_END, .own_next = TIER_END, .hnext = *head,
				       .owner = owner, .block = TIER_END };
	*head = i;
	t->regular++;
	if (owner)
		t->owners[owner].bytes += t->slot_bytes;
	kvpd_tier_use(t, i);
	return true;
}

void kvpd_tier_use(struct kvpd_tier *t, uint32_t i)
{
	struct tier_entry *x = &t->e[i];

	if (x->state != TIER_VALID) {
		x->state = TIER_VALID;
		x->promised = false; /* held from now on: a drop says so as any other's */
		t->st.held++;
		kvpd_events_tier_held(t->pool->events, x->group, &x->key);
	} else if (!x->pins) {
		lru_unlink(t, i);
	}
	if (!x->pins)
		lru_append(t, i);
}

void kvpd_tier_pin(struct kvpd_tier *t, uint32_t i)
{
	if (t->e[i].pins++ == 0)
		lru_unlink(t, i);
}

void kvpd_tier_unpin(struct kvpd_tier *t, uint32_t i)
{
	if (--t->e[i].pins == 0)
		lru_append(t, i); /* a promotion is a use: most recent */
}

/* Also the pool's tier_free: only an idle pool is freed (no job in flight, no POOL_SYNC waiting). */
static void tier_free(struct kvpd_tier *t, bool drop)
{
	if (t->copier)
		kvpd_tier_copier_stop(t->copier);
	kvpd_tier_disk_close(t, drop);
	for (uint32_t i = 1; i < t->nowners; i++)
		if (t->owners[i].names)
			kvpd_tenant_put(t->d, t->owners[i].tenant);
	free(t->owners);
	free(t->block_owner);
	if (t->mem && !t->leave_mapped)
		munmap(t->mem, (size_t)t->nslots * t->slot_bytes);
	if (t->mem_fd >= 0)
		close(t->mem_fd);
	if (t->leave_mapped)
		t->e = NULL; /* the exec unmaps it */
	kvpd_tier_index_unmap(t);
	free(t->blk);
	free(t->rescues);
	free(t->live);
	free(t->empty);
	free(t->in_empty);
	free(t->loader);
	free(t->ghost);
	free(t);
}

static uint32_t clamp_u32(uint64_t v, uint32_t lo, uint32_t hi)
{
	return v < lo ? lo : v > hi ? hi : (uint32_t)v;
}

/*
 * A host tier a planned restart handed over takes the last run's index and
 * memory as they are; any other starts empty. A handover that does not fit
 * (a failed check, no memory to map it) is forgotten: the tier starts empty.
 */
static bool adopt(struct kvpd_tier *t, uint32_t nb)
{
	struct kvpd_tier_handed *h = t->disk ? NULL : t->pool->tier_handed;

	if (!h || !kvpd_tier_adoptable(t, h, nb) || kvpd_tier_index_map(t, nb, h->index_fd))
		return false;
	t->mem = kvpd_tier_memory_adopt(t, h->mem_fd);
	if (!t->mem) {
		t->index_fd = -1; /* the handover's, still: closed with it */
		munmap(t->e, t->index_bytes);
		t->e = NULL;
		return false;
	}
	return true;
}

static int tier_alloc(struct kvpd_tier *t, uint32_t num_blocks)
{
	uint32_t nb = 2;
	bool adopted;

	while (nb < t->nslots)
		nb <<= 1;
	t->mask = nb - 1;
	adopted = adopt(t, nb);
	if (!adopted && kvpd_tier_index_map(t, nb, -1))
		return -ENOMEM;
	t->loader = calloc(num_blocks, sizeof(*t->loader));
	t->block_owner = calloc(num_blocks, sizeof(*t->block_owner));
	t->owners = calloc(1, sizeof(*t->owners));
	t->nowners = 1;
	if (t->pool->spec.tier_policy == KVPD_TIER_SECOND_SIGHT) {
		uint32_t ng = 2;

		while (ng < 2 * t->nslots)
			ng <<= 1;
		t->ghost = calloc(ng, sizeof(*t->ghost));
		t->ghost_mask = ng - 1;
		if (!t->ghost)
			return -ENOMEM;
	}
	if (!t->disk && !adopted)
		t->mem = kvpd_tier_host_memory(t);
	if (!t->loader || !t->block_owner || !t->owners || (!t->mem && !t->disk) ||
	    kvpd_tier_window_init(t, num_blocks) || (!adopted && kvpd_tier_slots_init(t)))
		return -ENOMEM;
	if (adopted)
		return kvpd_tier_adopted(t, t->pool->tier_handed);
	memset(t->buckets, 0xff, (size_t)nb * sizeof(*t->buckets));
	for (uint32_t i = 0; i < t->nslots; i++)
		t->e[i] = (struct tier_entry){ .lru_prev = TIER_END, .lru_next = TIER_END,
					       .own_prev = TIER_END, .own_next = TIER_END,
					       .hnext = TIER_END, .block = TIER_END };
	t->e[t->nslots].lru_prev = t->e[t->nslots].lru_next = t->nslots;
	if (!t->disk)
		kvpd_tier_slots_rest(t); /* a disk tier's, once its blocks are read back */
	return 0;
}

static int host_slots(struct kvpd_tier *t, char *why, size_t why_len)
{
	uint64_t bytes = t->pool->spec.tier_host_bytes;
	uint64_t slots = bytes / (t->slot_bytes ? t->slot_bytes : 1);

	if (slots == 0 || slots > KVC_MAX_BLOCKS)
		return kvpd_refuse(why, why_len, -EINVAL, "tier_host_bytes %llu: holds %llu blocks "
				   "of %zu bytes, must be 1..%u", (unsigned long long)bytes,
				   (unsigned long long)slots, t->slot_bytes, KVC_MAX_BLOCKS);
	t->capacity = (uint32_t)slots;
	t->nslots = (uint32_t)(slots + kvpd_tier_window_slots(slots, t->slot_bytes));
	return 0;
}

/* The host tier's copier, or the disk tier's index read back and its lanes. */
static int tier_start(struct kvpd_tier *t, char *why, size_t why_len)
{
	int ret;

	if (!t->disk) {
		ret = kvpd_tier_copier_start(&t->copier, "kvpoold-tier", true, NULL, NULL);
		return ret ? kvpd_refuse(why, why_len, ret, "tier: its copier thread: %s",
					 strerror(-ret)) : 0;
	}
	ret = kvpd_tier_disk_restore(t, why, why_len);
	if (ret)
		return ret;
	ret = kvpd_tier_disk_start(t);
	return ret ? kvpd_refuse(why, why_len, ret, "tier_disk_path: its threads: %s",
				 strerror(-ret)) : 0;
}

static int local_attach(struct kvpd *d, struct kvpd_pool *pool, char *why, size_t why_len)
{
	const struct kvpd_kv_layout *l = &pool->layout;
	bool disk = pool->spec.tier_disk_bytes != 0;
	struct kvpd_tier *t;
	int ret;

	if (!pool->spec.tier_host_bytes && !disk)
		return 0;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->d = d;
	t->pool = pool;
	t->mem_fd = -1;
	t->index_fd = -1;
	t->slot_bytes = 2 * l->layers * kvpd_block_chunk_bytes(l);
	ret = disk ? kvpd_tier_disk_open(t, why, why_len) : host_slots(t, why, why_len);
	if (ret)
		goto free_tier;
	if (disk) {
		t->capacity = (uint32_t)t->disk->capacity;
		t->pack = t->disk->pack;
	}
	/* A pool its clients may map, or on a GPU, is written out of the daemon's sight. */
	t->sees_writes = pool->spec.v2.backend == KVP_BACKEND_HOST && !*pool->namespace_;
	t->queue_cap = clamp_u32((disk ? TIER_DISK_QUEUE_BYTES : TIER_QUEUE_BYTES) / t->slot_bytes,
				 16, t->nslots);
	t->job_cap = clamp_u32(TIER_JOB_BYTES / t->slot_bytes, 16, TIER_JOB_BLOCKS);
#ifdef KVPD_TEST_HOOKS
	if (getenv("KVPOOL_TIER_DELAY_US"))
		t->delay_us = (uint32_t)strtoul(getenv("KVPOOL_TIER_DELAY_US"), NULL, 10);
#endif
	ret = tier_alloc(t, pool->layout.num_blocks) ?:
	      kvpd_events_tier_start(pool->events, t->nslots, disk);
	if (ret) {
		ret = kvpd_refuse(why, why_len, ret, "%s: no memory for %u blocks' tier",
				  disk ? "tier_disk_bytes" : "tier_host_bytes", t->capacity);
		goto free_tier;
	}
	ret = tier_start(t, why, why_len);
	if (ret)
		goto free_tier;
	t->st.kind = disk ? KVP_TIER_DISK : KVP_TIER_HOST;
	t->st.slots = t->capacity;
	t->st.bytes = disk ? t->disk->file_bytes : (uint64_t)t->capacity * t->slot_bytes;
	t->dirty = true; /* its row is written at the loop's next turn, once the pool is in */
	pool->tier = t;
	pool->tier_free = tier_free;
	kvpd_events_tier_announce(pool->events); /* a disk tier's blocks, before anything else */
	if (disk)
		kvpd_log(d, KVPD_LOG_INFO, "pool %s: disk tier %s: %u blocks, %llu found and "
			 "hittable, %llu refused; %s; its records read back in %.1f ms", pool->name,
			 t->disk->path, t->capacity, (unsigned long long)t->st.restored,
			 (unsigned long long)t->st.refused, kvpd_tier_disk_io(t),
			 t->disk->restore_ns / 1e6);
	return 0;

free_tier:
	tier_free(t, false);
	return ret;
}

void kvpd_tier_publish(struct kvpd *d, struct kvpd_tier *t)
{
	const struct kvpd_tier_stats *st = &t->st;

	kvpd_stats_begin(d);
	kvpd_stats_dirty(&d->stats->pools_dirty, t->pool->stat_idx);
	d->stats->tiers[t->pool->stat_idx] = (struct kvp_stats_tier){
		.in_use = 1, .kind = st->kind, .bytes = st->bytes, .slots = st->slots,
		.slot_bytes = (uint32_t)t->slot_bytes,
		.held = st->held, .queued = st->queued, .stored = st->stored,
		.skipped = st->skipped, .abandoned = st->abandoned, .evicted = st->evicted,
		.promoted = st->promoted, .read_failures = st->read_failures,
		.hit_tokens = st->hit_tokens, .bytes_down = st->bytes_down,
		.bytes_up = st->bytes_up, .ns_down = st->ns_down, .ns_up = st->ns_up,
		.restored = st->restored, .refused = st->refused,
		.write_failures = st->write_failures, .declined = st->declined,
	};
	memcpy(d->stats->tiers[t->pool->stat_idx].unoffered, st->unoffered, sizeof(st->unoffered));
	kvpd_stats_end(d);
	t->dirty = false;
}

bool kvpd_tier_stats(const struct kvpd_pool *pool, struct kvpd_tier_stats *st)
{
	if (!pool->tier)
		return false;
	*st = pool->tier->st;
	return true;
}

int kvpd_tier_purge_remote(struct kvpd *d, struct kvpd_client *c, struct kvpd_pool *pool,
			   uint64_t user_data)
{
	return pool->remote ? kvpd_remote_purge(d, c, pool, user_data) : -EOPNOTSUPP;
}

void kvpd_tier_acting(struct kvpd_pool *pool, const struct kvpd_client *c)
{
	if (pool && pool->remote)
		pool->remote->acting = c;
}

void kvpd_tier_reload(struct kvpd *d, struct kvpd_pool *pool)
{
	if (pool->remote)
		kvpd_remote_reload(d, pool);
}

int kvpd_tier_attach(struct kvpd *d, struct kvpd_pool *pool, char *why, size_t why_len)
{
	/* The cluster tier last: below the local one. */
	int ret = local_attach(d, pool, why, why_len) ?: kvpd_remote_attach(d, pool, why, why_len);

	if (!ret && (pool->tier || pool->remote))
		kvc_pool_set_tier(pool->core, &tier_ops, pool);
	return ret;
}
