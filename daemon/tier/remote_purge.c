/* SPDX-License-Identifier: MIT */
/*
 * POOL_PURGE_REMOTE (kvctl pool purge-remote): a pool's keys out of its
 * cluster tier, for an operator retiring a model or a key. The keys are
 * PREFIX:GEOMETRY:*, so every pool of this geometry and prefix, on any
 * machine, loses them too: they are the same blocks. Each master is SCANned
 * for them and each key UNLINKed alone (keys of one SCAN lie in many slots:
 * a multi-key UNLINK would be CROSSSLOT), on the sends' thread, which a purge
 * holds up for its length. The known set is cleared: a block computed again
 * is sent again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "tier/tier_internal.h"
#include "tier/remote.h"

#define PURGE_SCAN_COUNT "1000"
#define PURGE_ROUND_MS 5000u     /* one SCAN, or one batch of UNLINKs */

struct remote_purge {
	struct remote_head head;     /* REMOTE_PURGE */
	struct kvpd_remote *r;
	struct kvpd_client *c;
	uint64_t user_data;
	uint64_t purged;             /* the thread's: keys deleted */
	int error;                   /* the thread's: -EHOSTUNREACH, a master not reached */
};

static uint64_t deadline(void)
{
	return kvpd_now_ns() + PURGE_ROUND_MS * 1000000ull;
}

/* Every key of @keys (a SCAN's) UNLINKed on node @k: how many were deleted, -1 if not answered. */
static int64_t unlink_keys(struct remote_link *l, uint16_t k, const struct redisReply *keys)
{
	struct remote_cmd *cmds = calloc(keys->elements ? keys->elements : 1, sizeof(*cmds));
	int64_t deleted = 0;
	uint32_t n = 0;

	if (!cmds)
		return -1;
	for (size_t i = 0; i < keys->elements; i++) {
		const struct redisReply *key = keys->element[i];
		int len;

		if (key->type != REDIS_REPLY_STRING)
			continue;
		len = redisFormatCommandArgv(&cmds[n].buf, 2, (const char *[]){ "UNLINK", key->str },
					     (size_t[]){ 6, key->len });
		if (len < 0)
			continue;
		cmds[n++].len = (size_t)len;
	}
	if (remote_link_node_round(l, k, cmds, n, deadline()) < n)
		deleted = -1;
	for (uint32_t i = 0; i < n; i++) {
		if (deleted >= 0 && cmds[i].reply && cmds[i].reply->type == REDIS_REPLY_INTEGER)
			deleted += cmds[i].reply->integer;
		if (cmds[i].reply)
			remote_reply_free(cmds[i].reply);
		redisFreeCommand(cmds[i].buf);
	}
	free(cmds);
	return deleted;
}

/* Node @k's keys matching @pattern, SCANned to the end and deleted: 0, or -EHOSTUNREACH. */
static int purge_node(struct remote_link *l, uint16_t k, const char *pattern, uint64_t *purged)
{
	char cursor[32] = "0";

	do {
		const char *argv[] = { "SCAN", cursor, "MATCH", pattern, "COUNT", PURGE_SCAN_COUNT };
		struct remote_cmd cmd = { 0 };
		const struct redisReply *rep;
		int64_t deleted = -1;
		int len = redisFormatCommandArgv(&cmd.buf, 6, argv, NULL);

		if (len < 0)
			return -ENOMEM;
		cmd.len = (size_t)len;
		remote_link_node_round(l, k, &cmd, 1, deadline());
		redisFreeCommand(cmd.buf);
		rep = cmd.reply;
		if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
		    rep->element[0]->type == REDIS_REPLY_STRING &&
		    rep->element[0]->len < sizeof(cursor) &&
		    rep->element[1]->type == REDIS_REPLY_ARRAY) {
			memcpy(cursor, rep->element[0]->str, rep->element[0]->len + 1);
			deleted = unlink_keys(l, k, rep->element[1]);
		}
		if (cmd.reply)
			remote_reply_free(cmd.reply);
		if (deleted < 0)
			return -EHOSTUNREACH;
		*purged += (uint64_t)deleted;
	} while (strcmp(cursor, "0"));
	return 0;
}

void kvpd_remote_run_purge(struct kvpd_job *job)
{
	struct remote_purge *p = (struct remote_purge *)job;
	struct kvpd_remote *r = p->r;
	uint16_t masters[REMOTE_MAX_NODES];
	char pattern[REMOTE_KEY_MAX];
	uint32_t n;

	snprintf(pattern, sizeof(pattern), "%s:%016llx:*", r->prefix,
		 (unsigned long long)r->geometry);
	n = remote_link_masters(&r->send_link, masters, deadline());
	if (!n)
		p->error = -EHOSTUNREACH;
	for (uint32_t i = 0; i < n; i++)
		if (purge_node(&r->send_link, masters[i], pattern, &p->purged))
			p->error = -EHOSTUNREACH;
	remote_link_nodes(&r->send_link, &p->head.nodes_known, &p->head.nodes_answering);
	p->head.moved = r->send_link.moved;
	p->head.asked = r->send_link.asked;
	p->head.cluster = r->send_link.cluster;
	job->task_done(job);
}

int kvpd_remote_purge(struct kvpd *d, struct kvpd_client *c, struct kvpd_pool *pool,
		      uint64_t user_data)
{
	struct kvpd_remote *r = pool->remote;
	struct remote_purge *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	*p = (struct remote_purge){ .r = r, .c = c, .user_data = user_data };
	p->head.kind = REMOTE_PURGE;
	p->head.job.type = KVPD_JOB_REMOTE;
	p->head.job.pool = pool;
	p->head.job.client = c;
	p->head.job.ntasks = 1;
	p->head.job.start_ns = kvpd_now_ns();
	kvpd_client_job_out(c, 0);
	pool->inflight++;
	d->jobs_inflight++;
	kvpd_workers_adopt(d->workers, &p->head.job);
	kvpd_tier_copier_push(r->send_thread, &p->head.job, false);
	return KVPD_LATER;
}

void kvpd_remote_purge_done(struct kvpd *d, struct kvpd_job *job)
{
	struct remote_purge *p = (struct remote_purge *)job;
	struct kvpd_remote *r = p->r;

	r->pool->inflight--;
	d->jobs_inflight--;
	kvpd_remote_head_done(r, &p->head);
	remote_wait_drop(r); /* blocks committed before the purge: not sent after it */
	remote_known_clear(r);
	remote_charges_clear(r);
	kvpd_events_remote_purged(r->pool->events);
	kvpd_log(d, KVPD_LOG_NOTICE, "pool %s: %llu keys purged from the cluster tier%s",
		 r->pool->name, (unsigned long long)p->purged,
		 p->error ? " (a master was not reached: its keys stay)" : "");
	kvpd_client_job_back(p->c, 0);
	if (!p->c->dead)
		kvpd_ring_post(p->c, &(struct kvp_cqe){
			.user_data = p->user_data,
			.res = p->error ? p->error : (int32_t)(p->purged > INT32_MAX ? INT32_MAX :
								p->purged),
			.aux = p->purged });
	else if (!p->c->inflight)
		kvpd_client_free(d, p->c);
	free(p);
}
