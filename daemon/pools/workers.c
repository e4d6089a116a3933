/* SPDX-License-Identifier: MIT */
/*
 * The worker threads: take tasks of queued jobs, the clients' lanes in turn and
 * each lane's jobs in order, and hand finished jobs back.
 *
 * At most max_running tasks run at once, the event loop's included (it runs short
 * ones when idle: kvpd_workers_help): more would only share cores, and a task
 * that loses its core for a time slice delays its whole job by milliseconds.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "loop/spin.h"
#include "pools/jobs.h"

/* Hands @job to the loop; the caller holds the lock. */
static void finish_locked(struct kvpd_workers *w, struct kvpd_job *job)
{
	job->next = NULL;
	if (w->done_tail)
		w->done_tail->next = job;
	else
		w->done = job;
	w->done_tail = job;
	__atomic_add_fetch(&w->ndone, 1, __ATOMIC_RELEASE);
}

/* After the lock is let go: the loop's eventfd, if it sleeps. */
static void wake_loop(struct kvpd_workers *w)
{
	uint64_t one = 1;

	/*
	 * Only a sleeping loop needs the eventfd; a write that wakes nobody still
	 * costs a syscall. Pairs with the fence in kvpd_workers_loop_sleeping.
	 */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&w->loop_sleeping, __ATOMIC_RELAXED))
		return;
	/* The daemon's own eventfd (never shared): a write cannot block. */
	if (write(w->done_efd, &one, sizeof(one)) < 0)
		abort();
}

static void finish(struct kvpd_workers *w, struct kvpd_job *job)
{
	pthread_mutex_lock(&w->lock);
	finish_locked(w, job);
	pthread_mutex_unlock(&w->lock);
	wake_loop(w);
}

/*
 * The job whose task comes next: the first of the lane whose turn it is. The
 * caller holds the lock; without it, only whether there is one may be asked
 * (w->round, atomic): a lane's head changes under the lock.
 */
static struct kvpd_job *next_job(const struct kvpd_workers *w)
{
	return w->round ? w->round->head : NULL;
}

/* Puts @lane last in the round; the caller holds the lock. */
static void enter_round(struct kvpd_workers *w, struct kvpd_lane *lane)
{
	lane->next = NULL;
	lane->queued = true;
	if (w->round_tail)
		w->round_tail->next = lane;
	else
		__atomic_store_n(&w->round, lane, __ATOMIC_RELAXED);
	w->round_tail = lane;
}

/* Takes the next task of the round's first lane, which then goes last; the caller holds the lock. */
static struct kvpd_job *take_task(struct kvpd_workers *w, uint32_t *task)
{
	struct kvpd_lane *lane = w->round;
	struct kvpd_job *job = lane->head;

	*task = job->next_task++;
	if (job->next_task == job->ntasks) {
		lane->head = job->next;
		if (!lane->head)
			lane->tail = NULL;
	}
	/* atomic: kvpd_workers_help and the spinners peek at it without the lock */
	__atomic_store_n(&w->round, lane->next, __ATOMIC_RELAXED);
	if (!w->round)
		w->round_tail = NULL;
	lane->queued = false;
	if (lane->head)
		enter_round(w, lane);
	w->running++;
	return job;
}

/* A task of @job is done, whichever thread saw it: the last one hands the job back. */
static void task_done(struct kvpd_job *job)
{
	if (__atomic_sub_fetch(&job->tasks_left, 1, __ATOMIC_ACQ_REL) == 0)
		finish(job->workers, job);
}

