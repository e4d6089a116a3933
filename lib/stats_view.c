/* SPDX-License-Identifier: MIT */
/* The daemon's stats page copied out and checked, and the names its numbers go by. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libkvpool.h"

/* Every opcode of uapi/kvpool.h has its name here: tests/opcode_names.sh checks. */
static const char *const opcode_names[KVP_STATS_OPS] = {
	[KVP_OP_NOP] = "NOP",           [KVP_OP_SEQ_OPEN] = "SEQ_OPEN",
	[KVP_OP_SEQ_CLOSE] = "SEQ_CLOSE", [KVP_OP_APPEND_TOKENS] = "APPEND_TOKENS",
	[KVP_OP_LOOKUP] = "LOOKUP",     [KVP_OP_ALLOC] = "ALLOC",
	[KVP_OP_COMMIT] = "COMMIT",     [KVP_OP_FREE] = "FREE",
	[KVP_OP_GET_TABLE] = "GET_TABLE", [KVP_OP_POOL_STATS] = "POOL_STATS",
	[KVP_OP_STATS] = "STATS",       [KVP_OP_ATTACH] = "ATTACH",
	[KVP_OP_WRITE_KV] = "WRITE_KV", [KVP_OP_READ_KV] = "READ_KV",
	[KVP_OP_ATTEND] = "ATTEND",     [KVP_OP_POOL_LAYOUT] = "POOL_LAYOUT",
	[KVP_OP_POOL_MAP] = "POOL_MAP", [KVP_OP_POOL_CREATE] = "POOL_CREATE",
	[KVP_OP_POOL_DESTROY] = "POOL_DESTROY", [KVP_OP_EVICT] = "EVICT",
	[KVP_OP_RESET] = "RESET",       [KVP_OP_DUMP_FREEQ] = "DUMP_FREEQ",
	[KVP_OP_CHECK] = "CHECK",       [KVP_OP_POOL_SYNC] = "POOL_SYNC",
	[KVP_OP_POOL_PURGE_REMOTE] = "POOL_PURGE_REMOTE",
	[KVP_OP_DAEMON_RESTART] = "DAEMON_RESTART",
};

const char *kvp_opcode_name(unsigned opcode)
{
	return opcode < KVP_STATS_OPS && opcode_names[opcode] ? opcode_names[opcode] : "UNKNOWN";
}

const char *kvp_quota_name(unsigned key)
{
	static const char *const names[KVP_QUOTA_KEYS] = {
		[KVP_QUOTA_CLIENTS] = "clients",     [KVP_QUOTA_SEQUENCES] = "sequences",
		[KVP_QUOTA_TOKENS] = "tokens",       [KVP_QUOTA_ARENA_BYTES] = "arena_bytes",
		[KVP_QUOTA_BLOCKS] = "blocks",
	};

	return key < KVP_QUOTA_KEYS ? names[key] : "unknown";
}

const char *kvp_tier_unoffered_name(unsigned reason)
{
	static const char *const names[KVP_TIER_UNOFFERED_REASONS] = {
		[KVP_TIER_UNOFFERED_WINDOW] = "window",
		[KVP_TIER_UNOFFERED_QUEUE_FULL] = "queue_full",
		[KVP_TIER_UNOFFERED_NO_SLOT] = "no_slot",
		[KVP_TIER_UNOFFERED_QUOTA] = "quota",
		[KVP_TIER_UNOFFERED_OVERWRITTEN] = "overwritten",
		[KVP_TIER_UNOFFERED_DECLINED] = "declined",
		[KVP_TIER_UNOFFERED_DROPPED] = "dropped",
		[KVP_TIER_UNOFFERED_WRITE_FAILED] = "write_failed",
	};

	return reason < KVP_TIER_UNOFFERED_REASONS ? names[reason] : "unknown";
}

uint64_t kvp_tier_unoffered_total(const struct kvp_stats_tier *t)
{
	uint64_t n = 0;

	for (unsigned r = 0; r < KVP_TIER_UNOFFERED_MAX; r++)
		n += t->unoffered[r];
	return n;
}

/* The stats page says which; one from before ABI 2 leaves it 0. */
const char *kvp_event_loop_name(unsigned loop)
{
	switch (loop) {
	case KVP_EVENT_LOOP_IO_URING: return "io_uring";
	case KVP_EVENT_LOOP_EPOLL: return "epoll";
	default: return "unknown";
	}
}

