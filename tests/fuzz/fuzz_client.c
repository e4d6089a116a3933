/* SPDX-License-Identifier: MIT */
/*
 * fuzz_session's clients, from the client's side (fuzz_daemon.h): connect
 * through a socketpair and the real handshake, read the reply and map the
 * memfd as a client process would, check what the daemon promises in its
 * reply and completions, and hang up.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_daemon.h"

struct kvpd_client *fz_client_of(struct kvpd *d, const struct fz_client *fc)
{
	struct kvpd_client *c;

	if (!fc->gen)
		return NULL;
	c = kvpd_client_lookup(d, (uint64_t)fc->slot << 8 | (uint64_t)fc->gen << 32);
	return c && c->ready ? c : NULL;
}

/* What a setup reply's pool_generation must be: its pool's, 0 refused or attached to none. */
static uint64_t generation_of(struct kvpd *d, const struct fz_client *fc,
			      const struct kvp_setup_reply *r)
{
	struct kvpd_client *c = r->result ? NULL : fz_client_of(d, fc);

	return c && c->pool ? c->pool->generation : 0;
}

/*
 * The connection's credentials are the harness's own; another uid's
 * connection is modelled by moving the client to that uid's tenant, as
 * kvpd_client_accept would have put it. False: that uid is at max_clients.
 */
static bool impersonate(struct kvpd *d, struct kvpd_client *c, uid_t uid)
{
	struct kvpd_tenant *t = kvpd_tenant_get(d, KVP_TENANT_UID, uid, NULL);

	if (!t)
		fz_fail("out of memory");
	if (kvpd_tenant_take(t, KVP_QUOTA_CLIENTS, 1)) {
		kvpd_tenant_put(d, t);
		return false;
	}
	c->tenant[0]->used[KVP_QUOTA_CLIENTS]--;
	kvpd_tenant_put(d, c->tenant[0]);
	c->tenant[0] = t;
	c->uid = uid;
	return true;
}

/* [off, off + len) inside the mapping, or fail: the reply's offsets are the daemon's promise. */
static void *at(struct fz_client *fc, uint64_t off, uint64_t len)
{
	if (off > fc->map_bytes || len > fc->map_bytes - off)
		fz_fail("setup reply: [%llu, +%llu) outside its %zu-byte memfd",
			(unsigned long long)off, (unsigned long long)len, fc->map_bytes);
	return fc->map + off;
}

static void map_reply(struct fz_client *fc, const struct kvp_setup_reply *r, int memfd)
{
	if (r->mmap_bytes == 0 || r->mmap_bytes > (4ull << 30))
		fz_fail("setup reply: mmap_bytes %llu", (unsigned long long)r->mmap_bytes);
	fc->map_bytes = r->mmap_bytes;
	fc->map = mmap(NULL, fc->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (fc->map == MAP_FAILED)
		fz_fail("mmap of the client memfd: %s", strerror(errno));
	fc->sq_entries = r->sq_entries;
	fc->cq_entries = r->cq_entries;
	fc->sq_head = at(fc, r->sq_off.head, 4);
	fc->sq_tail = at(fc, r->sq_off.tail, 4);
	fc->sq_flags = at(fc, r->sq_off.flags, 4);
	fc->cq_head = at(fc, r->cq_off.head, 4);
	fc->cq_tail = at(fc, r->cq_off.tail, 4);
	fc->cq_flags = at(fc, r->cq_off.flags, 4);
	fc->sqes = at(fc, r->sq_off.sqes, (uint64_t)r->sq_entries * sizeof(struct kvp_sqe));
	fc->cqes = at(fc, r->cq_off.cqes, (uint64_t)r->cq_entries * sizeof(struct kvp_cqe));
	fc->arena = at(fc, r->arena_off, r->arena_bytes);
	fc->arena_bytes = r->arena_bytes;
	if (*(uint32_t *)at(fc, r->sq_off.entries, 4) != r->sq_entries ||
	    *(uint32_t *)at(fc, r->cq_off.entries, 4) != r->cq_entries)
		fz_fail("setup reply: ring sizes differ from the memfd's");
	fc->connected = true;
}

/* The reply, as a client reads it: result, descriptors, the memfd mapped. */
static void read_reply(struct kvpd *d, struct fz_client *fc, const struct kvp_setup *s)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVP_NUM_FDS)];
		struct cmsghdr align;
	} ctl;
	struct kvp_setup_reply r;
	struct iovec iov = { .iov_base = &r, .iov_len = sizeof(r) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	int fds[KVP_NUM_FDS], nfds = 0;
	ssize_t n = recvmsg(fc->sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); n >= 0 && cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		memcpy(fds, CMSG_DATA(cm), (size_t)nfds * sizeof(int));
	}
	if (n != (ssize_t)sizeof(r)) {
		/* No reply only when the setup never came: then the session is gone. */
		if (fz_client_of(d, fc))
			fz_fail("a client is set up but got no reply (%zd)", n);
	} else if (r.abi_version != KVP_ABI_VERSION || r.version != KVPOOL_VERSION_CODE ||
		   r.boot_id != d->boot_id || r.pool_generation != generation_of(d, fc, &r)) {
		fz_fail("setup reply: abi %u, version %#x, boot id %#llx (the daemon's %#llx), "
			"pool generation %#llx (its pool's %#llx)", r.abi_version, r.version,
			(unsigned long long)r.boot_id, (unsigned long long)d->boot_id,
			(unsigned long long)r.pool_generation,
			(unsigned long long)generation_of(d, fc, &r));
	} else if (r.result) {
		if (nfds || fz_client_of(d, fc))
			fz_fail("refused (%d) but %d descriptors came, or the client stays", r.result, nfds);
	} else {
		if (nfds < KVP_FD_STATS || (r.features & ~s->features))
			fz_fail("accepted with %d descriptors, features %#llx of %#llx", nfds,
				(unsigned long long)r.features, (unsigned long long)s->features);
		fc->admin = r.features & KVP_FEAT_ADMIN;
		map_reply(fc, &r, fds[KVP_FD_MEM]);
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
}

