/* SPDX-License-Identifier: MIT */
/*
 * Pools built off the event loop: POOL_CREATE and a reload's new pools make
 * their core tables and KV memory (seconds for millions of blocks) in a job's
 * one task on a worker, while the loop goes on serving; the pool appears, and
 * the request completes (or the reload's line is logged), when the job is back.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "events/events.h"
#include "tier/tier.h"

int kvpd_pool_build_start(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			  struct kvpd_pool *pool)
{
	struct kvpd_job *job = calloc(1, sizeof(*job));

	if (!job)
		return -ENOMEM;
	job->type = KVPD_JOB_POOL;
	job->pool = pool;
	job->prepare = kvpd_tier_probe;
	job->ntasks = 1;
	job->start_ns = d->taken_ns;
	if (c) {
		job->client = c;
		job->lane = &c->lane;
		job->opcode = sqe->opcode;
		job->user_data = sqe->user_data;
		job->reason_addr = sqe->out_addr;
		job->reason_len = sqe->out_len;
		job->alloc_bytes = sizeof(*job);
		kvpd_client_job_out(c, job->alloc_bytes);
	}
	d->jobs_inflight++;
	kvpd_workers_submit(d->workers, job);
	return 0;
}

/*
 * Installed, or discarded with its reason: to the client that asked (its
 * completion), or logged for a reload. An owned pool whose creator is gone is
 * discarded: nobody could attach to it but its reaper.
 */
void kvpd_pool_build_done(struct kvpd *d, struct kvpd_job *job)
{
	struct kvpd_client *c = job->client;
	struct kvpd_pool *pool = job->pool;
	struct kvp_cqe cqe = { .user_data = job->user_data };

	d->jobs_inflight--;
	cqe.res = __atomic_load_n(&job->error, __ATOMIC_ACQUIRE);
	if (!cqe.res && !pool->core)
		cqe.res = -ECANCELED; /* its client went before a worker took the task */
	if (!cqe.res && pool->owned && c && c->dead)
		cqe.res = -ECONNRESET;
	if (!cqe.res)
		cqe.res = kvpd_events_attach(d, pool, job->why, sizeof(job->why)) ?:
			  kvpd_tier_attach(d, pool, job->why, sizeof(job->why));
	if (cqe.res) {
		if (!c)
			kvpd_log(d, KVPD_LOG_ERR, "reload: pool %s not created: %s", pool->name,
				 job->why[0] ? job->why : strerror(-cqe.res));
		kvpd_pool_discard(d, pool);
	} else {
		kvpd_pool_install(d, pool);
	}
	if (!c)
		return;
	kvpd_client_job_back(c, job->alloc_bytes);
	if (!c->dead) {
		if (cqe.res)
			kvpd_client_reason(c, job->reason_addr, job->reason_len, job->why, &cqe);
		kvpd_stats_op(d, c, job->opcode, cqe.res, kvpd_now_ns() - job->start_ns);
		kvpd_stats_client(d, c);
		kvpd_ring_post(c, &cqe);
	} else if (c->inflight == 0) {
		kvpd_client_free(d, c);
	}
}
