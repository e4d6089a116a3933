/* SPDX-License-Identifier: MIT */
/*
 * The courier's queues, one a key, and its lanes' threads, which take the keys
 * in turn: see courier.h for why they exist. The lanes' processes and the
 * calls themselves are courier_lane.c's.
 */
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "loop/courier_lane.h"

struct kvpd_courier_queue {
	struct kvpd_courier_queue *next;       /* in k->queues */
	struct kvpd_courier_queue *next_ready; /* in k->ready, while ready */
	uint64_t key;
	struct kvpd_parcel *head, *tail;
	uint64_t in_hand;                      /* the seq a lane delivers now; 0: none */
	uint64_t rest_until;                   /* CLOCK_MONOTONIC ns; 0: not resting */
	unsigned copies;                       /* counted descriptors not out yet */
	bool ready;
};

static struct kvpd_courier_queue *queue_find(struct kvpd_courier *k, uint64_t key)
{
	struct kvpd_courier_queue *q = k->queues;

	while (q && q->key != key)
		q = q->next;
	return q;
}

/* @q's turn, after every key now waiting. */
static void ready_push(struct kvpd_courier *k, struct kvpd_courier_queue *q)
{
	q->ready = true;
	q->next_ready = NULL;
	if (k->ready_tail)
		k->ready_tail->next_ready = q;
	else
		k->ready = q;
	k->ready_tail = q;
	pthread_cond_signal(&k->wake);
}

static struct kvpd_courier_queue *ready_pop(struct kvpd_courier *k)
{
	struct kvpd_courier_queue *q = k->ready;

	k->ready = q->next_ready;
	if (!k->ready)
		k->ready_tail = NULL;
	q->ready = false;
	return q;
}

static void queue_forget(struct kvpd_courier *k, struct kvpd_courier_queue *q)
{
	struct kvpd_courier_queue **at = &k->queues;

	while (*at != q)
		at = &(*at)->next;
	*at = q->next;
	free(q);
	if (!k->queues)
		pthread_cond_broadcast(&k->idle);
}

/*
 * Ends the rests that are over (every one at stop): such a key takes its turn
 * again, or is forgotten if it has nothing left. Returns when the next rest
 * ends, 0 when none is left.
 */
static uint64_t rests_end(struct kvpd_courier *k)
{
	uint64_t now = kvpd_courier_clock_ns(CLOCK_MONOTONIC), next = 0;
	struct kvpd_courier_queue *q, *after;

	for (q = k->queues; q && k->resting; q = after) {
		after = q->next;
		if (!q->rest_until)
			continue;
		if (q->rest_until > now && !k->stop) {
			if (!next || q->rest_until < next)
				next = q->rest_until;
			continue;
		}
		q->rest_until = 0;
		k->resting--;
		if (q->head)
			ready_push(k, q);
		else
			queue_forget(k, q);
	}
	return next;
}

static void wait_until(struct kvpd_courier *k, uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
			       .tv_nsec = (long)(ns % 1000000000ull) };

	pthread_cond_timedwait(&k->wake, &k->lock, &ts);
}

static void *lane_main(void *arg)
{
	struct kvpd_courier_lane *l = arg;
	struct kvpd_courier *k = l->k;

	pthread_mutex_lock(&k->lock);
	for (;;) {
		uint64_t next = k->resting ? rests_end(k) : 0, cpu_ns;
		struct kvpd_courier_queue *q;
		struct kvpd_parcel *p;

		if (!k->ready) {
			if (k->stop && !k->resting)
				break;
			if (next)
				wait_until(k, next);
			else
				pthread_cond_wait(&k->wake, &k->lock);
			continue;
		}
		q = ready_pop(k);
		p = q->head;
		q->head = p->next;
		if (!q->head)
			q->tail = NULL;
		q->in_hand = p->seq;
		pthread_mutex_unlock(&k->lock);
		cpu_ns = kvpd_lane_deliver(k, l, p);
		pthread_mutex_lock(&k->lock);
		q->in_hand = 0;
		if (p->counted)
			q->copies -= p->npass;
		free(p);
		if (cpu_ns >= KVPD_COURIER_SLOW_NS) {
			q->rest_until = kvpd_courier_clock_ns(CLOCK_MONOTONIC) + KVPD_COURIER_REST * cpu_ns;
			k->resting++;
			/* Lanes asleep until an earlier rest's end: this one may end first. */
			pthread_cond_broadcast(&k->wake);
		} else if (q->head) {
			ready_push(k, q);
		} else {
			queue_forget(k, q);
		}
	}
	pthread_mutex_unlock(&k->lock);
	return NULL;
}

static void courier_sync_fini(struct kvpd_courier *k)
{
	pthread_mutex_destroy(&k->lock);
	pthread_cond_destroy(&k->wake);
	pthread_cond_destroy(&k->idle);
}

