/* SPDX-License-Identifier: MIT */
/*
 * What a pool with a cluster tier announces with medium "REMOTE": the blocks
 * this machine knows the cluster holds because it wrote them (a SET came
 * back OK) or read them (a GET's value passed its checks), each announced
 * once, until it learns otherwise: a miss (EXISTS, a read refused), the TTL
 * passed with neither a send nor a read renewing it, a purge, or the set
 * full (the oldest is withdrawn: no longer known). Apart from the pool's and
 * its tier's announcements: a block may be both, and each goes on its own.
 * Other machines' blocks are not announced (docs/events.md says why).
 */
#include <errno.h>
#include <stdlib.h>

#include "events/events_internal.h"
#include "log.h"

/*
 * Entries: 4 a pool block, 2^16 to 2^22. A pool with the cluster behind it
 * hits far more than it holds; past the bound the oldest is withdrawn, a hit
 * a router no longer sends here but never a miss it does. Memory is touched
 * as entries are used: the bound costs its buckets (4 bytes an entry) alone.
 */
#define REMOTE_PER_BLOCK 4u
#define REMOTE_MIN (1u << 16)
#define REMOTE_MAX (1u << 22)

/* One string, compared by address: announce.c joins events of the same medium. */
static const char REMOTE_MEDIUM[] = "REMOTE";

int kvpd_events_remote_start(struct kvpd_events *ev, uint32_t pool_blocks, uint32_t ttl_s)
{
	uint64_t cap = (uint64_t)pool_blocks * REMOTE_PER_BLOCK;
	struct ev_remote *m;
	int ret;

	if (!ev)
		return 0;
	cap = cap < REMOTE_MIN ? REMOTE_MIN : cap > REMOTE_MAX ? REMOTE_MAX : cap;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	ret = kvpd_ev_index_init(&m->x, (uint32_t)cap, ev->block_size);
	if (ret)
		goto free_set;
	m->prev = malloc(cap * sizeof(*m->prev));
	m->next = malloc(cap * sizeof(*m->next));
	m->at_ns = malloc(cap * sizeof(*m->at_ns));
	if (!m->prev || !m->next || !m->at_ns) {
		ret = -ENOMEM;
		goto free_order;
	}
	m->oldest = m->newest = EV_END;
	m->ttl_ns = ttl_s * 1000000000ull;
	ev->rem = m;
	return 0;

free_order:
	free(m->prev);
	free(m->next);
	free(m->at_ns);
	kvpd_ev_index_free(m->x);
free_set:
	free(m);
	return ret;
}

void kvpd_ev_remote_free(struct kvpd_events *ev)
{
	struct ev_remote *m = ev->rem;

	if (!m)
		return;
	free(m->prev);
	free(m->next);
	free(m->at_ns);
	kvpd_ev_index_free(m->x);
	free(m);
	ev->rem = NULL;
}

bool kvpd_events_remote_on(const struct kvpd_events *ev)
{
	return ev && ev->rem;
}

static void unlink_order(struct ev_remote *m, uint32_t i)
{
	*(m->prev[i] != EV_END ? &m->next[m->prev[i]] : &m->oldest) = m->next[i];
	*(m->next[i] != EV_END ? &m->prev[m->next[i]] : &m->newest) = m->prev[i];
}

static void link_newest(struct ev_remote *m, uint32_t i, uint64_t at_ns)
{
	m->prev[i] = m->newest;
	m->next[i] = EV_END;
	*(m->newest != EV_END ? &m->next[m->newest] : &m->oldest) = i;
	m->newest = i;
	m->at_ns[i] = at_ns;
}

/* Entry @i's BlockRemoved, and the entry forgotten. */
static void withdraw(struct kvpd_events *ev, uint32_t i)
{
	struct ev_remote *m = ev->rem;
	struct ev_entry *e = &m->x->e[i];

	kvpd_ev_removed(ev, e->group, REMOTE_MEDIUM, &e->key);
	unlink_order(m, i);
	kvpd_ev_index_del(m->x, e);
}

