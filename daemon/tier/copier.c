/* SPDX-License-Identifier: MIT */
/*
 * A tier's copier: one thread running its copies down, a block a task, on the
 * pool's backend, at a low priority (tier_internal.h says why).
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
	bool stop;
};

/* The next task of the job at the head; the job leaves the queue with its last task taken. */
static struct kvpd_job *take(struct tier_copier *cp, uint32_t *task)
{
	struct kvpd_job *job = cp->head;

	*task = job->next_task++;
	if (job->next_task == job->ntasks) {
		cp->head = job->next;
		if (!cp->head)
			cp->tail = NULL;
	}
	return job;
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
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &(struct sched_param){ 0 });
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
	pthread_mutex_lock(&cp->lock);
	for (;;) {
		struct kvpd_job *job;
		uint32_t task;

		while (!cp->head && !cp->stop)
			pthread_cond_wait(&cp->wake, &cp->lock);
		if (!cp->head)
			break;
		job = take(cp, &task);
		pthread_mutex_unlock(&cp->lock);
		/* The last task_done hands the job back to the loop: it is not read after. */
		if (kvpd_job_run(job, task) != KVPD_TASK_LATER)
			job->task_done(job);
		pthread_mutex_lock(&cp->lock);
	}
	pthread_mutex_unlock(&cp->lock);
	return NULL;
}

int kvpd_tier_copier_start(struct tier_copier **out)
{
	struct tier_copier *cp = calloc(1, sizeof(*cp));
	int ret;

	if (!cp)
		return -ENOMEM;
	pthread_mutex_init(&cp->lock, NULL);
	pthread_cond_init(&cp->wake, NULL);
	ret = pthread_create(&cp->thread, NULL, copier_main, cp);
	if (ret) {
		pthread_cond_destroy(&cp->wake);
		pthread_mutex_destroy(&cp->lock);
		free(cp);
		return -ret;
	}
	pthread_setname_np(cp->thread, "kvpoold-tier");
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

void kvpd_tier_copier_push(struct tier_copier *cp, struct kvpd_job *job)
{
	job->next = NULL;
	job->next_task = 0;
	pthread_mutex_lock(&cp->lock);
	if (cp->tail)
		cp->tail->next = job;
	else
		cp->head = job;
	cp->tail = job;
	pthread_cond_signal(&cp->wake);
	pthread_mutex_unlock(&cp->lock);
}
