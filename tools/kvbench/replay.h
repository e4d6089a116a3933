/* SPDX-License-Identifier: MIT */
/*
 * kvbench replay: a request trace (Mooncake's FAST'25 format, JSONL) through
 * a kvpoold, or a fleet of them on one cluster tier, hit rates by tier beside
 * what the trace allows (replay.c: options, the trace, the in-process
 * figures; replay_report.c: the row; replay_run.c: the daemons, their pools,
 * the engines; replay_fleet.c: which node serves a request, the Redis
 * Cluster a run starts).
 */
#ifndef KVPOOL_BENCH_REPLAY_H
#define KVPOOL_BENCH_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "../../lib/libkvpool.h"
#include "kvbench.h"

#define REPLAY_TRACE_BLOCK 512 /* tokens a trace hash id stands for */

struct replay_req {
	uint64_t ts_ms;
	uint32_t in_len, out_len;
	uint32_t nids;
	uint64_t *ids;
};

enum replay_route { REPLAY_ROUND_ROBIN, REPLAY_SESSION, REPLAY_RANDOM };
#define REPLAY_MAX_NODES 16

struct replay_opts {
	const char *trace, *daemon, *socket;
	unsigned engines;            /* a node's */
	unsigned nodes;              /* kvpoold, each a pool of pool_tokens and its local tier */
	enum replay_route route;
	uint64_t seed;               /* REPLAY_RANDOM's */
	unsigned redis_cluster;      /* masters the run starts on loopback (0: none) */
	uint64_t tier_remote_tokens; /* their memory, in tokens of KV (--redis-cluster) */
	uint32_t tier_remote_timeout_ms; /* the pools' key; 0: the daemon's default */
	double speed;          /* arrival times divided by it; 0: back to back */
	bool decode, json;
	bool bystander;        /* a process of NOPs on a pool of its own, timed, meanwhile */
	uint32_t kv_bytes_per_token; /* K and V of one token, every layer: 8 * head_dim (f32, 1 kv head, 1 layer) */
	uint32_t block_size;
	uint64_t pool_tokens, tier_host_tokens, tier_disk_tokens;
	const char *tier_disk_path;
	const char *tier_policy;     /* kvpool.conf's tier_policy: lru, second_sight */
	const char *tier_remote;     /* kvpool.conf's tier_remote (redis://HOST:PORT); NULL: none
				      * (--redis-cluster: its cluster's) */
	const char *groups;          /* kvpool.conf's groups: "full", "full cyclic:1024", ... */
	uint32_t max_step;           /* tokens one ALLOC adds (the pool's max_step_tokens) */
	int64_t snapshot_every;      /* the pool's snapshot_every; -1: the daemon's default */
	double restart_at;           /* the daemon restarts once this fraction is served; 0: never */
};

/* What one request saw (written by its engine into memory the parent shares). */
struct replay_result {
	uint32_t hit_tokens;
	uint32_t tier;         /* its ALLOC waited for the tier (KVP_CQE_F_TIER) */
	uint64_t lookup_ns;    /* its LOOKUP (a cluster tier's round included) */
	uint64_t alloc_ns;
	int32_t error;         /* 0, or the -errno its engine met */
	uint32_t done;
	uint32_t measured;     /* its hit is measured: a try after a restart keeps it */
};

/* The daemon's side of a run: its pool's tier counters once the engines are done. */
struct replay_tier {
	uint64_t hit_tokens, bytes_down, bytes_up, promoted, stored, skipped, abandoned;
	uint64_t pool_evicted; /* cached blocks the pool handed out for new data */
	bool disk;             /* the tier is a disk tier */
	uint64_t declined;     /* copies down its policy declined */
	uint64_t unoffered[KVP_TIER_UNOFFERED_REASONS]; /* evicted cached blocks it did not hold, why */
	uint64_t ns_down, ns_up; /* the copies' own time each way */
	uint64_t slots;          /* blocks it keeps */
	/* Its cluster tier's (tier_remote), 0 without one */
	uint64_t remote_hit_tokens, remote_bytes_in, remote_bytes_out;
	uint64_t remote_round_p50_ns, remote_round_p99_ns;
	uint64_t remote_timeouts;
};

