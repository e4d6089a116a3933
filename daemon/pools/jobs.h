/* SPDX-License-Identifier: MIT */
/*
 * Data-path requests (WRITE_KV, READ_KV, ATTEND) leave the event loop as jobs:
 * checked, their blocks pinned and mapped, split into tasks that worker threads
 * run in parallel. The last task hands the job back to the loop, which posts
 * the completion and unpins. Workers touch only pool memory and the client's
 * arena, never the core.
 */
#ifndef KVPOOLD_JOBS_H
#define KVPOOLD_JOBS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "attn/kvmask.h"
#include "pools/backend.h"

/*
 * KVPD_JOB_POOL: a pool built off the event loop (its one task runs kvpd_pool_build).
 * KVPD_JOB_TIER_DOWN, _UP: blocks copied into a pool's tier, or out of it (the tier room).
 * KVPD_JOB_REMOTE: a cluster tier's round on its own thread (the tier room).
 * KVPD_JOB_COPY: blocks copied to other blocks of the pool (cyclic groups' window
 * snapshots, data/snapcopy.c).
 */
enum kvpd_job_type { KVPD_JOB_WRITE, KVPD_JOB_READ, KVPD_JOB_ATTEND, KVPD_JOB_POOL,
		     KVPD_JOB_TIER_DOWN, KVPD_JOB_TIER_UP, KVPD_JOB_COPY, KVPD_JOB_REMOTE };

#define KVPD_JOB_WHY 128

/*
 * How big a task may be: every task of a long request leaves a worker after
 * about this much work, and another client's task waits for one at most.
 */
/*
 * The memory a client's jobs in flight may hold; past it, its next data-path
 * request waits in its SQ (one job, at most KVPD_MAX_ATTEND_IDS ids and
 * KVPD_SPLIT_SCRATCH of partials, always goes).
 */
#define KVPD_CLIENT_JOB_BYTES (16u << 20)
#define KVPD_TASK_BYTES (4u << 20) /* WRITE_KV, READ_KV: K and V bytes a task copies */
#define KVPD_TASK_WORK (1u << 18)  /* ATTEND: key positions a task reads, summed over its
				    * queries, times its query heads, times head_dim / 128 */

/* One sequence's queries of an ATTEND. */
struct kvpd_attend_unit {
	struct kvpd_block_map map;
	struct kvpd_mask mask;
	uint32_t first_pos, count;
	const uint8_t *q;  /* [count][q_heads][head_dim] in the query dtype */
	uint8_t *out;
	uint64_t keys;     /* key positions its queries read, summed */
	uint32_t minkeys;  /* key positions of its query that reads the fewest */
	uint32_t maxkeys;  /* and of the one that reads the most */
	/*
	 * Split-K (flash-decoding), for a long context with too few tasks to keep the
	 * workers busy: the keys of each query are cut into `split` parts, one task
	 * per (kv head, part), tasks task0.. (head-major); each writes its partial
	 * output and log-sum-exp, and the last part of a kv head to finish merges
	 * them into out. split 1: one task per kv head computes out directly.
	 */
	uint32_t split;
	/*
	 * Unsplit, a unit of many queries (a prefill) is cut by queries instead:
	 * `qparts` tasks per kv head, each its share of the queries, so that no
	 * task does much more than KVPD_TASK_WORK (a worker's task is what
	 * another client's next task waits for).
	 */
	uint32_t qparts;
	/*
	 * And a query that alone does more (a long context read by many query
	 * heads) is cut by its query heads: `hparts` tasks per query share, each
	 * its slice of the kv head's heads (independent: no merge).
	 */
	uint32_t hparts;
	uint32_t task0;
	float *part;       /* [kv_heads][split][count][g][head_dim] */
	float *lse;        /* [kv_heads][split][count][g] */
	uint32_t *left;    /* [kv_heads]: parts not finished (atomic) */
};

struct kvpd_client;
struct kvpd_pool;

/*
 * A client's jobs with tasks not yet taken, in order. The workers take tasks
 * from the lanes in turn, one task each, so that a client with a thousand
 * queued tasks delays another client's next task by one task, not a thousand.
 */
struct kvpd_lane {
	struct kvpd_lane *next;        /* in the workers' round, while queued */
	struct kvpd_job *head, *tail;
	bool queued;
};

struct kvpd_job;
/*
 * Runs task @task of @job; returns 0 when it is done, or KVPD_TASK_LATER when
 * it finishes later (a GPU kernel in flight): then whoever sees it finish
 * calls job->task_done(job) once, from any thread, and the job's completion is
 * posted after its last task is done. A later task holds no worker meanwhile.
 */
typedef int kvpd_task_fn(struct kvpd_job *job, uint32_t task);
#define KVPD_TASK_LATER 1
/* The daemon's: runs the task on its pool's backend. */
kvpd_task_fn kvpd_job_run;

struct kvpd_job {
	struct kvpd_job *next;
	struct kvpd_lane *lane;    /* its client's; NULL: the workers' own (tests) */
	bool cancelled;            /* its client is gone: tasks not yet taken never run */
	enum kvpd_job_type type;
	struct kvpd_client *client;
	struct kvpd_pool *pool;
	const struct kvpd_kv_layout *layout;
	uint8_t *mem;
	uint64_t user_data;
	uint64_t handle;           /* WRITE_KV: whose positions become written... */
	uint32_t epoch;            /* ...unless the sequence was freed since (its epoch moved) */
	uint64_t start_ns;         /* when its entry was taken */
	uint64_t bytes;            /* KV moved or read, for the probes */
	uint8_t opcode;
	uint32_t group, layer;