/* Ends the lanes' threads once everything queued is out. */
static void lanes_join(struct kvpd_courier *k)
{
	pthread_mutex_lock(&k->lock);
	k->stop = true;
	pthread_cond_broadcast(&k->wake);
	pthread_mutex_unlock(&k->lock);
	for (unsigned i = 0; i < KVPD_COURIER_LANES; i++) {
		if (k->lanes[i].started)
			pthread_join(k->lanes[i].thread, NULL);
		k->lanes[i].started = false;
	}
}

int kvpd_courier_start(struct kvpd_courier *k)
{
	sigset_t all, old;
	int ret = 0;

	pthread_condattr_t monotonic;

	pthread_mutex_init(&k->lock, NULL);
	pthread_condattr_init(&monotonic);
	pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
	pthread_cond_init(&k->wake, &monotonic);
	pthread_condattr_destroy(&monotonic);
	pthread_cond_init(&k->idle, NULL);
	/* Signals belong to the event loop's signalfd. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (unsigned i = 0; i < KVPD_COURIER_LANES && !ret; i++) {
		struct kvpd_courier_lane *l = &k->lanes[i];

		l->k = k;
		l->index = i;
		ret = -pthread_create(&l->thread, NULL, lane_main, l);
		/* Named, so that top, perf and the tests can tell their time from the loop's. */
		if (!ret) {
			pthread_setname_np(l->thread, "kvpoold-courier");
			l->started = true;
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		lanes_join(k);
		k->stop = false;
		courier_sync_fini(k);
		return ret;
	}
	k->started = true;
	return 0;
}

void kvpd_courier_stop(struct kvpd_courier *k)
{
	if (k->started) {
		lanes_join(k);
		courier_sync_fini(k);
		k->started = false;
	}
	for (unsigned i = 0; i < KVPD_COURIER_LANES; i++)
		kvpd_lane_stop(&k->lanes[i]);
}

/* Out of memory: delivered here once nothing is queued, so that no close overtakes a send. */
static uint64_t post_here(struct kvpd_courier *k, const struct kvpd_parcel *p)
{
	struct kvpd_parcel here = *p;

	pthread_mutex_lock(&k->lock);
	while (k->queues)
		pthread_cond_wait(&k->idle, &k->lock);
	here.seq = ++k->posted;
	pthread_mutex_unlock(&k->lock);
	kvpd_lane_deliver(k, NULL, &here);
	return here.seq;
}

uint64_t kvpd_courier_post(struct kvpd_courier *k, uint64_t key, const struct kvpd_parcel *p)
{
	struct kvpd_courier_queue *q;
	struct kvpd_parcel *copy;
	uint64_t seq;

	if (!k->started) {
		kvpd_lane_deliver(k, NULL, p);
		return ++k->posted;
	}
	copy = malloc(sizeof(*copy));
	if (!copy)
		return post_here(k, p);
	*copy = *p;
	copy->next = NULL;
	pthread_mutex_lock(&k->lock);
	q = queue_find(k, key);
	if (!q) {
		q = calloc(1, sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&k->lock);
			free(copy);
			return post_here(k, p);
		}
		q->key = key;
		q->next = k->queues;
		k->queues = q;
	}
	/* Read here: once the lock is let go, a lane may deliver and free it. */
	seq = copy->seq = ++k->posted;
	if (q->tail)
		q->tail->next = copy;
	else
		q->head = copy;
	q->tail = copy;
	if (copy->counted)
		q->copies += copy->npass;
	if (!q->in_hand && !q->ready && !q->rest_until)
		ready_push(k, q);
	pthread_mutex_unlock(&k->lock);
	return seq;
}

bool kvpd_courier_delivered(struct kvpd_courier *k, uint64_t key, uint64_t seq)
{
	struct kvpd_courier_queue *q;
	bool out = true;

	if (!k->started)
		return true;
	pthread_mutex_lock(&k->lock);
	q = queue_find(k, key);
	/* A key's parcels go in order: @seq is out when its key's oldest is younger. */
	if (q && q->in_hand)
		out = seq < q->in_hand;
	else if (q && q->head)
		out = seq < q->head->seq;
	pthread_mutex_unlock(&k->lock);
	return out;
}

unsigned kvpd_courier_copies(struct kvpd_courier *k, uint64_t key)
{
	struct kvpd_courier_queue *q;
	unsigned copies = 0;

	if (!k->started)
		return 0;
	pthread_mutex_lock(&k->lock);
	q = queue_find(k, key);
	if (q)
		copies = q->copies;
	pthread_mutex_unlock(&k->lock);
	return copies;
}

void kvpd_courier_close(struct kvpd_courier *k, uint64_t key, int fd)
{
	struct kvpd_parcel p = KVPD_PARCEL_INIT;

	p.close[p.nclose++] = fd;
	if (fd >= 0)
		kvpd_courier_post(k, key, &p);
}
