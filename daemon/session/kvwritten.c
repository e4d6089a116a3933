/* SPDX-License-Identifier: MIT */
/*
 * What WRITE_KV wrote past a sequence's computed count since its last COMMIT,
 * per (group, layer): such a position is readable only once written, and a
 * COMMIT needs every one it covers written (kvpd_kv_commit). Committed
 * positions are readable by definition and stop being tracked.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "session/kvwritten.h"
#include "session/session.h"

/* Positions written since the last commit, for one (group, layer). */
struct kvpd_written {
	uint64_t *bits; /* bit k: position base + k */
	uint32_t nwords;
	uint32_t high;  /* one past the highest position ever written (ring coverage) */
};

struct kvpd_seq_kv {
	uint32_t base; /* the computed count the bits start at */
	uint32_t layers;
	struct kvpd_written w[]; /* [group * layers + layer] */
};

void kvpd_seq_kv_free(struct kvpd_seq_kv *kv, uint32_t ngroups)
{
	if (!kv)
		return;
	for (uint32_t i = 0; i < ngroups * kv->layers; i++)
		free(kv->w[i].bits);
	free(kv);
}

/* After a FREE the blocks are gone: nothing written survives. */
void kvpd_seq_kv_reset(struct kvpd_seq_kv *kv, uint32_t ngroups)
{
	if (!kv)
		return;
	for (uint32_t i = 0; i < ngroups * kv->layers; i++) {
		if (kv->w[i].bits)
			memset(kv->w[i].bits, 0, kv->w[i].nwords * sizeof(uint64_t));
		kv->w[i].high = 0;
	}
	kv->base = 0;
}

/* Drops the bits of positions that became computed: they are present by definition now. */
void kvpd_seq_kv_rebase(struct kvpd_seq_kv *kv, uint32_t ngroups, uint32_t computed)
{
	uint32_t shift = computed - kv->base;

	if (computed <= kv->base)
		return;
	for (uint32_t i = 0; i < ngroups * kv->layers; i++) {
		struct kvpd_written *w = &kv->w[i];
		uint32_t words = shift / 64, bits = shift % 64;

		for (uint32_t k = 0; k < w->nwords; k++) {
			uint64_t lo = k + words < w->nwords ? w->bits[k + words] : 0;
			uint64_t hi = k + words + 1 < w->nwords ? w->bits[k + words + 1] : 0;

			w->bits[k] = bits ? lo >> bits | hi << (64 - bits) : lo;
		}
	}
	kv->base = computed;
}

static struct kvpd_written *written(struct kvpd_seq_kv *kv, uint32_t group, uint32_t layer)
{
	return &kv->w[group * kv->layers + layer];
}

struct kvpd_seq_kv *kvpd_seq_kv_new(uint32_t ngroups, uint32_t layers)
{
	struct kvpd_seq_kv *kv = calloc(1, sizeof(*kv) + (size_t)ngroups * layers *
						     sizeof(struct kvpd_written));

	if (kv)
		kv->layers = layers;
	return kv;
}

uint32_t kvpd_seq_kv_high(const struct kvpd_seq_kv *kv, uint32_t group, uint32_t layer)
{
	return kv->w[group * kv->layers + layer].high;
}

static bool all_written(const struct kvpd_written *w, uint32_t base, uint32_t lo, uint32_t hi)
{
	for (uint32_t p = lo; p < hi; p++) {
		uint32_t k = p - base;

		if (k / 64 >= w->nwords || !(w->bits[k / 64] >> (k % 64) & 1))
			return false;
	}
	return true;
}

bool kvpd_seq_kv_written(const struct kvpd_seq_kv *kv, uint32_t group, uint32_t layer,
			 uint32_t lo, uint32_t hi)
{
	return all_written(&kv->w[group * kv->layers + layer], kv->base, lo, hi);
}

static int mark_written(struct kvpd_written *w, uint32_t base, uint32_t lo, uint32_t hi)
{
	uint32_t need;

	/* Only what lies past computed is tracked: committed positions are present anyway. */
	if (hi <= base)
		return 0;
	need = (hi - base + 63) / 64;
	if (need > w->nwords) {
		uint64_t *bits = realloc(w->bits, need * sizeof(*bits));

		if (!bits)
			return -ENOMEM;
		memset(bits + w->nwords, 0, (need - w->nwords) * sizeof(*bits));
		w->bits = bits;
		w->nwords = need;
	}
	for (uint32_t p = lo < base ? base : lo; p < hi; p++)
		w->bits[(p - base) / 64] |= 1ull << ((p - base) % 64);
	if (hi > w->high)
		w->high = hi;
	return 0;
}

int kvpd_seq_kv_mark(struct kvpd_seq_kv *kv, uint32_t group, uint32_t layer, uint32_t lo,
		     uint32_t hi)
{
	return mark_written(written(kv, group, layer), kv->base, lo, hi);
}

/*
 * COMMIT n of a sequence of a pool that holds KV: every layer of every group
 * must have KV written at [computed, n), or a later reader (this sequence, or
 * another one hitting its published blocks) would see whatever the block held
 * before: -ENODATA. A WRITE_KV still in flight counts as not written. On
 * success, what was written past n stops being readable: a position past
 * computed is readable only once written after the last COMMIT.
 *
 * A pool a client mapped takes the client's word: what its COMMIT covers
 * counts as written, since the KV may have come through the mapping, which
 * the daemon cannot see (one namespace is one trust domain: see pool_map.c).
 */
int kvpd_kv_commit(struct kvpd_client *c, uint64_t handle, uint32_t n)
{
	struct kvpd_seq_slot *slot = kvpd_seq_slot(c, handle);
	uint32_t ngroups = kvc_pool_config(c->pool->core)->num_groups;
	struct kvpd_seq_kv *kv = slot->kv;
	struct kvc_seq_info info;
	int ret;

	kvc_seq_info(slot->seq, &info);
	/* An n the core refuses is refused as invalid, whatever was written. */
	if (c->pool->layout.slot_bytes && !c->pool->mapped && n > info.computed &&
	    n <= info.tokens && n <= info.allocated_slots) {
		if (!kv)
			return -ENODATA;
		kvpd_seq_kv_rebase(kv, ngroups, info.computed);
		for (uint32_t i = 0; i < ngroups * kv->layers; i++)
			if (!all_written(&kv->w[i], kv->base, info.computed, n))
				return -ENODATA;
	}
	ret = kvc_seq_computed(slot->seq, n);
	if (ret || !kv)
		return ret;
	kvpd_seq_kv_rebase(kv, ngroups, n);
	for (uint32_t i = 0; i < ngroups * kv->layers; i++)
		if (kv->w[i].bits)
			memset(kv->w[i].bits, 0, kv->w[i].nwords * sizeof(uint64_t));
	return 0;
}