	/*
	 * WRITE_KV / READ_KV: tokens first_pos.. of data = K then V [count][kv_heads][head_dim];
	 * task = chunk * kv_heads + kv head, a chunk being chunk_tokens tokens.
	 */
	struct kvpd_block_map map;
	uint32_t first_pos, count;
	uint32_t chunk_tokens;
	uint8_t *data;

	/* ATTEND */
	struct attn_params params;
	uint32_t q_heads;
	uint32_t nunits;
	struct kvpd_attend_unit *units;
	bool mapped;               /* some unit has several tasks a kv head (split or qparts):
				    * tasks map to units through task0 */

	uint8_t *scratch;          /* ATTEND: the split units' partials (in the job's allocation) */
	size_t alloc_bytes;        /* the job's allocation, counted in its client's job_bytes */

	/*
	 * Every task is short (split-K parts, decode queries): the event loop may run
	 * them between turns instead of waiting for a worker. A long one (a prefill)
	 * would keep the loop from the other clients' rings.
	 */
	bool short_tasks;
	uint32_t ntasks;
	uint32_t next_task;        /* under the workers' lock */
	uint32_t tasks_left;       /* atomic */
	int error;                 /* atomic: 0, or a failed task's -errno (a device error),
				    * the first one: the completion's res */
	char why[KVPD_JOB_WHY];    /* that failure's reason, when its backend gives one (the
				    * call and the driver's words): logged with the completion;
				    * written by the task whose error was the first only */
	uint64_t aux;              /* the completion's aux: a GPU ATTEND's kernel time, ns */
	struct kvpd_workers *workers;              /* set by kvpd_workers_submit */
	void (*task_done)(struct kvpd_job *job);   /* for a task that returned KVPD_TASK_LATER */
	uint32_t *pinned;
	uint32_t npinned;
	/*
	 * KVPD_JOB_TIER_DOWN, _UP: task i copies pool block blocks[i] into (out of)
	 * slot slots[i] of tier_mem, a slot being the block's chunks back to back
	 * (kvpd_block_chunk_off). Test builds may slow each task by delay_us. An
	 * _UP task whose swap[i] is set (swap NULL: none) exchanges the two
	 * instead: the block's old KV goes into the slot it empties (the host
	 * backend's; a backend without swaps never gets one).
	 */
	uint8_t *tier_mem;
	const uint32_t *blocks, *slots;
	const uint32_t *dsts;      /* KVPD_JOB_COPY: task i copies block blocks[i] into dsts[i] */
	const uint8_t *swap;
	uint32_t delay_us;
	/* KVPD_JOB_POOL from POOL_CREATE: where its refusal's reason goes in the arena. */
	uint64_t reason_addr;
	uint32_t reason_len;
	/* KVPD_JOB_POOL: a room above's part of the build, after it (the cluster tier's probe) */
	int (*prepare)(struct kvpd_pool *pool, char *why, size_t why_len);
};

struct kvpd_workers {
	pthread_t *threads;
	unsigned nthreads;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct kvpd_lane *round, *round_tail; /* lanes with tasks not yet taken, next first */
	struct kvpd_lane solo;                 /* for jobs without a lane */
	struct kvpd_job *done, *done_tail;    /* finished, for the event loop */
	uint32_t ndone;                        /* atomic: a cheap check for the spinning loop */
	int done_efd;                          /* written when a job finishes while the loop sleeps */
	unsigned running;                      /* tasks running, the loop's included (under lock) */
	unsigned max_running;                  /* at most this many: the number of workers */
	unsigned sleepers;                     /* workers waiting on wake (under lock) */
	unsigned spinning;                     /* workers spinning on the queue (under lock) */
	uint64_t spin_ns;                      /* a worker out of tasks spins this long, then sleeps */
	bool loop_sleeping;                    /* atomic: finish writes done_efd only then */
	bool stop;
	kvpd_task_fn *run;                     /* what a task runs */
};

/* @run runs one task of a job: the daemon's kvpd_job_run (its pool's backend), or a test's. */
int kvpd_workers_start(struct kvpd_workers *w, unsigned nthreads, unsigned spin_us,
		       kvpd_task_fn *run);
void kvpd_workers_stop(struct kvpd_workers *w);
void kvpd_workers_submit(struct kvpd_workers *w, struct kvpd_job *job);
/*
 * A job whose tasks another thread runs (a tier's copier, off the workers so
 * that a slow copy holds no client's task up): each job->task_done(job)
 * counts one task, and the last hands the job to the loop as the workers'
 * own jobs come back (kvpd_workers_take_done).
 */
void kvpd_workers_adopt(struct kvpd_workers *w, struct kvpd_job *job);
/*
 * @lane's client is gone: the tasks of its jobs not yet taken never run. A job
 * whose every taken task is done comes back now, marked cancelled; one with
 * tasks running comes back when they end.
 */
void kvpd_workers_cancel(struct kvpd_workers *w, struct kvpd_lane *lane);
/* The event loop runs the next task if it is short and a slot is free; false: it did not. */
bool kvpd_workers_help(struct kvpd_workers *w);
/*
 * The loop is about to sleep (true) or awake (false). Going to sleep, it returns
 * true if jobs finished meanwhile: then it must not sleep, no eventfd is coming.
 */
bool kvpd_workers_loop_sleeping(struct kvpd_workers *w, bool sleeping);
/* The finished jobs, oldest first; the caller owns them. */
struct kvpd_job *kvpd_workers_take_done(struct kvpd_workers *w);

#endif
