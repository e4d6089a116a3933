/* SPDX-License-Identifier: MIT */
/*
 * A tier's copier: one thread taking the tier's jobs, promotions before copies
 * down (an ALLOC waits for the first; nothing waits for the second), each job's
 * tasks in order, on the pool's backend.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "tier/tier_internal.h"

struct tier_copier {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct kvpd_job *up, *up_tail, *down, *down_tail;
	bool stop;
};

static struct kvpd_job *take(struct tier_copier *cp)
{
	struct kvpd_job **head = cp->up ? &cp->up : &cp->down;
	struct kvpd_job **tail = cp->up ? &cp->up_tail : &cp->down_tail;
	struct kvpd_job *job = *head;

	*head = job->next;
	if (!*head)
		*tail = NULL;
	return job;
}

static void *copier_main(void *arg)
{
	struct tier_copier *cp = arg;

	pthread_mutex_lock(&cp->lock);
	for (;;) {
		struct kvpd_job *job;
		uint32_t ntasks;

		while (!cp->up && !cp->down && !cp->stop)
			pthread_cond_wait(&cp->wake, &cp->lock);
		if (!cp->up && !cp->down)
			break;
		job = take(cp);
		ntasks = job->ntasks; /* the last task_done hands the job back: not read after */
		pthread_mutex_unlock(&cp->lock);
		for (uint32_t task = 0; task < ntasks; task++)
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
	bool up = job->type == KVPD_JOB_TIER_UP;
	struct kvpd_job **head = up ? &cp->up : &cp->down;
	struct kvpd_job **tail = up ? &cp->up_tail : &cp->down_tail;

	job->next = NULL;
	pthread_mutex_lock(&cp->lock);
	if (*tail)
		(*tail)->next = job;
	else
		*head = job;
	*tail = job;
	pthread_cond_signal(&cp->wake);
	pthread_mutex_unlock(&cp->lock);
}
