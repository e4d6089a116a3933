/* SPDX-License-Identifier: MIT */
/*
 * The worker pool (daemon/pools/workers.c) with a fake backend whose tasks sleep a
 * little and record how many run at once: every task runs exactly once, never
 * more than --threads at a time counting the event loop's own (played here by
 * the test thread calling kvpd_workers_help), the loop takes only short tasks,
 * a long job queued behind the loop's task gets a worker when that task ends,
 * a finished job writes the loop's eventfd only while the loop sleeps, the
 * clients' lanes take turns task by task, and a cancelled lane's tasks not yet
 * taken never run.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../daemon/pools/jobs.h"

#define MAX_TASKS 64

struct fake {
	unsigned now, peak;        /* tasks running, the most at once */
	unsigned runs[MAX_TASKS];  /* times each task ran */
	void (*hook)(struct kvpd_job *job); /* called first by every task */
	struct kvpd_job *order[MAX_TASKS]; /* the job of each task run, in the order they ran */
	unsigned nrun;
	bool later;                /* tasks finish later (KVPD_TASK_LATER), as a GPU's do */
};

static struct fake fake;

static int fake_task(struct kvpd_job *job, uint32_t task)
{
	unsigned now = __atomic_add_fetch(&fake.now, 1, __ATOMIC_SEQ_CST), peak;
	struct timespec ts = { 0, 1000000 }; /* 1 ms: long enough for the others to pile up */

	if (fake.hook)
		fake.hook(job);
	peak = __atomic_load_n(&fake.peak, __ATOMIC_SEQ_CST);
	while (now > peak && !__atomic_compare_exchange_n(&fake.peak, &peak, now, false,
							  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	fake.order[__atomic_fetch_add(&fake.nrun, 1, __ATOMIC_SEQ_CST) % MAX_TASKS] = job;
	nanosleep(&ts, NULL);
	__atomic_add_fetch(&fake.runs[task], 1, __ATOMIC_SEQ_CST);
	__atomic_sub_fetch(&fake.now, 1, __ATOMIC_SEQ_CST);
	return fake.later ? KVPD_TASK_LATER : 0;
}

/*
 * Starts @nthreads workers and waits until all of them sleep: one still starting up
 * would find the queue on its own, without the wake-up the test is about.
 */
static void start_asleep(struct kvpd_workers *w, unsigned nthreads, unsigned spin_us)
{
	unsigned sleepers = 0;

	assert_int_equal(kvpd_workers_start(w, nthreads, spin_us, fake_task), 0);
	while (sleepers < nthreads) {
		usleep(100);
		pthread_mutex_lock(&w->lock);
		sleepers = w->sleepers;
		pthread_mutex_unlock(&w->lock);
	}
}

/* Submits a job of @ntasks; the test thread helps until it is done. Returns the tasks it ran. */
static unsigned run_job(struct kvpd_workers *w, uint32_t ntasks, bool short_tasks)
{
	struct kvpd_job job = { .ntasks = ntasks, .short_tasks = short_tasks };
	struct kvpd_job *done;
	unsigned helped = 0;

	memset(&fake, 0, sizeof(fake));
	kvpd_workers_submit(w, &job);
	while (!(done = kvpd_workers_take_done(w)))
		helped += kvpd_workers_help(w);
	assert_ptr_equal(done, &job);
	assert_null(done->next);
	assert_null(kvpd_workers_take_done(w));
	for (uint32_t t = 0; t < ntasks; t++)
		assert_int_equal(fake.runs[t], 1);
	return helped;
}

static void test_short_tasks_share_the_slots_with_the_loop(void **state)
{
	struct kvpd_workers w = { 0 };
	unsigned helped;

	(void)state;
	start_asleep(&w, 2, 0);
	helped = run_job(&w, 16, true);
	assert_true(helped >= 1);
	assert_true(helped <= 16);
	assert_int_equal(fake.peak, 2);
	kvpd_workers_stop(&w);
}

static void test_long_tasks_stay_with_the_workers(void **state)
{
	struct kvpd_workers w = { 0 };

	(void)state;
	start_asleep(&w, 3, 0);
	assert_int_equal(run_job(&w, 24, false), 0);
	assert_int_equal(fake.peak, 3);
	kvpd_workers_stop(&w);
}

static void test_one_thread_one_task_at_a_time(void **state)
{
	struct kvpd_workers w = { 0 };

	(void)state;
	/* spinning workers: the spin ends in a sleep that submit must still wake */
	start_asleep(&w, 1, 50);
	run_job(&w, 8, true);
	assert_int_equal(fake.peak, 1);
	run_job(&w, 8, false);
	assert_int_equal(fake.peak, 1);
	kvpd_workers_stop(&w);
}

/* The job the running task queues (test_the_loops_slot_goes_to_a_long_job). */
static struct kvpd_workers *behind_pool;
static struct kvpd_job behind;
static pthread_t loop_thread;
static unsigned runs_on_loop; /* atomic: a worker may run the hook too */

static void queue_a_long_job(struct kvpd_job *job)
{
	if (job == &behind)
		return;
	if (pthread_equal(pthread_self(), loop_thread))
		__atomic_add_fetch(&runs_on_loop, 1, __ATOMIC_RELAXED);
	behind = (struct kvpd_job){ .ntasks = 1, .short_tasks = false };
	/* every slot is taken (this task's): submit wakes nobody */
	kvpd_workers_submit(behind_pool, &behind);
}

/*
 * One slot, one sleeping worker; the loop runs a short task that queues a long
 * job. The loop never takes a long task, and the worker sleeps for want of the
 * slot: only the loop, giving its slot back, can hand the job over.
 */
static void test_the_loops_slot_goes_to_a_long_job(void **state)
{
	struct kvpd_workers w = { 0 };

	(void)state;
	start_asleep(&w, 1, 0);
	behind_pool = &w;
	runs_on_loop = 0;
	loop_thread = pthread_self();
	for (int i = 0; i < 20; i++) {
		struct kvpd_job first = { .ntasks = 1, .short_tasks = true };
		unsigned ndone = 0;

		memset(&fake, 0, sizeof(fake));
		fake.hook = queue_a_long_job;
		/* the worker asleep first: submit wakes it, and the loop races it for the task */
		while (!__atomic_load_n(&w.sleepers, __ATOMIC_ACQUIRE))
			usleep(100);
		kvpd_workers_submit(&w, &first);
		kvpd_workers_help(&w);
		for (int ms = 0; ndone < 2 && ms < 5000; ms++) {
			for (struct kvpd_job *j = kvpd_workers_take_done(&w); j; j = j->next)
				ndone++;
			usleep(1000);
		}
		assert_int_equal(ndone, 2);
	}
	/* the worker's futex wake-up takes microseconds, the loop's help none */
	assert_true(__atomic_load_n(&runs_on_loop, __ATOMIC_RELAXED) > 0);
	fake.hook = NULL;
	kvpd_workers_stop(&w);
}

/*
 * Until a job is done and its worker is back under the lock: past finish(), whose
 * eventfd write comes after ndone, so that what the test reads next is all there is.
 */
static void wait_done(struct kvpd_workers *w)
{
	for (;;) {
		bool settled;

		pthread_mutex_lock(&w->lock);
		settled = w->ndone && !w->running;
		pthread_mutex_unlock(&w->lock);
		if (settled)
			return;
		usleep(100);
	}
}

static void test_eventfd_only_for_a_sleeping_loop(void **state)
{
	struct kvpd_workers w = { 0 };
	struct kvpd_job a = { .ntasks = 1 }, b = { .ntasks = 1 };
	uint64_t v = 0;

	(void)state;
	start_asleep(&w, 1, 0);
	memset(&fake, 0, sizeof(fake));

	/* awake loop: no write; going to sleep, it learns a job is waiting */
	assert_false(kvpd_workers_loop_sleeping(&w, false));
	kvpd_workers_submit(&w, &a);
	wait_done(&w);
	assert_int_equal(read(w.done_efd, &v, sizeof(v)), -1);
	assert_int_equal(errno, EAGAIN);
	assert_true(kvpd_workers_loop_sleeping(&w, true));
	assert_ptr_equal(kvpd_workers_take_done(&w), &a);

	/* sleeping loop, nothing done: it may sleep, and the next job wakes it */
	assert_false(kvpd_workers_loop_sleeping(&w, true));
	kvpd_workers_submit(&w, &b);
	wait_done(&w);
	assert_int_equal(read(w.done_efd, &v, sizeof(v)), (ssize_t)sizeof(v));
	assert_int_equal(v, 1);
	assert_ptr_equal(kvpd_workers_take_done(&w), &b);
	kvpd_workers_stop(&w);
}

/* Collects finished jobs until @n have come back (at most 5 s). */
static unsigned collect(struct kvpd_workers *w, unsigned n)
{
	unsigned got = 0;

	for (int ms = 0; got < n && ms < 5000; ms++) {
		for (struct kvpd_job *j = kvpd_workers_take_done(w); j; j = j->next)
			got++;
		if (got < n)
			usleep(1000);
	}
	return got;
}

/*
 * One worker; client A queues 8 tasks, then client B 2. In one queue B would
 * wait for all of A's; in turns, B's two are among the first five to run.
 */
static void test_lanes_take_turns(void **state)
{
	struct kvpd_workers w = { 0 };
	struct kvpd_lane la = { 0 }, lb = { 0 };
	struct kvpd_job a = { .ntasks = 8, .lane = &la }, b = { .ntasks = 2, .lane = &lb };
	unsigned last_b = 0;

	(void)state;
	start_asleep(&w, 1, 0);
	memset(&fake, 0, sizeof(fake));
	kvpd_workers_submit(&w, &a);
	kvpd_workers_submit(&w, &b);
	assert_int_equal(collect(&w, 2), 2);
	assert_int_equal(fake.nrun, 10);
	for (unsigned i = 0; i < fake.nrun; i++)
		if (fake.order[i] == &b)
			last_b = i;
	assert_true(last_b <= 4);
	kvpd_workers_stop(&w);
}

/* The hook of test_cancel: the first task cancels its own lane. */
static struct kvpd_workers *cancel_pool;

static void cancel_own_lane(struct kvpd_job *job)
{
	if (__atomic_load_n(&fake.nrun, __ATOMIC_SEQ_CST) == 0)
		kvpd_workers_cancel(cancel_pool, job->lane);
}

/* A client gone while its job runs: the task running ends, the other seven never start. */
static void test_cancel_drops_untaken_tasks(void **state)
{
	struct kvpd_workers w = { 0 };
	struct kvpd_lane lane = { 0 };
	struct kvpd_job job = { .ntasks = 8, .lane = &lane };
	unsigned runs = 0;

	(void)state;
	start_asleep(&w, 1, 0);
	memset(&fake, 0, sizeof(fake));
	cancel_pool = &w;
	fake.hook = cancel_own_lane;
	kvpd_workers_submit(&w, &job);
	assert_int_equal(collect(&w, 1), 1);
	assert_true(job.cancelled);
	for (uint32_t t = 0; t < MAX_TASKS; t++)
		runs += fake.runs[t];
	assert_int_equal(runs, 1);
	assert_int_equal(fake.runs[0], 1);
	assert_false(lane.queued);
	assert_null(lane.head);
	fake.hook = NULL;
	kvpd_workers_stop(&w);
}

/* What a GPU's completion thread does: reports a job's tasks done, from another thread. */
static void *finish_later(void *arg)
{
	struct kvpd_job *job = arg;

	for (uint32_t t = 0; t < job->ntasks; t++)
		job->task_done(job);
	return NULL;
}

/*
 * Tasks that finish later: every task has run and left its worker, yet the
 * job comes back only once the backend has reported each done.
 */
static void test_tasks_that_finish_later(void **state)
{
	struct kvpd_workers w = { 0 };
	struct kvpd_job job = { .ntasks = 6 };
	unsigned ran = 0, running = 1;
	pthread_t t;

	(void)state;
	start_asleep(&w, 2, 0);
	memset(&fake, 0, sizeof(fake));
	fake.later = true;
	kvpd_workers_submit(&w, &job);
	while (ran < job.ntasks || running) {
		usleep(200);
		ran = __atomic_load_n(&fake.nrun, __ATOMIC_SEQ_CST);
		pthread_mutex_lock(&w.lock);
		running = w.running;
		pthread_mutex_unlock(&w.lock);
	}
	/* No worker holds a slot for them, and the job is not back. */
	assert_null(kvpd_workers_take_done(&w));
	assert_int_equal(__atomic_load_n(&job.tasks_left, __ATOMIC_SEQ_CST), 6);
	assert_int_equal(pthread_create(&t, NULL, finish_later, &job), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	/* The last report finished it, on the reporting thread. */
	assert_ptr_equal(kvpd_workers_take_done(&w), &job);
	for (uint32_t i = 0; i < job.ntasks; i++)
		assert_int_equal(fake.runs[i], 1);
	kvpd_workers_stop(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_short_tasks_share_the_slots_with_the_loop),
		cmocka_unit_test(test_long_tasks_stay_with_the_workers),
		cmocka_unit_test(test_one_thread_one_task_at_a_time),
		cmocka_unit_test(test_the_loops_slot_goes_to_a_long_job),
		cmocka_unit_test(test_eventfd_only_for_a_sleeping_loop),
		cmocka_unit_test(test_lanes_take_turns),
		cmocka_unit_test(test_cancel_drops_untaken_tasks),
		cmocka_unit_test(test_tasks_that_finish_later),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
