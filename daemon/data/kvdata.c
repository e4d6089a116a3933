/* SPDX-License-Identifier: MIT */
/*
 * WRITE_KV, READ_KV and ATTEND on the event loop: check the request against
 * the sequence (positions written or committed, windows, geometry), map and
 * pin its blocks, and hand a job to the workers; when it comes back, unpin
 * and complete. A sequence's positions at or past its computed count are
 * readable only once a WRITE_KV of them has completed.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "observe/probes.h"
#include "session/kvwritten.h"
#include "session/sizes.h"

/*
 * Block ids one ATTEND may pin (4 MiB of them): entries may repeat a handle,
 * so bound the sum; with the split partials below, what one request may cost
 * the daemon in memory (and a client has KVPD_CLIENT_JOB_BYTES in flight).
 */
#define KVPD_MAX_ATTEND_IDS (1u << 20)
/*
 * Split-K: an ATTEND of fewer (sequence, kv head) tasks than KVPD_SPLIT_TASKS per
 * worker thread cuts the keys of its long queries into parts, so that one long
 * context is read by every thread, not one: into enough parts to make that many
 * tasks, each of at least KVPD_SPLIT_MIN_KEYS keys (a few hundred microseconds
 * of reading: the partials and their merge cost next to nothing against that).
 * The partials of one job take at most KVPD_SPLIT_SCRATCH bytes.
 */
#define KVPD_SPLIT_TASKS 2
#define KVPD_SPLIT_MIN_KEYS 2048
#define KVPD_SPLIT_SCRATCH (4u << 20)
/*
 * An ATTEND whose every task reads at most this many key positions times query
 * heads (per kv head: 8192 keys of 8 query heads, about 100-600 us) may run on
 * the event loop between turns (jobs.h short_tasks).
 */
#define KVPD_SHORT_TASK_WORK (1u << 16)

/* What one request needs to know about its sequence in one group. */
struct seq_view {
	struct kvpd_seq_slot *slot;
	struct kvc_seq_info info;
	const uint32_t *table;
	uint32_t tlen;
	uint32_t ring;   /* cyclic: ring tokens */
	uint32_t floor;  /* cyclic, after a snapshot hit: the oldest position its copy brought */
	struct kvpd_mask mask;
};

static int view_seq(struct kvpd_client *c, uint64_t handle, uint32_t group, uint32_t layer,
		    struct seq_view *v)
{
	const struct kvpd_pool *pool = c->pool;
	const struct kvc_pool_config *cfg = kvc_pool_config(pool->core);
	struct kvpd_seq_slot *slot = kvpd_seq_slot(c, handle);
	uint32_t window;

	if (!slot)
		return -EBADF;
	if (slot->busy)
		return -EBUSY; /* its blocks' KV is still coming up from the tier */
	if (!pool->layout.slot_bytes)
		return -EOPNOTSUPP;
	if (group >= cfg->num_groups || layer >= pool->layout.layers)
		return -EINVAL;
	if (!slot->kv) {
		slot->kv = kvpd_seq_kv_new(cfg->num_groups, pool->layout.layers);
		if (!slot->kv)
			return -ENOMEM;
	}
	v->slot = slot;
	kvc_seq_info(slot->seq, &v->info);
	kvpd_seq_kv_rebase(slot->kv, cfg->num_groups, v->info.computed);
	v->table = kvc_seq_table(slot->seq, group, &v->tlen);
	v->ring = kvc_group_ring_blocks(pool->core, group) * cfg->block_size;
	/* A hit's ring got the window before its boundary only: older slots hold nothing. */
	window = cfg->groups[group].param - 1;
	v->floor = v->ring && slot->snap_at ? slot->snap_at - (window < slot->snap_at ? window : slot->snap_at) : 0;
	v->mask = (struct kvpd_mask){ cfg->groups[group].kind, cfg->groups[group].param,
				      v->info.prefix };
	return 0;
}

