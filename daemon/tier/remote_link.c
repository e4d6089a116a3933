/* SPDX-License-Identifier: MIT */
/*
 * The cluster tier's link to Redis: a connection per node, rounds of
 * pipelined single-key commands over all nodes at once under one deadline,
 * and the slot map that routes a key to its node. Debian's hiredis (0.14) has
 * no cluster support: its protocol code formats the commands and parses the
 * replies, over non-blocking sockets of our own polled together, so that a
 * slow or dead node costs a round its deadline and nothing more, and never a
 * multi-key command crosses slots (no CROSSSLOT). Runs on the tier's thread.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "log.h"
#include "tier/remote.h"

#define READ_BYTES (256u << 10)

/* CRC16-CCITT (XMODEM), Redis Cluster's key hash. */
static uint16_t crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((uint8_t)buf[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

uint16_t remote_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len), *close;

	/* A {tag} of at least one character hashes alone: keys sharing it share a slot. */
	if (open) {
		close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
		if (close && close > open + 1)
			return crc16(open + 1, (size_t)(close - open - 1)) % REMOTE_SLOTS;
	}
	return crc16(key, len) % REMOTE_SLOTS;
}

/* Milliseconds left until @deadline_ns, rounded up; 0: none. */
static int ms_left(uint64_t deadline_ns)
{
	uint64_t now = kvpd_now_ns();

	if (now >= deadline_ns)
		return 0;
	return (int)((deadline_ns - now + 999999) / 1000000);
}

/* A reply whose string is an arena's: its integer field, unused by strings, says so. */
#define IN_ARENA 0x6b76706f6f6c4152ll

/* The link a reply is read for: hiredis gives the reader's privdata to the top task only. */
static struct remote_link *link_of(const redisReadTask *task)
{
	while (task->parent)
		task = task->parent;
	return task->privdata;
}

/*
 * A value (a top-level bulk string) goes into the link's arena: hiredis would
 * malloc each, and glibc maps and faults in each 256 KiB value anew (half the
 * promotion's bandwidth on a 2-core VM).
 */
static void *create_string(const redisReadTask *task, char *str, size_t len)
{
	struct remote_link *l = link_of(task);
	struct remote_arena *a = l ? l->arena : NULL;
	redisReply *r;

	if (!a || task->parent || task->type != REDIS_REPLY_STRING || len < a->min ||
	    a->cap - a->used < len + 1)
		return l ? l->defaults->createString(task, str, len) : NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->type = REDIS_REPLY_STRING;
	r->integer = IN_ARENA;
	r->str = (char *)a->mem + a->used;
	r->len = len;
	memcpy(r->str, str, len);
	r->str[len] = '\0';
	a->used += (len + 64) & ~(size_t)63;
	if (a->used > a->cap)
		a->used = a->cap;
	return r;
}

void remote_reply_free(struct redisReply *r)
{
	if (r && r->type == REDIS_REPLY_STRING && r->integer == IN_ARENA)
		free(r);
	else
		freeReplyObject(r);
}

static void free_object(void *obj)
{
	remote_reply_free(obj);
}

static void *create_array(const redisReadTask *task, int n)
{
	const struct remote_link *l = link_of(task);

	return l ? l->defaults->createArray(task, n) : NULL;
}

static void *create_integer(const redisReadTask *task, long long v)
{
	const struct remote_link *l = link_of(task);

	return l ? l->defaults->createInteger(task, v) : NULL;
}

static void *create_nil(const redisReadTask *task)
{
	const struct remote_link *l = link_of(task);

	return l ? l->defaults->createNil(task) : NULL;
}

void remote_link_init(struct remote_link *l, const struct kvpd_remote_addr *seeds, uint32_t n,
		      uint32_t timeout_ms)
{
	memset(l, 0, sizeof(*l));
	for (uint32_t i = 0; i < n && i < REMOTE_MAX_NODES; i++) {
		l->nodes[i].addr = seeds[i];
		l->nodes[i].fd = -1;
	}
	l->nnodes = l->nseeds = n;
	l->timeout_ms = timeout_ms;
	l->fns = (redisReplyObjectFunctions){ create_string, create_array, create_integer,
					      create_nil, free_object };
	for (uint32_t s = 0; s < REMOTE_SLOTS; s++)
		l->slot_node[s] = REMOTE_NO_NODE;
}

