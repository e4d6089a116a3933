/* SPDX-License-Identifier: MIT */
/*
 * A disk tier's reads and writes, off the event loop: two lanes, each a
 * thread (a copier) with an io_uring of its own and staging buffers
 * registered with it. Copies down run at a low priority (nothing waits for
 * them) and promotions as the daemon (an ALLOC waits). A batch of blocks is
 * staged, then read or written with one submission; where io_uring is
 * refused (the epoll loop's machines), the same thread uses pread/pwrite.
 *
 * Down, a block is gathered from the pool into a stage buffer and its
 * checksum taken there, its slot's record cleared, the data written; the
 * loop then keeps the blocks whose copy held (down.c) and sends their
 * records back here, written after their data. Up, a slot is read and its
 * checksum compared with its record's before any byte reaches the pool.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "tier/disk.h"

/* A lane's staging, one batch: up to 64 pages or 8 MiB. */
#define LANE_STAGE_BYTES (8u << 20)
#define LANE_STAGE_MAX 64u

struct disk_lane {
	struct kvpd_tier *t;
	struct tier_disk *dk;
	struct tier_copier *cp;
	struct io_uring ring;
	bool uring;      /* else pread/pwrite */
	bool fixed;      /* stage registered with the ring */
	uint8_t *stage;  /* nstage buffers of dk->page_bytes */
	uint8_t *lost;   /* the stage a broken ring may still write: never reused, freed last */
	uint32_t nstage;
	int res[LANE_STAGE_MAX];
};

/*
 * A ring that failed: its reads may still land in the stage, so the stage is
 * put aside (freed with the lane) and pread/pwrite go on in a new one.
 */
static void ring_broken(struct disk_lane *ln)
{
	void *stage;

	io_uring_queue_exit(&ln->ring);
	ln->uring = ln->fixed = false;
	if (posix_memalign(&stage, KVTIER_ALIGN, (size_t)ln->nstage * ln->dk->page_bytes))
		return; /* no memory: the old stage it is, its reads most likely done */
	ln->lost = ln->stage;
	ln->stage = stage;
}

/* @m transfers between stage buffer k and the page at @offs[k]; res[k]: 0 or -errno. */
static void transfer(struct disk_lane *ln, bool write, const uint64_t *offs, uint32_t m)
{
	struct tier_disk *dk = ln->dk;
	unsigned bytes = (unsigned)dk->page_bytes;
	uint32_t k, got = 0;
	int ret;

	if (!ln->uring)
		goto synchronous;
	for (k = 0; k < m; k++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ln->ring);
		uint8_t *buf = ln->stage + (size_t)k * dk->page_bytes;

		if (ln->fixed && write)
			io_uring_prep_write_fixed(sqe, dk->fd, buf, bytes, offs[k], 0);
		else if (ln->fixed)
			io_uring_prep_read_fixed(sqe, dk->fd, buf, bytes, offs[k], 0);
		else if (write)
			io_uring_prep_write(sqe, dk->fd, buf, bytes, offs[k]);
		else
			io_uring_prep_read(sqe, dk->fd, buf, bytes, offs[k]);
		sqe->user_data = k;
	}
	ret = io_uring_submit_and_wait(&ln->ring, m);
	while (ret >= 0 && got < m) {
		struct io_uring_cqe *cqe;

		ret = io_uring_wait_cqe(&ln->ring, &cqe);
		if (ret == -EINTR) {
			ret = 0;
			continue;
		}
		if (ret < 0)
			break;
		ln->res[cqe->user_data] = cqe->res == (int)bytes ? 0 :
					  cqe->res < 0 ? cqe->res : -EIO; /* short: the end */
		io_uring_cqe_seen(&ln->ring, cqe);
		got++;
	}
	if (got == m)
		return;
	/*
	 * The ring broke: none of this batch's transfers is trusted (its data was in
	 * the stage put aside), and the ring is not used again.
	 */
	ring_broken(ln);
	for (k = 0; k < m; k++)
		ln->res[k] = ret < 0 ? ret : -EIO;
	return;
