/* SPDX-License-Identifier: MIT */
/*
 * The state a planned restart hands on, written once the loop has ended and
 * every client is gone: a section a pool (pool_state.h), then the container
 * sealed. A pool that cannot be handed over (a cuda pool, an owned pool whose
 * creator the restart disconnects, a block still in use) is logged and left
 * out: the next run makes it empty, or not at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handover/handover.h"
#include "handover/pool_state.h"
#include "events/events.h"
#include "tier/tier.h"

#define ALIGN8(x) (((x) + 7) & ~(uint64_t)7)

/* A copy of @fd the exec keeps (no close-on-exec), numbered past the standard three. */
static int keep_fd(int fd)
{
	return fd < 0 ? -1 : fcntl(fd, F_DUPFD, 3);
}

/* Why @pool is not handed over, or NULL. */
static const char *left_out(const struct kvpd_pool *pool)
{
	if (pool->owned)
		return "made by a client for itself (KVP_POOL_OWNED), which the restart "
		       "disconnects: not handed over";
	if (pool->removed)
		return "gone from the config: not handed over";
	if (pool->spec.v2.backend != KVP_BACKEND_HOST)
		return "a cuda pool's memory is not handed over yet: the next run starts it empty";
	return NULL;
}

/* @pool's section: its header laid out in @ps (arrays' offsets, the descriptors kept in @h). */
static int lay_out(struct kvpd_handover *h, const struct kvpd_pool *pool,
		   struct kvpd_pool_state *ps)
{
	uint64_t off = ALIGN8(sizeof(*ps));
	uint32_t nb = pool->layout.num_blocks ? pool->layout.num_blocks : pool->params.num_blocks;
	int mem_fd = -1, index_fd = -1;

	*ps = (struct kvpd_pool_state){ .spec = pool->spec, .generation = pool->generation,
					.kv_fd = -1, .tier_fd = -1, .tier_index_fd = -1,
					.num_blocks = nb, .configured = pool->configured };
	ps->has_tier = kvpd_tier_save_head(pool, &ps->tier, &mem_fd, &index_fd);
	ps->events = kvpd_events_saved_count(pool->events);
	ps->event_block_size = kvpd_events_block_size(pool->events);
	ps->blocks_off = off;
	off += ALIGN8((uint64_t)(nb - 1) * sizeof(struct kvc_saved_block));
	ps->owners_off = off;
	if (ps->has_tier)
		off += ALIGN8((uint64_t)(ps->tier.nowners - 1) * sizeof(struct kvpd_tier_saved_owner));
	ps->block_owner_off = off;
	if (ps->has_tier)
		off += ALIGN8((uint64_t)nb * sizeof(uint32_t));
	ps->walk_off = off;
	if (ps->has_tier)
		off += ALIGN8((uint64_t)nb * sizeof(uint32_t));
	ps->events_off = off;
	off += ALIGN8((uint64_t)ps->events * sizeof(struct kvpd_events_saved));
	ps->tokens_off = off;
	off += ALIGN8((uint64_t)ps->events * ps->event_block_size * sizeof(uint32_t));
	ps->end = off;
	ps->kv_bytes = pool->layout.map_bytes;
	/* Each kept before the next is made: a failure leaves h->kept to close. */
	if (pool->layout.slot_bytes && (ps->kv_fd = keep_fd(pool->layout.mem_fd)) < 0)
		return -errno;
	if (ps->kv_fd >= 0)
		h->kept[h->nkept++] = ps->kv_fd;
	if (ps->has_tier && (ps->tier_fd = keep_fd(mem_fd)) < 0)
		return -errno;
	if (ps->tier_fd >= 0)
		h->kept[h->nkept++] = ps->tier_fd;
	if (ps->has_tier && (ps->tier_index_fd = keep_fd(index_fd)) < 0)
		return -errno;
	if (ps->tier_index_fd >= 0)
		h->kept[h->nkept++] = ps->tier_index_fd;
	return 0;
}

/* What the events index says the tier holds, as the next run's tier will: no window's copy. */
static void events_fit_tier(const struct kvpd_pool *pool, struct kvpd_events_saved *e, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (e[i].in_tier)
			e[i].in_tier = kvpd_tier_keeps(pool, e[i].group, &e[i].key);
}