/* Every position of [lo, hi) has KV this sequence may read. */
static bool present(const struct seq_view *v, uint32_t group, uint32_t layer, uint32_t bs,
		    uint32_t lo, uint32_t hi)
{
	uint32_t computed = v->info.computed, end = hi < computed ? hi : computed;

	if (lo < end) {
		if (v->ring) {
			/* A ring slot holds the latest position written to it only. */
			uint32_t high = kvpd_seq_kv_high(v->slot->kv, group, layer);
			uint32_t newest = computed > high ? computed : high;

			if ((uint64_t)lo + v->ring < newest || lo < v->floor)
				return false;
		}
		for (uint32_t p = lo; p < end; p += bs - p % bs) {
			uint32_t b = (v->ring ? p % v->ring : p) / bs;

			if (b >= v->tlen || v->table[b] == KVC_NULL_BLOCK)
				return false;
		}
	}
	return kvpd_seq_kv_written(v->slot->kv, group, layer, lo > computed ? lo : computed, hi);
}

/* The blocks holding [lo, hi): the ring's whole table, or the table's span. */
static void span_of(const struct seq_view *v, uint32_t bs, uint32_t lo, uint32_t hi,
		    struct kvpd_block_map *m)
{
	m->ring_tokens = v->ring;
	if (v->ring) {
		m->first_block = 0;
		m->nblocks = v->tlen;
	} else {
		m->first_block = lo / bs;
		m->nblocks = (hi - 1) / bs - lo / bs + 1;
	}
}

/* A job with room for @units attend units, @ids block ids and @scratch bytes (at job->scratch). */
static struct kvpd_job *new_job(struct kvpd_client *c, const struct kvp_sqe *sqe,
				enum kvpd_job_type type, size_t units, size_t ids, size_t scratch)
{
	size_t head = sizeof(struct kvpd_job) + units * sizeof(struct kvpd_attend_unit) +
		      ids * sizeof(uint32_t);
	size_t at = (head + 63) & ~(size_t)63;
	struct kvpd_job *job = calloc(1, at + scratch);

	if (!job)
		return NULL;
	job->type = type;
	job->alloc_bytes = at + scratch;
	job->client = c;
	job->lane = &c->lane;
	job->pool = c->pool;
	job->opcode = sqe->opcode;
	job->layout = &c->pool->layout;
	job->mem = c->pool->mem;
	job->user_data = sqe->user_data;
	job->units = (struct kvpd_attend_unit *)(job + 1);
	job->pinned = (uint32_t *)(job->units + units);
	job->scratch = scratch ? (uint8_t *)job + at : NULL;
	return job;
}

/* Pins the job's blocks and hands it to the workers; frees it on failure. */
static int launch(struct kvpd *d, struct kvpd_job *job)
{
	int ret = kvc_pin(job->pool->core, job->pinned, job->npinned);

	if (ret) {
		free(job);
		return ret;
	}
	kvpd_client_job_out(job->client, job->alloc_bytes);
	job->pool->inflight++;
	d->jobs_inflight++;
	job->start_ns = d->taken_ns;
	kvpd_workers_submit(d->workers, job);
	return 0;
}

static int copy_ids(const struct seq_view *v, struct kvpd_block_map *m, uint32_t *dst)
{
	if (m->first_block + m->nblocks > v->tlen)
		return -EINVAL;
	memcpy(dst, v->table + m->first_block, m->nblocks * sizeof(*dst));
	m->ids = dst;
	return 0;
}

