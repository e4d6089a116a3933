/* SPDX-License-Identifier: MIT */
/*
 * Client sessions: accept, the setup handshake (rings in a sealed memfd and
 * the doorbell eventfd, sent by SCM_RIGHTS), attach to a pool, and teardown.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "observe/probes.h"
#include "session/session.h"
#include "session/sizes.h"

/* Ring indices each get a cache line: the two sides write different ones. */
enum {
	OFF_SQ_HEAD = 0, OFF_SQ_TAIL = 64, OFF_SQ_FLAGS = 128, OFF_SQ_ENTRIES = 192,
	OFF_CQ_HEAD = 256, OFF_CQ_TAIL = 320, OFF_CQ_FLAGS = 384, OFF_CQ_ENTRIES = 448,
	OFF_SQES = 4096,
};

static uint64_t page_align(uint64_t v)
{
	return (v + 4095) & ~4095ull;
}

static bool is_pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

/* Messages a refused client may have queued that are taken off before the reply. */
#define REFUSAL_DRAIN 16
/* The last slots of --max-clients, kept for root and the daemon's uid. */
#define RESERVED_SLOTS 4

/*
 * A connection turned away at once: the reply says how (-EUSERS), the message
 * after it why; the client reads them after it sends its setup. The courier
 * sends them and hangs up.
 */
static void refuse(struct kvpd *d, int fd, uint64_t owner, int err, const char *why)
{
	struct kvp_setup_reply r = { .result = err, .abi_version = KVP_ABI_VERSION,
				     .version = KVPOOL_VERSION_CODE };
	struct kvpd_parcel p = KVPD_PARCEL_INIT;

	kvpd_log(d, KVPD_LOG_INFO, "refusing a connection: %s", why);
	p.sock = fd;
	p.len = sizeof(r);
	memcpy(p.msg, &r, sizeof(r));
	kvpd_parcel_why(&p, why);
	p.drain = REFUSAL_DRAIN;
	p.close[p.nclose++] = fd;
	kvpd_courier_post(&d->courier, owner, &p);
}

/*
 * Called when full. A daemon that was stopped or busy accepts its backlog in
 * one go, and most of it may be connections whose peers gave up: their
 * hang-ups are events the loop has not seen yet. They give their slots back
 * before a live connection is turned away.
 */