static int save_pool(struct kvpd *d, struct kvpd_state_writer *w, struct kvpd_pool *pool)
{
	struct kvpd_pool_state ps;
	uint8_t *sec;
	int ret = lay_out(d->handover, pool, &ps);

	if (ret)
		return ret;
	sec = kvpd_state_add(w, KVPD_SECTION_POOL, KVPD_SECTION_POOL_VERSION, pool->name, ps.end);
	if (!sec)
		return w->err;
	memcpy(sec, &ps, sizeof(ps));
	ret = kvc_pool_save(pool->core, (struct kvc_saved_block *)(sec + ps.blocks_off));
	if (ret) {
		/* The section stays, saying so: the next run starts the pool empty. */
		((struct kvpd_pool_state *)sec)->num_blocks = 0;
		kvpd_log(d, KVPD_LOG_WARNING, "restart: pool %s: a block is still in use: its cache "
			 "is not handed over", pool->name);
		return 0;
	}
	if (ps.has_tier)
		kvpd_tier_save(pool, (struct kvpd_tier_saved_owner *)(sec + ps.owners_off),
			       (uint32_t *)(sec + ps.block_owner_off),
			       (uint32_t *)(sec + ps.walk_off));
	kvpd_events_save(pool->events, (struct kvpd_events_saved *)(sec + ps.events_off),
			 (uint32_t *)(sec + ps.tokens_off));
	events_fit_tier(pool, (struct kvpd_events_saved *)(sec + ps.events_off), ps.events);
	return 0;
}

/* A test build spoils a pool's section when told to (KVPOOLD_TEST_DAMAGE=POOL:flip|version). */
static void test_damage(struct kvpd_state_writer *w)
{
#ifdef KVPD_TEST_HOOKS
	const char *spec = getenv("KVPOOLD_TEST_DAMAGE");
	const char *colon = spec ? strrchr(spec, ':') : NULL;

	if (!colon || (size_t)(colon - spec) >= sizeof(w->damage_name))
		return;
	memcpy(w->damage_name, spec, (size_t)(colon - spec));
	w->damage = !strcmp(colon + 1, "version") ? KVPD_STATE_NEXT_VERSION : KVPD_STATE_FLIP_BYTE;
#else
	(void)w;
#endif
}

/* The descriptors the sections name, closed: a refused restart keeps none. */
static void close_kept_all(struct kvpd_handover *h)
{
	for (unsigned i = 0; i < h->nkept; i++)
		close(h->kept[i]);
	h->nkept = 0;
}

void kvpd_handover_refused(struct kvpd *d)
{
	struct kvpd_handover *h = d->handover;

	h->requested = false;
	if (h->exe_fd >= 0)
		close(h->exe_fd);
	h->exe_fd = -1;
}

int kvpd_handover_save(struct kvpd *d)
{
	struct kvpd_handover *h = d->handover;
	struct kvpd_state_writer w;
	int ret = 0;

	h->drained_ns = kvpd_now_ns();
	kvpd_state_writer_init(&w);
	test_damage(&w);
	for (unsigned i = 0; i < d->npools && !ret; i++) {
		struct kvpd_pool *pool = d->pools[i];
		const char *why = left_out(pool);

		if (why)
			kvpd_log(d, KVPD_LOG_NOTICE, "restart: pool %s: %s", pool->name, why);
		else
			ret = save_pool(d, &w, pool);
	}
	if (ret) {
		kvpd_state_writer_free(&w);
	} else {
		h->state_bytes = w.len;
		ret = kvpd_state_seal(&w, KVPOOL_VERSION, &h->state_fd);
	}
	if (ret) {
		close_kept_all(h);
		kvpd_log(d, KVPD_LOG_ERR, "restart refused: the state cannot be written: %s; "
			 "serving on", strerror(-ret));
		return ret;
	}
	h->written_ns = kvpd_now_ns();
	/* Committed to the exec: the big mappings go with the process (exec.c). */
	for (unsigned i = 0; i < d->npools; i++) {
		d->pools[i]->leave_mapped = d->pools[i]->backend == &kvpd_host_backend;
		kvpd_tier_leave_mapped(d->pools[i]);
	}
	return 0;
}
