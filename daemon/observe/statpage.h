/* SPDX-License-Identifier: MIT */
/*
 * The observe room: the stats page (statpage.c: a sealed memfd that clients
 * map read-only, the event loop its only writer, a seqlock around each bracket
 * of writes), the uids' private views of it (statview.c), and the USDT probes
 * (probes.h). It owns the page's memory, its brackets and its views; the rows
 * are written by the rooms that own what they describe (pools/pool_stats.c,
 * session/client_stats.c, tenants/tenant_stats.c), which include this header.
 * What the page needs of them at a bracket's end or a new view comes through
 * struct kvpd_stats_hooks, set by the top.
 *
 * It may use the loop and config rooms and the shared headers.
 */
#ifndef KVPOOLD_STATPAGE_H
#define KVPOOLD_STATPAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpoold.h"

#define KVPD_STATS_OPS_WORDS (KVP_STATS_OPS / 64)

/* What the rooms above add at the page's moments: each may be NULL. */
struct kvpd_stats_hooks {
	/* The outermost bracket ends, the page still open: rows counted late (fragmentation). */
	void (*bracket_end)(struct kvpd *d, uint64_t now);
	/* The page is sealed: what tracers hear about the bracket (op batches). */
	void (*sealed)(struct kvpd *d);
	/* A new view: the rows of @v->uid's it gets beside the clients' (its tenants'). */
	void (*view_fill)(struct kvpd *d, struct kvpd_statview *v);
};

struct kvpd_statpage {
	int fd;
	size_t bytes;
	struct kvp_stats_page *page;
	struct kvp_stats_pool *pools;
	struct kvp_stats_client *clients;
	struct kvp_stats_op *ops;
	struct kvp_stats_tenant *tenants;
	struct kvp_stats_tier *tiers;  /* parallel to pools */
	struct kvp_stats_events *events; /* likewise */
	struct kvp_stats_snapshots *snapshots; /* likewise */
	struct kvp_stats_remote *remote;       /* likewise */
	unsigned depth;            /* nested writers: the seqlock moves at the outermost */
	/* The full page's entries written since its views were last brought up to date. */
	uint64_t ops_dirty[KVPD_STATS_OPS_WORDS];
	uint64_t pools_dirty;      /* bit: stat_idx */
	const struct kvpd_stats_hooks *hooks; /* the full page's */
};

/*
 * The page of a uid's readers without the admin feature: the same layout,
 * the daemon's pools and operations, but only that uid's client rows and
 * tenant rows (statview.c).
 */
struct kvpd_statview {
	struct kvpd_statview *next;
	uid_t uid;
	unsigned readers;          /* clients that were given it */
	unsigned own_clients;      /* its rows in use */
	struct kvpd_statpage pg;
};

/* statpage.c */
/* The full page, into d->stats (which the caller provides), with @hooks. */
int kvpd_statpage_init(struct kvpd *d, const struct kvpd_stats_hooks *hooks);
void kvpd_statpage_fini(struct kvpd *d);
/* A sealed page of the stats layout, mapped writable by us only (one per view). */
int kvpd_statpage_make(struct kvpd *d, struct kvpd_statpage *sp, const char *name);
void kvpd_statpage_unmake(struct kvpd_statpage *sp);
static inline void kvpd_stats_dirty(uint64_t *words, unsigned bit)
{
	words[bit / 64] |= 1ull << (bit % 64);
}
void kvpd_stats_begin(struct kvpd *d);
void kvpd_stats_end(struct kvpd *d);
/* The latency histogram's bucket of @ns (log2 ns, as the page's). */
unsigned kvpd_stats_bucket(uint64_t ns);
/* Operation @opcode's counters in the full page: one more, of result @res, taking @ns; its bucket. */
unsigned kvpd_stats_count_op(struct kvpd *d, uint8_t opcode, int32_t res, uint64_t ns);

/* statview.c */
/* The view a reader of @uid without the admin feature maps: made on first use; NULL without memory. */
struct kvpd_statview *kvpd_statview_get(struct kvpd *d, uid_t uid);
void kvpd_statview_put(struct kvpd *d, struct kvpd_statview *v);
/* @uid's view, if a reader holds one. */
struct kvpd_statview *kvpd_statview_of(struct kvpd *d, uid_t uid);
/* The full page's changes since the last call, into every view (at a bracket's end). */
void kvpd_statviews_sync(struct kvpd *d);

#endif
