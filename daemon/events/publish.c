/* SPDX-License-Identifier: MIT */
/*
 * A pool's publisher: a thread with a ZMQ PUB socket (each batch as vLLM
 * sends it: topic, 8-byte big-endian sequence number, payload) and, with
 * replay, a ROUTER that answers a start sequence number with every kept batch
 * from there, (seq, payload) each, then (-1, empty).
 *
 * The loop hands batches over through one ring, under a mutex held for a
 * pointer's move or a payload's copy, never while ZMQ runs: the last @keep
 * batches stay for replay, and at most EV_QUEUE wait to be sent. Past that
 * the oldest unsent is not sent (counted in dropped; still kept, so a replay
 * fills the gap a subscriber sees). A PUB socket never blocks: at a slow
 * subscriber ZMQ drops at its high-water mark, silently, by design. A replay
 * goes at the subscriber's pace (ZMQ_ROUTER_MANDATORY: a full pipe says
 * EAGAIN, and the replay waits), EV_REPLAYS at once; more wait in ZMQ's queue.
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "events/events_internal.h"
#include "refuse.h"

#define EV_QUEUE 4096u    /* batches waiting to be sent, at most (tests may set fewer) */
#define EV_REPLAYS 4      /* replays served at once */
#define EV_SEND_BURST 256 /* batches sent before replays get a turn */
#define EV_REPLAY_BURST 64
#define EV_ID_MAX 256     /* a ROUTER peer's routing id: at most 255 bytes */
#define EV_LINGER_MS 200  /* what is queued at the stop gets this long to leave */

struct ev_batch {
	uint64_t seq;
	char *data;
	size_t len;
};

struct ev_replay {
	bool active, delimited; /* a REQ's request had the empty frame: the reply has it too */
	uint8_t id[EV_ID_MAX];
	size_t idlen;
	uint64_t next, end;
};

struct ev_publisher {
	pthread_t thread;
	void *ctx, *pub, *router;
	int wake_fd;
	char topic[KVPD_EVENTS_TOPIC_MAX];
	size_t topic_len;
	uint32_t delay_us;
	char ipc[2][KVPD_EVENTS_ENDPOINT_MAX]; /* socket files bound, removed at the end */
	pthread_mutex_t lock;
	/* Under lock */
	struct ev_batch *ring;
	uint32_t cap, keep, queue;
	uint64_t first, next, send; /* the oldest kept, the next to number, the next to send */
	bool stop, sleeping;
	uint64_t dropped;
	/* The thread's; read with atomics */
	uint64_t sent, bytes, replays, replayed;
	struct ev_replay rp[EV_REPLAYS];
};

static void set_why_zmq(char *why, size_t len, const char *what, const char *ep)
{
	snprintf(why, len, "%s = %.80s: %s", what, ep, zmq_strerror(zmq_errno()));
}

static void *socket_bound(struct ev_publisher *p, int type, const char *key, const char *ep,
			  char *ipc, char *why, size_t len)
{
	void *s = zmq_socket(p->ctx, type);
	int linger = EV_LINGER_MS, one = 1;

	if (!s) {
		set_why_zmq(why, len, key, ep);
		return NULL;
	}
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
	/* tcp://[::]:PORT, and a wildcard host, take IPv6 as well as IPv4. */
	zmq_setsockopt(s, ZMQ_IPV6, &one, sizeof(one));
	if (type == ZMQ_ROUTER)
		zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
	if (zmq_bind(s, ep)) {
		snprintf(why, len, "%s = %.80s: cannot bind: %s", key, ep, zmq_strerror(zmq_errno()));
		zmq_close(s);
		return NULL;
	}
	/* As the daemon's own socket: its user and group connect (the events carry tokens). */
	if (!strncmp(ep, "ipc://", 6) && ep[6] != '@') {
		chmod(ep + 6, 0660);
		snprintf(ipc, KVPD_EVENTS_ENDPOINT_MAX, "%s", ep + 6);
	}
	return s;
}