void fz_connect(struct kvpd *d, struct fz_client *fc, const struct kvp_setup *s, size_t len,
		uid_t uid, bool hup)
{
	struct kvpd_client *c;
	unsigned slot;
	int sv[2];

	memset(fc, 0, sizeof(*fc));
	fc->sock = -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		fz_fail("socketpair: %s", strerror(errno));
	fc->sock = sv[0];
	/* The loop accepts with SOCK_NONBLOCK: the daemon's end never blocks. */
	if (fcntl(sv[1], F_SETFL, O_NONBLOCK))
		fz_fail("fcntl: %s", strerror(errno));
	for (slot = 0; slot < d->cfg.max_clients && d->clients[slot]; slot++)
		;
	if (kvpd_client_accept(d, sv[1]))
		return; /* refused: its end is closed */
	c = d->clients[slot];
	fc->slot = slot;
	fc->gen = c->gen;
	if (uid != c->uid && !impersonate(d, c, uid)) {
		kvpd_client_close(d, c, "its uid has max_clients connections");
		fc->gen = 0;
		return;
	}
	if (send(fc->sock, s, len, MSG_DONTWAIT) != (ssize_t)len)
		fz_fail("send: %s", strerror(errno));
	kvpd_client_event(d, c, POLLIN | (hup ? POLLHUP : 0));
	read_reply(d, fc, s);
}

void fz_hangup(struct kvpd *d, struct fz_client *fc)
{
	struct kvpd_client *c = fz_client_of(d, fc);

	if (c)
		kvpd_client_event(d, c, POLLHUP);
	if (fc->map)
		munmap(fc->map, fc->map_bytes);
	if (fc->sock >= 0)
		close(fc->sock);
	memset(fc, 0, sizeof(*fc));
	fc->sock = -1;
}

#define UD_TAG 0xf2ull /* user_data of the harness's SQEs: tag << 56 | opcode << 32 | n */

void fz_scan_cqes(struct fz_client *fc)
{
	uint32_t tail = __atomic_load_n(fc->cq_tail, __ATOMIC_ACQUIRE);

	/* Flow control: the daemon never has more completions out than the CQ holds. */
	if (!fc->hostile && tail - fc->cq_local > fc->cq_entries)
		fz_fail("CQ overflow: tail %u, head %u, %u entries", tail, fc->cq_local,
			fc->cq_entries);
	if (tail - fc->cq_scanned > fc->cq_entries)
		fc->cq_scanned = tail - fc->cq_entries;
	for (; fc->cq_scanned != tail; fc->cq_scanned++) {
		const struct kvp_cqe *cqe = &fc->cqes[fc->cq_scanned & (fc->cq_entries - 1)];

		if (fz_verbose)
			fprintf(stderr, "fuzz: client %u: cqe op %llu #%llu res %d aux %llu flags %u\n",
				fc->gen, cqe->user_data >> 32 & 0xff, cqe->user_data & 0xffffffff,
				cqe->res, (unsigned long long)cqe->aux, cqe->flags);
		if (cqe->resv || (cqe->flags & ~KVP_CQE_F_OVERFLOW))
			fz_fail("CQE: reserved %llu, flags %#x", (unsigned long long)cqe->resv,
				cqe->flags);
		if (cqe->user_data >> 56 == UD_TAG && (cqe->user_data >> 32 & 0xff) == KVP_OP_SEQ_OPEN &&
		    cqe->res == 0)
			fc->handles[fc->nhandles++ % 16] = cqe->aux;
	}
}
