/* SPDX-License-Identifier: MIT */
/*
 * Offers the send queue has no room for. A block in the queue is pinned
 * (its KV must stay until its SET is formatted), so the queue is a sixteenth
 * of the pool; but a prompt commits all its blocks at once, and a burst past
 * the queue was skipped: the cluster then never held them (conversations
 * whose prompts are half an 8k-token pool hit 0.49 of the 0.71 an LRU gets).
 * Past the queue an offer waits here unpinned, its block id and generation
 * noted; as sends come back the oldest go, each only if its block still holds
 * the same key (not handed out since): a block the pool lets go meanwhile is
 * skipped, never a wrong one sent.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tier/tier_internal.h"
#include "tier/remote.h"

struct remote_offer {
	struct kvc_hash key;
	uint32_t group, block, gen, charge;
	struct kvpd_block_origin origin; /* tokens NULL: unknown */
};

int remote_wait_init(struct kvpd_remote *r, uint32_t pool_blocks, bool origins)
{
	struct remote_waiting *w = &r->waiting;
	uint32_t bs = r->pool->params.block_size;

	w->cap = pool_blocks;
	w->e = malloc((size_t)w->cap * sizeof(*w->e));
	w->tokens = origins ? malloc((size_t)w->cap * bs * sizeof(*w->tokens)) : NULL;
	if (!w->e || (origins && !w->tokens)) {
		remote_wait_free(r);
		return -ENOMEM;
	}
	return 0;
}

void remote_wait_free(struct kvpd_remote *r)
{
	free(r->waiting.e);
	free(r->waiting.tokens);
	r->waiting = (struct remote_waiting){ 0 };
}

bool remote_wait(struct kvpd_remote *r, uint32_t group, uint32_t block,
		 const struct kvc_hash *key, uint32_t charge, const struct kvpd_block_origin *o)
{
	struct remote_waiting *w = &r->waiting;
	uint32_t bs = r->pool->params.block_size, i;
	struct kvc_block_state st;
	struct remote_offer *e;

	if (w->n == w->cap || kvc_block_state(r->pool->core, block, &st))
		return false;
	i = (w->head + w->n++) % w->cap;
	w->added++;
	e = &w->e[i];
	*e = (struct remote_offer){ .key = *key, .group = group, .block = block, .gen = st.gen,
				    .charge = charge };
	if (o && o->tokens && w->tokens) {
		e->origin = *o;
		e->origin.tokens = w->tokens + (size_t)i * bs;
		memcpy(w->tokens + (size_t)i * bs, o->tokens, bs * sizeof(*o->tokens));
	}
	return true;
}

/* Whether @e's block holds its key still: cached under it, and not handed out since. */
static bool still_held(struct kvpd_remote *r, const struct remote_offer *e)
{
	struct kvc_block_state st;

	return !kvc_block_state(r->pool->core, e->block, &st) && st.hashed && st.gen == e->gen &&
	       st.group == e->group && !memcmp(&st.key, &e->key, sizeof(e->key));
}

void remote_wait_drain(struct kvpd_remote *r)
{
	struct remote_waiting *w = &r->waiting;

	while (w->n && r->st.queued < r->queue_cap) {
		struct remote_offer *e = &w->e[w->head];

		w->head = (w->head + 1) % w->cap;
		w->n--;
		w->taken++;
		if (still_held(r, e) &&
		    remote_send_queue(r, e->group, e->block, &e->key, e->charge,
				      e->origin.tokens ? &e->origin : NULL))
			continue;
		kvpd_remote_forget(r, e->group, &e->key);
		remote_charge_give(r, e->charge, r->data_bytes);
		r->st.skipped++;
	}
	r->dirty = true;
}

void remote_wait_drop(struct kvpd_remote *r)
{
	struct remote_waiting *w = &r->waiting;

	r->st.skipped += w->n;
	w->taken += w->n;
	for (; w->n; w->n--, w->head = (w->head + 1) % w->cap)
		remote_charge_give(r, w->e[w->head].charge, r->data_bytes);
	r->dirty = true;
}
