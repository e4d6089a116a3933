/* SPDX-License-Identifier: MIT */
/*
 * A tier's copier: one thread running a queue of its jobs in order: a host
 * tier's copies down, a block a task, on the pool's backend, at a low
 * priority (tier_internal.h says why); a disk tier's reads and writes
 * (disk_io.c), one copier each way.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tier/tier_internal.h"

struct tier_copier {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct kvpd_job *head, *tail;
	/*
	 * Without @run: the job being run, its tasks taken under the lock by the
	 * copier and by an idle event loop (kvpd_tier_copier_help) alike, and the
	 * next queued one started by whichever finds them all taken: a job is not
	 * looked at again once its tasks are all taken (the loop may free it).
	 */
	struct kvpd_job *current;
	uint32_t next, ntasks;
	bool stop;
	bool background;
	tier_run_fn *run;            /* NULL: the pool's backend runs the tasks, the loop helping */
	void *arg;
};

/*
 * Up to @most tasks of the job being run, or of the next queued one (which
 * then is), taken, the first at *@task: how many (0: none). The caller holds
 * the lock.
 */
static uint32_t take_tasks(struct tier_copier *cp, uint32_t most, struct kvpd_job **job,
			   uint32_t *task)
{
	uint32_t n;

	if (!cp->current || cp->next == cp->ntasks) {
		cp->current = cp->head;
		if (!cp->current)
			return 0;
		cp->head = cp->current->next;
		if (!cp->head)
			cp->tail = NULL;
		cp->next = 0;
		cp->ntasks = cp->current->ntasks;
	}
	n = cp->ntasks - cp->next < most ? cp->ntasks - cp->next : most;
	*job = cp->current;
	*task = cp->next;
	cp->next += n;
	return n;
}

/* The last task_done hands the job back to the loop: it is not read after. */
static void run_taken(struct kvpd_job *job, uint32_t task, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		if (kvpd_job_run(job, task + k) != KVPD_TASK_LATER)
			job->task_done(job);
}

bool kvpd_tier_copier_help(struct tier_copier *cp, size_t bytes, size_t task_bytes)
{
	uint32_t most = (uint32_t)(bytes / (task_bytes ? task_bytes : 1)), task, n;
	struct kvpd_job *job;

	pthread_mutex_lock(&cp->lock);
	n = cp->run ? 0 : take_tasks(cp, most ? most : 1, &job, &task);
	pthread_mutex_unlock(&cp->lock);
	if (n)
		run_taken(job, task, n);
	return n;
}

static void *copier_main(void *arg)
{
	struct tier_copier *cp = arg;

	/*
	 * Background work: it never preempts a thread that wakes (SCHED_BATCH),
	 * and at nice 10 takes a tenth of what a client would of a busy core, so
	 * the event loop and the clients do not wait for it (a bystander's round
	 * trip must not pay for the tier). SCHED_IDLE protected them no better on
	 * a busy 2-core machine, and there starved the copies (the tier's hit rate
	 * fell by half: bench/README.md).
	 */
	if (cp->background) {
		pthread_setschedparam(pthread_self(), SCHED_BATCH, &(struct sched_param){ 0 });
		setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
	}
	pthread_mutex_lock(&cp->lock);
	for (;;) {
		struct kvpd_job *job;
		uint32_t task, n;

		/* A few tasks at a time: an idle event loop may take some too. */
		if (!cp->run && (n = take_tasks(cp, 8, &job, &task))) {
			pthread_mutex_unlock(&cp->lock);
			run_taken(job, task, n);
			pthread_mutex_lock(&cp->lock);
			continue;
		}
		if (cp->run && cp->head) {
			job = cp->head;
			cp->head = job->next;
			if (!cp->head)
				cp->tail = NULL;
			pthread_mutex_unlock(&cp->lock);
			cp->run(cp->arg, job);
			pthread_mutex_lock(&cp->lock);
			continue;
		}
		if (cp->stop)
			break;
		pthread_cond_wait(&cp->wake, &cp->lock);
	}
	pthread_mutex_unlock(&cp->lock);
	return NULL;
}

int kvpd_tier_copier_start(struct tier_copier **out, const char *name, bool background,
			   tier_run_fn *run, void *arg)
{
	struct tier_copier *cp = calloc(1, sizeof(*cp));
	int ret;

	if (!cp)
		return -ENOMEM;
	cp->background = background;
	cp->run = run;
	cp->arg = arg;
	pthread_mutex_init(&cp->lock, NULL);
	pthread_cond_init(&cp->wake, NULL);
	ret = pthread_create(&cp->thread, NULL, copier_main, cp);
	if (ret) {
		pthread_cond_destroy(&cp->wake);
		pthread_mutex_destroy(&cp->lock);
		free(cp);
		return -ret;
	}
	pthread_setname_np(cp->thread, name);
	*out = cp;
	return 0;
}

void kvpd_tier_copier_stop(struct tier_copier *cp)
{
	pthread_mutex_lock(&cp->lock);
	cp->stop = true;
	pthread_cond_signal(&cp->wake);
	pthread_mutex_unlock(&cp->lock);
	pthread_join(cp->thread, NULL);
	pthread_cond_destroy(&cp->wake);
	pthread_mutex_destroy(&cp->lock);
	free(cp);
}

void kvpd_tier_copier_push(struct tier_copier *cp, struct kvpd_job *job, bool first)
{
	job->next = NULL;
	job->next_task = 0;
	pthread_mutex_lock(&cp->lock);
	if (first && cp->head) {
		job->next = cp->head;
		cp->head = job;
	} else {
		if (cp->tail)
			cp->tail->next = job;
		else
			cp->head = job;
		cp->tail = job;
	}
	pthread_cond_signal(&cp->wake);
	pthread_mutex_unlock(&cp->lock);
}
