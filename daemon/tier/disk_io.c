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

/* A lane's staging, one batch: up to 64 blocks or 8 MiB. */
#define LANE_STAGE_BYTES (8u << 20)
#define LANE_STAGE_MAX 64u

struct disk_lane {
	struct kvpd_tier *t;
	struct tier_disk *dk;
	struct tier_copier *cp;
	struct io_uring ring;
	bool uring;      /* else pread/pwrite */
	bool fixed;      /* stage registered with the ring */
	uint8_t *stage;  /* nstage buffers of dk->stride */
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
	if (posix_memalign(&stage, KVTIER_ALIGN, (size_t)ln->nstage * ln->dk->stride))
		return; /* no memory: the old stage it is, its reads most likely done */
	ln->lost = ln->stage;
	ln->stage = stage;
}

/* @m transfers between stage buffer k and slot @slots[k]; res[k]: 0 or -errno. */
static void transfer(struct disk_lane *ln, bool write, const uint32_t *slots, uint32_t m)
{
	struct tier_disk *dk = ln->dk;
	uint32_t k, got = 0;
	int ret;

	if (!ln->uring)
		goto synchronous;
	for (k = 0; k < m; k++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ln->ring);
		uint8_t *buf = ln->stage + (size_t)k * dk->stride;
		uint64_t off = dk->data_off + (uint64_t)slots[k] * dk->stride;

		if (ln->fixed && write)
			io_uring_prep_write_fixed(sqe, dk->fd, buf, (unsigned)dk->stride, off, 0);
		else if (ln->fixed)
			io_uring_prep_read_fixed(sqe, dk->fd, buf, (unsigned)dk->stride, off, 0);
		else if (write)
			io_uring_prep_write(sqe, dk->fd, buf, (unsigned)dk->stride, off);
		else
			io_uring_prep_read(sqe, dk->fd, buf, (unsigned)dk->stride, off);
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
		ln->res[cqe->user_data] = cqe->res == (int)dk->stride ? 0 :
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
		uint8_t *buf = ln->stage + (size_t)k * dk->stride;
		off_t off = (off_t)(dk->data_off + (uint64_t)slots[k] * dk->stride);
		ssize_t n = write ? pwrite(dk->fd, buf, dk->stride, off) :
				    pread(dk->fd, buf, dk->stride, off);

		ln->res[k] = n == (ssize_t)dk->stride ? 0 : n < 0 ? -errno : -EIO;
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

static int write_record(struct tier_disk *dk, uint32_t slot, const struct kvtier_record *r)
{
	off_t off = (off_t)(dk->records_off + (uint64_t)slot * sizeof(*r));
	ssize_t n = pwrite(dk->rfd, r, sizeof(*r), off);

	return n == (ssize_t)sizeof(*r) ? 0 : n < 0 ? -errno : -EIO;
}

static int write_origin(struct tier_disk *dk, uint32_t slot, const uint8_t *origin)
{
	off_t off = (off_t)(dk->origins_off + (uint64_t)slot * dk->origin_stride);
	ssize_t n = pwrite(dk->rfd, origin, dk->origin_stride, off);

	return n == (ssize_t)dk->origin_stride ? 0 : n < 0 ? -errno : -EIO;
}

/* The second pass down: the kept blocks' origins and records, after their data. */
static void commit(struct disk_lane *ln, struct tier_job *tj)
{
	struct tier_disk *dk = ln->dk;

	for (uint32_t i = 0; i < tj->n; i++) {
		struct kvtier_record *r = &tj->recs[i];
		int ret;

		if (r->origin_sum &&
		    (ret = write_origin(dk, tj->slots[i], tj->origins + (size_t)i * dk->origin_stride))) {
			set_first(&dk->write_error, ret);
			r->origin_sum = 0; /* the block stays; after a restart it goes unannounced */
		}
		r->stamp = ++dk->stamp;
		r->check = XXH3_64bits_withSeed(r, offsetof(struct kvtier_record, check),
						tj->slots[i]);
		ret = write_record(dk, tj->slots[i], r);
		if (ret)
			set_first(&dk->write_error, ret);
	}
}

static void down_run(void *arg, struct kvpd_job *job)
{
	static const struct kvtier_record empty;
	struct disk_lane *ln = arg;
	struct tier_disk *dk = ln->dk;
	struct tier_job *tj = (struct tier_job *)job;
	uint32_t n = tj->n;

	if (tj->commit) {
		commit(ln, tj);
		job->task_done(job);
		return;
	}
	for (uint32_t i0 = 0; i0 < n; i0 += ln->nstage) {
		uint32_t m = n - i0 < ln->nstage ? n - i0 : ln->nstage;
		bool stopped = __atomic_load_n(&dk->write_error, __ATOMIC_ACQUIRE);

		for (uint32_t k = 0; k < m && !stopped; k++) {
			uint8_t *buf = ln->stage + (size_t)k * dk->stride;
			uint32_t i = i0 + k;
			int ret;

			if (job->delay_us)
				usleep(job->delay_us);
			gather(job, tj->blocks[i], buf);
			memset(buf + dk->slot_bytes, 0, dk->stride - dk->slot_bytes);
			tj->sums[i] = XXH3_64bits(buf, dk->slot_bytes);
			/* The old record goes before the slot is written: it never names new data. */
			ret = write_record(dk, tj->slots[i], &empty);
			if (ret) {
				set_first(&dk->write_error, ret);
				stopped = true;
			}
		}
		if (!stopped)
			transfer(ln, true, tj->slots + i0, m);
		for (uint32_t k = 0; k < m; k++) {
			int ret = stopped ? -EIO : ln->res[k];

			tj->failed[i0 + k] = ret != 0;
			if (ret && !stopped)
				set_first(&dk->write_error, ret);
		}
	}
	/* The last task_done hands the job back to the loop: it is not read after. */
	for (uint32_t i = 0; i < n; i++)
		job->task_done(job);
}

/* Task @i's slot read into stage buffer @k (@res: its outcome): checked, then into the pool. */
static void land(struct disk_lane *ln, struct tier_job *tj, uint32_t k, uint32_t i, int res)
{
	const uint8_t *buf = ln->stage + (size_t)k * ln->dk->stride;

	/* A torn or flipped slot never reaches the pool. */
	if (!res && XXH3_64bits(buf, ln->dk->slot_bytes) != tj->sums[i])
		res = -EIO;
	tj->failed[i] = res != 0;
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
 * (bench/README.md). -errno when the ring itself fails (the tasks not landed
 * are then failed by the caller, their data blameless).
 */
static int stream_reads(struct disk_lane *ln, struct tier_job *tj, uint32_t *landed)
{
	struct tier_disk *dk = ln->dk;
	uint32_t free_bufs[LANE_STAGE_MAX], nfree = ln->nstage, next = 0;

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
			uint8_t *buf = ln->stage + (size_t)k * dk->stride;
			uint64_t off = dk->data_off + (uint64_t)tj->slots[next] * dk->stride;

			if (ln->fixed)
				io_uring_prep_read_fixed(sqe, dk->fd, buf, (unsigned)dk->stride, off, 0);
			else
				io_uring_prep_read(sqe, dk->fd, buf, (unsigned)dk->stride, off);
			sqe->user_data = (uint64_t)k << 32 | next++;
		}
		ret = io_uring_submit_and_wait(&ln->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
			return ret;
		io_uring_for_each_cqe(&ln->ring, head, cqe) {
			uint32_t k = (uint32_t)(cqe->user_data >> 32), i = (uint32_t)cqe->user_data;

			land(ln, tj, k, i, cqe->res == (int)dk->stride ? 0 :
					   cqe->res < 0 ? cqe->res : -EIO);
			free_bufs[nfree++] = k;
			seen++;
		}
		io_uring_cq_advance(&ln->ring, seen);
		*landed += seen;
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

		transfer(ln, false, tj->slots + i0, m);
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
	uint64_t n = LANE_STAGE_BYTES / dk->stride;
	void *stage;
	int ret;

	if (!ln)
		return -ENOMEM;
	ln->t = t;
	ln->dk = dk;
	ln->nstage = n < 1 ? 1 : n > LANE_STAGE_MAX ? LANE_STAGE_MAX : (uint32_t)n;
	if (posix_memalign(&stage, KVTIER_ALIGN, (size_t)ln->nstage * dk->stride)) {
		free(ln);
		return -ENOMEM;
	}
	ln->stage = stage;
	/* Refused where the epoll loop runs (a seccomp filter, a container): pread/pwrite then. */
	ln->uring = !io_uring_queue_init(ln->nstage, &ln->ring, 0);
	if (ln->uring) {
		struct iovec iov = { ln->stage, (size_t)ln->nstage * dk->stride };

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

	kvpd_tier_copier_push(ln->cp, &tj->job);
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