synchronous:
	for (k = 0; k < m; k++) {
		uint8_t *buf = ln->stage + (size_t)k * dk->page_bytes;
		ssize_t n = write ? pwrite(dk->fd, buf, bytes, (off_t)offs[k]) :
				    pread(dk->fd, buf, bytes, (off_t)offs[k]);

		ln->res[k] = n == (ssize_t)bytes ? 0 : n < 0 ? -errno : -EIO;
	}
}

static void set_first(int *where, int err)
{
	int none = 0;

	__atomic_compare_exchange_n(where, &none, err, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Block @block's chunks into @buf, back to back (the host tier's slot). */
static void gather(const struct kvpd_job *job, uint32_t block, uint8_t *buf)
{
	const struct kvpd_kv_layout *l = job->layout;
	size_t chunk = kvpd_block_chunk_bytes(l);

	for (uint32_t c = 0; c < 2 * l->layers; c++, buf += chunk)
		memcpy(buf, job->mem + kvpd_block_chunk_off(l, block, c), chunk);
}

static void scatter(const struct kvpd_job *job, const uint8_t *buf, uint32_t block)
{
	const struct kvpd_kv_layout *l = job->layout;
	size_t chunk = kvpd_block_chunk_bytes(l);

	for (uint32_t c = 0; c < 2 * l->layers; c++, buf += chunk)
		memcpy(job->mem + kvpd_block_chunk_off(l, block, c), buf, chunk);
}

static int write_at(int fd, const void *buf, size_t len, uint64_t off)
{
	ssize_t n = pwrite(fd, buf, len, (off_t)off);

	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
}

/* How many of @slots[0..n) run on from the first, slot after slot (their records adjoin). */
static uint32_t run_of(const uint32_t *slots, uint32_t n)
{
	uint32_t k = 1;

	while (k < n && slots[k] == slots[0] + k)
		k++;
	return k;
}

/*
 * The second pass down: the kept blocks' origins and records, after their
 * data, a write for each run of adjoining slots (blocks going down together
 * take slots one after the other).
 */
static void commit(struct disk_lane *ln, struct tier_job *tj)
{
	struct tier_disk *dk = ln->dk;

	for (uint32_t i = 0, m; i < tj->n; i += m) {
		m = run_of(tj->slots + i, tj->n - i);
		if (tj->origins) {
			int ret = write_at(dk->rfd, tj->origins + (size_t)i * dk->origin_stride,
					   m * dk->origin_stride,
					   dk->origins_off + (uint64_t)tj->slots[i] * dk->origin_stride);

			for (uint32_t k = i; ret && k < i + m; k++)
				tj->recs[k].origin_sum = 0; /* the block stays, unannounced after a restart */
			if (ret)
				set_first(&dk->write_error, ret);
		}
		for (uint32_t k = i; k < i + m; k++) {
			struct kvtier_record *r = &tj->recs[k];

			r->stamp = ++dk->stamp;
			r->check = XXH3_64bits_withSeed(r, offsetof(struct kvtier_record, check),
							tj->slots[k]);
		}
		if (write_at(dk->rfd, &tj->recs[i], m * sizeof(struct kvtier_record),
			     dk->records_off + (uint64_t)tj->slots[i] * sizeof(struct kvtier_record)))
			set_first(&dk->write_error, -EIO);
	}
}

/* The old records of tasks @from..@to cleared, before their slots are written: a run a write. */
static int clear_records(struct tier_disk *dk, const struct tier_job *tj, uint32_t from,
			 uint32_t to)
{
	static const struct kvtier_record empty[64];

	for (uint32_t i = from, m; i < to; i += m) {
		int ret;

		m = run_of(tj->slots + i, to - i);
		m = m < 64 ? m : 64;
		ret = write_at(dk->rfd, empty, m * sizeof(empty[0]),
			       dk->records_off + (uint64_t)tj->slots[i] * sizeof(empty[0]));
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * A batch of pages: stage buffer k holds the page at offs[k], the blocks of
 * its tasks gathered in. A page that holds other entries' data (the loop
 * said so: rmw) is read first; a page already in the batch takes the next
 * block where it is.
 */
struct down_batch {
	uint64_t offs[LANE_STAGE_MAX];
	uint32_t m;
};

/* Stage buffer of the page at @off in @b, made (and read, with @rmw) if new; -errno. */
static int stage_of(struct disk_lane *ln, struct down_batch *b, uint64_t off, bool rmw,
		    uint32_t *k)
{
	struct tier_disk *dk = ln->dk;
	uint8_t *buf = ln->stage + (size_t)b->m * dk->page_bytes;

	for (*k = 0; *k < b->m; (*k)++)
		if (b->offs[*k] == off)
			return 0;
	if (rmw) {
		ssize_t n = pread(dk->fd, buf, dk->page_bytes, (off_t)off);

		if (n != (ssize_t)dk->page_bytes)
			return n < 0 ? -errno : -EIO;
	} else {
		memset(buf, 0, dk->page_bytes);
	}
	b->offs[b->m] = off;
	*k = b->m++;
	return 0;
}

/* The batch's pages written; tasks @from..@to fail with their page (in @which). */
static void down_flush(struct disk_lane *ln, struct down_batch *b, struct tier_job *tj,
		       uint32_t from, uint32_t to, const uint8_t *which)
{
	struct tier_disk *dk = ln->dk;
	bool stopped = __atomic_load_n(&dk->write_error, __ATOMIC_ACQUIRE);
	int ret;

	/* The old records go before the slots are written: a record never names new data. */
	if (!stopped && b->m && (ret = clear_records(dk, tj, from, to))) {
		set_first(&dk->write_error, ret);
		stopped = true;
	}
	if (!stopped && b->m)
		transfer(ln, true, b->offs, b->m);
	for (uint32_t k = 0; k < b->m && !stopped; k++)
		if (ln->res[k])
			set_first(&dk->write_error, ln->res[k]);
	for (uint32_t i = from; i < to; i++)
		if (!tj->failed[i] && (stopped || ln->res[which[i - from]]))
			tj->failed[i] = TIER_WRITE_FAILED;
	b->m = 0;
}

#define DOWN_BATCH_TASKS 4096 /* a batch's tasks at most, however small its blocks */

static void down_run(void *arg, struct kvpd_job *job)
{
	struct disk_lane *ln = arg;
	struct tier_disk *dk = ln->dk;
	struct tier_job *tj = (struct tier_job *)job;
	uint8_t which[DOWN_BATCH_TASKS] = { 0 };
	struct down_batch b = { .m = 0 };
	uint32_t n = tj->n, from = 0;

	if (tj->commit) {
		commit(ln, tj);
		job->task_done(job);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint64_t off = kvpd_disk_page_off(dk, tj->slots[i]);
		uint32_t k;
		uint8_t *buf;
		int ret;

		/* A page the batch has no room for: the batch goes to the disk first. */
		for (k = 0; k < b.m && b.offs[k] != off; k++)
			;
		if ((k == b.m && b.m == ln->nstage) || i - from == DOWN_BATCH_TASKS) {
			down_flush(ln, &b, tj, from, i, which);
			from = i;
		}
		if (job->delay_us)
			usleep(job->delay_us);
		ret = __atomic_load_n(&dk->write_error, __ATOMIC_ACQUIRE) ? -EIO :
		      stage_of(ln, &b, off, tj->rmw && tj->rmw[i], &k);
		tj->failed[i] = ret ? TIER_WRITE_FAILED : 0;
		which[i - from] = (uint8_t)k;
		if (ret)
			continue;
		buf = ln->stage + (size_t)k * dk->page_bytes + kvpd_disk_in_page(dk, tj->slots[i]);
		gather(job, tj->blocks[i], buf);
		/*
		 * A write into the block let go before the copy ended (the loop counts
		 * them before a writer starts): what was copied may be part of it, and
		 * goes nowhere. The disk's write comes later, and does not matter.
		 */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&ln->t->blk[tj->blocks[i]].writes, __ATOMIC_RELAXED) !=
		    tj->writes[i])
			tj->failed[i] = TIER_OVERWRITTEN;
		tj->sums[i] = XXH3_64bits(buf, dk->slot_bytes);
	}
	down_flush(ln, &b, tj, from, n, which);
	/* The last task_done hands the job back to the loop: it is not read after. */
	for (uint32_t i = 0; i < n; i++)
		job->task_done(job);
}

