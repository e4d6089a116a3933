/* SPDX-License-Identifier: MIT */
/*
 * The requests room: what each ring entry asks, by opcode (dispatch.c), with
 * the requests that need more than a few lines in files of their own: the
 * STATS snapshot (stats.c), POOL_CREATE (pool_create.c) and POOL_MAP's
 * descriptors (pool_map.c). The data
 * path's requests go on to the data room.
 *
 * It may use every room below it: data, session, pools, tenants, observe,
 * loop, config, attn, the core and the shared headers.
 */
#ifndef KVPOOLD_REQUESTS_H
#define KVPOOLD_REQUESTS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "session/session.h"

/* The session's kvpd_dispatch_fn: false when the request went to the workers (completed later). */
bool kvpd_dispatch(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
		   struct kvp_cqe *cqe);

/* stats.c: what @reader may see of the daemon: its own uid's clients unless it is admin. */
int kvpd_stats(struct kvpd *d, const struct kvpd_client *reader, uint8_t *out, uint32_t out_len,
	       __u64 *needed);

/*
 * pool_create.c: POOL_CREATE, v1, v2 or v3 and its keys: KVPD_LATER once the
 * pool's build is under way (completed when it is there), or -errno with the
 * reason in the request's output.
 */
int kvpd_pool_create_request(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			     struct kvp_cqe *cqe);

/* pool_map.c: POOL_MAP: how many descriptors follow on the socket, or -errno and @why. */
int kvpd_pool_map(struct kvpd *d, struct kvpd_client *c, uint64_t tag, char *why,
		  size_t why_len);

#endif
