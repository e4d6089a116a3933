/* SPDX-License-Identifier: MIT */
/* libkvpool: connecting, the rings and the wake-up protocol (the client's side). */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"

#define DEFAULT_TIMEOUT_MS 30000

/* Programs built before .monitor pass the same struct: it took padding, nothing moved. */
#if __SIZEOF_POINTER__ == 8
_Static_assert(sizeof(struct kvp_connect_opts) == 72 &&
	       offsetof(struct kvp_connect_opts, pool_map) == 52 &&
	       offsetof(struct kvp_connect_opts, monitor) == 53 &&
	       offsetof(struct kvp_connect_opts, why) == 56, "kvp_connect_opts layout");
#endif

/* A sleeping wait looks at the socket this often: a dead daemon's hang-up is seen this fast. */
#define HANGUP_CHECK_NS (25ull * 1000000ull)

/* What poll(2) takes: at most INT_MAX, whatever timeout_ms asked for. */
static int ms_left(uint64_t deadline)
{
	uint64_t now = kvp_now_ns(), ms;

	if (now >= deadline)
		return 0;
	ms = (deadline - now + 999999) / 1000000;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Waits until @fd is readable, at most until @deadline: -ETIMEDOUT after. */
int kvp_wait_readable(int fd, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = ms_left(deadline), n;

		if (!left)
			return -ETIMEDOUT;
		n = poll(&p, 1, left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

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
	ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	/*
	 * A daemon that refuses us answers and hangs up, perhaps before our
	 * setup message reached it: that unread message makes the kernel report
	 * ECONNRESET once, ahead of the reply still queued for us.
	 */
	if (n < 0 && errno == ECONNRESET)
		n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
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

/*
 * A non-blocking connect: a daemon whose accept backlog is full (stopped, or
 * swamped) answers EAGAIN, and a Unix socket offers nothing to wait on for
 * room, so it is retried with a growing pause until @deadline.
 */
static int dial(const char *path, uint64_t deadline)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	useconds_t pause_us = 1000;
	int fd, ret;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		if (ret != -EAGAIN && ret != -EINTR)
			goto err_close;
		if (!ms_left(deadline)) {
			ret = -ETIMEDOUT;
			goto err_close;
		}
		usleep(pause_us);
		if (pause_us < 20000)
			pause_us *= 2;
	}
	return fd;

err_close:
	close(fd);
	return ret;
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

static int map_rings(struct kvp_client *c, const struct kvp_setup_reply *r, int mem_fd)
{
	uint8_t *m;

	if (mem_fd < 0 || r->arena_off > r->mmap_bytes ||
	    r->arena_bytes > r->mmap_bytes - r->arena_off)
		return -EPROTO;
	m = mmap(NULL, r->mmap_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem_fd, 0);
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
	c->daemon_version = r->version;
	c->boot_id = r->boot_id;
	c->pool = r->pool;
	c->pool_generation = r->pool_generation;
	return 0;
}

/* Read-only: the daemon sealed it F_SEAL_FUTURE_WRITE, a writable mapping would fail. */
static int map_stats(struct kvp_client *c, const struct kvp_setup_reply *r, int stats_fd)
{
	void *m;

	if (stats_fd < 0 || !(r->features & KVP_FEAT_STATS_PAGE) ||
	    r->stats_bytes < sizeof(struct kvp_stats_page))
		return -EPROTO;
	m = mmap(NULL, r->stats_bytes, PROT_READ, MAP_SHARED, stats_fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	c->stats_map = m;
	c->stats_bytes = r->stats_bytes;
	return 0;
}

/*
 * A refusal's reason: the message after the reply, sent before the daemon
 * hangs up, so waiting for it ends by @deadline at the latest.
 */
static void recv_reason(int sock, uint64_t deadline, char *why, size_t why_len)
{
	char text[KVP_REASON_MAX];
	ssize_t n;

	if (!why || !why_len || kvp_wait_readable(sock, deadline))
		return;
	n = recv(sock, text, sizeof(text) - 1, MSG_DONTWAIT);
	if (n <= 0)
		return;
	text[n] = '\0';
	snprintf(why, why_len, "%s", text);
}

/* Which daemon refused us for its ABI (one before 0.2.0 sends no release, one of ABI 1 no ABI). */
static void print_abi_mismatch(const struct kvp_setup_reply *r)
{
	char release[32] = "";

	if (r->version)
		snprintf(release, sizeof(release), " %u.%u.%u", r->version >> 16,
			 r->version >> 8 & 0xff, r->version & 0xff);
	fprintf(stderr, "libkvpool: kvpoold%s speaks ABI %u, libkvpool %s ABI %u\n", release,
		r->abi_version ? r->abi_version : 1, KVPOOL_VERSION, KVP_ABI_VERSION);
}

/* The setup exchange on a connected socket, all before @deadline. */
static int handshake(struct kvp_client *c, const struct kvp_setup *s,
		     const struct kvp_connect_opts *opts, uint64_t deadline)
{
	bool admin = opts->admin, stats_page = opts->stats_page;
	struct kvp_setup_reply r;
	int fds[KVP_NUM_FDS] = { -1, -1, -1 };
	int ret;

	/* A fresh connection's send buffer is empty: this never has to wait. */
	if (send(c->sock, s, sizeof(*s), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(*s)) {
		ret = -errno;
		/*
		 * A daemon that turns a connection away (-EUSERS) answers at
		 * once and hangs up: its reply is queued here, and says why.
		 */
		if ((ret != -EPIPE && ret != -ECONNRESET) || recv_reply(c->sock, &r, fds))
			return ret;
		ret = 0;
	} else {
		ret = kvp_wait_readable(c->sock, deadline) ?: recv_reply(c->sock, &r, fds);
	}
	if (!ret) {
		ret = r.result;
		if (ret < 0)
			recv_reason(c->sock, deadline, opts->why, opts->why_len);
	}

	if (ret == -EPROTO && r.abi_version != KVP_ABI_VERSION)
		print_abi_mismatch(&r);
	if (!ret && admin && !(r.features & KVP_FEAT_ADMIN))
		ret = -EPERM;
	if (!ret && fds[KVP_FD_DOORBELL] < 0)
		ret = -EPROTO;
	if (!ret)
		ret = map_rings(c, &r, fds[KVP_FD_MEM]);
	if (!ret && stats_page)
		ret = map_stats(c, &r, fds[KVP_FD_STATS]);
	if (!ret) {
		c->bell = fds[KVP_FD_DOORBELL];
		fds[KVP_FD_DOORBELL] = -1;
	}
	/* The mappings hold the memory: the other descriptors are not needed any more. */
	for (unsigned i = 0; i < KVP_NUM_FDS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return ret;
}

int kvp_connect(const struct kvp_connect_opts *opts, struct kvp_client **out)
{
	struct kvp_connect_opts defaults = { 0 };
	struct kvp_setup s = {
		.magic = KVP_MAGIC,
		.abi_version = KVP_ABI_VERSION,
		.features = KVP_FEAT_SPIN_WAKEUP,
	};
	struct kvp_client *c;
	uint64_t deadline;
	const char *path;
	int ret;

	if (!opts)
		opts = &defaults;
	if (opts->why && opts->why_len)
		*opts->why = '\0';
	path = opts->socket_path ? opts->socket_path : getenv("KVPOOL_SOCKET");
	if (!path)
		path = KVP_DEFAULT_SOCKET;
	s.sq_entries = opts->sq_entries ? opts->sq_entries : 64;
	s.arena_bytes = opts->arena_bytes ? opts->arena_bytes : 1u << 20;
	if (opts->admin)
		s.features |= KVP_FEAT_ADMIN | KVP_FEAT_POOL_KEYS;
	if (opts->stats_page)
		s.features |= KVP_FEAT_STATS_PAGE;
	if (opts->pool_map)
		s.features |= KVP_FEAT_POOL_MAP;
	if (opts->monitor)
		s.features |= KVP_FEAT_MONITOR;
	ret = copy_name(s.pool, opts->pool) ?: copy_name(s.namespace_, opts->namespace_);
	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->bell = -1;
	c->spin_us = opts->spin_us;
	c->timeout_ns = (opts->timeout_ms ? opts->timeout_ms : DEFAULT_TIMEOUT_MS) * 1000000ull;
	deadline = kvp_now_ns() + c->timeout_ns;

	c->sock = dial(path, deadline);
	if (c->sock < 0) {
		ret = c->sock;
		free(c);
		return ret;
	}
	ret = handshake(c, &s, opts, deadline);
	if (ret) {
		kvp_close(c);
		return ret;
	}
	*out = c;
	return 0;
}

void kvp_close(struct kvp_client *c)
{
	if (!c)
		return;
	if (c->map)
		munmap(c->map, c->map_bytes);
	if (c->stats_map)
		munmap(c->stats_map, c->stats_bytes);
	if (c->sock >= 0)
		close(c->sock);
	if (c->bell >= 0)
		close(c->bell);
	free(c);
}

#define KVP_STATS_WAIT_NS (5ull * 1000000000ull)

/* The daemon closed its end: it is gone, and its page's numbers are its last. */
static bool daemon_hung_up(const struct kvp_client *c)
{
	struct pollfd hup = { .fd = c->sock, .events = POLLRDHUP };

	return poll(&hup, 1, 0) > 0 && (hup.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

int kvp_stats_snapshot(const struct kvp_client *c, void *buf, size_t bytes)
{
	const struct kvp_stats_page *page = c->stats_map;
	uint64_t deadline = 0;

	if (!page)
		return -ENODEV;
	if (bytes < c->stats_bytes)
		return -EOVERFLOW;
	/* The page outlives its daemon: a dead one's last numbers are not a snapshot. */
	if (c->broken)
		return c->broken;
	if (daemon_hung_up(c))
		return -ECONNRESET;
	/*
	 * The daemon writes it in short brackets, but one slow request can hold
	 * one a few milliseconds, and a loop kept busy by a hostile client kept
	 * readers out for 2.5 s in a test: spin a little, then retry every 10 us
	 * for up to 5 s. A daemon killed inside a bracket leaves it open for
	 * good: its hang-up ends the wait.
	 */
	for (unsigned attempt = 0;; attempt++) {
		uint32_t seq = __atomic_load_n(&page->seq, __ATOMIC_ACQUIRE);
		uint64_t now;

		if (!(seq & 1)) {
			memcpy(buf, page, c->stats_bytes);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(&page->seq, __ATOMIC_RELAXED) == seq)
				return (int)c->stats_bytes;
		}
		if (attempt < 1000) {
			kvp_cpu_relax();
			continue;
		}
		if (daemon_hung_up(c))
			return -ECONNRESET;
		now = kvp_now_ns();
		if (!deadline)
			deadline = now + KVP_STATS_WAIT_NS;
		else if (now > deadline)
			return -EAGAIN;
		usleep(10);
	}
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

uint64_t kvp_boot_id(const struct kvp_client *c)
{
	return c->boot_id;
}

uint64_t kvp_pool_generation(const struct kvp_client *c)
{
	return c->pool_generation;
}

uint32_t kvp_daemon_version(const struct kvp_client *c)
{
	return c->daemon_version;
}

const char *kvp_version(void)
{
	return KVPOOL_VERSION;
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

	if (c->broken)
		return NULL;
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

/* The daemon is gone: every later call says so. */
static int daemon_gone(struct kvp_client *c)
{
	c->broken = -ECONNRESET;
	return -ECONNRESET;
}

/*
 * The doorbell. The daemon never reads it, so it never blocks; EAGAIN would
 * mean its counter is full, which only a client writing huge values reaches.
 */
static int ring_doorbell(struct kvp_client *c)
{
	uint64_t one = 1;

	if (write(c->bell, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

int kvp_submit(struct kvp_client *c)
{
	uint32_t n;

	if (c->broken)
		return c->broken;
	n = c->sq_local_tail - *c->sq_tail;
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
	for (;;) {
		uint32_t head = *c->cq_head;

		if (c->broken)
			return c->broken;
		if (__atomic_load_n(c->cq_tail, __ATOMIC_ACQUIRE) == head)
			return -EAGAIN;
		*cqe = &c->cqes[head & (c->cq_entries - 1)];
		if (!c->tickets_out || !kvp_ticket_reap(c, *cqe))
			return 0;
	}
}

/* The socket's end of file (or an error) means the daemon is gone; it sends nothing after setup. */
static bool socket_hung_up(struct kvp_client *c)
{
	char b;
	ssize_t n = recv(c->sock, &b, 1, MSG_DONTWAIT | MSG_PEEK);

	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/*
 * Sleeps in FUTEX_WAIT on the CQ tail while it still reads @tail, at most
 * @ns. The daemon wakes the word when it posts a completion and sees our
 * KVP_CQ_NEED_WAKEUP.
 */
static void sleep_on_cq(struct kvp_client *c, uint32_t tail, uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
			       .tv_nsec = (long)(ns % 1000000000ull) };

	syscall(SYS_futex, c->cq_tail, FUTEX_WAIT, tail, &ts, NULL, 0);
}

/*
 * Spin (while the daemon spins too), then sleep on the futex in slices of
 * HANGUP_CHECK_NS, looking at the socket between them: nothing the daemon
 * could be made to wait on, and its death is noticed within a slice.
 */
int kvp_wait_cqe_until(struct kvp_client *c, struct kvp_cqe **cqe, uint64_t deadline,
		       bool for_lookup)
{
	uint64_t start, now, reaped = c->tickets_reaped;
	unsigned spins = 0;
	int ret;

	/* Batches find their completions there: no clock read for them. */
	ret = kvp_peek_cqe(c, cqe);
	if (ret != -EAGAIN || (for_lookup && c->tickets_reaped != reaped))
		return ret;
	start = kvp_now_ns();
	/*
	 * Spinning only pays while the daemon spins too: once it sleeps (too many
	 * spinners for the cores), a spinning client only takes the core it needs
	 * to wake up on.
	 */
	while (c->spin_us && !(__atomic_load_n(c->sq_flags, __ATOMIC_RELAXED) & KVP_SQ_NEED_WAKEUP) &&
	       kvp_now_ns() - start < c->spin_us * 1000ull) {
		ret = kvp_peek_cqe(c, cqe);
		if (ret != -EAGAIN || (for_lookup && c->tickets_reaped != reaped))
			return ret;
		/* Never hold a shared core for a time slice: see the daemon's loop. */
		if (++spins % 32 == 0)
			sched_yield();
		else
			kvp_cpu_relax();
	}
	__atomic_store_n(c->cq_flags, KVP_CQ_NEED_WAKEUP, __ATOMIC_RELAXED);
	for (;;) {
		/* Pairs with the daemon's fence between publishing its tail and reading our flag. */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		ret = kvp_peek_cqe(c, cqe);
		if (ret != -EAGAIN || (for_lookup && c->tickets_reaped != reaped))
			break;
		now = kvp_now_ns();
		if (now >= deadline) {
			/*
			 * A request's completion may still land where the next
			 * call would stage its data; a lookup stages nothing.
			 */
			if (!for_lookup)
				c->broken = -ENOTCONN;
			ret = -ETIMEDOUT;
			break;
		}
		sleep_on_cq(c, *c->cq_head, deadline - now < HANGUP_CHECK_NS ? deadline - now :
								     HANGUP_CHECK_NS);
		if (kvp_peek_cqe(c, cqe) == -EAGAIN && !(for_lookup && c->tickets_reaped != reaped) &&
		    socket_hung_up(c)) {
			ret = daemon_gone(c);
			break;
		}
	}
	__atomic_store_n(c->cq_flags, 0, __ATOMIC_RELAXED);
	return ret;
}

int kvp_wait_cqe(struct kvp_client *c, struct kvp_cqe **cqe)
{
	return kvp_wait_cqe_until(c, cqe, kvp_now_ns() + c->timeout_ns, false);
}

void kvp_cqe_seen(struct kvp_client *c, struct kvp_cqe *cqe)
{
	uint32_t head, unreaped;

	(void)cqe;
	if (c->broken)
		return;
	head = *c->cq_head;
	/* Requests submitted and not yet reaped, this one included: each has one completion. */
	unreaped = *c->sq_tail - head;
	__atomic_store_n(c->cq_head, head + 1, __ATOMIC_RELEASE);
	/*
	 * Entries the daemon left in the SQ for want of CQ room wait for this
	 * reap: if it sleeps, wake it (the fence pairs with its own between
	 * setting NEED_WAKEUP and re-checking our CQ head). It stops taking
	 * entries only with the CQ full, so with no more requests out than the
	 * CQ holds none was left: the SQ head, a line the daemon has just
	 * written, is then not read (a cross-core miss on every round trip).
	 */
	if (unreaped > c->cq_entries && __atomic_load_n(c->sq_head, __ATOMIC_ACQUIRE) != *c->sq_tail) {
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(c->sq_flags, __ATOMIC_RELAXED) & KVP_SQ_NEED_WAKEUP)
			ring_doorbell(c);
	}
}
