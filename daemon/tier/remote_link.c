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
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "log.h"
#include "tier/remote.h"

#define READ_BYTES (256u << 10)
/* A node down is tried again after this, doubling to the most: reconnects back off. */
#define BACKOFF_MIN_MS 50u
#define BACKOFF_MAX_MS 2000u
/* Connections timed out in a row that make a node down (a refusal does at once). */
#define DOWN_AFTER_TIMEOUTS 3u
/* A cluster node down: the slot map read again this often, to find the replica promoted. */
#define MAP_RETRY_NS (100ull * 1000000)

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
		      uint32_t timeout_ms, struct remote_access *access)
{
	memset(l, 0, sizeof(*l));
	l->access = access;
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
	remote_conn_close(nd);
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

static void tell(struct remote_link *l, enum remote_event ev, const struct remote_node *nd,
		 const struct remote_node *other, const char *why)
{
	if (l->event)
		l->event(l->event_arg, ev, &nd->addr, other ? &other->addr : NULL, why);
}

/*
 * @nd connected by @deadline_ns (remote_conn.c), its reader made: 0 or
 * -errno. A failure marks it down until its back-off has passed: the rounds
 * meanwhile leave its commands unanswered at once, and a cluster's map is read
 * again soon, to find the replica that takes its slots.
 */
static int node_connect(struct remote_link *l, struct remote_node *nd, uint64_t deadline_ns)
{
	int ret;

	if (nd->down && kvpd_now_ns() < nd->retry_ns)
		return -EAGAIN;
	if (!l->defaults) {
		/* hiredis's own functions, for every reply but a value: a reader's. */
		redisReader *probe = redisReaderCreate();

		l->defaults = probe ? probe->fn : NULL;
		if (probe)
			redisReaderFree(probe);
	}
	nd->reader = l->defaults ? redisReaderCreateWithFunctions(&l->fns) : NULL;
	if (!nd->reader)
		return -ENOMEM;
	/* Its buffer kept between values: freed after each, a 256 KiB value faulted it in anew. */
	nd->reader->maxbuf = 0;
	nd->reader->privdata = l;
	ret = remote_conn_open(l, nd, deadline_ns);
	/*
	 * A connection not made by a short round's deadline is a late node, not
	 * a dead one (a busy machine misses 5 ms): down after a few in a row.
	 */
	if (ret == -ETIMEDOUT && ++nd->timeouts < DOWN_AFTER_TIMEOUTS) {
		node_drop(nd);
		return ret;
	}
	if (ret) {
		node_drop(nd);
		nd->backoff_ms = nd->down ? nd->backoff_ms * 2 : BACKOFF_MIN_MS;
		if (nd->backoff_ms > BACKOFF_MAX_MS)
			nd->backoff_ms = BACKOFF_MAX_MS;
		nd->retry_ns = kvpd_now_ns() + (uint64_t)nd->backoff_ms * 1000000;
		if (!nd->down)
			tell(l, REMOTE_NODE_DOWN, nd, NULL, l->why);
		nd->down = true;
		if (l->cluster && !l->map_due_ns)
			l->map_due_ns = kvpd_now_ns() + MAP_RETRY_NS;
		return ret;
	}
	if (nd->down)
		tell(l, REMOTE_NODE_BACK, nd, NULL, NULL);
	nd->down = false;
	nd->backoff_ms = 0;
	nd->timeouts = 0;
	return 0;
}

/* Writes what the socket takes of @nd's commands: 0, or -errno (the node dropped by the caller). */
static int write_some(struct remote_node *nd, struct remote_cmd *cmds)
{
	while (nd->written < nd->ncmds) {
		const struct remote_cmd *c = &cmds[nd->cmds[nd->written]];
		ssize_t w = remote_conn_send(nd, c->buf + nd->off, c->len - nd->off);

		if (w < 0)
			return w == -EAGAIN ? 0 : (int)w;
		nd->off += (size_t)w;
		if (nd->off == c->len) {
			nd->written++;
			nd->off = 0;
		}
	}
	return 0;
}

/*
 * Reads what @nd answered, each reply to its command in order: 0, or -errno.
 * Until the socket is dry: TLS keeps what it decrypted beyond the record
 * asked for, which poll would not report.
 */
static int read_some(struct remote_link *l, struct remote_node *nd, struct remote_cmd *cmds)
{
	for (;;) {
		ssize_t r = remote_conn_recv(nd, l->rbuf, READ_BYTES);

		if (r < 0)
			return r == -EAGAIN ? 0 : (int)r;
		if (redisReaderFeed(nd->reader, l->rbuf, (size_t)r) != REDIS_OK)
			return -EPROTO;
		while (nd->answered < nd->ncmds) {
			void *reply;

			if (redisReaderGetReply(nd->reader, &reply) != REDIS_OK)
				return -EPROTO;
			if (!reply)
				break;
			cmds[nd->cmds[nd->answered++]].reply = reply;
		}
		if (nd->answered == nd->ncmds)
			return 0;
	}
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
 * CLUSTER SLOTS from node @k into @map: each range [start, end, [host, port,
 * id], replicas...] routed to its master. An empty host is the asked node's
 * (Redis's "unknown endpoint").
 */
static bool read_slots(struct remote_link *l, uint32_t k, const redisReply *r, uint16_t *map)
{
	if (!r || r->type != REDIS_REPLY_ARRAY)
		return false;
	for (uint32_t s = 0; s < REMOTE_SLOTS; s++)
		map[s] = REMOTE_NO_NODE;
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
				map[s] = node;
	}
	return true;
}

/*
 * @map in place. A node down that served slots and serves none now was
 * replaced (a failover): said once. While a node down still serves slots, the
 * map is read again soon.
 */
static void map_install(struct remote_link *l, const uint16_t *map)
{
	uint16_t was[REMOTE_MAX_NODES], now[REMOTE_MAX_NODES];
	uint32_t waiting = 0;

	memset(was, 0xff, sizeof(was));
	memset(now, 0xff, sizeof(now));
	for (uint32_t s = 0; s < REMOTE_SLOTS; s++) {
		if (l->slot_node[s] != REMOTE_NO_NODE)
			was[l->slot_node[s]] = (uint16_t)s;
		if (map[s] != REMOTE_NO_NODE)
			now[map[s]] = (uint16_t)s;
	}
	memcpy(l->slot_node, map, sizeof(l->slot_node));
	for (uint32_t k = 0; k < l->nnodes; k++) {
		struct remote_node *nd = &l->nodes[k];

		if (!nd->down)
			continue;
		if (now[k] != REMOTE_NO_NODE)
			waiting++;
		else if (was[k] != REMOTE_NO_NODE && l->slot_node[was[k]] != REMOTE_NO_NODE)
			tell(l, REMOTE_NODE_REPLACED, nd, &l->nodes[l->slot_node[was[k]]], NULL);
	}
	l->map_due_ns = waiting && l->cluster ? kvpd_now_ns() + MAP_RETRY_NS : 0;
}

/*
 * The slot map, from the first node that answers (seeds first): CLUSTER INFO
 * tells a cluster (then CLUSTER SLOTS routes) from a standalone server, which
 * takes every slot.
 */
static void read_map(struct remote_link *l, uint64_t deadline_ns)
{
	static const char *info[] = { "CLUSTER", "INFO" }, *slots[] = { "CLUSTER", "SLOTS" };
	uint16_t map[REMOTE_SLOTS];

	for (uint32_t k = 0; k < l->nnodes; k++) {
		redisReply *r = node_call(l, k, 2, info, deadline_ns);
		bool ok;

		if (!r)
			continue;
		if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOPERM", 6)) {
			remote_reply_free(r);
			l->cluster = false;
			for (uint32_t s = 0; s < REMOTE_SLOTS; s++)
				map[s] = (uint16_t)k;
			map_install(l, map);
			l->mapped = true;
			l->stale = false;
			return;
		}
		remote_reply_free(r);
		r = node_call(l, k, 2, slots, deadline_ns);
		ok = read_slots(l, k, r, map);
		if (r)
			remote_reply_free(r);
		if (ok) {
			l->cluster = true;
			map_install(l, map);
			l->mapped = true;
			l->stale = false;
			return;
		}
	}
}

static bool is_error(const redisReply *r, const char *kind)
{
	return r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, kind, strlen(kind));
}