int kvpd_kv_io(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	const struct kvpd_kv_layout *l = &c->pool->layout;
	uint32_t group = sqe->arg2 & 0xffff, layer = sqe->arg2 >> 16;
	uint32_t first = sqe->arg1, count = sqe->len, bs = l->block_size;
	bool is_write = sqe->opcode == KVP_OP_WRITE_KV;
	uint64_t bytes;
	struct kvpd_block_map m;
	struct kvpd_job *job;
	struct seq_view v;
	uint8_t *data;
	int ret;

	if (count == 0 || (uint64_t)first + count > UINT32_MAX ||
	    kvpd_kv_io_bytes(count, l->kv_heads, l->row_bytes, &bytes))
		return -EINVAL;
	ret = view_seq(c, sqe->handle, group, layer, &v);
	if (ret)
		return ret;
	data = kvpd_arena_range(c, is_write ? sqe->addr : sqe->out_addr, bytes);
	if (!data || (!is_write && sqe->out_len < bytes))
		return -EINVAL;
	if (is_write && first < v.info.computed)
		return -EPERM; /* committed KV may be shared: it never changes */
	if (is_write && first + count > v.info.allocated_slots)
		return -EINVAL;
	if (!is_write && !present(&v, group, layer, bs, first, first + count))
		return -ENODATA;

	span_of(&v, bs, first, first + count, &m);
	job = new_job(c, sqe, is_write ? KVPD_JOB_WRITE : KVPD_JOB_READ, 0, m.nblocks, 0);
	if (!job)
		return -ENOMEM;
	ret = copy_ids(&v, &m, job->pinned);
	for (uint32_t i = 0; !ret && i < m.nblocks; i++)
		if (m.ids[i] == KVC_NULL_BLOCK && !v.ring)
			ret = -ENODATA;
	if (ret) {
		free(job);
		return ret;
	}
	job->npinned = m.nblocks;
	job->map = m;
	job->handle = sqe->handle;
	job->epoch = v.slot->epoch;
	job->group = group;
	job->layer = layer;
	job->first_pos = first;
	job->count = count;
	job->data = data;
	/* Chunks of tokens: a task copies at most KVPD_TASK_BYTES of K and V. */
	job->chunk_tokens = (uint32_t)(KVPD_TASK_BYTES / (2 * l->row_bytes));
	if (job->chunk_tokens == 0)
		job->chunk_tokens = 1;
	job->ntasks = l->kv_heads * ((count + job->chunk_tokens - 1) / job->chunk_tokens);
	job->bytes = bytes;
	if (is_write)
		kvpd_tier_writing(c->pool, job->pinned, job->npinned);
	return launch(d, job);
}

/* What KVP_ATTEND_MAX_KEYS and KVP_ATTEND_MAX_QUERIES leave of one ATTEND as its entries are walked. */
struct attend_budget {
	uint32_t keys, queries;
};

/*
 * One sequence's ATTEND entry, checked; its block span goes to @ids when
 * non-NULL. Its queries and key positions are taken off @left (-E2BIG when
 * they do not fit); the queries are looked at one by one (on the event loop)
 * only once they fit, so the walk of one request is bounded.
 */
static int attend_unit(struct kvpd_client *c, const struct kvp_attend *a,
		       const struct kvp_attend_seq *s, size_t q_row, struct kvpd_attend_unit *u,
		       uint32_t *ids, uint32_t *nids, struct attend_budget *left)
{
	const struct kvpd_kv_layout *l = &c->pool->layout;
	uint32_t lo[2], hi[2], n, span = 0, bs = l->block_size;
	size_t bytes;
	struct seq_view v;
	int ret;

	if (s->count == 0 || (uint64_t)s->first_pos + s->count > UINT32_MAX)
		return -EINVAL;
	if (s->count > left->queries || s->count > left->keys)
		return -E2BIG;
	left->queries -= s->count;
	ret = kvpd_attend_q_bytes(s->count, a->q_heads, q_row, &bytes);
	if (ret)
		return ret;
	ret = view_seq(c, s->handle, a->group, a->layer, &v);
	if (ret)
		return ret;
	u->q = kvpd_arena_range(c, s->q_off, bytes);
	u->out = kvpd_arena_range(c, s->out_off, bytes);
	if (!u->q || !u->out)
		return -EINVAL;
	u->mask = v.mask;
	u->first_pos = s->first_pos;
	u->count = s->count;
	u->keys = 0;
	u->minkeys = UINT32_MAX;
	u->maxkeys = 0;
	u->split = 1;
	u->qparts = 1;
	u->hparts = 1;
	for (uint32_t i = 0; i < s->count; i++) {
		uint32_t qlo[2], qhi[2], qn = kvpd_mask_ranges(&v.mask, s->first_pos + i, qlo, qhi);
		uint32_t seen = 0;

		for (uint32_t r = 0; r < qn; r++)
			seen += qhi[r] - qlo[r];
		u->keys += seen;
		u->minkeys = seen < u->minkeys ? seen : u->minkeys;
		u->maxkeys = seen > u->maxkeys ? seen : u->maxkeys;
	}
	n = kvpd_mask_union(&v.mask, s->first_pos, s->first_pos + s->count - 1, lo, hi);
	for (uint32_t r = 0; r < n; r++)
		span += hi[r] - lo[r];
	if (span > left->keys)
		return -E2BIG;
	left->keys -= span;
	for (uint32_t r = 0; r < n; r++)
		if (!present(&v, a->group, a->layer, bs, lo[r], hi[r]))
			return -ENODATA;
	span_of(&v, bs, lo[0], hi[n - 1], &u->map);
	*nids = u->map.nblocks;
	return ids ? copy_ids(&v, &u->map, ids) : 0;
}