double kvp_pool_usage(const struct kvp_stats_pool *p)
{
	return p->blocks_total > 1 ? (double)p->blocks_used / (p->blocks_total - 1) : 0.0;
}

uint64_t kvp_hist_percentile(const __u64 *hist, unsigned buckets, double p)
{
	uint64_t total = 0, seen = 0;

	for (unsigned b = 0; b < buckets; b++)
		total += hist[b];
	for (unsigned b = 0; b < buckets && total; b++) {
		seen += hist[b];
		if ((double)seen >= p * (double)total)
			return 2ull << b;
	}
	return 0;
}

/* The page is the daemon's: still, check its offsets before following them. */
static int validate(struct kvp_stats_view *s)
{
	const struct kvp_stats_page *pg = s->buf;
	uint64_t pools_end, clients_end, ops_end, tenants_end, tiers_end, events_end, events_off;
	uint64_t snapshots_end, snapshots_off, remote_end, remote_off;

	if (s->bytes < sizeof(*pg) || pg->magic != KVP_STATS_MAGIC || pg->version != KVP_STATS_VERSION)
		return -EPROTO;
	pools_end = pg->pools_off + (uint64_t)pg->max_pools * sizeof(struct kvp_stats_pool);
	clients_end = pg->clients_off + (uint64_t)pg->max_clients * sizeof(struct kvp_stats_client);
	ops_end = pg->ops_off + KVP_STATS_OPS * sizeof(struct kvp_stats_op);
	tenants_end = pg->tenants_off + (uint64_t)pg->max_tenants * sizeof(struct kvp_stats_tenant);
	tiers_end = pg->tiers_off + (uint64_t)pg->max_pools * sizeof(struct kvp_stats_tier);
	/* A page made before the field: its bytes there are the first pool's. */
	events_off = pg->pools_off >= offsetof(struct kvp_stats_page, events_off) + 8 ?
			     pg->events_off : 0;
	events_end = events_off + (uint64_t)pg->max_pools * sizeof(struct kvp_stats_events);
	snapshots_off = pg->pools_off >= offsetof(struct kvp_stats_page, snapshots_off) + 8 ?
				pg->snapshots_off : 0;
	snapshots_end = snapshots_off + (uint64_t)pg->max_pools * sizeof(struct kvp_stats_snapshots);
	remote_off = pg->pools_off >= offsetof(struct kvp_stats_page, remote_off) + 8 ?
			     pg->remote_off : 0;
	remote_end = remote_off + (uint64_t)pg->max_pools * sizeof(struct kvp_stats_remote);
	if (pools_end > s->bytes || clients_end > s->bytes || ops_end > s->bytes ||
	    tenants_end > s->bytes || (pg->tiers_off && tiers_end > s->bytes) ||
	    (events_off && events_end > s->bytes) || (snapshots_off && snapshots_end > s->bytes) ||
	    (remote_off && remote_end > s->bytes) ||
	    pg->hist_buckets != KVP_HIST_BUCKETS)
		return -EPROTO;
	s->page = pg;
	s->pools = (const void *)((const char *)s->buf + pg->pools_off);
	s->clients = (const void *)((const char *)s->buf + pg->clients_off);
	s->ops = (const void *)((const char *)s->buf + pg->ops_off);
	s->tenants = (const void *)((const char *)s->buf + pg->tenants_off);
	s->max_tenants = pg->max_tenants;
	s->tiers = pg->tiers_off ? (const void *)((const char *)s->buf + pg->tiers_off) : NULL;
	s->events = events_off ? (const void *)((const char *)s->buf + events_off) : NULL;
	s->snapshots = snapshots_off ? (const void *)((const char *)s->buf + snapshots_off) : NULL;
	s->remote = remote_off ? (const void *)((const char *)s->buf + remote_off) : NULL;
	return 0;
}

int kvp_stats_view_take(struct kvp_client *c, struct kvp_stats_view *s)
{
	struct timespec ts;
	int ret;

	if (!s->buf) {
		s->bytes = kvp_stats_bytes(c);
		s->buf = malloc(s->bytes ? s->bytes : 1);
		if (!s->buf)
			return -ENOMEM;
	}
	ret = kvp_stats_snapshot(c, s->buf, s->bytes);
	if (ret < 0)
		return ret;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	s->taken_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return validate(s);
}

void kvp_stats_view_release(struct kvp_stats_view *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}