/* Task @i's page read into stage buffer @k (@res: its outcome): checked, then into the pool. */
static void land(struct disk_lane *ln, struct tier_job *tj, uint32_t k, uint32_t i, int res)
{
	const uint8_t *buf = ln->stage + (size_t)k * ln->dk->page_bytes +
			     kvpd_disk_in_page(ln->dk, tj->slots[i]);

	/* A torn or flipped slot never reaches the pool. */
	if (!res && XXH3_64bits(buf, ln->dk->slot_bytes) != tj->sums[i])
		res = -EIO;
	tj->failed[i] = res ? TIER_WRITE_FAILED : 0;
	if (res)
		set_first(&tj->job.error, res);
	else
		scatter(&tj->job, buf, tj->blocks[i]);
}

/*
 * Promotion reads kept nstage deep: a buffer goes back to the disk as soon as
 * its block is checked and copied, so the copies overlap the reads still in
 * flight. Batch by batch, each waited for its slowest read and then copied
 * with the disk idle: 0.71 of fio's bandwidth at the same depth
 * (bench/README.md). Tasks one after another in one packed page (a chain's
 * blocks went down together) share its read. -errno when the ring itself
 * fails (the tasks not landed are then failed by the caller, their data
 * blameless).
 */
static int stream_reads(struct disk_lane *ln, struct tier_job *tj, uint32_t *landed)
{
	struct tier_disk *dk = ln->dk;
	uint32_t free_bufs[LANE_STAGE_MAX], runs[LANE_STAGE_MAX], nfree = ln->nstage, next = 0;

	for (uint32_t k = 0; k < ln->nstage; k++)
		free_bufs[k] = k;
	*landed = 0;
	while (*landed < tj->n) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		int ret;

		while (next < tj->n && nfree) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ln->ring);
			uint32_t k = free_bufs[--nfree];
			uint8_t *buf = ln->stage + (size_t)k * dk->page_bytes;
			uint64_t off = kvpd_disk_page_off(dk, tj->slots[next]);

			if (ln->fixed)
				io_uring_prep_read_fixed(sqe, dk->fd, buf, (unsigned)dk->page_bytes,
							 off, 0);
			else
				io_uring_prep_read(sqe, dk->fd, buf, (unsigned)dk->page_bytes, off);
			sqe->user_data = (uint64_t)k << 32 | next;
			for (runs[k] = 1; ++next < tj->n &&
			     kvpd_disk_page_off(dk, tj->slots[next]) == off; runs[k]++)
				;
		}
		ret = io_uring_submit_and_wait(&ln->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
			return ret;
		io_uring_for_each_cqe(&ln->ring, head, cqe) {
			uint32_t k = (uint32_t)(cqe->user_data >> 32), i = (uint32_t)cqe->user_data;
			int res = cqe->res == (int)dk->page_bytes ? 0 : cqe->res < 0 ? cqe->res : -EIO;

			for (uint32_t r = 0; r < runs[k]; r++)
				land(ln, tj, k, i + r, res);
			*landed += runs[k];
			free_bufs[nfree++] = k;
			seen++;
		}
		io_uring_cq_advance(&ln->ring, seen);
	}
	return 0;
}

