/* SPDX-License-Identifier: MIT */
/*
 * kvbench load: what its files share. load.c reads the options, sets
 * the workloads up and prints; load_engine.c is an engine's scheduler;
 * load_ops.c runs its batches (on a daemon's rings, or on the core in
 * process); load_run.c runs the engines, as processes or in turn in one.
 */
#ifndef KVPOOL_BENCH_LOAD_H
#define KVPOOL_BENCH_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../lib/libkvpool.h"
#include "kvcore.h"

/* Spin mode: how long engines (kvp_connect_opts.spin_us) and the daemon (--spin-us) spin. */
#define LD_SPIN_US 1000

/* What latencies are kept of: each ring operation, and a step's whole batch. */
enum ld_kind { LD_OPEN, LD_LOOKUP, LD_APPEND, LD_ALLOC, LD_COMMIT, LD_CLOSE, LD_FREE, LD_STEP,
	       LD_NKINDS };
extern const char *const ld_kind_names[LD_NKINDS];

/* One workload as each engine runs it: every count is per engine. */
struct ld_workload {
	const char *name;
	uint32_t seqs;       /* running at once at most (vLLM's max_num_seqs) */
	uint32_t requests;   /* served in all, `arrivals` arriving each step from the first */
	uint32_t arrivals;
	uint32_t prompt;     /* prompt tokens */
	uint32_t shared;     /* leading prompt tokens taken from one of `systems` prefixes */
	uint32_t systems;    /* 0: nothing shared; more than 1: picked by Zipf popularity */
	uint32_t steps;      /* tokens each request generates: its decode steps */
	uint32_t chunk;      /* most prompt tokens one step prefills (chunked prefill) */
	uint32_t block_size;
	uint32_t num_groups;
	struct kvc_group_spec groups[2];
	uint32_t pool_blocks; /* the null block included */
	uint64_t seed;       /* token ids and popularity come from it: engines share prefixes */
};

struct ld_samples {
	uint64_t *v;
	size_t n, cap;
};

/* Written raw down a pipe by an engine process: plain numbers only. */
struct ld_counts {
	uint64_t ops, steps, tokens, preemptions, nospace;
	uint64_t hit_tokens, query_tokens; /* at each admission: the cache's hit, the tokens offered */
	uint64_t start_ns, end_ns;         /* CLOCK_MONOTONIC, the same in every process */
};

struct ld_stats {
	struct ld_counts n;
	struct ld_samples lat[LD_NKINDS]; /* ns */
};

int ld_sample(struct ld_samples *s, uint64_t v);
/* Appends @from's samples to @into's and adds up the counts. */
int ld_stats_merge(struct ld_stats *into, const struct ld_stats *from);
void ld_stats_free(struct ld_stats *st);

/* Where an engine's batches go: a daemon's rings (c), or the core allocator in process (pool). */
struct ld_backend {
	struct kvp_client *c;
	struct kvc_pool *pool;
};

struct ld_req;

/* One request of a batch, and its answer. */
struct ld_op {
	uint8_t opcode;
	bool use_cache;
	uint32_t len;
	uint64_t handle;
	const uint32_t *tokens; /* SEQ_OPEN, APPEND: len of them */
	struct ld_req *req;    /* the engine's, untouched here */
	int32_t res;
	uint64_t aux;
};

/*
 * Runs a batch, each answer in its op, and samples each op's latency and
 * the batch's into @st. -errno when the batch could not be run (the
 * connection, memory): the ops' own refusals are in their res.
 */
int ld_backend_run(const struct ld_backend *be, struct ld_op *ops, uint32_t n, struct ld_stats *st);

struct ld_engine;

/* Engine @index of a run: its requests' token ids depend on it and on the seed. */
int ld_engine_new(const struct ld_workload *w, unsigned index, struct ld_backend be,
		  struct ld_engine **out);
/*
 * One scheduler step, one batch: 1, or 0 when it is starved (an admission
 * refused for want of room with nothing of its own running: only other
 * engines can free blocks), or -errno (ld_engine_error says what failed).
 */
int ld_engine_step(struct ld_engine *e);
bool ld_engine_done(const struct ld_engine *e);
/* Sequences running or finishing: holding blocks. */
uint32_t ld_engine_busy(const struct ld_engine *e);
const char *ld_engine_error(const struct ld_engine *e);
struct ld_stats *ld_engine_stats(struct ld_engine *e);
void ld_engine_free(struct ld_engine *e);

/* Ring sizes an engine of @w connects with: a step's batch fits in one submission. */
uint32_t ld_sq_entries(const struct ld_workload *w);
uint64_t ld_arena_bytes(const struct ld_workload *w);

struct ld_pct {
	uint64_t count, median, p99, p999;
};

/* One run of one workload: a row of the output. */
struct ld_result {
	int err;             /* 0, or what failed, in why */
	char why[256];
	struct ld_counts n;
	double seconds;
	uint32_t peak_used;  /* blocks in use at most (sampled) */
	double mean_usage;   /* of the usable blocks, over the samples */
	int64_t blocks_leaked; /* in use once every engine closed its sequences; -1: not known */
	struct ld_pct lat[LD_NKINDS];
};

struct ld_run_opts {
	unsigned engines;
	bool spin;
	const char *socket;
};

int ld_run_daemon(const struct ld_workload *w, const struct ld_run_opts *o, struct ld_result *r);
int ld_run_in_process(const struct ld_workload *w, unsigned engines, struct ld_result *r);

#endif
