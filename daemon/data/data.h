/* SPDX-License-Identifier: MIT */
/*
 * The data room: WRITE_KV, READ_KV and ATTEND (kvdata.c). On the event loop it
 * checks a request against its sequences (positions written or committed,
 * windows, geometry), maps and pins its blocks and hands a job to the workers;
 * when the job comes back it unpins, counts and posts the completion. Pools
 * are built by the workers too (pool_build.c).
 *
 * It may use the session, pools, tenants, observe, loop and config rooms,
 * attn, the core and the shared headers.
 */
#ifndef KVPOOLD_DATA_H
#define KVPOOLD_DATA_H

#include "tier/tier.h"

/* 0 when the job is launched, else -errno (complete at once). */
int kvpd_kv_io(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe);
int kvpd_attend(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe);
/*
 * snapcopy.c: the window-snapshot copies the core asked for in the ALLOC or
 * COMMIT @sqe just made (kvc_pool_copies), with @ret what the request returns
 * so far (0, KVPD_LATER, or -errno: copies ended unmade). KVPD_LATER when a
 * job copies them (its completion then waits for it), else @ret.
 */
int kvpd_snap_copies(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
		     struct kvp_cqe *cqe, int ret);
/* Its job is back (kvpd_jobs_complete): the copies ended, the request completed when last. */
void kvpd_snap_copies_done(struct kvpd *d, struct kvpd_job *job);
/* The workers' finished jobs: unpinned, counted, their completions posted. */
void kvpd_jobs_complete(struct kvpd *d);

/*
 * pool_build.c: a prepared pool (pools.h) built on a worker. From POOL_CREATE
 * of @c (@sqe: its reason buffer), completed to it; from a reload (@c NULL),
 * logged. 0, or -ENOMEM with nothing started (the caller discards the pool).
 */
int kvpd_pool_build_start(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			  struct kvpd_pool *pool);
/* Its job is back (kvpd_jobs_complete): the pool installed or discarded, the request completed. */
void kvpd_pool_build_done(struct kvpd *d, struct kvpd_job *job);

#endif