static void up_run(void *arg, struct kvpd_job *job)
{
	struct disk_lane *ln = arg;
	struct tier_job *tj = (struct tier_job *)job;
	uint32_t n = tj->n, i0 = 0;

	if (job->delay_us)
		usleep(job->delay_us * n);
	if (ln->uring) {
		uint32_t landed;
		int ret = stream_reads(ln, tj, &landed);

		if (ret) {
			ring_broken(ln);
			set_first(&job->error, ret);
		}
		i0 = n;
	}
	for (; i0 < n; i0 += ln->nstage) {
		uint32_t m = n - i0 < ln->nstage ? n - i0 : ln->nstage;
		uint64_t offs[LANE_STAGE_MAX];

		for (uint32_t k = 0; k < m; k++)
			offs[k] = kvpd_disk_page_off(ln->dk, tj->slots[i0 + k]);
		transfer(ln, false, offs, m);
		for (uint32_t k = 0; k < m; k++)
			land(ln, tj, k, i0 + k, ln->res[k]);
	}
	for (uint32_t i = 0; i < n; i++)
		job->task_done(job);
}

static void lane_free(struct disk_lane *ln)
{
	if (!ln)
		return;
	if (ln->cp)
		kvpd_tier_copier_stop(ln->cp);
	if (ln->uring)
		io_uring_queue_exit(&ln->ring);
	free(ln->stage);
	free(ln->lost);
	free(ln);
}

