/* SPDX-License-Identifier: MIT */
/*
 * What a pool's events say, from what the core and the tier report on the
 * loop: a (group, hash) is announced when it becomes hittable here and
 * withdrawn when it no longer is, in the pool or its tier (a key held in both
 * is announced once and withdrawn once: the index decides, see index.c).
 * Blocks of one request that chain (the same group and medium, each the
 * previous one's child) join one BlockStored; withdrawals of one request in
 * one group, one BlockRemoved. The turn's events leave as one batch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "events/events_internal.h"
#include "log.h"

/* Room for @more of @size-byte items in *@arr: false (and the turn lost) when it cannot grow. */
static bool grow(struct kvpd_events *ev, void **arr, size_t *cap, size_t used, size_t more,
		 size_t size)
{
	size_t want = *cap ? *cap : 64;
	void *p;

	if (used + more <= *cap)
		return true;
	while (want < used + more)
		want *= 2;
	p = realloc(*arr, want * size);
	if (!p) {
		ev->lost = true;
		return false;
	}
	*arr = p;
	*cap = want;
	return true;
}

static bool room(struct kvpd_events *ev, bool new_event, uint32_t tokens)
{
	return !ev->lost &&
	       (!new_event ||
		grow(ev, (void **)&ev->pend, &ev->pend_cap, ev->npend, 1, sizeof(*ev->pend))) &&
	       grow(ev, (void **)&ev->hashes, &ev->hashes_cap, ev->nhashes, 1, sizeof(*ev->hashes)) &&
	       grow(ev, (void **)&ev->tokens, &ev->tokens_cap, ev->ntokens, tokens,
		    sizeof(*ev->tokens));
}

/* A new event of @type, the batch sent first when the turn has grown large. */
static struct ev_pending *open_event(struct kvpd_events *ev, enum kvpd_event_type type,
				     uint32_t group, const char *medium)
{
	struct ev_pending *p;

	if (ev->nhashes >= EV_BATCH_HASHES)
		kvpd_events_flush(ev);
	if (!room(ev, true, type == KVPD_EVENT_STORED ? ev->block_size : 0))
		return NULL;
	p = &ev->pend[ev->npend++];
	*p = (struct ev_pending){ .type = type, .group = group, .medium = medium,
				  .first = ev->nhashes, .tok_first = ev->ntokens };
	ev->cut = false;
	return p;
}

void kvpd_ev_stored(struct kvpd_events *ev, uint32_t group, const char *medium, uint32_t pos,
		    const struct kvc_hash *key, const struct kvc_hash *parent,
		    const uint32_t *tokens)
{
	struct ev_pending *p = ev->npend ? &ev->pend[ev->npend - 1] : NULL;

	/* It joins the last event when it is that event's next block. */
	if (!(p && !ev->cut && p->type == KVPD_EVENT_STORED && p->group == group &&
	      p->medium == medium && p->next_pos == pos && parent &&
	      ev->hashes[p->first + p->n - 1] == parent->lo && room(ev, false, ev->block_size))) {
		p = open_event(ev, KVPD_EVENT_STORED, group, medium);
		if (!p)
			return;
		p->has_parent = parent != NULL;
		p->parent = parent ? parent->lo : 0;
	}
	ev->hashes[ev->nhashes++] = key->lo;
	memcpy(ev->tokens + ev->ntokens, tokens, ev->block_size * sizeof(*tokens));
	ev->ntokens += ev->block_size;
	p->n++;
	p->next_pos = pos + 1;
	ev->stored++;
}

void kvpd_ev_removed(struct kvpd_events *ev, uint32_t group, const char *medium,
		     const struct kvc_hash *key)
{
	struct ev_pending *p = ev->npend ? &ev->pend[ev->npend - 1] : NULL;

	if (!(p && !ev->cut && p->type == KVPD_EVENT_REMOVED && p->group == group &&
	      p->medium == medium && room(ev, false, 0))) {
		p = open_event(ev, KVPD_EVENT_REMOVED, group, medium);
		if (!p)
			return;
	}
	ev->hashes[ev->nhashes++] = key->lo;
	p->n++;
	ev->removed++;
}