/* What a task reading @keys key positions for @heads query heads costs: KVPD_TASK_WORK's unit. */
static uint64_t attend_work(uint64_t keys, uint32_t heads, uint32_t head_dim)
{
	return (keys * heads * head_dim + 127) / 128;
}

/*
 * Cuts an unsplit unit into tasks of about KVPD_TASK_WORK: by queries, and a
 * query that alone does more by its query heads (a worker's task is what
 * another client's next task waits for). A pure function of the request.
 */
static void attend_cut(struct kvpd_attend_unit *u, uint32_t g, uint32_t head_dim)
{
	uint64_t work = attend_work(u->keys, g, head_dim), one = attend_work(u->maxkeys, g, head_dim);
	uint64_t want = (work + KVPD_TASK_WORK - 1) / KVPD_TASK_WORK;
	uint32_t per;

	if (work <= KVPD_TASK_WORK)
		return;
	u->qparts = want < u->count ? (uint32_t)want : u->count;
	if (one <= KVPD_TASK_WORK || g == 1)
		return;
	want = (one + KVPD_TASK_WORK - 1) / KVPD_TASK_WORK;
	per = want < g ? (uint32_t)((g + want - 1) / want) : 1;
	u->hparts = (g + per - 1) / per;
}

/*
 * How many parts unit @u's keys are cut into (1: none) in an ATTEND of @tasks
 * (sequence, kv head) tasks; *scratch counts the bytes of partials so far. A pure
 * function of the request and the number of threads: a request is always
 * computed the same way, bit for bit.
 */
static uint32_t attend_split(const struct kvpd_attend_unit *u, const struct kvpd_kv_layout *l,
			     uint32_t q_heads, uint64_t tasks, unsigned threads, size_t *scratch)
{
	uint64_t want = (uint64_t)KVPD_SPLIT_TASKS * threads, parts, bytes;
	uint32_t g;

	if (threads < 2 || tasks >= want)
		return 1;
	parts = (want + tasks - 1) / tasks;
	if (parts > u->minkeys / KVPD_SPLIT_MIN_KEYS)
		parts = u->minkeys / KVPD_SPLIT_MIN_KEYS;
	if (parts > ATTN_MERGE_MAX)
		parts = ATTN_MERGE_MAX;
	if (parts < 2)
		return 1;
	/*
	 * Parts still too long for a task, read by several query heads: cut by
	 * heads instead (attend_cut), which needs no partials.
	 */
	g = q_heads / l->kv_heads;
	if (g > 1 && attend_work(u->keys / parts, g, l->head_dim) > KVPD_TASK_WORK)
		return 1;
	bytes = parts * u->count * q_heads * ((uint64_t)l->head_dim + 1) * sizeof(float) +
		l->kv_heads * sizeof(uint32_t);
	bytes = (bytes + 63) & ~(uint64_t)63;
	if (bytes > KVPD_SPLIT_SCRATCH - *scratch)
		return 1;
	*scratch += bytes;
	return (uint32_t)parts;
}

/* Points split unit @u's partials into @mem (the bytes attend_split counted for it). */
static void attend_scratch(struct kvpd_attend_unit *u, const struct kvpd_kv_layout *l,
			   uint32_t q_heads, uint8_t *mem)
{
	size_t n = (size_t)u->split * u->count * q_heads;

	u->part = (float *)mem;
	u->lse = u->part + n * l->head_dim;
	u->left = (uint32_t *)(u->lse + n);
	for (uint32_t h = 0; h < l->kv_heads; h++)
		u->left[h] = u->split;
}