/* Past @keep kept and EV_QUEUE waiting, the oldest go (under lock). */
static void trim(struct ev_publisher *p)
{
	if (p->next - p->send > p->queue) {
		p->send++;
		p->dropped++;
	}
	while (p->first < p->send && p->next - p->first > p->keep) {
		struct ev_batch *b = &p->ring[p->first % p->cap];

		free(b->data);
		b->data = NULL;
		p->first++;
	}
}

void kvpd_ev_pub_push(struct ev_publisher *p, char *data, size_t len)
{
	bool wake;

	pthread_mutex_lock(&p->lock);
	p->ring[p->next % p->cap] = (struct ev_batch){ p->next, data, len };
	p->next++;
	trim(p);
	wake = p->sleeping;
	p->sleeping = false;
	pthread_mutex_unlock(&p->lock);
	/* One write a sleep: while the thread is up it finds the batch itself. */
	if (wake)
		(void)!eventfd_write(p->wake_fd, 1);
}

/* Batch @seq copied into @msg (under lock): false when it is no longer kept. */
static bool take(struct ev_publisher *p, uint64_t seq, zmq_msg_t *msg)
{
	const struct ev_batch *b;

	if (seq < p->first || seq >= p->next)
		return false;
	b = &p->ring[seq % p->cap];
	if (zmq_msg_init_size(msg, b->len))
		return false;
	memcpy(zmq_msg_data(msg), b->data, b->len);
	return true;
}

static void send_pending(struct ev_publisher *p)
{
	for (int i = 0; i < EV_SEND_BURST; i++) {
		uint64_t seq, be;
		zmq_msg_t msg;
		size_t len;

		pthread_mutex_lock(&p->lock);
		seq = p->send;
		if (seq == p->next || !take(p, seq, &msg)) {
			pthread_mutex_unlock(&p->lock);
			return;
		}
		p->send++;
		trim(p); /* what a push could not drop unsent goes now: kept stays @keep */
		pthread_mutex_unlock(&p->lock);
		if (p->delay_us)
			usleep(p->delay_us);
		be = htobe64(seq);
		len = zmq_msg_size(&msg);
		zmq_send(p->pub, p->topic, p->topic_len, ZMQ_SNDMORE);
		zmq_send(p->pub, &be, sizeof(be), ZMQ_SNDMORE);
		if (zmq_msg_send(&msg, p->pub, 0) < 0)
			zmq_msg_close(&msg);
		__atomic_add_fetch(&p->sent, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&p->bytes, len, __ATOMIC_RELAXED);
	}
}

/*
 * One reply of replay @r: (seq, payload), or the end's (-1, empty) when
 * @msg is NULL. 0; -EAGAIN while the peer's pipe is full; -EHOSTUNREACH once
 * it is gone.
 */