void kvpd_events_remote_held(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key,
			     const struct kvpd_block_origin *o, uint64_t at_ns)
{
	struct ev_remote *m = ev ? ev->rem : NULL;
	struct kvc_hash parent = { o ? o->parent : 0, 0 };
	struct ev_entry *e;
	uint32_t i;

	if (!m)
		return;
	e = kvpd_ev_index_find(m->x, group, key);
	if (e) {
		/* Renewed: said already. Sends end out of order: a TTL never moves back. */
		i = (uint32_t)(e - m->x->e);
		if (m->at_ns[i] > at_ns)
			at_ns = m->at_ns[i];
		unlink_order(m, i);
		link_newest(m, i, at_ns);
		return;
	}
	if (!o)
		return; /* without its origin no BlockStored can say it */
	if (m->x->used == m->x->cap)
		withdraw(ev, m->oldest);
	e = kvpd_ev_index_add(m->x, group, o->pos, key, o->has_parent ? &parent : NULL, o->tokens);
	if (!e)
		return;
	link_newest(m, (uint32_t)(e - m->x->e), at_ns);
	kvpd_ev_stored(ev, group, REMOTE_MEDIUM, o->pos, key, o->has_parent ? &parent : NULL,
		       o->tokens);
}

void kvpd_events_remote_read(struct kvpd_events *ev, struct kvc_seq *seq, uint32_t group,
			     uint32_t pos, uint64_t at_ns)
{
	uint32_t nb, ntok;
	const struct kvc_hash *h = kvc_seq_hashes(seq, &nb);
	const uint32_t *tokens = kvc_seq_tokens(seq, &ntok);
	struct kvpd_block_origin o = { .pos = pos, .has_parent = pos > 0 };

	if (pos >= nb || (size_t)(pos + 1) * ev->block_size > ntok)
		return;
	o.parent = pos ? h[pos - 1].lo : 0;
	o.tokens = tokens + (size_t)pos * ev->block_size;
	kvpd_events_remote_held(ev, group, &h[pos], &o, at_ns);
}

void kvpd_events_remote_lost(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key)
{
	struct ev_entry *e;

	if (ev && ev->rem && (e = kvpd_ev_index_find(ev->rem->x, group, key)))
		withdraw(ev, (uint32_t)(e - ev->rem->x->e));
}

void kvpd_events_remote_purged(struct kvpd_events *ev)
{
	if (!ev || !ev->rem)
		return;
	ev->cut = true;
	while (ev->rem->oldest != EV_END)
		withdraw(ev, ev->rem->oldest);
	ev->cut = true;
}

void kvpd_ev_remote_again(struct kvpd_events *ev)
{
	struct ev_remote *m = ev->rem;
	uint32_t n = 0, *in, *out;

	if (!m->x->used)
		return;
	in = malloc(2 * (size_t)m->x->used * sizeof(*in));
	if (!in) {
		ev->lost = true;
		return;
	}
	out = in + m->x->used;
	for (uint32_t i = m->oldest; i != EV_END; i = m->next[i])
		in[n++] = i;
	kvpd_ev_index_chain(m->x, in, n, out);
	ev->cut = true;
	for (uint32_t i = 0; i < n; i++)
		kvpd_ev_stored_entry(ev, m->x, &m->x->e[out[i]], REMOTE_MEDIUM);
	ev->cut = true;
	free(in);
}

/* The entries whose TTL passed unrenewed: the cluster dropped them (oldest first). */
static bool expire(struct kvpd_events *ev, uint64_t now)
{
	struct ev_remote *m = ev->rem;

	if (!m->ttl_ns || m->oldest == EV_END || m->at_ns[m->oldest] + m->ttl_ns > now)
		return false;
	ev->cut = true;
	while (m->oldest != EV_END && m->at_ns[m->oldest] + m->ttl_ns <= now)
		withdraw(ev, m->oldest);
	ev->cut = true;
	return true;
}

void kvpd_events_expire(struct kvpd *d)
{
	uint64_t now = kvpd_now_ns();
	bool any = false;

	for (unsigned i = 0; i < d->npools; i++)
		if (d->pools[i]->events && d->pools[i]->events->rem)
			any |= expire(d->pools[i]->events, now);
	/* An idle loop's timer makes no turn: the withdrawals leave now. */
	if (any)
		kvpd_events_turn(d);
}
