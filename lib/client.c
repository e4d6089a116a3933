/* SPDX-License-Identifier: MIT */
/* libkvpool: connecting, the rings and the wake-up protocol (the client's side). */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"

static int recv_reply(int sock, struct kvp_setup_reply *r, int fds[KVP_NUM_FDS])
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVP_NUM_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = r, .iov_len = sizeof(*r) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);

	if (n < 0)
		return -errno;
	cm = CMSG_FIRSTHDR(&msg);
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
		size_t nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		/* The stats page's descriptor comes only when that feature was agreed. */
		if (nfds == KVP_FD_STATS || nfds == KVP_NUM_FDS)
			memcpy(fds, CMSG_DATA(cm), sizeof(int) * nfds);
		else
			for (size_t i = 0; i < nfds; i++)
				close(((int *)CMSG_DATA(cm))[i]);
	}
	if (n != (ssize_t)sizeof(*r) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return -EPROTO;
	return 0;
}

static int dial(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	return fd;
}

static int copy_name(char dst[KVP_NAME_MAX], const char *src)
{
	if (!src)
		src = "";
	if (strlen(src) >= KVP_NAME_MAX)
		return -ENAMETOOLONG;
	strcpy(dst, src);
	return 0;
}

static int map_rings(struct kvp_client *c, const struct kvp_setup_reply *r)
{
	uint8_t *m;

	if (r->arena_off > r->mmap_bytes || r->arena_bytes > r->mmap_bytes - r->arena_off)
		return -EPROTO;
	m = mmap(NULL, r->mmap_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->mem_fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	c->map = m;
	c->map_bytes = r->mmap_bytes;
	c->sq_head = (uint32_t *)(m + r->sq_off.head);
	c->sq_tail = (uint32_t *)(m + r->sq_off.tail);
	c->sq_flags = (uint32_t *)(m + r->sq_off.flags);
	c->sqes = (struct kvp_sqe *)(m + r->sq_off.sqes);
	c->cq_head = (uint32_t *)(m + r->cq_off.head);
	c->cq_tail = (uint32_t *)(m + r->cq_off.tail);
	c->cq_flags = (uint32_t *)(m + r->cq_off.flags);
	c->cqes = (struct kvp_cqe *)(m + r->cq_off.cqes);
	c->sq_entries = r->sq_entries;
	c->cq_entries = r->cq_entries;
	c->arena = m + r->arena_off;
	c->arena_bytes = r->arena_bytes;
	c->sq_local_tail = *c->sq_tail;
	c->features = r->features;
	c->pool = r->pool;
	return 0;
}

/* Read-only: the daemon sealed it F_SEAL_FUTURE_WRITE, a writable mapping would fail. */
static int map_stats(struct kvp_client *c, const struct kvp_setup_reply *r)
{
	void *m;

	if (c->stats_fd < 0 || !(r->features & KVP_FEAT_STATS_PAGE) ||
	    r->stats_bytes < sizeof(struct kvp_stats_page))
		return -EPROTO;
	m = mmap(NULL, r->stats_bytes, PROT_READ, MAP_SHARED, c->stats_fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	c->stats_map = m;
	c->stats_bytes = r->stats_bytes;
	return 0;
}

int kvp_connect(const struct kvp_connect_opts *opts, struct kvp_client **out)
{
	struct kvp_connect_opts defaults = { 0 };
	struct kvp_setup s = {
		.magic = KVP_MAGIC,
		.abi_version = KVP_ABI_VERSION,
		.features = KVP_FEAT_SPIN_WAKEUP,
	};
	struct kvp_setup_reply r;
	int fds[KVP_NUM_FDS] = { -1, -1, -1, -1 };
	struct kvp_client *c;
	const char *path;
	int ret;

	if (!opts)
		opts = &defaults;
	path = opts->socket_path ? opts->socket_path : getenv("KVPOOL_SOCKET");
	if (!path)
		path = KVP_DEFAULT_SOCKET;
	s.sq_entries = opts->sq_entries ? opts->sq_entries : 64;
	s.arena_bytes = opts->arena_bytes ? opts->arena_bytes : 1u << 20;
	if (opts->admin)
		s.features |= KVP_FEAT_ADMIN;
	if (opts->stats_page)
		s.features |= KVP_FEAT_STATS_PAGE;
	ret = copy_name(s.pool, opts->pool) ?: copy_name(s.namespace_, opts->namespace_);
	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->mem_fd = c->sq_efd = c->cq_efd = c->stats_fd = -1;
	c->spin_us = opts->spin_us;

	c->sock = dial(path);
	if (c->sock < 0) {
		ret = c->sock;
		goto err_free;
	}
	if (send(c->sock, &s, sizeof(s), MSG_NOSIGNAL) != (ssize_t)sizeof(s)) {
		ret = -errno;
		goto err_close;
	}
	ret = recv_reply(c->sock, &r, fds);
	c->mem_fd = fds[KVP_FD_MEM];
	c->sq_efd = fds[KVP_FD_SQ_DOORBELL];
	c->cq_efd = fds[KVP_FD_CQ_EVENT];
	c->stats_fd = fds[KVP_FD_STATS];
	if (!ret)
		ret = r.result;
	if (!ret && (c->mem_fd < 0 || c->sq_efd < 0 || c->cq_efd < 0))
		ret = -EPROTO;
	if (!ret && opts->admin && !(r.features & KVP_FEAT_ADMIN))
		ret = -EPERM;
	if (!ret)
		ret = map_rings(c, &r);
	if (!ret && opts->stats_page)
		ret = map_stats(c, &r);
	if (ret)
		goto err_close;
	*out = c;
	return 0;

err_close:
	kvp_close(c);
	return ret;
err_free:
	free(c);
	return ret;
}

void kvp_close(struct kvp_client *c)
{
	if (!c)
		return;
	if (c->map)
		munmap(c->map, c->map_bytes);
	if (c->stats_map)
		munmap(c->stats_map, c->stats_bytes);
	for (int *fd = &c->sock; fd <= &c->stats_fd; fd++)
		if (*fd >= 0)
			close(*fd);
	free(c);
}

int kvp_stats_snapshot(const struct kvp_client *c, void *buf, size_t bytes)
{
	const struct kvp_stats_page *page = c->stats_map;

	if (!page)
		return -ENODEV;
	if (bytes < c->stats_bytes)
		return -EOVERFLOW;
	for (int attempt = 0; attempt < 10000; attempt++) {
		uint32_t seq = __atomic_load_n(&page->seq, __ATOMIC_ACQUIRE);

		if (seq & 1) {
			kvp_cpu_relax();
			continue;
		}
		memcpy(buf, page, c->stats_bytes);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&page->seq, __ATOMIC_RELAXED) == seq)
			return (int)c->stats_bytes;
	}
	return -EAGAIN;
}