static int reply(struct ev_publisher *p, struct ev_replay *r, uint64_t seq, zmq_msg_t *msg)
{
	uint64_t be = msg ? htobe64(seq) : htobe64(UINT64_MAX); /* -1, 8 signed bytes */

	if (zmq_send(p->router, r->id, r->idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
		return -zmq_errno();
	if (r->delimited)
		zmq_send(p->router, "", 0, ZMQ_SNDMORE);
	zmq_send(p->router, &be, sizeof(be), ZMQ_SNDMORE);
	if (!msg)
		return zmq_send(p->router, "", 0, 0) < 0 ? -zmq_errno() : 0;
	return zmq_msg_send(msg, p->router, 0) < 0 ? -zmq_errno() : 0;
}

/* A burst of replay @r: false while it waits on its subscriber's pipe. */
static bool serve(struct ev_publisher *p, struct ev_replay *r)
{
	for (int i = 0; i < EV_REPLAY_BURST; i++) {
		zmq_msg_t msg;
		uint64_t lo;
		bool have;
		int ret;

		pthread_mutex_lock(&p->lock);
		/* From the oldest kept for replay (what waits to be sent may be older). */
		lo = p->next - p->first > p->keep ? p->next - p->keep : p->first;
		if (r->next < lo)
			r->next = lo;
		have = r->next < r->end && take(p, r->next, &msg);
		pthread_mutex_unlock(&p->lock);
		ret = reply(p, r, r->next, have ? &msg : NULL);
		if (ret && have)
			zmq_msg_close(&msg);
		if (ret == -EAGAIN)
			return false;
		if (ret || !have) {
			r->active = false; /* the end said, or the subscriber gone */
			__atomic_add_fetch(&p->replays, 1, __ATOMIC_RELAXED);
			return true;
		}
		r->next++;
		__atomic_add_fetch(&p->replayed, 1, __ATOMIC_RELAXED);
	}
	return true;
}

/* A request off the ROUTER: [id, "", start] from a REQ, [id, start] from a DEALER. */
static void accept_replay(struct ev_publisher *p, struct ev_replay *r)
{
	uint8_t part[3][EV_ID_MAX];
	int len[3] = { 0 }, n = 0, more = 1;
	size_t more_len = sizeof(more);
	uint64_t start;

	while (more) {
		int got = zmq_recv(p->router, n < 3 ? part[n] : part[2], EV_ID_MAX, ZMQ_DONTWAIT);

		if (got < 0)
			return;
		if (n < 3)
			len[n] = got;
		n++;
		zmq_getsockopt(p->router, ZMQ_RCVMORE, &more, &more_len);
	}
	*r = (struct ev_replay){ .active = true, .delimited = n == 3 && len[1] == 0,
				 .idlen = (size_t)(len[0] < EV_ID_MAX ? len[0] : EV_ID_MAX) };
	memcpy(r->id, part[0], r->idlen);
	/* Anything else than 8 bytes where the start goes is answered with the end alone. */
	if ((n == 2 || r->delimited) && len[n - 1] == 8) {
		memcpy(&start, part[n - 1], 8);
		r->next = be64toh(start);
	} else {
		r->next = UINT64_MAX;
	}
	pthread_mutex_lock(&p->lock);
	r->end = p->next;
	pthread_mutex_unlock(&p->lock);
}

static void *run(void *arg)
{
	struct ev_publisher *p = arg;

	for (;;) {
		zmq_pollitem_t it[2] = { { .fd = p->wake_fd, .events = ZMQ_POLLIN },
					 { .socket = p->router, .events = ZMQ_POLLIN } };
		int nit = 1, active = 0, waiting = 0;
		long timeout = -1;
		bool stop;
		eventfd_t v;

		send_pending(p);
		for (int i = 0; i < EV_REPLAYS; i++)
			if (p->rp[i].active && !serve(p, &p->rp[i]))
				waiting++;
		for (int i = 0; i < EV_REPLAYS; i++)
			active += p->rp[i].active;
		if (p->router && active < EV_REPLAYS)
			nit = 2;
		pthread_mutex_lock(&p->lock);
		stop = p->stop && p->send == p->next; /* replays are abandoned, not the queue */
		if (p->send != p->next)
			timeout = 0;
		else if (active)
			timeout = waiting == active ? 10 : 0; /* a full pipe: look again soon */
		else
			p->sleeping = !p->stop;
		pthread_mutex_unlock(&p->lock);
		if (stop)
			break;
		if (zmq_poll(it, nit, timeout) < 0 && zmq_errno() != EINTR)
			break;
		if (it[0].revents & ZMQ_POLLIN)
			eventfd_read(p->wake_fd, &v);
		pthread_mutex_lock(&p->lock);
		p->sleeping = false;
		pthread_mutex_unlock(&p->lock);
		if (nit == 2 && (it[1].revents & ZMQ_POLLIN))
			for (int i = 0; i < EV_REPLAYS; i++)
				if (!p->rp[i].active) {
					accept_replay(p, &p->rp[i]);
					break;
				}
	}
	return NULL;
}

static void pub_free(struct ev_publisher *p)
{
	if (p->router)
		zmq_close(p->router);
	if (p->pub)
		zmq_close(p->pub);
	if (p->ctx)
		zmq_ctx_term(p->ctx);
	/* libzmq leaves an ipc listener's file behind: a pool made again binds it anew. */
	for (int i = 0; i < 2; i++)
		if (p->ipc[i][0])
			unlink(p->ipc[i]);
	if (p->wake_fd >= 0)
		close(p->wake_fd);
	for (uint64_t s = p->first; p->ring && s < p->next; s++)
		free(p->ring[s % p->cap].data);
	free(p->ring);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int kvpd_ev_pub_start(struct ev_publisher **out, const struct ev_pub_config *cfg, char *why,
		      size_t why_len)
{
	struct ev_publisher *p = calloc(1, sizeof(*p));
	int ret = -ENOMEM;

	if (!p)
		return -ENOMEM;
	p->wake_fd = -1;
	pthread_mutex_init(&p->lock, NULL);
	p->keep = cfg->keep;
	p->queue = cfg->queue ? cfg->queue : EV_QUEUE;
	p->cap = cfg->keep + p->queue + 1;
	p->delay_us = cfg->delay_us;
	p->topic_len = strlen(cfg->topic);
	memcpy(p->topic, cfg->topic, p->topic_len);
	p->ring = calloc(p->cap, sizeof(*p->ring));
	p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	p->ctx = zmq_ctx_new();
	if (!p->ring || p->wake_fd < 0 || !p->ctx) {
		ret = kvpd_refuse(why, why_len, p->wake_fd < 0 ? -errno : -ENOMEM,
				  "kv_events: the publisher's %s", !p->ring ? "ring (out of memory)" :
				  p->wake_fd < 0 ? "eventfd" : "ZMQ context");
		goto err_free;
	}
	zmq_ctx_set(p->ctx, ZMQ_IO_THREADS, 1);
	p->pub = socket_bound(p, ZMQ_PUB, "kv_events", cfg->endpoint, p->ipc[0], why, why_len);
	if (!p->pub) {
		ret = -EADDRNOTAVAIL;
		goto err_free;
	}
	if (cfg->replay) {
		p->router = socket_bound(p, ZMQ_ROUTER, "kv_events_replay", cfg->replay, p->ipc[1],
					 why, why_len);
		if (!p->router) {
			ret = -EADDRNOTAVAIL;
			goto err_free;
		}
	}
	ret = -pthread_create(&p->thread, NULL, run, p);
	if (ret) {
		kvpd_refuse(why, why_len, ret, "kv_events: the publisher's thread: %s", strerror(-ret));
		goto err_free;
	}
	pthread_setname_np(p->thread, "kvpd-events");
	*out = p;
	return 0;

err_free:
	pub_free(p);
	return ret;
}

void kvpd_ev_pub_counters(struct ev_publisher *p, struct kvp_stats_events *row)
{
	pthread_mutex_lock(&p->lock);
	row->dropped += p->dropped;
	row->kept = (uint32_t)(p->next - p->first);
	row->queued = (uint32_t)(p->next - p->send);
	pthread_mutex_unlock(&p->lock);
	row->sent = __atomic_load_n(&p->sent, __ATOMIC_RELAXED);
	row->bytes = __atomic_load_n(&p->bytes, __ATOMIC_RELAXED);
	row->replays = __atomic_load_n(&p->replays, __ATOMIC_RELAXED);
	row->replayed = __atomic_load_n(&p->replayed, __ATOMIC_RELAXED);
}

void kvpd_ev_pub_stop(struct ev_publisher *p)
{
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_mutex_unlock(&p->lock);
	(void)!eventfd_write(p->wake_fd, 1);
	pthread_join(p->thread, NULL);
	pub_free(p);
}