/* Runs a task taken with take_task; returns with the lock held. */
static void run_task(struct kvpd_workers *w, struct kvpd_job *job, uint32_t task)
{
	pthread_mutex_unlock(&w->lock);
	if (w->run(job, task) != KVPD_TASK_LATER)
		task_done(job);
	pthread_mutex_lock(&w->lock);
	w->running--;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spins until a job is queued, stop is set or @deadline passes; the lock is not held. */
static void spin_for_job(struct kvpd_workers *w, uint64_t deadline)
{
	for (unsigned spins = 1; !__atomic_load_n(&w->round, __ATOMIC_RELAXED) &&
				 !__atomic_load_n(&w->stop, __ATOMIC_RELAXED); spins++) {
		if (spins % 32)
			kvpd_cpu_relax();
		else if (now_ns() < deadline)
			sched_yield(); /* never hold a core a runnable client needs */
		else
			break;
	}
}

static void *worker_main(void *arg)
{
	struct kvpd_workers *w = arg;
	uint64_t last_task = 0;

	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		struct kvpd_job *job;
		uint32_t task;

		if (!w->round && w->spin_ns && now_ns() - last_task < w->spin_ns) {
			w->spinning++;
			pthread_mutex_unlock(&w->lock);
			spin_for_job(w, last_task + w->spin_ns);
			pthread_mutex_lock(&w->lock);
			w->spinning--;
			if (!w->round)
				last_task = 0;
			continue;
		}
		if (!w->round || w->running >= w->max_running) {
			w->sleepers++;
			pthread_cond_wait(&w->wake, &w->lock);
			w->sleepers--;
			continue;
		}
		job = take_task(w, &task);
		run_task(w, job, task);
		last_task = now_ns();
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

bool kvpd_workers_help(struct kvpd_workers *w)
{
	struct kvpd_job *job;
	uint32_t task;

	if (!__atomic_load_n(&w->round, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&w->lock);
	job = next_job(w);
	if (!job || !job->short_tasks || w->running >= w->max_running) {
		pthread_mutex_unlock(&w->lock);
		return false;
	}
	job = take_task(w, &task);
	run_task(w, job, task);
	/*
	 * The slot is free again. A worker that goes on takes its next task itself,
	 * but the loop takes only short ones: a long one next in the queue needs a
	 * worker that slept for want of this slot.
	 */
	job = next_job(w);
	if (job && !job->short_tasks && w->sleepers && !w->spinning)
		pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
	return true;
}

bool kvpd_workers_loop_sleeping(struct kvpd_workers *w, bool sleeping)
{
	__atomic_store_n(&w->loop_sleeping, sleeping, __ATOMIC_RELAXED);
	if (!sleeping)
		return false;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(&w->ndone, __ATOMIC_RELAXED) != 0;
}

int kvpd_workers_start(struct kvpd_workers *w, unsigned nthreads, unsigned spin_us,
		       kvpd_task_fn *run)
{
	int ret = 0;

	w->run = run;
	w->max_running = nthreads;
	w->spin_ns = spin_us * 1000ull;
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
		pthread_setname_np(w->threads[w->nthreads], "kvpoold-worker");
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
	__atomic_store_n(&w->stop, true, __ATOMIC_RELAXED); /* spinners read it unlocked */
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

void kvpd_workers_adopt(struct kvpd_workers *w, struct kvpd_job *job)
{
	job->workers = w;
	job->tasks_left = job->ntasks;
	job->task_done = task_done;
}

void kvpd_workers_submit(struct kvpd_workers *w, struct kvpd_job *job)
{
	unsigned wake;

	struct kvpd_lane *lane = job->lane ? job->lane : &w->solo;

	job->next = NULL;
	job->next_task = 0;
	job->tasks_left = job->ntasks;
	job->workers = w;
	job->task_done = task_done;
	pthread_mutex_lock(&w->lock);
	if (lane->tail)
		lane->tail->next = job;
	else
		lane->head = job;
	lane->tail = job;
	if (!lane->queued)
		enter_round(w, lane);
	/*
	 * Wake one worker per task that has a free slot, less the one the loop
	 * takes itself when the tasks are short: a worker woken for nothing costs a
	 * core some microseconds.
	 */
	wake = w->max_running > w->running ? w->max_running - w->running : 0;
	if (wake > job->ntasks)
		wake = job->ntasks;
	if (job->short_tasks && wake > 1)
		wake--;
	wake = wake > w->spinning ? wake - w->spinning : 0;
	if (wake > w->sleepers)
		wake = w->sleepers;
	if (wake == w->sleepers && wake > 1)
		pthread_cond_broadcast(&w->wake);
	else
		while (wake--)
			pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

void kvpd_workers_cancel(struct kvpd_workers *w, struct kvpd_lane *lane)
{
	bool finished = false;

	pthread_mutex_lock(&w->lock);
	while (lane->head) {
		struct kvpd_job *job = lane->head;
		uint32_t untaken = job->ntasks - job->next_task;

		lane->head = job->next;
		job->cancelled = true;
		job->next_task = job->ntasks;
		/* Its running tasks (if any) finish it; else it is finished now. */
		if (__atomic_sub_fetch(&job->tasks_left, untaken, __ATOMIC_ACQ_REL) == 0) {
			finish_locked(w, job);
			finished = true;
		}
	}
	lane->tail = NULL;
	if (lane->queued) {
		struct kvpd_lane **link = &w->round, *prev = NULL;

		while (*link != lane) {
			prev = *link;
			link = &(*link)->next;
		}
		__atomic_store_n(link, lane->next, __ATOMIC_RELAXED);
		if (w->round_tail == lane)
			w->round_tail = prev;
		lane->queued = false;
	}
	pthread_mutex_unlock(&w->lock);
	if (finished)
		wake_loop(w);
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
