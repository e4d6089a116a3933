/* SPDX-License-Identifier: MIT */
/*
 * A pool's publisher from its kv_events keys: the endpoints (ipc:// beside
 * the daemon's socket unless a key names another), the topic, the events'
 * fixed fields (medium, each group's kind and window), the core's hooks; and
 * the loop's side of it: the turn's batch, the stats rows, the end.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events/events_internal.h"
#include "log.h"
#include "refuse.h"

/* NAME.SUFFIX as an ipc:// endpoint in the directory of the daemon's socket. */
static int default_endpoint(const struct kvpd *d, const char *pool, const char *suffix,
			    char *out, size_t len, char *why, size_t why_len)
{
	const char *sock = d->cfg.socket_path, *slash = strrchr(sock, '/');
	int dir = slash ? (int)(slash - sock) : 1;
	int n = snprintf(out, len, "ipc://%.*s/%s.%s", dir, slash ? sock : ".", pool, suffix);

	/* A socket's path holds 107 bytes and a NUL. */
	if (n < 0 || (size_t)n >= len || n - 6 > 107)
		return kvpd_refuse(why, why_len, -ENAMETOOLONG, "kv_events: the default endpoint "
				   "%s/%s.%s is over 107 bytes: name one", slash ? "" : ".", pool,
				   suffix);
	return 0;
}

static void group_fields(struct kvpd_events *ev, const struct kvp_pool_params *p)
{
	for (uint32_t g = 0; g < p->num_groups; g++) {
		switch (p->group_kind[g]) {
		case KVP_KIND_SWA:
		case KVP_KIND_RSWA:
		case KVP_KIND_CYCLIC:
			/* vLLM's names: an R-SWA's or a cyclic's blocks are a window's too. */
			ev->kind[g] = "sliding_window";
			ev->window[g] = p->group_param[g];
			break;
		case KVP_KIND_CHUNKED:
			ev->kind[g] = "chunked_local_attention";
			break;
		default:
			ev->kind[g] = "full_attention";
		}
	}
}

static void events_free(struct kvpd_events *ev)
{
	/* What the turn holds goes first: a destroy loses nothing the loop made. */
	kvpd_events_flush(ev);
	kvpd_ev_pub_stop(ev->pub);
	kvpd_ev_index_free(ev->idx);
	kvpd_ev_remote_free(ev);
	kvpd_events_pending_free(ev);
	free(ev);
}

