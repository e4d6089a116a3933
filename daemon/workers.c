/* SPDX-License-Identifier: MIT */
/* The worker threads: take tasks of queued jobs in order, hand finished jobs back. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "jobs.h"

static void finish(struct kvpd_workers *w, struct kvpd_job *job)
{
	uint64_t one = 1;

	pthread_mutex_lock(&w->lock);
	job->next = NULL;
	if (w->done_tail)
		w->done_tail->next = job;
	else
		w->done = job;
	w->done_tail = job;
	__atomic_add_fetch(&w->ndone, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&w->lock);
	/* The daemon's own eventfd (never shared): a write cannot block. */
	if (write(w->done_efd, &one, sizeof(one)) < 0)
		abort();
}

static void *worker_main(void *arg)
{
	struct kvpd_workers *w = arg;

	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		struct kvpd_job *job = w->queue;
		uint32_t task;

		if (!job) {
			pthread_cond_wait(&w->wake, &w->lock);
			continue;
		}
		task = job->next_task++;
		if (job->next_task == job->ntasks) {
			w->queue = job->next;
			if (!w->queue)
				w->queue_tail = NULL;
		}
		pthread_mutex_unlock(&w->lock);
		w->backend->run_task(job, task);
		if (__atomic_sub_fetch(&job->tasks_left, 1, __ATOMIC_ACQ_REL) == 0)
			finish(w, job);
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int kvpd_workers_start(struct kvpd_workers *w, unsigned nthreads,
		       const struct kvpd_backend_ops *backend)
{
	int ret = 0;

	w->backend = backend;
	w->done_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->done_efd < 0)
		return -errno;
	w->threads = calloc(nthreads, sizeof(*w->threads));
	if (!w->threads) {
		ret = -ENOMEM;
		goto err_close_efd;
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	/* Signals belong to the event loop's signalfd: workers inherit a full block mask. */
	sigset_t all, old;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (w->nthreads = 0; w->nthreads < nthreads; w->nthreads++) {
		ret = -pthread_create(&w->threads[w->nthreads], NULL, worker_main, w);
		if (ret)
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		goto err_stop;
	return 0;

err_stop:
	kvpd_workers_stop(w);
	return ret;
err_close_efd:
	close(w->done_efd);
	w->done_efd = -1;
	return ret;
}

void kvpd_workers_stop(struct kvpd_workers *w)
{
	if (!w->threads)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->nthreads; i++)
		pthread_join(w->threads[i], NULL);
	free(w->threads);
	w->threads = NULL;
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->wake);
	close(w->done_efd);
	w->done_efd = -1;
}

void kvpd_workers_submit(struct kvpd_workers *w, struct kvpd_job *job)
{
	job->next = NULL;
	job->next_task = 0;
	job->tasks_left = job->ntasks;
	pthread_mutex_lock(&w->lock);
	if (w->queue_tail)
		w->queue_tail->next = job;
	else
		w->queue = job;
	w->queue_tail = job;
	if (job->ntasks == 1)
		pthread_cond_signal(&w->wake);
	else
		pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

struct kvpd_job *kvpd_workers_take_done(struct kvpd_workers *w)
{
	struct kvpd_job *jobs;

	if (!__atomic_load_n(&w->ndone, __ATOMIC_ACQUIRE))
		return NULL;
	pthread_mutex_lock(&w->lock);
	jobs = w->done;
	w->done = w->done_tail = NULL;
	w->ndone = 0;
	pthread_mutex_unlock(&w->lock);
	return jobs;
}