int kvpd_attend(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe)
{
	const struct kvpd_kv_layout *l = &c->pool->layout;
	const struct kvp_attend *src = kvpd_arena_range(c, sqe->addr, sqe->len);
	struct kvp_attend head, *a;
	struct kvpd_job *job;
	size_t q_row, total_ids = 0, scratch = 0, bytes;
	struct attend_budget left = { KVP_ATTEND_MAX_KEYS, KVP_ATTEND_MAX_QUERIES };
	/* A backend that plans a request itself (a GPU's one launch) gets it as one task. */
	bool whole = c->pool->backend->whole_attend;
	uint64_t tasks;
	int ret = 0;

	if (!src || sqe->len < sizeof(head))
		return -EINVAL;
	if (!c->pool->layout.slot_bytes)
		return -EOPNOTSUPP;
	/* The header first, once: how many entries there are bounds the copy below. */
	memcpy(&head, src, sizeof(head));
	if (head.num_seqs > KVP_ATTEND_MAX_SEQS || head.q_heads > KVP_ATTEND_MAX_Q_HEADS)
		return -E2BIG;
	bytes = sizeof(head) + (size_t)head.num_seqs * sizeof(head.seqs[0]);
	if (sqe->len < bytes)
		return -EINVAL;
	/* One private copy: every later look at the request sees the same bytes. */
	a = malloc(bytes);
	if (!a)
		return -ENOMEM;
	memcpy(a, &head, sizeof(head));
	memcpy(a->seqs, src->seqs, bytes - sizeof(head));
	if (a->num_seqs == 0 || a->resv || a->flags & ~KVP_ATTEND_Q_F32 || !a->q_heads ||
	    a->q_heads % l->kv_heads || !isfinite(a->scale) || !isfinite(a->softcap) ||
	    a->softcap < 0) {
		ret = -EINVAL;
		goto out_free;
	}
	q_row = (size_t)l->head_dim * attn_dtype_size(a->flags & KVP_ATTEND_Q_F32 ? ATTN_F32 : l->dtype);
	tasks = (uint64_t)a->num_seqs * l->kv_heads;
	for (uint32_t s = 0; s < a->num_seqs && !ret; s++) {
		struct kvpd_attend_unit u;
		uint32_t n;

		ret = attend_unit(c, a, &a->seqs[s], q_row, &u, NULL, &n, &left);
		total_ids += n;
		if (!ret && !whole)
			attend_split(&u, l, a->q_heads, tasks, d->workers->nthreads, &scratch);
	}
	if (!ret && total_ids > KVPD_MAX_ATTEND_IDS)
		ret = -E2BIG;
	if (ret)
		goto out_free;
	job = new_job(c, sqe, KVPD_JOB_ATTEND, a->num_seqs, total_ids, scratch);
	if (!job) {
		ret = -ENOMEM;
		goto out_free;
	}
	/* The same walk again: the same units, so the same splits into the same scratch. */
	scratch = 0;
	left = (struct attend_budget){ KVP_ATTEND_MAX_KEYS, KVP_ATTEND_MAX_QUERIES };
	for (uint32_t s = 0; s < a->num_seqs && !ret; s++) {
		struct kvpd_attend_unit *u = &job->units[s];
		uint32_t n;
		size_t at = scratch;

		ret = attend_unit(c, a, &a->seqs[s], q_row, u, job->pinned + job->npinned, &n,
				  &left);
		job->npinned += n;
		if (ret || whole)
			continue;
		u->split = attend_split(u, l, a->q_heads, tasks, d->workers->nthreads, &scratch);
		if (u->split == 1)
			attend_cut(u, a->q_heads / l->kv_heads, l->head_dim);
		u->task0 = job->ntasks;
		job->ntasks += l->kv_heads * u->split * u->qparts * u->hparts;
		if (u->split > 1)
			attend_scratch(u, l, a->q_heads, job->scratch + at);
		if (u->split > 1 || u->qparts > 1 || u->hparts > 1)
			job->mapped = true;
	}
	if (ret) {
		free(job);
		goto out_free;
	}
	if (whole)
		job->ntasks = 1;
	job->group = a->group;
	job->layer = a->layer;
	job->nunits = a->num_seqs;
	job->q_heads = a->q_heads;
	job->params = (struct attn_params){
		.g = a->q_heads / l->kv_heads,
		.scale = a->scale,
		.softcap = a->softcap,
		.q_dtype = a->flags & KVP_ATTEND_Q_F32 ? ATTN_F32 : l->dtype,
	};
	/* a whole request's task holds a worker through its device time: never the loop */
	job->short_tasks = !whole;
	for (uint32_t s = 0; s < a->num_seqs; s++) {
		const struct kvpd_attend_unit *u = &job->units[s];

		uint64_t parts = (uint64_t)u->split * u->qparts * u->hparts;

		job->bytes += u->keys * 2 * l->kv_heads * l->row_bytes;
		if (attend_work(u->keys, job->params.g, l->head_dim) / parts > KVPD_SHORT_TASK_WORK)
			job->short_tasks = false;
	}
	ret = launch(d, job);
out_free:
	free(a);
	return ret;
}