static void node_drop(struct remote_node *nd)
{
	if (nd->fd >= 0)
		close(nd->fd);
	nd->fd = -1;
	if (nd->reader)
		redisReaderFree(nd->reader);
	nd->reader = NULL;
	nd->answering = false;
}

void remote_link_close(struct remote_link *l)
{
	for (uint32_t i = 0; i < l->nnodes; i++) {
		node_drop(&l->nodes[i]);
		free(l->nodes[i].cmds);
	}
	free(l->rbuf);
	l->rbuf = NULL;
}

/* A non-blocking TCP connection to @nd by @deadline_ns: 0 or -errno. */
static int node_connect(struct remote_link *l, struct remote_node *nd, uint64_t deadline_ns)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai, *a;
	char port[8];
	int ret = -EHOSTUNREACH, one = 1;

	snprintf(port, sizeof(port), "%u", nd->addr.port);
	if (getaddrinfo(nd->addr.host, port, &hints, &ai))
		return -EHOSTUNREACH;
	for (a = ai; a; a = a->ai_next) {
		int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		socklen_t len = sizeof(ret);

		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS) {
			ret = -errno;
			close(fd);
			continue;
		}
		if (poll(&pfd, 1, ms_left(deadline_ns)) != 1 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &ret, &len) || ret) {
			ret = ret > 0 ? -ret : -ETIMEDOUT;
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (!l->defaults) {
			/* hiredis's own functions, for every reply but a value: a reader's. */
			redisReader *probe = redisReaderCreate();

			l->defaults = probe ? probe->fn : NULL;
			if (probe)
				redisReaderFree(probe);
		}
		nd->reader = l->defaults ? redisReaderCreateWithFunctions(&l->fns) : NULL;
		if (!nd->reader) {
			close(fd);
			ret = -ENOMEM;
			break;
		}
		/* Its buffer kept between values: freed after each, a 256 KiB value faulted it in anew. */
		nd->reader->maxbuf = 0;
		nd->reader->privdata = l;
		nd->fd = fd;
		ret = 0;
		break;
	}
	freeaddrinfo(ai);
	return ret;
}