/* Blocks each group held while the engines ran (sampled), and the pool's window snapshots. */
struct replay_held {
	uint32_t ngroups;
	double mean[KVP_MAX_GROUPS];
	uint64_t max[KVP_MAX_GROUPS];
	uint64_t samples;
	bool snapshots;
	uint64_t snap_made, snap_hit, snap_evicted;
	uint32_t snap_held;
};

/* Latencies measured beside the requests': decode ALLOCs, the bystander's NOPs. */
struct replay_lat {
	struct bench_pct decode, nop;
	uint64_t decode_n, nop_n;
	double restart_s;      /* --restart-at: the request to the next run's first hit; <0: none */
};

/*
 * replay_restart.c (--restart-at): whether the run is due to restart the
 * daemon; the restart itself through @admin (a new one, the next run's, in its
 * place), timed to the first hit into *@restart_s: 0 or -errno; the tier
 * counters of the run before added to the next's.
 */
bool replay_restart_due(const struct replay_opts *o, const struct replay_result *res, uint32_t n);
int replay_restart(struct kvp_client **admin, const char *sock, const char *pool,
		   const struct replay_req *reqs, const struct replay_result *res, uint32_t n,
		   double *restart_s);
/* @b's tier counters added to @a's (replay_report.c). */
void replay_tier_add(struct replay_tier *a, const struct replay_tier *b);

/* Token j of a prompt whose trace blocks are @ids: what the id alone determines. */
uint32_t replay_token(const uint64_t *ids, uint32_t j);

/*
 * replay_run.c: the requests through o->nodes kvpoold (o->socket, or those it
 * starts), request i on node @node_of[i]; @res[i] for request i; each node's
 * tier counters into @tiers[node]; the replay's wall time into *elapsed_ns.
 * 0, or -errno with the cause printed.
 */
int replay_run(const struct replay_opts *o, const struct replay_req *reqs, uint32_t n,
	       const uint8_t *node_of, struct replay_result *res, struct replay_tier *tiers,
	       struct replay_lat *lat, struct replay_held *held, uint64_t *elapsed_ns);

/*
 * replay_fleet.c: @fn runs when SIGINT, SIGTERM or SIGHUP ends kvbench (in
 * kvbench itself, not the engines it forks): what a run made on disk, or the
 * servers it started, go with it.
 */
void replay_on_signal(void (*fn)(void));

/* The node of each request (@node_of[i]), as o->route says. 0 or -ENOMEM. */
int replay_route(const struct replay_opts *o, const struct replay_req *reqs, uint32_t n,
		 uint8_t *node_of);
const char *replay_route_name(enum replay_route route);

/* The Redis Cluster a run starts (--redis-cluster M): M masters on loopback. */
struct replay_cluster {
	unsigned masters;
	int pids[REPLAY_MAX_NODES];
	int ports[REPLAY_MAX_NODES];
	char dir[64];
	char url[512];
	uint64_t key_bytes;          /* a block's memory there, measured */
	uint64_t keys, evicted;      /* after the run: keys held, and evicted (maxmemory) */
};
int replay_cluster_start(const struct replay_opts *o, struct replay_cluster *c);
/* The masters' keys and evictions now, into c->keys and c->evicted. */
void replay_cluster_census(struct replay_cluster *c);
void replay_cluster_stop(struct replay_cluster *c);

/* replay_report.c: the row (JSON with o->json, else a line). */
struct replay_figures {
	uint64_t ceiling, lru, elapsed_ns;
	const uint8_t *node_of;
	const struct replay_tier *tiers; /* each node's */
	const struct replay_cluster *cluster; /* NULL: none started */
};
void replay_report(const struct replay_opts *o, const struct replay_req *reqs, uint32_t n,
		   const struct replay_result *res, const struct replay_lat *lat,
		   const struct replay_held *held, const struct replay_figures *f);

#endif