/* The core: a key's first cached copy in the pool. */
static void core_stored(void *ctx, uint32_t group, uint32_t pos, const struct kvc_hash *key,
			const struct kvc_hash *parent, const uint32_t *tokens)
{
	struct kvpd_events *ev = ctx;
	struct ev_entry *e;

	if (ev->idx) {
		e = kvpd_ev_index_find(ev->idx, group, key);
		if (e) {
			e->in_pool = true; /* the tier's: announced already */
			return;
		}
		e = kvpd_ev_index_add(ev->idx, group, pos, key, parent, tokens);
		if (e)
			e->in_pool = true;
		else if (!ev->idx->full_logged && (ev->idx->full_logged = true))
			kvpd_log(ev->d, KVPD_LOG_ERR, "pool %s: kv_events: the index of announced "
				 "blocks is full (%u): a block the tier keeps may be withdrawn early",
				 ev->pool->name, ev->idx->cap);
	}
	kvpd_ev_stored(ev, group, ev->medium, pos, key, parent, tokens);
}

/*
 * The medium a withdrawal names: the one its announcement named (a router
 * keys what it learns by hash and medium), whichever copy goes last.
 */
static const char *said_medium(const struct kvpd_events *ev, const struct ev_entry *e)
{
	return e->said_tier ? ev->tier_medium : ev->medium;
}

/* The core: a key's last copy in the pool forgot it. */
static void core_removed(void *ctx, uint32_t group, const struct kvc_hash *key)
{
	struct kvpd_events *ev = ctx;
	const char *medium = ev->medium;
	struct ev_entry *e;

	if (ev->idx && (e = kvpd_ev_index_find(ev->idx, group, key))) {
		e->in_pool = false;
		if (e->in_tier)
			return; /* still hittable here */
		medium = said_medium(ev, e);
		kvpd_ev_index_del(ev->idx, e);
	}
	kvpd_ev_removed(ev, group, medium, key);
}

void kvpd_ev_stored_entry(struct kvpd_events *ev, const struct ev_index *x,
			  const struct ev_entry *e, const char *medium)
{
	struct kvc_hash parent = { e->parent, 0 };

	kvpd_ev_stored(ev, e->group, medium, e->pos, &e->key, e->has_parent ? &parent : NULL,
		       kvpd_ev_index_tokens(x, e));
}

/* Every tier entry in the index, parents first; what only the pool held is forgotten. */
static void announce_tier(struct kvpd_events *ev)
{
	uint32_t *order, n;

	order = malloc((size_t)ev->idx->used * sizeof(*order) + 1);
	if (!order) {
		ev->lost = true;
		return;
	}
	n = kvpd_ev_index_reset(ev->idx, order);
	ev->cut = true;
	for (uint32_t i = 0; i < n; i++) {
		ev->idx->e[order[i]].said_tier = true;
		kvpd_ev_stored_entry(ev, ev->idx, &ev->idx->e[order[i]], ev->tier_medium);
	}
	free(order);
	ev->cut = true;
}

bool kvpd_ev_open_cleared(struct kvpd_events *ev)
{
	if (!open_event(ev, KVPD_EVENT_CLEARED, 0, ev->medium))
		return false;
	ev->cleared++;
	return true;
}

/*
 * The core: a reset. What the tier holds is hittable still, and what the
 * cluster holds (a reset does not touch it): said again after the clear.
 */
static void core_cleared(void *ctx)
{
	struct kvpd_events *ev = ctx;

	if (!kvpd_ev_open_cleared(ev))
		return;
	if (ev->idx)
		announce_tier(ev);
	if (ev->rem)
		kvpd_ev_remote_again(ev);
}

const struct kvc_event_ops kvpd_events_core_ops = {
	.stored = core_stored,
	.removed = core_removed,
	.cleared = core_cleared,
};

