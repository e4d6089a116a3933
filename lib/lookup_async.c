/* SPDX-License-Identifier: MIT */
/*
 * Lookups that do not wait (kvp_lookup_start): an engine's scheduler asks for
 * a prefix hit that the pool's cluster tier may take a network round to
 * answer, and serves its other requests meanwhile. Each is a ticket in the
 * client; whoever reads the CQ next (a blocking call, a batch, a poll) finds
 * its completion and sets it aside (kvp_ticket_reap), so the rings keep
 * moving in order.
 */
#include <errno.h>

#include "client.h"

enum { TICKET_FREE, TICKET_OUT, TICKET_DONE, TICKET_DROPPED };

static struct kvp_ticket *ticket_of(struct kvp_client *c, uint64_t user_data)
{
	if (!(user_data & KVP_TICKET_BIT))
		return NULL;
	for (unsigned i = 0; i < KVP_LOOKUPS_MAX; i++)
		if (c->tickets[i].user_data == user_data)
			return &c->tickets[i];
	return NULL;
}

bool kvp_ticket_reap(struct kvp_client *c, const struct kvp_cqe *cqe)
{
	struct kvp_ticket *t = ticket_of(c, cqe->user_data);

	if (!t || t->state == TICKET_DONE)
		return false;
	t->res = cqe->res;
	if (t->state == TICKET_DROPPED)
		*t = (struct kvp_ticket){ 0 };
	else
		t->state = TICKET_DONE;
	c->tickets_out--;
	c->tickets_reaped++;
	kvp_cqe_seen(c, (struct kvp_cqe *)cqe);
	return true;
}

int kvp_lookup_start(struct kvp_client *c, uint64_t handle, uint64_t *ticket)
{
	struct kvp_ticket *t = NULL;
	struct kvp_sqe *sqe;
	int ret;

	if (c->broken)
		return c->broken;
	for (unsigned i = 0; !t && i < KVP_LOOKUPS_MAX; i++)
		if (c->tickets[i].state == TICKET_FREE)
			t = &c->tickets[i];
	if (!t)
		return -EAGAIN;
	sqe = kvp_get_sqe(c);
	if (!sqe)
		return c->broken ? c->broken : -EBUSY;
	kvp_prep_handle_op(sqe, KVP_OP_LOOKUP, handle, 0);
	sqe->user_data = KVP_TICKET_BIT | ++c->tickets_made;
	ret = kvp_submit(c);
	if (ret < 0)
		return ret; /* the connection is broken: the entry is never answered */
	*t = (struct kvp_ticket){ .user_data = sqe->user_data, .state = TICKET_OUT };
	c->tickets_out++;
	*ticket = t->user_data;
	return 0;
}

int kvp_lookup_poll(struct kvp_client *c, uint64_t ticket, uint64_t wait_ns)
{
	struct kvp_ticket *t = ticket_of(c, ticket);
	uint64_t deadline = kvp_now_ns() + wait_ns;
	struct kvp_cqe *cqe;
	int ret;

	if (!t || t->state == TICKET_DROPPED)
		return -ENOENT;
	for (;;) {
		if (t->state == TICKET_DONE) {
			ret = t->res;
			*t = (struct kvp_ticket){ 0 };
			return ret;
		}
		ret = wait_ns ? kvp_wait_cqe_until(c, &cqe, deadline, true) : kvp_peek_cqe(c, &cqe);
		if (t->state == TICKET_DONE)
			continue;
		/* A completion of the caller's own is next, or the time is up. */
		if (ret == 0 || ret == -ETIMEDOUT || (ret == -EAGAIN && !wait_ns))
			return -EINPROGRESS;
		if (ret != -EAGAIN)
			return ret;
	}
}

void kvp_lookup_drop(struct kvp_client *c, uint64_t ticket)
{
	struct kvp_ticket *t = ticket_of(c, ticket);

	if (!t)
		return;
	if (t->state == TICKET_OUT)
		t->state = TICKET_DROPPED;
	else
		*t = (struct kvp_ticket){ 0 };
}