/* Writes what the socket takes of @nd's commands: 0, or -errno (the node dropped by the caller). */
static int write_some(struct remote_node *nd, struct remote_cmd *cmds)
{
	while (nd->written < nd->ncmds) {
		const struct remote_cmd *c = &cmds[nd->cmds[nd->written]];
		ssize_t w = send(nd->fd, c->buf + nd->off, c->len - nd->off, MSG_NOSIGNAL);

		if (w < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		nd->off += (size_t)w;
		if (nd->off == c->len) {
			nd->written++;
			nd->off = 0;
		}
	}
	return 0;
}

/* Reads what @nd answered, each reply to its command in order: 0, or -errno. */
static int read_some(struct remote_link *l, struct remote_node *nd, struct remote_cmd *cmds)
{
	ssize_t r = recv(nd->fd, l->rbuf, READ_BYTES, 0);

	if (r == 0)
		return -ECONNRESET;
	if (r < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (redisReaderFeed(nd->reader, l->rbuf, (size_t)r) != REDIS_OK)
		return -EPROTO;
	while (nd->answered < nd->ncmds) {
		void *reply;

		if (redisReaderGetReply(nd->reader, &reply) != REDIS_OK)
			return -EPROTO;
		if (!reply)
			return 0;
		cmds[nd->cmds[nd->answered++]].reply = reply;
	}
	return 0;
}

static int node_add_cmd(struct remote_node *nd, uint32_t i)
{
	if (nd->ncmds == nd->cmds_cap) {
		uint32_t cap = nd->cmds_cap ? 2 * nd->cmds_cap : 64;
		uint32_t *p = realloc(nd->cmds, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		nd->cmds = p;
		nd->cmds_cap = cap;
	}
	nd->cmds[nd->ncmds++] = i;
	return 0;
}

/* Command i goes to node node_of[i] (REMOTE_NO_NODE: unanswered). */
static uint32_t run_round(struct remote_link *l, struct remote_cmd *cmds, const uint16_t *node_of,
			  uint32_t n, uint64_t deadline_ns)
{
	struct pollfd pfds[REMOTE_MAX_NODES];
	uint32_t who[REMOTE_MAX_NODES], answered = 0;

	if (!l->rbuf && !(l->rbuf = malloc(READ_BYTES)))
		return 0;
	for (uint32_t k = 0; k < l->nnodes; k++) {
		l->nodes[k].ncmds = l->nodes[k].written = l->nodes[k].answered = 0;
		l->nodes[k].off = 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (node_of[i] == REMOTE_NO_NODE)
			continue;
		cmds[i].reply = NULL;
		if (node_add_cmd(&l->nodes[node_of[i]], i))
			break;
	}
	l->unreachable = 0;
	for (uint32_t k = 0; k < l->nnodes; k++) {
		struct remote_node *nd = &l->nodes[k];

		if (nd->ncmds && nd->fd < 0 && node_connect(l, nd, deadline_ns)) {
			nd->ncmds = 0; /* unreachable: its commands go unanswered */
			l->unreachable++;
		}
	}
	for (;;) {
		uint32_t np = 0;
		int ms;

		for (uint32_t k = 0; k < l->nnodes; k++) {
			struct remote_node *nd = &l->nodes[k];

			if (nd->fd < 0 || nd->answered == nd->ncmds)
				continue;
			pfds[np] = (struct pollfd){ .fd = nd->fd, .events = (short)(POLLIN |
						    (nd->written < nd->ncmds ? POLLOUT : 0)) };
			who[np++] = k;
		}
		if (!np || !(ms = ms_left(deadline_ns)) || poll(pfds, np, ms) < 0)
			break;
		for (uint32_t j = 0; j < np; j++) {
			struct remote_node *nd = &l->nodes[who[j]];
			int ret = 0;

			if (pfds[j].revents & POLLOUT)
				ret = write_some(nd, cmds);
			if (!ret && (pfds[j].revents & (POLLIN | POLLHUP | POLLERR)))
				ret = read_some(l, nd, cmds);
			if (ret) {
				nd->ncmds = nd->answered; /* the rest go unanswered */
				node_drop(nd);
			}
		}
	}
	for (uint32_t k = 0; k < l->nnodes; k++) {
		struct remote_node *nd = &l->nodes[k];

		answered += nd->answered;
		if (nd->answered < nd->ncmds)
			node_drop(nd); /* late: its stream is out of step with what we asked */
		else if (nd->ncmds)
			nd->answering = true;
	}
	return answered;
}

/* One command to node @k: its reply (the caller frees it), NULL when none came in time. */
static redisReply *node_call(struct remote_link *l, uint32_t k, int argc, const char **argv,
			     uint64_t deadline_ns)
{
	struct remote_cmd cmd = { 0 };
	uint16_t node = (uint16_t)k;
	int len = redisFormatCommandArgv(&cmd.buf, argc, argv, NULL);

	if (len < 0)
		return NULL;
	cmd.len = (size_t)len;
	run_round(l, &cmd, &node, 1, deadline_ns);
	redisFreeCommand(cmd.buf);
	return cmd.reply;
}

/* The node at @host:@port, added if new: its index, or REMOTE_NO_NODE when full. */
static uint16_t node_of_addr(struct remote_link *l, const char *host, size_t host_len,
			     uint16_t port)
{
	struct remote_node *nd;

	if (host_len >= KVPD_REMOTE_HOST_MAX)
		return REMOTE_NO_NODE;
	for (uint32_t k = 0; k < l->nnodes; k++)
		if (l->nodes[k].addr.port == port && strlen(l->nodes[k].addr.host) == host_len &&
		    !memcmp(l->nodes[k].addr.host, host, host_len))
			return (uint16_t)k;
	if (l->nnodes == REMOTE_MAX_NODES)
		return REMOTE_NO_NODE;
	nd = &l->nodes[l->nnodes];
	memset(nd, 0, sizeof(*nd));
	memcpy(nd->addr.host, host, host_len);
	nd->addr.host[host_len] = '\0';
	nd->addr.port = port;
	nd->fd = -1;
	return (uint16_t)l->nnodes++;
}

/*
 * CLUSTER SLOTS from node @k: each range [start, end, [host, port, id], replicas...]
 * routed to its master. An empty host is the asked node's (Redis's "unknown endpoint").
 */
static bool read_slots(struct remote_link *l, uint32_t k, const redisReply *r)
{
	if (!r || r->type != REDIS_REPLY_ARRAY)
		return false;
	for (uint32_t s = 0; s < REMOTE_SLOTS; s++)
		l->slot_node[s] = REMOTE_NO_NODE;
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i], *m;
		const char *host;
		size_t host_len;
		uint16_t node;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER)
			return false;
		m = e->element[2];
		if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
		    m->element[0]->type != REDIS_REPLY_STRING ||
		    m->element[1]->type != REDIS_REPLY_INTEGER ||
		    m->element[1]->integer <= 0 || m->element[1]->integer > 65535)
			return false;
		host = m->element[0]->str;
		host_len = m->element[0]->len;
		if (!host_len || (host_len == 1 && host[0] == '?')) {
			host = l->nodes[k].addr.host;
			host_len = strlen(host);
		}
		node = node_of_addr(l, host, host_len, (uint16_t)m->element[1]->integer);
		for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
			if (s >= 0 && s < REMOTE_SLOTS)
				l->slot_node[s] = node;
	}
	return true;
}