void kvpd_events_cut(struct kvpd_events *ev)
{
	ev->cut = true;
}

void kvpd_events_tier_held(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key)
{
	struct ev_entry *e;

	/* Copied down while the pool held it: announced with the pool's copy. */
	if (ev && ev->idx && (e = kvpd_ev_index_find(ev->idx, group, key)))
		e->in_tier = true;
}

void kvpd_events_tier_gone(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key)
{
	const char *medium;
	struct ev_entry *e;

	if (!ev || !ev->idx || !(e = kvpd_ev_index_find(ev->idx, group, key)))
		return;
	e->in_tier = false;
	if (e->in_pool)
		return;
	medium = said_medium(ev, e);
	kvpd_ev_index_del(ev->idx, e);
	kvpd_ev_removed(ev, group, medium, key);
}

void kvpd_events_tier_restored(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key,
			       const struct kvpd_block_origin *o)
{
	struct kvc_hash parent = { o ? o->parent : 0, 0 };
	struct ev_entry *e;

	if (!ev || !ev->idx || !o || kvpd_ev_index_find(ev->idx, group, key))
		return;
	e = kvpd_ev_index_add(ev->idx, group, o->pos, key, o->has_parent ? &parent : NULL,
			      o->tokens);
	if (e)
		e->in_tier = true;
}

void kvpd_events_tier_announce(struct kvpd_events *ev)
{
	if (ev && ev->idx && ev->idx->used)
		announce_tier(ev);
}

bool kvpd_events_origin(const struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key,
			struct kvpd_block_origin *o)
{
	const struct ev_entry *e = ev && ev->idx ? kvpd_ev_index_find(ev->idx, group, key) : NULL;

	if (!e)
		return false;
	*o = (struct kvpd_block_origin){ .pos = e->pos, .has_parent = e->has_parent,
					 .parent = e->parent, .tokens = kvpd_ev_index_tokens(ev->idx, e) };
	return true;
}

void kvpd_events_flush(struct kvpd_events *ev)
{
	struct kvpd_kv_event *list;
	msgpack_sbuffer sb;
	struct timespec ts;
	int ret = -ENOMEM;

	if (!ev->npend && !ev->lost)
		return;
	list = ev->lost ? NULL : malloc((size_t)ev->npend * sizeof(*list));
	msgpack_sbuffer_init(&sb);
	if (list) {
		for (uint32_t i = 0; i < ev->npend; i++) {
			const struct ev_pending *p = &ev->pend[i];

			list[i] = (struct kvpd_kv_event){
				.type = p->type, .group = p->group, .nblocks = p->n,
				.hashes = ev->hashes + p->first, .has_parent = p->has_parent,
				.parent = p->parent, .tokens = ev->tokens + p->tok_first,
				.block_size = ev->block_size, .medium = p->medium,
				.spec_kind = ev->kind[p->group], .window = ev->window[p->group] };
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ret = kvpd_events_encode(&sb, (double)ts.tv_sec + ts.tv_nsec / 1e9, list, ev->npend,
					 ev->format);
		free(list);
	}
	if (!ret) {
		size_t len = sb.size;

		ev->batches++;
		ev->events += ev->npend;
		kvpd_ev_pub_push(ev->pub, msgpack_sbuffer_release(&sb), len);
	} else {
		ev->unmade++;
		kvpd_log(ev->d, KVPD_LOG_ERR, "pool %s: kv_events: a batch of %u events could not be "
			 "made (out of memory): dropped", ev->pool->name, ev->npend);
	}
	msgpack_sbuffer_destroy(&sb);
	ev->npend = ev->nhashes = 0;
	ev->ntokens = 0;
	ev->lost = false;
	ev->cut = true;
}

void kvpd_events_pending_free(struct kvpd_events *ev)
{
	free(ev->pend);
	free(ev->hashes);
	free(ev->tokens);
}