size_t kvp_stats_bytes(const struct kvp_client *c)
{
	return c->stats_map ? c->stats_bytes : 0;
}

const struct kvp_pool_info *kvp_pool_info(const struct kvp_client *c)
{
	return &c->pool;
}

uint64_t kvp_features(const struct kvp_client *c)
{
	return c->features;
}

void *kvp_arena(const struct kvp_client *c, uint64_t *bytes)
{
	if (bytes)
		*bytes = c->arena_bytes;
	return c->arena;
}

struct kvp_sqe *kvp_get_sqe(struct kvp_client *c)
{
	struct kvp_sqe *sqe;

	/* The daemon's SQ head is another cache line to pull: read it only when the SQ looks full. */
	if (c->sq_local_tail - c->sq_head_seen >= c->sq_entries) {
		c->sq_head_seen = __atomic_load_n(c->sq_head, __ATOMIC_ACQUIRE);
		if (c->sq_local_tail - c->sq_head_seen >= c->sq_entries)
			return NULL;
	}
	sqe = &c->sqes[c->sq_local_tail++ & (c->sq_entries - 1)];
	memset(sqe, 0, sizeof(*sqe));
	return sqe;
}

/* EAGAIN means the counter is saturated: the daemon has a wake-up pending anyway. */
static int ring_doorbell(struct kvp_client *c)
{
	uint64_t one = 1;

	if (write(c->sq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

int kvp_submit(struct kvp_client *c)
{
	uint32_t n = c->sq_local_tail - *c->sq_tail;

	if (n == 0)
		return 0;
	__atomic_store_n(c->sq_tail, c->sq_local_tail, __ATOMIC_RELEASE);
	/* Pairs with the daemon's fence between setting NEED_WAKEUP and re-checking the rings. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(c->sq_flags, __ATOMIC_RELAXED) & KVP_SQ_NEED_WAKEUP) {
		int ret = ring_doorbell(c);

		if (ret)
			return ret;
	}
	return (int)n;
}

int kvp_peek_cqe(struct kvp_client *c, struct kvp_cqe **cqe)
{
	uint32_t head = *c->cq_head;

	if (__atomic_load_n(c->cq_tail, __ATOMIC_ACQUIRE) == head)
		return -EAGAIN;
	*cqe = &c->cqes[head & (c->cq_entries - 1)];
	return 0;
}

static bool daemon_gone(struct kvp_client *c)
{
	char b;
	ssize_t n = recv(c->sock, &b, 1, MSG_DONTWAIT | MSG_PEEK);

	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Sleeps on the CQ eventfd or the socket (whose hang-up means the daemon died). */
static int sleep_for_cqe(struct kvp_client *c)
{
	struct pollfd pfd[2] = { { .fd = c->cq_efd, .events = POLLIN },
				 { .fd = c->sock, .events = POLLIN | POLLRDHUP } };
	uint64_t v;

	if (poll(pfd, 2, -1) < 0)
		return errno == EINTR ? 0 : -errno;
	if (pfd[0].revents & POLLIN && read(c->cq_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return -errno;
	if (pfd[1].revents && daemon_gone(c))
		return -ECONNRESET;
	return 0;
}

int kvp_wait_cqe(struct kvp_client *c, struct kvp_cqe **cqe)
{
	uint64_t deadline = 0;
	unsigned spins = 0;
	int ret;

	for (;;) {
		if (kvp_peek_cqe(c, cqe) == 0)
			return 0;
		/*
		 * Spinning only pays while the daemon spins too: once it sleeps
		 * (too many spinners for the cores), a spinning client only takes
		 * the core it needs to wake up on.
		 */
		if (c->spin_us && !(__atomic_load_n(c->sq_flags, __ATOMIC_RELAXED) & KVP_SQ_NEED_WAKEUP)) {
			uint64_t now = kvp_now_ns();

			if (!deadline)
				deadline = now + c->spin_us * 1000ull;
			if (now < deadline) {
				/* Never hold a shared core for a time slice: see the daemon's loop. */
				if (++spins % 32 == 0)
					sched_yield();
				else
					kvp_cpu_relax();
				continue;
			}
		}
		__atomic_store_n(c->cq_flags, KVP_CQ_NEED_WAKEUP, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (kvp_peek_cqe(c, cqe) == 0)
			ret = 0;
		else
			ret = sleep_for_cqe(c) ?: 1;
		__atomic_store_n(c->cq_flags, 0, __ATOMIC_RELAXED);
		if (ret <= 0)
			return ret;
	}
}

void kvp_cqe_seen(struct kvp_client *c, struct kvp_cqe *cqe)
{
	(void)cqe;
	__atomic_store_n(c->cq_head, *c->cq_head + 1, __ATOMIC_RELEASE);
	/*
	 * Entries the daemon left in the SQ for want of CQ room wait for this
	 * reap: if it sleeps, wake it (the fence pairs with its own between
	 * setting NEED_WAKEUP and re-checking our CQ head).
	 */
	if (__atomic_load_n(c->sq_head, __ATOMIC_ACQUIRE) != *c->sq_tail) {
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(c->sq_flags, __ATOMIC_RELAXED) & KVP_SQ_NEED_WAKEUP)
			ring_doorbell(c);
	}
}
