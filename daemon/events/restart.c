/* SPDX-License-Identifier: MIT */
/*
 * A pool's announced blocks carried across a planned restart (the handover
 * room writes and reads the state): the index, each block with its origin,
 * so that the next run can say every one again. A router that saw the last
 * run's announcements cannot know which of them the next run still holds:
 * the next run says AllBlocksCleared first, then every block it restored,
 * each chain whole and parents first, with the medium that holds it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "events/events_internal.h"

uint32_t kvpd_events_saved_count(const struct kvpd_events *ev)
{
	return ev && ev->idx ? ev->idx->used : 0;
}

uint32_t kvpd_events_block_size(const struct kvpd_events *ev)
{
	return ev ? ev->block_size : 0;
}

void kvpd_events_save(const struct kvpd_events *ev, struct kvpd_events_saved *out,
		      uint32_t *tokens)
{
	const struct ev_index *x = ev && ev->idx ? ev->idx : NULL;
	uint32_t n = 0;

	for (uint32_t b = 0; x && b <= x->mask; b++) {
		for (uint32_t i = x->buckets[b]; i != EV_END; i = x->e[i].hnext) {
			const struct ev_entry *e = &x->e[i];

			out[n] = (struct kvpd_events_saved){ .key = e->key, .parent = e->parent,
							     .group = e->group, .pos = e->pos,
							     .in_pool = e->in_pool,
							     .in_tier = e->in_tier,
							     .has_parent = e->has_parent };
			memcpy(tokens + (size_t)n * x->block_size, kvpd_ev_index_tokens(x, e),
			       x->block_size * sizeof(*tokens));
			n++;
		}
	}
}

/* AllBlocksCleared, then every entry the index holds, each chain whole, parents first. */
static void announce_all(struct kvpd_events *ev)
{
	struct ev_index *x = ev->idx;
	uint32_t *in, *order, n = 0;

	if (!kvpd_ev_open_cleared(ev) || !x || !x->used)
		return;
	in = malloc((size_t)x->used * sizeof(*in));
	order = malloc((size_t)x->used * sizeof(*order));
	if (!in || !order) {
		ev->lost = true; /* the batch is dropped: a replay asks again */
		goto free_order;
	}
	for (uint32_t b = 0; b <= x->mask; b++)
		for (uint32_t i = x->buckets[b]; i != EV_END; i = x->e[i].hnext)
			in[n++] = i;
	kvpd_ev_index_chain(x, in, n, order); /* out of memory: by position, still whole */
	ev->cut = true;
	for (uint32_t i = 0; i < n; i++) {
		struct ev_entry *e = &x->e[order[i]];

		e->said_tier = !e->in_pool;
		kvpd_ev_stored_entry(ev, x, e, e->in_pool ? ev->medium : ev->tier_medium);
	}
	ev->cut = true;
free_order:
	free(in);
	free(order);
}

void kvpd_events_load(struct kvpd_events *ev, const struct kvpd_events_saved *in,
		      const uint32_t *tokens, uint32_t n, bool tier_back)
{
	struct ev_index *x = ev ? ev->idx : NULL;

	if (!ev)
		return;
	for (uint32_t i = 0; x && i < n; i++) {
		const struct kvpd_events_saved *s = &in[i];
		struct kvc_hash parent = { s->parent, 0 };
		bool in_tier = s->in_tier && tier_back;
		struct ev_entry *e;

		if (s->group >= ev->pool->params.num_groups || (!s->in_pool && !in_tier))
			continue;
		e = kvpd_ev_index_find(x, s->group, &s->key);
		if (!e)
			e = kvpd_ev_index_add(x, s->group, s->pos, &s->key,
					      s->has_parent ? &parent : NULL,
					      tokens + (size_t)i * x->block_size);
		if (!e)
			break; /* full: what is left is not announced */
		e->in_pool |= s->in_pool;
		e->in_tier |= in_tier;
	}
	announce_all(ev);
}