/* The map, read again when missing or stale, within the link's timeout and @deadline_ns. */
static void map_fresh(struct remote_link *l, uint64_t deadline_ns)
{
	uint64_t by = kvpd_now_ns() + (uint64_t)l->timeout_ms * 1000000;

	if (l->map_due_ns && kvpd_now_ns() >= l->map_due_ns)
		l->stale = true;
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
		if (!is_error(cmds[i].reply, "MOVED "))
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

/*
 * ASK replies (the key's slot migrating, the key gone to the importing node):
 * each command sent once more to that node, after ASKING, the map left as it
 * is. How many were asked (their replies in place of the ASKs').
 */
static uint32_t follow_ask(struct remote_link *l, struct remote_cmd *cmds, uint32_t n,
			   uint64_t deadline_ns)
{
	static char asking[] = "*1\r\n$6\r\nASKING\r\n";
	struct remote_cmd *pairs;
	uint16_t *node_of;
	uint32_t *which, m = 0;

	for (uint32_t i = 0; i < n; i++)
		m += is_error(cmds[i].reply, "ASK ");
	if (m && !ms_left(deadline_ns)) {
		/* No time to follow them: unanswered, as a node late. */
		for (uint32_t i = 0; i < n; i++)
			if (is_error(cmds[i].reply, "ASK ")) {
				remote_reply_free(cmds[i].reply);
				cmds[i].reply = NULL;
			}
		return 0;
	}
	if (!m)
		return 0;
	pairs = calloc(2 * m, sizeof(*pairs));
	node_of = calloc(2 * m, sizeof(*node_of));
	which = calloc(m, sizeof(*which));
	m = 0;
	for (uint32_t i = 0; pairs && node_of && which && i < n; i++) {
		const char *addr, *colon;
		uint16_t node;

		if (!is_error(cmds[i].reply, "ASK "))
			continue;
		/* "ASK SLOT HOST:PORT" */
		addr = strchr(cmds[i].reply->str + 4, ' ');
		colon = addr ? strrchr(addr, ':') : NULL;
		node = colon ? node_of_addr(l, addr + 1, (size_t)(colon - addr - 1),
					    (uint16_t)atoi(colon + 1)) : REMOTE_NO_NODE;
		remote_reply_free(cmds[i].reply);
		cmds[i].reply = NULL;
		if (node == REMOTE_NO_NODE)
			continue;
		pairs[2 * m] = (struct remote_cmd){ .buf = asking, .len = sizeof(asking) - 1 };
		pairs[2 * m + 1] = (struct remote_cmd){ .buf = cmds[i].buf, .len = cmds[i].len };
		node_of[2 * m] = node_of[2 * m + 1] = node;
		which[m++] = i;
	}
	if (m)
		run_round(l, pairs, node_of, 2 * m, deadline_ns);
	for (uint32_t j = 0; j < m; j++) {
		if (pairs[2 * j].reply)
			remote_reply_free(pairs[2 * j].reply);
		cmds[which[j]].reply = pairs[2 * j + 1].reply;
	}
	l->asked += m;
	free(pairs);
	free(node_of);
	free(which);
	return m;
}

static uint32_t count_answered(const struct remote_cmd *cmds, uint32_t n)
{
	uint32_t answered = 0;

	for (uint32_t i = 0; i < n; i++)
		answered += cmds[i].reply != NULL;
	return answered;
}

uint32_t remote_round(struct remote_link *l, struct remote_cmd *cmds, uint32_t n,
		      uint64_t deadline_ns)
{
	uint16_t *node_of = calloc(n ? n : 1, sizeof(*node_of));
	uint32_t generation = l->access ? __atomic_load_n(&l->access->generation,
							  __ATOMIC_ACQUIRE) : 0;

	if (!node_of)
		return 0;
	/* Secrets rotated: connections made with the old ones are made again. */
	for (uint32_t k = 0; k < l->nnodes; k++)
		if (l->nodes[k].fd >= 0 && l->nodes[k].generation != generation)
			node_drop(&l->nodes[k]);
	map_fresh(l, deadline_ns);
	for (uint32_t i = 0; i < n; i++) {
		cmds[i].reply = NULL;
		node_of[i] = l->slot_node[cmds[i].slot];
	}
	run_round(l, cmds, node_of, n, deadline_ns);
	follow_ask(l, cmds, n, deadline_ns);
	/* A slot moved (a reshard, a failover): the map is read again, and those asked once more. */
	if (take_moved(l, cmds, node_of, n) && ms_left(deadline_ns)) {
		map_fresh(l, deadline_ns);
		for (uint32_t i = 0; i < n; i++)
			if (node_of[i] != REMOTE_NO_NODE)
				node_of[i] = l->slot_node[cmds[i].slot];
		run_round(l, cmds, node_of, n, deadline_ns);
		follow_ask(l, cmds, n, deadline_ns);
		take_moved(l, cmds, node_of, n);
	}
	free(node_of);
	return count_answered(cmds, n);
}

uint32_t remote_link_masters(struct remote_link *l, uint16_t *out, uint64_t deadline_ns)
{
	bool seen[REMOTE_MAX_NODES] = { false };
	uint32_t n = 0;

	map_fresh(l, deadline_ns);
	for (uint32_t s = 0; s < REMOTE_SLOTS; s++) {
		uint16_t k = l->slot_node[s];

		if (k != REMOTE_NO_NODE && !seen[k]) {
			seen[k] = true;
			out[n++] = k;
		}
	}
	return n;
}

uint32_t remote_link_node_round(struct remote_link *l, uint16_t k, struct remote_cmd *cmds,
				uint32_t n, uint64_t deadline_ns)
{
	uint16_t *node_of = calloc(n ? n : 1, sizeof(*node_of));

	if (!node_of)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		cmds[i].reply = NULL;
		node_of[i] = k;
	}
	run_round(l, cmds, node_of, n, deadline_ns);
	free(node_of);
	return count_answered(cmds, n);
}

int remote_link_probe(struct remote_link *l, uint32_t k, uint64_t deadline_ns)
{
	int ret = node_connect(l, &l->nodes[k], deadline_ns);

	node_drop(&l->nodes[k]);
	return ret;
}

void remote_link_nodes(const struct remote_link *l, uint32_t *known, uint32_t *answering)
{
	*known = l->nnodes;
	*answering = 0;
	for (uint32_t k = 0; k < l->nnodes; k++)
		*answering += l->nodes[k].answering;
}
