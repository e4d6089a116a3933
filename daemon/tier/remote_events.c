/* SPDX-License-Identifier: MIT */
/*
 * What the cluster tier's links see happen to the nodes, said once a pool:
 * both links (sends, asks) meet the same outage, each tells it here, and the
 * first telling is logged. An outage is one line when it starts and one when
 * it ends (the node back, or its slots served by the replica that replaced
 * it); a node refusing SET (an ACL without it, maxmemory with noeviction) is
 * one line for the pool's life: every send after it fails the same way,
 * counted in send_errors. Called on the tier's threads; the loop collects
 * the counts into the stats row.
 */
#include <stdio.h>
#include <string.h>

#include "kvpoold.h"
#include "tier/tier_internal.h"
#include "tier/remote.h"

static struct remote_outage *outage_of(struct kvpd_remote *r, const struct kvpd_remote_addr *a)
{
	for (uint32_t i = 0; i < r->noutages; i++)
		if (r->outages[i].addr.port == a->port && !strcmp(r->outages[i].addr.host, a->host))
			return &r->outages[i];
	if (r->noutages == REMOTE_MAX_NODES)
		return NULL;
	r->outages[r->noutages] = (struct remote_outage){ .addr = *a };
	return &r->outages[r->noutages++];
}

void remote_event(void *arg, enum remote_event ev, const struct kvpd_remote_addr *node,
		  const struct kvpd_remote_addr *other, const char *why)
{
	struct kvpd_remote *r = arg;
	struct kvpd *d = r->d;
	struct remote_outage *o;

	pthread_mutex_lock(&r->events_lock);
	o = outage_of(r, node);
	switch (ev) {
	case REMOTE_NODE_DOWN:
		if (!o || o->down)
			break;
		o->down = true;
		r->outages_total++;
		kvpd_log(d, KVPD_LOG_WARNING, "pool %s: remote tier: %s:%u unreachable (%s); misses "
			 "until it is back", r->pool->name, node->host, node->port, why);
		break;
	case REMOTE_NODE_BACK:
		if (!o || !o->down)
			break;
		o->down = false;
		kvpd_log(d, KVPD_LOG_NOTICE, "pool %s: remote tier: %s:%u is back", r->pool->name,
			 node->host, node->port);
		break;
	case REMOTE_NODE_REPLACED:
		if (!o || !o->down)
			break;
		o->down = false;
		kvpd_log(d, KVPD_LOG_NOTICE, "pool %s: remote tier: %s:%u's slots are served by "
			 "%s:%u", r->pool->name, node->host, node->port, other->host, other->port);
		break;
	case REMOTE_NODE_REFUSED_SET:
		if (r->set_refusal_said)
			break;
		r->set_refusal_said = true;
		kvpd_log(d, KVPD_LOG_ERR, "pool %s: remote tier: %s:%u refused SET (%.100s); blocks "
			 "are not stored there (counted in send_errors)", r->pool->name, node->host,
			 node->port, why);
		break;
	case REMOTE_NODE_REFUSED_READ:
		if (r->read_refusal_said)
			break;
		r->read_refusal_said = true;
		kvpd_log(d, KVPD_LOG_ERR, "pool %s: remote tier: %s:%u refused a read (%.100s); its "
			 "values are not served (counted in refused, header)", r->pool->name,
			 node->host, node->port, why);
		break;
	}
	pthread_mutex_unlock(&r->events_lock);
}

void remote_tell_refusal(struct kvpd_remote *r, const struct remote_link *l, uint16_t slot,
			 bool read, const char *err)
{
	uint16_t k = l->slot_node[slot];

	if (k != REMOTE_NO_NODE)
		remote_event(r, read ? REMOTE_NODE_REFUSED_READ : REMOTE_NODE_REFUSED_SET,
			     &l->nodes[k].addr, NULL, err);
}

bool remote_error_transient(const char *err)
{
	static const char *const kinds[] = { "CLUSTERDOWN", "TRYAGAIN", "LOADING", "MASTERDOWN",
					     "MOVED", "ASK" };

	for (unsigned i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (!strncmp(err, kinds[i], strlen(kinds[i])))
			return true;
	return false;
}

void remote_events_collect(struct kvpd_remote *r)
{
	uint32_t down = 0;

	pthread_mutex_lock(&r->events_lock);
	for (uint32_t i = 0; i < r->noutages; i++)
		down += r->outages[i].down;
	if (r->st.outages != r->outages_total || r->st.nodes_down != down)
		r->dirty = true;
	r->st.outages = r->outages_total;
	r->st.nodes_down = down;
	pthread_mutex_unlock(&r->events_lock);
}
