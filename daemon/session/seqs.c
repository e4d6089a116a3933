/* SPDX-License-Identifier: MIT */
/*
 * A client's sequence handles: client tag (24 bits) | slot generation (16) |
 * slot (24). The tag is unique to the connection, so another client's handle
 * never names a sequence here, and the generation makes a closed sequence's
 * handle stale: both get -EBADF. A slot is retired once its generation is
 * spent rather than wrapping it, so no handle of a connection ever comes back.
 */
#include <errno.h>
#include <stdlib.h>

#include "observe/probes.h"
#include "session/kvwritten.h"
#include "session/session.h"

#define SLOT_NONE UINT32_MAX
#define SLOT_BITS 24
#define GEN_BITS 16
#define GEN_MAX ((1u << GEN_BITS) - 1)

static uint64_t make_handle(const struct kvpd_client *c, uint32_t gen, uint32_t slot)
{
	return (uint64_t)(c->gen & 0xffffff) << (SLOT_BITS + GEN_BITS) |
	       (uint64_t)(gen & GEN_MAX) << SLOT_BITS | slot;
}

/* Called only with no free slot left. */
static int grow(struct kvpd_client *c)
{
	uint32_t cap = c->seqs_cap ? c->seqs_cap * 2 : 64;
	struct kvpd_seq_slot *s;

	if (c->seqs_cap >= (1u << SLOT_BITS))
		return -EMFILE;
	s = realloc(c->seqs, (size_t)cap * sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (uint32_t i = c->seqs_cap; i < cap; i++)
		s[i] = (struct kvpd_seq_slot){ .next_free = i + 1 < cap ? i + 1 : SLOT_NONE };
	c->seq_free_head = c->seqs_cap;
	c->seqs = s;
	c->seqs_cap = cap;
	return 0;
}

int kvpd_seq_put(struct kvpd_client *c, struct kvc_seq *seq, __u64 *handle)
{
	struct kvpd_seq_slot *s;
	uint32_t slot;
	int ret;

	if (c->seqs_cap == 0 || c->seq_free_head == SLOT_NONE) {
		ret = grow(c);
		if (ret)
			return ret;
	}
	slot = c->seq_free_head;
	s = &c->seqs[slot];
	c->seq_free_head = s->next_free;
	s->seq = seq;
	s->busy = false;
	kvc_seq_set_owner(seq, &c->charge);
	s->gen++;
	c->seqs_open++;
	c->pool->sequences++;
	*handle = make_handle(c, s->gen, slot);
	return 0;
}

struct kvpd_seq_slot *kvpd_seq_slot(struct kvpd_client *c, uint64_t handle)
{
	uint32_t slot = handle & ((1u << SLOT_BITS) - 1);

	if (slot >= c->seqs_cap || !c->seqs[slot].seq || make_handle(c, c->seqs[slot].gen, slot) != handle)
		return NULL;
	return &c->seqs[slot];
}

struct kvc_seq *kvpd_seq_get(struct kvpd_client *c, uint64_t handle)
{
	struct kvpd_seq_slot *s = kvpd_seq_slot(c, handle);

	return s ? s->seq : NULL;
}

static void release_slot(struct kvpd_client *c, uint32_t slot)
{
	struct kvc_seq_info info;

	kvc_seq_info(c->seqs[slot].seq, &info);
	KVPD_PROBE(seq_close, c->gen, make_handle(c, c->seqs[slot].gen, slot), info.blocks_held);
	kvpd_quota_give(c->tenant, KVP_QUOTA_TOKENS, info.tokens);
	kvpd_quota_give(c->tenant, KVP_QUOTA_SEQUENCES, 1);
	kvc_seq_destroy(c->seqs[slot].seq);
	kvpd_seq_kv_free(c->seqs[slot].kv, kvc_pool_config(c->pool->core)->num_groups);
	c->seqs[slot].seq = NULL;
	c->seqs[slot].kv = NULL;
	/* A spent generation would wrap and revive the slot's oldest handle: retire the slot. */
	if (c->seqs[slot].gen < GEN_MAX) {
		c->seqs[slot].next_free = c->seq_free_head;
		c->seq_free_head = slot;
	}
	c->seqs_open--;
	c->pool->sequences--;
}

void kvpd_seq_later(struct kvpd_seq_slot *slot)
{
	slot->busy = true;
	slot->parts++;
}

bool kvpd_seq_later_back(struct kvpd_seq_slot *slot, struct kvp_cqe *cqe)
{
	slot->later_flags |= cqe->flags;
	if (cqe->res < 0 && !slot->later_res)
		slot->later_res = cqe->res;
	if (--slot->parts)
		return false;
	if (slot->later_res)
		*cqe = (struct kvp_cqe){ .user_data = cqe->user_data, .res = slot->later_res };
	else
		cqe->flags = slot->later_flags;
	slot->later_flags = 0;
	slot->later_res = 0;
	slot->busy = false;
	return true;
}

int kvpd_seq_close(struct kvpd_client *c, uint64_t handle)
{
	if (!kvpd_seq_get(c, handle))
		return -EBADF;
	release_slot(c, handle & ((1u << SLOT_BITS) - 1));
	return 0;
}

void kvpd_seqs_close_all(struct kvpd_client *c)
{
	for (uint32_t slot = 0; slot < c->seqs_cap && c->seqs_open; slot++)
		if (c->seqs[slot].seq)
			release_slot(c, slot);
}
