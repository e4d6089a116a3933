/* SPDX-License-Identifier: MIT */
/*
 * What a pool has announced: each (group, hash) hittable in the pool, its
 * tier or both, with where it came from. The core says a key's first
 * and last copy in the pool, the tier its entries': only the index knows when
 * neither holds a key (its BlockRemoved), and it keeps the origin (position,
 * parent, tokens) a tier entry is announced with again after a reset, and a
 * disk tier writes beside the block, and a planned restart hands on
 * (restart.c). Its size is fixed at the events' start (the pool's blocks),
 * and at the tier's (its slots more): that bounds what can be held at once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "events/events_internal.h"

static uint32_t bucket_of(const struct ev_index *x, uint32_t group, const struct kvc_hash *key)
{
	/* The key is a hash already: its low bits, the group mixed in. */
	return (uint32_t)(key->lo ^ (key->hi >> 7) ^ ((uint64_t)group * 0x9e3779b97f4a7c15ull)) &
	       x->mask;
}

int kvpd_ev_index_init(struct ev_index **out, uint32_t cap, uint32_t block_size)
{
	struct ev_index *x = calloc(1, sizeof(*x));
	uint32_t nb = 1;

	if (!x)
		return -ENOMEM;
	while (nb < cap && nb < (1u << 31))
		nb <<= 1;
	x->cap = cap;
	x->mask = nb - 1;
	x->block_size = block_size;
	/* Untouched until used (a fresh entry is taken past the freed ones): calloc's pages. */
	x->e = calloc(cap, sizeof(*x->e));
	x->tokens = calloc((size_t)cap * block_size, sizeof(*x->tokens));
	x->buckets = malloc((size_t)nb * sizeof(*x->buckets));
	if (!x->e || !x->tokens || !x->buckets) {
		kvpd_ev_index_free(x);
		return -ENOMEM;
	}
	memset(x->buckets, 0xff, (size_t)nb * sizeof(*x->buckets));
	x->free_head = EV_END;
	*out = x;
	return 0;
}

void kvpd_ev_index_free(struct ev_index *x)
{
	if (!x)
		return;
	free(x->e);
	free(x->tokens);
	free(x->buckets);
	free(x);
}

struct ev_entry *kvpd_ev_index_find(const struct ev_index *x, uint32_t group,
				    const struct kvc_hash *key)
{

	for (uint32_t i = x->buckets[bucket_of(x, group, key)]; i != EV_END; i = x->e[i].hnext)
		if (x->e[i].group == group && x->e[i].key.lo == key->lo && x->e[i].key.hi == key->hi)
			return &x->e[i];
	return NULL;
}

struct ev_entry *kvpd_ev_index_add(struct ev_index *x, uint32_t group, uint32_t pos,
				   const struct kvc_hash *key, const struct kvc_hash *parent,
				   const uint32_t *tokens)
{
	uint32_t i = x->free_head, *head;

	if (i != EV_END)
		x->free_head = x->e[i].hnext;
	else if (x->fresh < x->cap)
		i = x->fresh++;
	else
		return NULL;
	head = &x->buckets[bucket_of(x, group, key)];
	x->e[i] = (struct ev_entry){ .key = *key, .group = group, .pos = pos, .hnext = *head,
				     .has_parent = parent != NULL, .parent = parent ? parent->lo : 0 };
	*head = i;
	memcpy(x->tokens + (size_t)i * x->block_size, tokens, x->block_size * sizeof(*tokens));
	x->used++;
	return &x->e[i];
}

void kvpd_ev_index_del(struct ev_index *x, struct ev_entry *e)
{
	uint32_t i = (uint32_t)(e - x->e);
	uint32_t *link = &x->buckets[bucket_of(x, e->group, &e->key)];

	while (*link != i)
		link = &x->e[*link].hnext;
	*link = e->hnext;
	e->hnext = x->free_head;
	x->free_head = i;
	x->used--;
}

const uint32_t *kvpd_ev_index_tokens(const struct ev_index *x, const struct ev_entry *e)
{
	return x->tokens + (size_t)(e - x->e) * x->block_size;
}

static int by_group_pos(const void *a, const void *b, void *entries)
{
	const struct ev_entry *x = (const struct ev_entry *)entries + *(const uint32_t *)a;
	const struct ev_entry *y = (const struct ev_entry *)entries + *(const uint32_t *)b;

	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* By (group, parent): a block's children are one run. */
static int by_group_parent(const void *a, const void *b, void *entries)
{
	const struct ev_entry *x = (const struct ev_entry *)entries + *(const uint32_t *)a;
	const struct ev_entry *y = (const struct ev_entry *)entries + *(const uint32_t *)b;

	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	if (x->parent != y->parent)
		return x->parent < y->parent ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The first of @kids (sorted by group, parent) not yet placed whose parent is @e. */
static uint32_t child_of(const struct ev_entry *all, const uint32_t *kids, uint32_t n,
			 const struct ev_entry *e, const uint8_t *placed)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct ev_entry *m = &all[kids[mid]];

		if (m->group < e->group || (m->group == e->group && m->parent < e->key.lo))
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n; lo++) {
		const struct ev_entry *k = &all[kids[lo]];

		if (k->group != e->group || k->parent != e->key.lo)
			break;
		if (!placed[kids[lo]] && k->pos == e->pos + 1)
			return kids[lo];
	}
	return EV_END;
}

int kvpd_ev_index_chain(struct ev_index *x, uint32_t *in, uint32_t n, uint32_t *out)
{
	uint32_t *kids = malloc((size_t)n * sizeof(*kids) + 1);
	uint8_t *placed = calloc(x->cap ? x->cap : 1, 1);
	uint32_t nkids = 0, m = 0;

	qsort_r(in, n, sizeof(*in), by_group_pos, x->e);
	if (!kids || !placed) {
		free(kids);
		free(placed);
		memcpy(out, in, (size_t)n * sizeof(*in));
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		if (x->e[in[i]].has_parent)
			kids[nkids++] = in[i];
	qsort_r(kids, nkids, sizeof(*kids), by_group_parent, x->e);
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t at = in[i]; at != EV_END && !placed[at];
		     at = child_of(x->e, kids, nkids, &x->e[at], placed)) {
			placed[at] = 1;
			out[m++] = at;
		}
	}
	free(kids);
	free(placed);
	return 0;
}

uint32_t kvpd_ev_index_reset(struct ev_index *x, uint32_t *out)
{
	uint32_t n = 0, *tier = malloc((size_t)x->used * sizeof(*tier) + 1);

	for (uint32_t b = 0; b <= x->mask; b++) {
		uint32_t *link = &x->buckets[b];

		while (*link != EV_END) {
			struct ev_entry *e = &x->e[*link];

			e->in_pool = false;
			if (e->in_tier) {
				(tier ? tier : out)[n++] = *link;
				link = &e->hnext;
				continue;
			}
			*link = e->hnext;
			e->hnext = x->free_head;
			x->free_head = (uint32_t)(e - x->e);
			x->used--;
		}
	}
	if (tier)
		kvpd_ev_index_chain(x, tier, n, out);
	else
		qsort_r(out, n, sizeof(*out), by_group_pos, x->e);
	free(tier);
	return n;
}
