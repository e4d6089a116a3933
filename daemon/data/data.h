/* SPDX-License-Identifier: MIT */
/*
 * The data room: WRITE_KV, READ_KV and ATTEND (kvdata.c). On the event loop it
 * checks a request against its sequences (positions written or committed,
 * windows, geometry), maps and pins its blocks and hands a job to the workers;
 * when the job comes back it unpins, counts and posts the completion.
 *
 * It may use the session, pools, tenants, observe, loop and config rooms,
 * attn, the core and the shared headers.
 */
#ifndef KVPOOLD_DATA_H
#define KVPOOLD_DATA_H

#include "session/session.h"

/* 0 when the job is launched, else -errno (complete at once). */
int kvpd_kv_io(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe);
int kvpd_attend(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe);
/* The workers' finished jobs: unpinned, counted, their completions posted. */
void kvpd_jobs_complete(struct kvpd *d);

#endif