int kvpd_events_attach(struct kvpd *d, struct kvpd_pool *pool, char *why, size_t why_len)
{
	const struct kvpd_pool_spec *s = &pool->spec;
	char pub_ep[KVPD_EVENTS_ENDPOINT_MAX + 32], replay_ep[KVPD_EVENTS_ENDPOINT_MAX + 32];
	char topic[KVPD_EVENTS_TOPIC_MAX], host[64] = "localhost";
	struct ev_pub_config cfg = { .endpoint = s->kv_events,
				     .replay = s->kv_events_replay, .topic = s->kv_events_topic,
				     .keep = s->kv_events_buffer_set ? s->kv_events_buffer :
								       KVPD_EVENTS_BUFFER };
	struct kvpd_events *ev;
	int ret;

	if (!*s->kv_events)
		return 0;
	if (!strcmp(s->kv_events, "on")) {
		ret = default_endpoint(d, pool->name, "events", pub_ep, sizeof(pub_ep), why, why_len);
		if (ret)
			return ret;
		cfg.endpoint = pub_ep;
	}
	if (!strcmp(s->kv_events_replay, "off")) {
		cfg.replay = NULL;
	} else if (!*s->kv_events_replay) {
		ret = default_endpoint(d, pool->name, "replay", replay_ep, sizeof(replay_ep), why,
				       why_len);
		if (ret)
			return ret;
		cfg.replay = replay_ep;
	}
	if (!*cfg.topic) {
		gethostname(host, sizeof(host) - 1);
		snprintf(topic, sizeof(topic), "kv@%s@%s", host, pool->name);
		cfg.topic = topic;
	}
#ifdef KVPD_TEST_HOOKS
	if (getenv("KVPOOL_EVENTS_DELAY_US"))
		cfg.delay_us = (uint32_t)strtoul(getenv("KVPOOL_EVENTS_DELAY_US"), NULL, 10);
	if (getenv("KVPOOL_EVENTS_QUEUE"))
		cfg.queue = (uint32_t)strtoul(getenv("KVPOOL_EVENTS_QUEUE"), NULL, 10);
#endif
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	ev->d = d;
	ev->pool = pool;
	ev->format = s->kv_events_format == KVPD_EVENTS_FORM_ARRAY ? KVPD_EVENTS_ARRAY :
								     KVPD_EVENTS_MAP;
	ev->block_size = pool->params.block_size;
	ev->medium = pool->spec.v2.backend == KVP_BACKEND_CUDA ? "GPU" : "CPU";
	ev->tier_medium = ev->medium;
	ev->cut = true;
	group_fields(ev, &pool->params);
	/*
	 * The pool's cached keys with their origins, so that a planned restart
	 * can announce them again; a pool with a tier gets a larger one at the
	 * tier's start (kvpd_events_tier_start).
	 */
	if (pool->params.caching && !s->tier_host_bytes && !s->tier_disk_bytes &&
	    kvpd_ev_index_init(&ev->idx, pool->params.num_blocks, ev->block_size)) {
		free(ev);
		return kvpd_refuse(why, why_len, -ENOMEM, "kv_events: no memory for the index of "
				   "%u blocks' origins", pool->params.num_blocks);
	}
	ret = kvpd_ev_pub_start(&ev->pub, &cfg, why, why_len);
	if (ret) {
		kvpd_ev_index_free(ev->idx);
		free(ev);
		return ret;
	}
	pool->events = ev;
	pool->events_free = events_free;
	kvc_pool_set_events(pool->core, &kvpd_events_core_ops, ev);
	kvpd_log(d, KVPD_LOG_INFO, "pool %s: kv_events on %s, replay %s, topic %s, %u batches kept",
		 pool->name, cfg.endpoint, cfg.replay ? cfg.replay : "off", cfg.topic, cfg.keep);
	return 0;
}

int kvpd_events_tier_start(struct kvpd_events *ev, uint32_t slots, bool disk)
{
	if (!ev)
		return 0;
	ev->tier_medium = disk ? "DISK" : "CPU";
	/* The pool's cached keys and the tier's entries, each at most once. */
	return kvpd_ev_index_init(&ev->idx, ev->pool->params.num_blocks + slots, ev->block_size);
}

/* @ev's row, written when it moved (in a bracket @open opens once). */
static void stats_row(struct kvpd *d, const struct kvpd_events *ev, bool *open)
{
	unsigned idx = ev->pool->stat_idx;
	struct kvp_stats_events row = {
		.in_use = 1,
		.format = ev->format == KVPD_EVENTS_ARRAY ? KVP_EVENTS_ARRAY : KVP_EVENTS_MAP,
		.batches = ev->batches, .events = ev->events, .blocks_stored = ev->stored,
		.blocks_removed = ev->removed, .cleared = ev->cleared, .dropped = ev->unmade,
	};

	kvpd_ev_pub_counters(ev->pub, &row);
	if (!memcmp(&row, &d->stats->events[idx], sizeof(row)))
		return;
	if (!*open && (*open = true))
		kvpd_stats_begin(d);
	kvpd_stats_dirty(&d->stats->pools_dirty, idx);
	d->stats->events[idx] = row;
}

void kvpd_events_stats(struct kvpd *d)
{
	bool open = false;

	for (unsigned i = 0; i < d->npools; i++)
		if (d->pools[i]->events)
			stats_row(d, d->pools[i]->events, &open);
	if (open)
		kvpd_stats_end(d);
}

void kvpd_events_turn(struct kvpd *d)
{
	bool open = false;

	for (unsigned i = 0; i < d->npools; i++) {
		struct kvpd_events *ev = d->pools[i]->events;

		if (!ev || !(ev->npend || ev->lost))
			continue;
		kvpd_events_flush(ev);
		/* A reader of the page sees the batch's sequence number as soon as it is out. */
		stats_row(d, ev, &open);
	}
	if (open)
		kvpd_stats_end(d);
}
