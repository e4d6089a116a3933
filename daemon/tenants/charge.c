/* SPDX-License-Identifier: MIT */
/* Open addressing, linear probing, backward-shift deletion: O(1) per table change. */
#include <stdlib.h>

#include "core/kvcore.h"
#include "tenants/charge.h"

static uint32_t slot_of(const struct kvpd_charge *ch, uint32_t key)
{
	return (key * 0x9e3779b1u) & (ch->cap - 1);
}

static uint32_t find(const struct kvpd_charge *ch, uint32_t key)
{
	uint32_t i = slot_of(ch, key);

	while (ch->keys[i] && ch->keys[i] != key)
		i = (i + 1) & (ch->cap - 1);
	return i;
}

static bool grow(struct kvpd_charge *ch)
{
	struct kvpd_charge old = *ch;

	ch->cap = old.cap ? old.cap * 2 : 64;
	ch->keys = calloc(ch->cap, sizeof(*ch->keys));
	ch->counts = calloc(ch->cap, sizeof(*ch->counts));
	if (!ch->keys || !ch->counts) {
		free(ch->keys);
		free(ch->counts);
		*ch = old;
		return false;
	}
	for (uint32_t i = 0; i < old.cap; i++) {
		if (!old.keys[i])
			continue;
		uint32_t j = find(ch, old.keys[i]);

		ch->keys[j] = old.keys[i];
		ch->counts[j] = old.counts[i];
	}
	free(old.keys);
	free(old.counts);
	return true;
}

static void erase(struct kvpd_charge *ch, uint32_t i)
{
	uint32_t j = i;

	ch->keys[i] = 0;
	for (;;) {
		j = (j + 1) & (ch->cap - 1);
		if (!ch->keys[j])
			break;
		/* Move j back into the hole if its home slot is not in (i, j]. */
		uint32_t home = slot_of(ch, ch->keys[j]);

		if (((j - home) & (ch->cap - 1)) >= ((j - i) & (ch->cap - 1))) {
			ch->keys[i] = ch->keys[j];
			ch->counts[i] = ch->counts[j];
			ch->keys[j] = 0;
			i = j;
		}
	}
	ch->len--;
}

static void hold(struct kvpd_charge *ch, uint32_t block, bool held)
{
	uint32_t key = block + 1, i;

	if (ch->failed)
		return;
	if (held && (ch->len + 1) * 2 > ch->cap && !grow(ch)) {
		ch->failed = true;
		return;
	}
	i = ch->cap ? find(ch, key) : 0;
	if (held) {
		if (!ch->keys[i]) {
			ch->keys[i] = key;
			ch->counts[i] = 0;
			ch->len++;
			ch->blocks++;
		}
		ch->counts[i]++;
	} else if (ch->cap && ch->keys[i] && --ch->counts[i] == 0) {
		erase(ch, i);
		ch->blocks--;
	}
}

/* Keeps @block's holds in @ch and the charges it feeds, to let go at kvpd_charge_settle. */
static bool defer(struct kvpd_charge *ch, uint32_t block)
{
	if (ch->ndeferred + 3 > ch->deferred_cap) {
		uint32_t cap = ch->deferred_cap ? ch->deferred_cap * 2 : 64;
		struct kvpd_deferred *d = realloc(ch->deferred, cap * sizeof(*d));

		if (!d)
			return false; /* let go of now, as before: the quota is then looser */
		ch->deferred = d;
		ch->deferred_cap = cap;
	}
	ch->deferred[ch->ndeferred++] = (struct kvpd_deferred){ ch, block };
	for (unsigned i = 0; i < 2; i++)
		if (ch->also[i])
			ch->deferred[ch->ndeferred++] = (struct kvpd_deferred){ ch->also[i], block };
	return true;
}

void kvpd_charge_hold(void *owner, uint32_t block, bool held)
{
	struct kvpd_charge *ch = owner;

	if (!ch)
		return;
	if (!held && ch->inflight && *ch->inflight && ch->pool &&
	    kvc_block_pins(ch->pool, block) && defer(ch, block))
		return;
	hold(ch, block, held);
	for (unsigned i = 0; i < 2; i++)
		if (ch->also[i])
			hold(ch->also[i], block, held);
}

void kvpd_charge_settle(struct kvpd_charge *ch)
{
	for (uint32_t i = 0; i < ch->ndeferred; i++)
		hold(ch->deferred[i].ch, ch->deferred[i].block, false);
	ch->ndeferred = 0;
}

bool kvpd_charge_holds(const struct kvpd_charge *ch, uint32_t block)
{
	return ch->cap && ch->keys[find(ch, block + 1)] != 0;
}

void kvpd_charge_release(struct kvpd_charge *ch)
{
	uint64_t limit = ch->limit;

	free(ch->keys);
	free(ch->counts);
	free(ch->deferred);
	*ch = (struct kvpd_charge){ .limit = limit };
}