static int lane_new(struct kvpd_tier *t, bool down, struct disk_lane **out)
{
	struct tier_disk *dk = t->disk;
	struct disk_lane *ln = calloc(1, sizeof(*ln));
	uint64_t n = LANE_STAGE_BYTES / dk->page_bytes;
	void *stage;
	int ret;

	if (!ln)
		return -ENOMEM;
	ln->t = t;
	ln->dk = dk;
	ln->nstage = n < 1 ? 1 : n > LANE_STAGE_MAX ? LANE_STAGE_MAX : (uint32_t)n;
	if (posix_memalign(&stage, KVTIER_ALIGN, (size_t)ln->nstage * dk->page_bytes)) {
		free(ln);
		return -ENOMEM;
	}
	ln->stage = stage;
	/* Refused where the epoll loop runs (a seccomp filter, a container): pread/pwrite then. */
	ln->uring = !io_uring_queue_init(ln->nstage, &ln->ring, 0);
	if (ln->uring) {
		struct iovec iov = { ln->stage, (size_t)ln->nstage * dk->page_bytes };

		/* Registered, each transfer skips pinning its pages (refused past RLIMIT_MEMLOCK). */
		ln->fixed = !io_uring_register_buffers(&ln->ring, &iov, 1);
	}
	ret = kvpd_tier_copier_start(&ln->cp, down ? "kvpoold-tier-w" : "kvpoold-tier-r", down,
				     down ? down_run : up_run, ln);
	if (ret) {
		lane_free(ln);
		return ret;
	}
	*out = ln;
	return 0;
}

int kvpd_tier_disk_start(struct kvpd_tier *t)
{
	return lane_new(t, true, &t->disk->down) ?: lane_new(t, false, &t->disk->up);
}

void kvpd_tier_disk_stop(struct kvpd_tier *t)
{
	lane_free(t->disk->down);
	lane_free(t->disk->up);
	t->disk->down = t->disk->up = NULL;
}

void kvpd_tier_disk_push(struct kvpd_tier *t, struct tier_job *tj)
{
	struct disk_lane *ln = tj->job.type == KVPD_JOB_TIER_UP ? t->disk->up : t->disk->down;

	kvpd_tier_copier_push(ln->cp, &tj->job, tj->rescue);
}

const char *kvpd_tier_disk_io(const struct kvpd_tier *t)
{
	const struct disk_lane *ln = t->disk->down;

	return ln->fixed ? "io_uring, registered buffers" : ln->uring ? "io_uring" :
	       "pread/pwrite (io_uring refused)";
}

int kvpd_tier_disk_write_error(const struct kvpd_tier *t)
{
	return t->disk ? __atomic_load_n(&t->disk->write_error, __ATOMIC_ACQUIRE) : 0;
}
