/* SPDX-License-Identifier: MIT */
/*
 * Window snapshots' copies (docs/design.md): the core chose the blocks, here
 * their KV moves. A COMMIT that crossed a snapshot's boundary copies ring
 * blocks out into new blocks, which the core caches only once their KV is in
 * place: it completes at once, and the client's next entry on that sequence
 * waits in its SQ until the copies are back (ring.c), so that nothing writes
 * a ring under its copy. An ALLOC that hit a snapshot copies it into its new
 * ring and completes once that is done (its sequence answers -EBUSY
 * meanwhile), also waiting for a tier's promotions when it has some
 * (kvpd_seq_later).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "observe/probes.h"
#include "tier/tier.h"

struct snap_job {
	struct kvpd_job job;
	struct kvp_cqe cqe;     /* the request's completion, as it stood */
	uint32_t n;
	struct kvc_copy *copies; /* the core's, copied out */
	uint32_t *src, *dst;
};

/* Ends @n copies as @ok; without KV to move (a pool of no KV) they are done at once. */
static void copies_end(struct kvc_pool *core, const struct kvc_copy *copies, uint32_t n, bool ok)
{
	for (uint32_t i = 0; i < n; i++)
		kvc_copy_done(core, &copies[i], ok);
}

/* An ALLOC whose ring will not get its snapshot's KV: the sequence lets its blocks go. */
static int fail_hit(struct kvpd_client *c, uint64_t handle, int err)
{
	struct kvpd_seq_slot *slot = kvpd_seq_slot(c, handle);

	kvc_seq_free(slot->seq);
	slot->epoch++;
	return err;
}

int kvpd_snap_copies(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
		     struct kvp_cqe *cqe, int ret)
{
	struct kvc_pool *core = c->pool->core;
	const struct kvc_copy *copies;
	uint32_t n = kvc_pool_copies(core, &copies);
	bool hit = sqe->opcode == KVP_OP_ALLOC;
	struct snap_job *sj;
	size_t bytes;

	if (!n)
		return ret;
	if (!c->pool->layout.slot_bytes || (ret < 0 && ret != KVPD_LATER)) {
		copies_end(core, copies, n, !c->pool->layout.slot_bytes);
		return ret;
	}
	bytes = sizeof(*sj) + n * (sizeof(struct kvc_copy) + 2 * sizeof(uint32_t));
	sj = calloc(1, bytes);
	if (!sj) {
		copies_end(core, copies, n, false);
		/* A made snapshot is only lost; a hit's ring would lack its KV. */
		if (!hit)
			return ret;
		fail_hit(c, sqe->handle, -ENOMEM);
		if (ret != KVPD_LATER)
			return -ENOMEM;
		/* The tier's completion, still to come, carries the error. */
		kvpd_seq_slot(c, sqe->handle)->later_res = -ENOMEM;
		return ret;
	}
	sj->n = n;
	sj->copies = (struct kvc_copy *)(sj + 1);
	sj->src = (uint32_t *)(sj->copies + n);
	sj->dst = sj->src + n;
	memcpy(sj->copies, copies, n * sizeof(*copies));
	for (uint32_t i = 0; i < n; i++) {
		sj->src[i] = copies[i].src;
		sj->dst[i] = copies[i].dst;
	}
	sj->cqe = *cqe;
	sj->cqe.user_data = sqe->user_data;
	sj->cqe.flags |= KVP_CQE_F_SNAPSHOT;
	cqe->flags |= KVP_CQE_F_SNAPSHOT;
	sj->job = (struct kvpd_job){
		.type = KVPD_JOB_COPY, .client = c, .lane = &c->lane, .pool = c->pool,
		.layout = &c->pool->layout, .mem = c->pool->mem, .user_data = sqe->user_data,
		.handle = sqe->handle, .opcode = sqe->opcode, .start_ns = d->taken_ns,
		.bytes = (uint64_t)n * c->pool->layout.slot_bytes, .ntasks = n,
		.blocks = sj->src, .dsts = sj->dst, .alloc_bytes = bytes,
	};
	kvpd_client_job_out(c, bytes);
	c->pool->inflight++;
	d->jobs_inflight++;
	kvpd_workers_submit(d->workers, &sj->job);
	if (!hit) {
		kvpd_tier_owned_by(c->pool, c, sj->dst, n);
		kvpd_seq_slot(c, sqe->handle)->copying++;
		c->commits_copying++;
		return ret;
	}
	kvpd_seq_later(kvpd_seq_slot(c, sqe->handle));
	return KVPD_LATER;
}

void kvpd_snap_copies_done(struct kvpd *d, struct kvpd_job *job)
{
	struct snap_job *sj = (struct snap_job *)job;
	struct kvpd_client *c = job->client;
	int err = __atomic_load_n(&job->error, __ATOMIC_ACQUIRE);
	bool ok = !err && !job->cancelled;
	uint64_t ns = kvpd_now_ns() - job->start_ns;
	struct kvpd_seq_slot *slot;

	copies_end(job->pool->core, sj->copies, sj->n, ok);
	job->pool->inflight--;
	d->jobs_inflight--;
	kvpd_client_job_back(c, job->alloc_bytes);
	if (c->dead) {
		if (!c->inflight) {
			kvpd_stats_pool(d, job->pool, 0);
			kvpd_client_free(d, c);
		}
		free(sj);
		return;
	}
	if (err && job->why[0])
		kvpd_log(d, KVPD_LOG_WARNING, "client %u pool '%s': a window snapshot's copy failed "
			 "on its %s backend: %s", c->gen, job->pool->name, job->pool->backend->name,
			 job->why);
	KVPD_PROBE(snapshot_copy, c->gen, job->handle, sj->n, ns);
	slot = kvpd_seq_slot(c, job->handle);
	if (job->opcode == KVP_OP_COMMIT) {
		/*
		 * A made snapshot that failed is only not cached: the COMMIT stood.
		 * The entries on its sequence waited in the SQ: nothing closed it.
		 */
		if (slot)
			slot->copying--;
		c->commits_copying--;
		c->data_blocked = false; /* the entry that waited is taken next turn */
		kvpd_stats_pool(d, job->pool, c->gen);
	} else {
		struct kvp_cqe cqe = sj->cqe;

		if (err) {
			fail_hit(c, job->handle, err);
			cqe.res = err;
		}
		if (kvpd_seq_later_back(slot, &cqe)) {
			kvpd_stats_op(d, c, job->opcode, cqe.res, ns);
			kvpd_stats_pool(d, job->pool, c->gen);
			kvpd_stats_client(d, c);
			kvpd_ring_post(c, &cqe);
		}
	}
	free(sj);
}