/*
 * The slot map, from the first node that answers (seeds first): CLUSTER INFO
 * tells a cluster (then CLUSTER SLOTS routes) from a standalone server, which
 * takes every slot.
 */
static void read_map(struct remote_link *l, uint64_t deadline_ns)
{
	static const char *info[] = { "CLUSTER", "INFO" }, *slots[] = { "CLUSTER", "SLOTS" };

	for (uint32_t k = 0; k < l->nnodes; k++) {
		redisReply *r = node_call(l, k, 2, info, deadline_ns);
		bool ok;

		if (!r)
			continue;
		if (r->type == REDIS_REPLY_ERROR) {
			remote_reply_free(r);
			l->cluster = false;
			for (uint32_t s = 0; s < REMOTE_SLOTS; s++)
				l->slot_node[s] = (uint16_t)k;
			l->mapped = true;
			l->stale = false;
			return;
		}
		remote_reply_free(r);
		r = node_call(l, k, 2, slots, deadline_ns);
		ok = read_slots(l, k, r);
		if (r)
			remote_reply_free(r);
		if (ok) {
			l->cluster = true;
			l->mapped = true;
			l->stale = false;
			return;
		}
	}
}

static bool is_moved(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "MOVED ", 6);
}

/* The map, read again when missing or stale, within the link's timeout and @deadline_ns. */
static void map_fresh(struct remote_link *l, uint64_t deadline_ns)
{
	uint64_t by = kvpd_now_ns() + (uint64_t)l->timeout_ms * 1000000;

	if (!l->mapped || l->stale)
		read_map(l, by < deadline_ns ? by : deadline_ns);
}

/* MOVED replies freed, their commands routed anew in @node_of, the others not: how many. */
static uint32_t take_moved(struct remote_link *l, struct remote_cmd *cmds, uint16_t *node_of,
			   uint32_t n)
{
	uint32_t moved = 0;

	for (uint32_t i = 0; i < n; i++) {
		node_of[i] = REMOTE_NO_NODE;
		if (!is_moved(cmds[i].reply))
			continue;
		remote_reply_free(cmds[i].reply);
		cmds[i].reply = NULL;
		node_of[i] = 0;
		moved++;
	}
	l->moved += moved;
	l->stale |= moved > 0;
	return moved;
}

uint32_t remote_round(struct remote_link *l, struct remote_cmd *cmds, uint32_t n,
		      uint64_t deadline_ns)
{
	uint16_t *node_of = malloc((n ? n : 1) * sizeof(*node_of));
	uint32_t answered, moved;

	if (!node_of)
		return 0;
	map_fresh(l, deadline_ns);
	for (uint32_t i = 0; i < n; i++) {
		cmds[i].reply = NULL;
		node_of[i] = l->slot_node[cmds[i].slot];
	}
	answered = run_round(l, cmds, node_of, n, deadline_ns);
	/* A slot moved (a reshard, a failover): the map is read again, and those asked once more. */
	moved = take_moved(l, cmds, node_of, n);
	if (moved && ms_left(deadline_ns)) {
		answered -= moved;
		map_fresh(l, deadline_ns);
		for (uint32_t i = 0; i < n; i++)
			if (node_of[i] != REMOTE_NO_NODE)
				node_of[i] = l->slot_node[cmds[i].slot];
		answered += run_round(l, cmds, node_of, n, deadline_ns);
		answered -= take_moved(l, cmds, node_of, n);
	} else {
		answered -= moved;
	}
	free(node_of);
	return answered;
}

void remote_link_nodes(const struct remote_link *l, uint32_t *known, uint32_t *answering)
{
	*known = l->nnodes;
	*answering = 0;
	for (uint32_t k = 0; k < l->nnodes; k++)
		*answering += l->nodes[k].answering;
}