/* Back on the event loop: unpin, note what a WRITE_KV made readable, complete. */
static void probe_job(const struct kvpd_job *job, uint64_t ns)
{
	uint32_t client = job->client->gen;

	if (job->type == KVPD_JOB_WRITE)
		KVPD_PROBE(write_kv, client, job->bytes, ns);
	else if (job->type == KVPD_JOB_READ)
		KVPD_PROBE(read_kv, client, job->bytes, ns);
	else
		KVPD_PROBE(attend, client, job->bytes, ns, job->nunits);
}

void kvpd_jobs_complete(struct kvpd *d)
{
	struct kvpd_job *job = kvpd_workers_take_done(d->workers);

	if (!job)
		return;
	kvpd_stats_begin(d);
	while (job) {
		struct kvpd_job *next = job->next;
		struct kvpd_client *c = job->client;
		struct kvp_cqe cqe = { .user_data = job->user_data };

		if (job->type == KVPD_JOB_POOL) {
			kvpd_pool_build_done(d, job);
			free(job);
			job = next;
			continue;
		}
		if (job->type == KVPD_JOB_TIER_DOWN || job->type == KVPD_JOB_TIER_UP ||
		    job->type == KVPD_JOB_REMOTE) {
			kvpd_tier_job_done(d, job);
			job = next;
			continue;
		}
		if (job->type == KVPD_JOB_COPY) {
			kvpd_snap_copies_done(d, job);
			job = next;
			continue;
		}

		kvc_unpin(job->pool->core, job->pinned, job->npinned);
		job->pool->inflight--;
		d->jobs_inflight--;
		kvpd_client_job_back(c, job->alloc_bytes);
		c->data_blocked = false; /* a request waiting for this room is taken next turn */
		if (!c->dead) {
			struct kvpd_seq_slot *slot = kvpd_seq_slot(c, job->handle);

			cqe.res = __atomic_load_n(&job->error, __ATOMIC_ACQUIRE);
			if (!cqe.res)
				cqe.aux = job->aux;
			else if (job->why[0])
				kvpd_log(d, KVPD_LOG_WARNING, "client %u pool '%s': %s failed on its %s "
					 "backend: %s", c->gen, job->pool->name,
					 job->type == KVPD_JOB_WRITE ? "WRITE_KV" :
					 job->type == KVPD_JOB_READ ? "READ_KV" : "ATTEND",
					 job->pool->backend->name, job->why);
			if (!cqe.res && job->type == KVPD_JOB_WRITE && slot && slot->kv &&
			    slot->epoch == job->epoch) {
				struct kvc_seq_info info;
				uint32_t ngroups = kvc_pool_config(job->pool->core)->num_groups;

				kvc_seq_info(slot->seq, &info);
				kvpd_seq_kv_rebase(slot->kv, ngroups, info.computed);
				cqe.res = kvpd_seq_kv_mark(slot->kv, job->group, job->layer,
							   job->first_pos, job->first_pos + job->count);
			}
			uint64_t ns = kvpd_now_ns() - job->start_ns;

			kvpd_stats_op(d, c, job->opcode, cqe.res, ns);
			probe_job(job, ns);
			kvpd_stats_pool(d, job->pool, c->gen);
			kvpd_stats_client(d, c);
			kvpd_ring_post(c, &cqe);
		} else if (c->inflight == 0) {
			kvpd_stats_pool(d, job->pool, 0);
			kvpd_client_free(d, c);
		}
		free(job);
		job = next;
	}
	kvpd_stats_end(d);
}