static void reclaim_hung_up(struct kvpd *d)
{
	for (unsigned slot = 0; slot < d->cfg.max_clients; slot++) {
		struct kvpd_client *c = d->clients[slot];
		char byte;

		if (c && !c->ready && recv(c->conn.sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
			kvpd_client_close(d, c, "hung up before its setup");
	}
}

int kvpd_client_accept(struct kvpd *d, int fd)
{
	unsigned reserved = d->cfg.max_clients > RESERVED_SLOTS ? RESERVED_SLOTS : 0;
	struct kvpd_tenant *tenant;
	struct kvpd_client *c;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	bool privileged;
	unsigned slot;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) {
		refuse(d, fd, KVPD_COURIER_ANON, -errno, strerror(errno));
		return -EPROTO;
	}
	privileged = cred.uid == 0 || cred.uid == geteuid();
	if (d->nclients >= d->cfg.max_clients - (privileged ? 0 : reserved))
		reclaim_hung_up(d);
	if (d->nclients >= d->cfg.max_clients ||
	    (!privileged && d->nclients >= d->cfg.max_clients - reserved)) {
		refuse(d, fd, cred.uid, -EUSERS,
		       d->nclients >= d->cfg.max_clients ? "too many clients" :
		       "the last slots are kept for root and the daemon's uid");
		return -EUSERS;
	}
	/* Counted from accept: a connection that never sets up holds its uid's slot too. */
	tenant = kvpd_tenant_get(d, KVP_TENANT_UID, cred.uid, NULL);
	if (!tenant) {
		refuse(d, fd, cred.uid, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	if (kvpd_tenant_take(tenant, KVP_QUOTA_CLIENTS, 1) &&
	    (reclaim_hung_up(d), kvpd_tenant_take(tenant, KVP_QUOTA_CLIENTS, 1))) {
		kvpd_tenant_put(d, tenant);
		refuse(d, fd, cred.uid, -EUSERS, "its uid has max_clients connections");
		return -EUSERS;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		tenant->used[KVP_QUOTA_CLIENTS]--;
		kvpd_tenant_put(d, tenant);
		refuse(d, fd, cred.uid, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	for (slot = 0; d->clients[slot]; slot++)
		;
	c->slot = slot;
	c->gen = (uint32_t)++d->client_gen;
	c->conn.key = (uint64_t)slot << 8 | (uint64_t)c->gen << 32;
	c->conn.sock = fd;
	c->conn.owner = cred.uid;
	c->conn.bell = c->mem_fd = c->bell_efd = c->stats_fd = -1;
	c->charge.inflight = &c->inflight;
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->tenant[0] = tenant;
	c->accepted_ns = kvpd_now_ns();
	d->clients[slot] = c;
	d->nclients++;
	if (d->ev->client_watch(d, &c->conn)) {
		kvpd_client_close(d, c, "cannot watch its socket");
		return -ENOMEM;
	}
	return 0;
}

struct kvpd_client *kvpd_client_lookup(struct kvpd *d, uint64_t key)
{
	uint32_t slot = (uint32_t)(key >> 8) & 0xffffff, gen = (uint32_t)(key >> 32);
	struct kvpd_client *c;

	if (slot >= d->cfg.max_clients)
		return NULL;
	c = d->clients[slot];
	return c && c->gen == gen && !c->dead ? c : NULL;
}

/*
 * A setup name field: "" or a valid name, zero-padded to the end. The whole
 * namespace field is mixed into every salt, so a byte after the NUL would
 * make two clients of the "same" namespace never share a block.
 */
static bool valid_name_field(const char field[KVP_NAME_MAX])
{
	size_t len = strnlen(field, KVP_NAME_MAX);

	for (size_t i = len; i < KVP_NAME_MAX; i++)
		if (field[i])
			return false;
	return len == 0 || kvpd_name_valid(field);
}

static int validate_setup(const struct kvp_setup *s, char *why, size_t why_len)
{
	if (s->magic != KVP_MAGIC)
		return kvpd_refuse(why, why_len, -EPROTO, "magic %#x: not a kvpool setup", s->magic);
	if (s->abi_version != KVP_ABI_VERSION)
		return kvpd_refuse(why, why_len, -EPROTO, "ABI %u: this daemon speaks ABI %u",
				   s->abi_version, KVP_ABI_VERSION);
	if (!is_pow2(s->sq_entries) || s->sq_entries > KVP_MAX_ENTRIES)
		return kvpd_refuse(why, why_len, -EINVAL,
				   "sq_entries %u: a power of two, 1..%u", s->sq_entries,
				   KVP_MAX_ENTRIES);
	if (s->cq_entries && (!is_pow2(s->cq_entries) || s->cq_entries < s->sq_entries ||
			      s->cq_entries > 2 * KVP_MAX_ENTRIES))
		return kvpd_refuse(why, why_len, -EINVAL,
				   "cq_entries %u: 0, or a power of two, sq_entries..%u",
				   s->cq_entries, 2 * KVP_MAX_ENTRIES);
	if (s->arena_bytes > KVP_MAX_ARENA)
		return kvpd_refuse(why, why_len, -EINVAL, "arena_bytes %llu: at most %llu",
				   (unsigned long long)s->arena_bytes,
				   (unsigned long long)KVP_MAX_ARENA);
	if (!valid_name_field(s->pool))
		return kvpd_refuse(why, why_len, -EINVAL, "pool: not a valid name");
	if (!valid_name_field(s->namespace_))
		return kvpd_refuse(why, why_len, -EINVAL, "namespace: not a valid name");
	for (unsigned i = 0; i < sizeof(s->resv) / sizeof(s->resv[0]); i++)
		if (s->resv[i])
			return kvpd_refuse(why, why_len, -EINVAL, "resv[%u]: must be zero", i);
	return 0;
}

/* The memfd: ring headers, SQEs, CQEs, then the arena; sealed so it can't change size. */
static int map_rings(struct kvpd_client *c, const struct kvp_setup *s,
		     struct kvp_setup_reply *r)
{
	uint64_t cqes_off, arena_off, total;
	uint8_t *m;

	c->sq_entries = s->sq_entries;
	c->cq_entries = s->cq_entries ? s->cq_entries : 2 * s->sq_entries;
	if (kvpd_rings_bytes(OFF_SQES, c->sq_entries, sizeof(struct kvp_sqe), c->cq_entries,
			     sizeof(struct kvp_cqe), &cqes_off, &arena_off))
		return -EINVAL;
	arena_off = page_align(arena_off);
	c->arena_bytes = page_align(s->arena_bytes);
	total = arena_off + c->arena_bytes;

	c->mem_fd = memfd_create("kvpool-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (c->mem_fd < 0)
		return -errno;
	if (ftruncate(c->mem_fd, (off_t)total) ||
	    fcntl(c->mem_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return -errno;
	m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, c->mem_fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	c->map = m;
	c->map_bytes = total;
	c->sq_head = (uint32_t *)(m + OFF_SQ_HEAD);
	c->sq_tail = (uint32_t *)(m + OFF_SQ_TAIL);
	c->sq_flags = (uint32_t *)(m + OFF_SQ_FLAGS);
	c->cq_head = (uint32_t *)(m + OFF_CQ_HEAD);
	c->cq_tail = (uint32_t *)(m + OFF_CQ_TAIL);
	c->cq_flags = (uint32_t *)(m + OFF_CQ_FLAGS);
	*(uint32_t *)(m + OFF_SQ_ENTRIES) = c->sq_entries;
	*(uint32_t *)(m + OFF_CQ_ENTRIES) = c->cq_entries;
	c->sqes = (struct kvp_sqe *)(m + OFF_SQES);
	c->cqes = (struct kvp_cqe *)(m + cqes_off);
	c->arena = m + arena_off;

	r->mmap_bytes = total;
	r->sq_entries = c->sq_entries;
	r->cq_entries = c->cq_entries;
	r->sq_off = (struct kvp_sq_offsets){ OFF_SQ_HEAD, OFF_SQ_TAIL, OFF_SQ_FLAGS, OFF_SQ_ENTRIES,
					     OFF_SQES, { 0 } };
	r->cq_off = (struct kvp_cq_offsets){ OFF_CQ_HEAD, OFF_CQ_TAIL, OFF_CQ_FLAGS, OFF_CQ_ENTRIES,
					     (uint32_t)cqes_off, { 0 } };
	r->arena_off = arena_off;
	r->arena_bytes = c->arena_bytes;
	return 0;
}

/*
 * The doorbell: an eventfd the client writes and the daemon never reads (a
 * read would walk the waiters the client put on it), inside an epoll set of
 * the client's own that only the daemon holds, which is what the loop
 * watches. Set up before the client has the eventfd: nothing contends yet.
 */
static int make_doorbell(struct kvpd_client *c)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET };

	c->bell_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->bell_efd < 0)
		return -errno;
	c->conn.bell = epoll_create1(EPOLL_CLOEXEC);
	if (c->conn.bell < 0 || epoll_ctl(c->conn.bell, EPOLL_CTL_ADD, c->bell_efd, &ev))
		return -errno;
	return 0;
}

/*
 * The reply goes out on the courier (the client's side may have any number of
 * waiters for its wake-up to walk); the memfd and the doorbell's eventfd are
 * closed once it is sent. A refusal's reply is followed by @why.
 */
static void send_reply(struct kvpd *d, struct kvpd_client *c, const struct kvp_setup_reply *r,
		       const char *why)
{
	struct kvpd_parcel p = KVPD_PARCEL_INIT;

	_Static_assert(sizeof(*r) <= sizeof(p.msg), "a setup reply fits a parcel");
	_Static_assert(sizeof(p.why) == KVP_REASON_MAX, "a reason fits a parcel");
	p.sock = c->conn.sock;
	p.len = sizeof(*r);
	memcpy(p.msg, r, sizeof(*r));
	if (r->result == 0) {
		p.pass[KVP_FD_MEM] = c->mem_fd;
		p.pass[KVP_FD_DOORBELL] = c->bell_efd;
		p.npass = KVP_FD_STATS;
		if (c->stats_fd >= 0) {
			p.pass[p.npass++] = c->stats_fd;
			p.close[p.nclose++] = c->stats_fd;
		}
		p.close[p.nclose++] = c->mem_fd;
		p.close[p.nclose++] = c->bell_efd;
		c->mem_fd = c->bell_efd = c->stats_fd = -1;
	} else {
		kvpd_parcel_why(&p, why);
		/* The socket closes next: the peeked setup message must not be left unread. */
		p.drain = REFUSAL_DRAIN;
	}
	kvpd_courier_post(&d->courier, c->conn.owner, &p);
}

static int setup_session(struct kvpd *d, struct kvpd_client *c, const struct kvp_setup *s,
			 struct kvp_setup_reply *r, char *why, size_t why_len)
{
	int ret = validate_setup(s, why, why_len);

	if (ret)
		return ret;
	if (!kvpd_namespace_allowed(&d->cfg, s->namespace_, c->uid))
		return kvpd_refuse(why, why_len, -EPERM, "namespace '%s' is not granted to uid %u",
				   s->namespace_, (unsigned)c->uid);
	if ((s->features & KVP_FEAT_MONITOR) && *s->pool)
		return kvpd_refuse(why, why_len, -EINVAL, "a monitor attaches to no pool (pool '%s')",
				   s->pool);
	/* The namespace's quotas (a named one's), and the arena against both tenants'. */
	if (*s->namespace_) {
		struct kvpd_tenant *t = kvpd_tenant_get(d, KVP_TENANT_NAMESPACE, 0, s->namespace_);

		if (!t)
			return kvpd_refuse(why, why_len, -ENOMEM, "out of memory");
		ret = kvpd_tenant_take(t, KVP_QUOTA_CLIENTS, 1);
		if (ret) {
			kvpd_tenant_put(d, t);
			return kvpd_refuse(why, why_len, ret,
					   "namespace '%s' has max_clients connections",
					   s->namespace_);
		}
		c->tenant[1] = t;
	}
	ret = kvpd_quota_take(c->tenant, KVP_QUOTA_ARENA_BYTES, page_align(s->arena_bytes));
	if (ret)
		return kvpd_refuse(why, why_len, ret,
				   "arena_bytes %llu: past max_arena_bytes of its uid or namespace",
				   (unsigned long long)s->arena_bytes);
	c->arena_charged = page_align(s->arena_bytes);
	c->admin = (s->features & KVP_FEAT_ADMIN) && (c->uid == 0 || c->uid == geteuid());
	/* Before attaching: a pool restricted to a namespace takes only its clients. */
	memcpy(c->namespace_, s->namespace_, sizeof(c->namespace_));
	ret = kvpd_client_attach(d, c, s->pool, why, why_len);
	if (ret)
		return ret;
	ret = map_rings(c, s, r) ?: make_doorbell(c);
	if (ret)
		return kvpd_refuse(why, why_len, ret, "its rings: %s", strerror(-ret));
	r->client_id = c->gen;
	r->boot_id = d->boot_id;
	r->features = s->features & KVP_FEATURES_SUPPORTED & (c->admin ? ~0ull : ~KVP_FEAT_ADMIN);
	c->may_map = r->features & KVP_FEAT_POOL_MAP;
	if (r->features & KVP_FEAT_STATS_PAGE) {
		/* Without the admin feature: its uid's view, no other uid's clients. */
		if (!c->admin) {
			c->stat_view = kvpd_statview_get(d, c->uid);
			if (!c->stat_view)
				return kvpd_refuse(why, why_len, -ENOMEM, "out of memory");
		}
		/* A copy, closed once sent: the view may go before the courier sends it. */
		c->stats_fd = fcntl(c->stat_view ? c->stat_view->pg.fd : d->stats->fd,
				    F_DUPFD_CLOEXEC, 0);
		if (c->stats_fd < 0)
			return kvpd_refuse(why, why_len, -errno, "its stats page: %s",
					   strerror(errno));
		r->stats_bytes = d->stats->bytes;
	}
	kvpd_fill_pool_info(c, &r->pool);
	r->pool_generation = c->pool ? c->pool->generation : 0;
	return 0;
}

/*
 * The setup message has come (or the hang-up). It is only peeked at: taking
 * it off the queue would wake the client's end, a pass over whatever waiters
 * the client put there. It goes with the socket, closed on the courier.
 * Returns false when the client was closed.
 */
static bool client_setup(struct kvpd *d, struct kvpd_client *c)
{
	struct kvp_setup s;
	struct kvp_setup_reply r = { .abi_version = KVP_ABI_VERSION, .version = KVPOOL_VERSION_CODE };
	char why[KVP_REASON_MAX] = "";
	/* MSG_TRUNC: the message's real length, so a longer one is refused, not cut short. */
	ssize_t n = recv(c->conn.sock, &s, sizeof(s), MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
	int ret;

	if (n < 0 && errno == EAGAIN)
		return true;
	if (n <= 0) {
		kvpd_client_close(d, c, n == 0 ? "hung up before setup" : "bad setup message");
		return false;
	}
	if (n != (ssize_t)sizeof(s))
		ret = kvpd_refuse(why, sizeof(why), -EINVAL,
				  "setup message of %zd bytes: struct kvp_setup is %zu", n, sizeof(s));
	else
		ret = setup_session(d, c, &s, &r, why, sizeof(why));
	if (!ret && d->ev->doorbell_watch(d, &c->conn))
		ret = kvpd_refuse(why, sizeof(why), -ENOMEM, "its doorbell cannot be watched");
	if (ret) {
		/* A refusal carries nothing but how, why, and which daemon and ABI refused. */
		r = (struct kvp_setup_reply){ .result = ret, .abi_version = KVP_ABI_VERSION,
					      .version = KVPOOL_VERSION_CODE };
		send_reply(d, c, &r, why);
		kvpd_client_close(d, c, why);
		return false;
	}
	/* Counted and published before the reply: a client sees itself in the stats at once. */
	c->ready = true;
	c->monitor = r.features & KVP_FEAT_MONITOR;
	c->active_idx = d->nactive;
	d->active[d->nactive++] = c;
	/* A monitor is counted, never listed: it is not one of the clients it watches. */
	d->nmonitors += c->monitor;
	d->connected += !c->monitor;
	kvpd_stats_begin(d);
	d->stats->page->clients_connected = d->connected;
	d->stats->page->monitors = d->nmonitors;
	kvpd_stats_client(d, c);
	kvpd_stats_end(d);
	KVPD_PROBE(client_connect, c->gen, (int32_t)c->pid, (uint32_t)c->uid);
	send_reply(d, c, &r, NULL);
	kvpd_log(d, c->monitor ? KVPD_LOG_DEBUG : KVPD_LOG_INFO,
		 "client %u connected: pid %d uid %u pool '%s' namespace '%s'%s%s", c->gen,
		 (int)c->pid, (unsigned)c->uid, c->pool ? c->pool->name : "", c->namespace_,
		 c->admin ? " admin" : "", c->monitor ? " monitor" : "");
	return true;
}

/*
 * After setup the socket is silent: only its hang-up matters. Anything else
 * the client sends stays queued, charged to its own send buffer.
 */
void kvpd_client_event(struct kvpd *d, struct kvpd_client *c, int revents)
{
	/* Edge-triggered: a setup message and its sender's hang-up may come as one event. */
	if (!c->ready && !client_setup(d, c))
		return;
	if (revents & (POLLHUP | POLLRDHUP | POLLERR))
		kvpd_client_close(d, c, "hung up");
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/*
 * Closes every sequence (published blocks stay cached) and frees the session.
 * The event loop stops watching its socket and hands it to the courier, whose
 * close is the peer's hang-up; events that still arrive name a client that is
 * gone and are ignored.
 */
void kvpd_client_close(struct kvpd *d, struct kvpd_client *c, const char *why)
{
	uint32_t seqs_open = c->seqs_open;
	bool killed = seqs_open > 0;

	if (c->ready) {
		d->nmonitors -= c->monitor;
		d->disconnected += !c->monitor;
		d->killed += killed; /* a monitor has no pool, no sequence */
		d->active[c->active_idx] = d->active[--d->nactive];
		d->active[c->active_idx]->active_idx = c->active_idx;
		kvpd_stats_batch_flush(d, c);
	}
	/* Killed: gone with sequences open (a crash, most often), as the stats count it. */
	kvpd_log(d, c->monitor ? KVPD_LOG_DEBUG : KVPD_LOG_INFO,
		 "client %u %s: pid %d uid %u pool '%s' namespace '%s': %s; %u sequences closed",
		 c->gen, !c->ready ? "refused" : killed ? "killed" : "disconnected", (int)c->pid,
		 (unsigned)c->uid, c->pool ? c->pool->name : "", c->namespace_, why, seqs_open);
	d->ev->client_release(d, &c->conn);
	/* Nobody waits for its queued work any more: only its running tasks finish. */
	if (c->inflight)
		kvpd_workers_cancel(d->workers, &c->lane);
	kvpd_stats_begin(d);
	if (c->pool) {
		kvpd_seqs_close_all(c);
		d->seqs_released += seqs_open;
		kvpd_tenants_detach(&c->charge);
		c->charge.pool = NULL;
		c->pool->clients--;
		kvpd_stats_pool(d, c->pool, c->gen);
		c->pool = NULL; /* it may be an owned pool that goes with this client */
	}
	/*
	 * What it took from its tenants' quotas goes back. Its hold on them goes
	 * with its last job: the blocks a job pins stay charged to them until then.
	 */
	kvpd_quota_give(c->tenant, KVP_QUOTA_CLIENTS, 1);
	kvpd_quota_give(c->tenant, KVP_QUOTA_ARENA_BYTES, c->arena_charged);
	for (unsigned i = 0; i < 2; i++)
		if (c->tenant[i])
			kvpd_stats_tenant(d, c->tenant[i]);
	if (c->ready) {
		d->stats->page->clients_disconnected = d->disconnected;
		d->stats->page->clients_killed = d->killed;
		d->stats->page->monitors = d->nmonitors;
		if (c->charge.blocks != d->stats->clients[c->slot].blocks_held || killed)
			KVPD_PROBE(blocks_held, c->gen, (uint64_t)c->charge.blocks);
		kvpd_stats_client_remove(d, c);
		kvpd_pools_owner_gone(d, c->gen);
		/* Last of the client's probes: a tracer may forget it here. */
		KVPD_PROBE(client_disconnect, c->gen, (int32_t)c->pid, (uint32_t)c->uid,
			   (uint32_t)killed, seqs_open);
	}
	kvpd_statview_put(d, c->stat_view);
	c->stat_view = NULL;
	kvpd_stats_end(d);
	close_fd(&c->mem_fd);
	close_fd(&c->bell_efd); /* never sent: the client does not hold it */
	close_fd(&c->stats_fd);
	d->clients[c->slot] = NULL;
	d->nclients--;
	c->dead = true;
	/* A descriptor is free again: if accept ran out of them, try now. */
	kvpd_accept_resume(d);
	/* Workers may still read or write its arena: the mapping outlives its jobs. */
	if (c->inflight == 0)
		kvpd_client_free(d, c);
}

void kvpd_accept_resume(struct kvpd *d)
{
	if (!d->accept_paused || d->stopping)
		return;
	d->accept_paused = false;
	if (d->ev->accept_start(d))
		d->accept_paused = true;
}

void kvpd_client_free(struct kvpd *d, struct kvpd_client *c)
{
	for (unsigned i = 0; i < 2; i++)
		kvpd_tenant_put(d, c->tenant[i]);
	kvpd_charge_release(&c->charge);
	free(c->seqs);
	if (c->map)
		munmap(c->map, c->map_bytes);
	free(c);
}
