/* SPDX-License-Identifier: MIT */
/*
 * KVP_OP_POOL_MAP: a pool's memory descriptors, passed on the client's socket
 * so that an engine runs its own kernels on the KV. Only a pool restricted to
 * one namespace is mapped, and only by that namespace's clients: a mapping
 * writes KV the daemon cannot check, so one namespace is one trust domain.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "requests/requests.h"

/*
 * Descriptor copies queued on the courier at once for one uid's clients (the
 * courier's key): each is one of the daemon's descriptors until sent. Enough
 * for one map of a 256 GiB cuda pool (1 GiB pieces); one map of any size goes
 * when none of its uid's is queued. Per uid, so that no uid's unread maps
 * make another's wait.
 */
#define MAP_COPIES_MAX 256

/*
 * Sends descriptors [0, n) of @fds in messages of at most KVPD_PARCEL_FDS, each
 * then closed. Returns the last message's courier seq.
 */
static uint64_t post_pieces(struct kvpd *d, struct kvpd_client *c, uint64_t tag, const int *fds,
			    unsigned n)
{
	uint64_t seq = 0;

	for (unsigned first = 0; first < n; first += KVPD_PARCEL_FDS) {
		struct kvpd_parcel p = KVPD_PARCEL_INIT;
		struct kvp_map_msg m = { .magic = KVP_MAP_MAGIC, .first = first,
					 .total = n, .tag = tag };

		_Static_assert(KVPD_PARCEL_FDS <= KVP_MAP_FDS_PER_MSG, "at most SCM_MAX_FD a message");
		_Static_assert(sizeof(m) <= KVPD_PARCEL_BYTES, "a map message fits a parcel");
		m.count = n - first < KVPD_PARCEL_FDS ? n - first : KVPD_PARCEL_FDS;
		p.sock = c->conn.sock;
		p.len = sizeof(m);
		memcpy(p.msg, &m, sizeof(m));
		memcpy(p.pass, fds + first, m.count * sizeof(int));
		memcpy(p.close, fds + first, m.count * sizeof(int));
		p.npass = p.nclose = m.count;
		p.counted = true;
		seq = kvpd_courier_post(&d->courier, c->conn.owner, &p);
	}
	return seq;
}

int kvpd_pool_map(struct kvpd *d, struct kvpd_client *c, uint64_t tag, char *why, size_t why_len)
{
	struct kvpd_pool *pool = c->pool;
	unsigned queued, pieces = pool->layout.num_pieces;
	int unread = 0, n;
	int *fds;

	if (!c->may_map)
		return kvpd_refuse(why, why_len, -EPERM,
				   "KVP_FEAT_POOL_MAP was not agreed at setup");
	if (!pool->layout.slot_bytes)
		return kvpd_refuse(why, why_len, -EOPNOTSUPP, "pool '%s' holds no KV (kv_heads 0)",
				   pool->name);
	if (!*pool->namespace_)
		return kvpd_refuse(why, why_len, -EPERM,
				   "pool '%s' is shared by all namespaces: only a pool restricted "
				   "to one namespace is mapped", pool->name);
	/* Attach refuses other namespaces already; the memory is worth checking twice. */
	if (strcmp(pool->namespace_, c->namespace_))
		return kvpd_refuse(why, why_len, -EPERM,
				   "pool '%s' is restricted to namespace '%s'", pool->name,
				   pool->namespace_);
	if (!pool->backend->export_fds)
		return kvpd_refuse(why, why_len, -EOPNOTSUPP,
				   "the %s backend's pools cannot be mapped", pool->backend->name);
	/*
	 * One POOL_MAP at a time, so that a client that never reads cannot pile up
	 * descriptors in flight: its last one's messages must be out of the
	 * courier, and read (what was sent on the socket and not read yet is
	 * charged to the daemon's side of it).
	 */
	if (!kvpd_courier_delivered(&d->courier, c->conn.owner, c->map_parcel) ||
	    (ioctl(c->conn.sock, SIOCOUTQ, &unread) == 0 && unread > 0))
		return kvpd_refuse(why, why_len, -EBUSY,
				   "the descriptors of an earlier POOL_MAP are still unread");
	queued = kvpd_courier_copies(&d->courier, c->conn.owner);
	if (queued && queued + pieces > MAP_COPIES_MAX)
		return kvpd_refuse(why, why_len, -EAGAIN,
				   "%u descriptors are queued to be sent: try again", queued);
	fds = calloc(pieces, sizeof(*fds));
	if (!fds)
		return kvpd_refuse(why, why_len, -ENOMEM, "out of memory");
	n = pool->backend->export_fds(&pool->layout, pool->mem, fds, pieces);
	if (n < 0) {
		free(fds);
		return kvpd_refuse(why, why_len, n, "pool '%s': its memory cannot be exported: %s",
				   pool->name, strerror(-n));
	}
	c->map_parcel = post_pieces(d, c, tag, fds, (unsigned)n);
	free(fds);
	pool->mapped = true;
	return n;
}
