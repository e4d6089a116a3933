/* SPDX-License-Identifier: MIT */
/*
 * The host backend: pool memory in a memfd (huge pages where the system has
 * them), KV copies and attention on the worker threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn/attend_internal.h"
#include "pools/pools.h"
#include "../../uapi/kvpool.h"

/*
 * A memfd of @bytes mapped shared; *fd stays open for POOL_MAP. Sealed at its
 * size: a mapping client that could shrink it would make the daemon's next
 * touch of the lost pages a SIGBUS.
 */
static void *map_memfd(size_t bytes, unsigned flags, int *fd)
{
	void *mem = MAP_FAILED;

	*fd = memfd_create("kvpool-kv", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
	if (*fd < 0)
		return MAP_FAILED;
	/* Huge pages are reserved at mmap (ENOMEM when there are too few); never NORESERVE them,
	 * or a shortage shows up later as SIGBUS on first touch. */
	if (ftruncate(*fd, (off_t)bytes) == 0 &&
	    fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
		mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			   MAP_SHARED | (flags & MFD_HUGETLB ? 0 : MAP_NORESERVE), *fd, 0);
	if (mem == MAP_FAILED) {
		int err = errno;

		close(*fd);
		*fd = -1;
		errno = err;
	}
	return mem;
}

#define HUGE_PAGE_BYTES (2ul << 20)
#ifndef MFD_HUGE_2MB /* linux/memfd.h's, which clashes with glibc's MFD_ flags */
#define MFD_HUGE_2MB (21u << 26)
#endif

static int host_pool_init(struct kvpd_kv_layout *l, uint32_t device, void **mem, char *why,
			  size_t why_len)
{
	size_t bytes = l->total_bytes;
	size_t huge_bytes = (bytes + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1);
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	void *m;

	(void)device; /* checked 0 */
	if (huge_bytes < bytes)
		return -EOVERFLOW;
	/*
	 * A memfd is sparse: a pool larger than the machine would be created, and
	 * then killed by the OOM killer when its blocks fill. Its limit: the RAM.
	 */
	if (bytes > ram)
		return kvpd_refuse(why, why_len, -ENOMEM, "KV memory of %.1f GiB: more than this "
				   "machine's %.1f GiB of RAM", bytes / 1073741824.0,
				   ram / 1073741824.0);
	/*
	 * Explicit huge pages only when the admin reserved enough; the mapping is rounded
	 * up to whole pages (under 2 MiB more), which costs less than a TLB miss on every
	 * block: scattered blocks over 4 KiB pages attend about a quarter slower.
	 */
	m = map_memfd(huge_bytes, MFD_HUGETLB | MFD_HUGE_2MB, &l->mem_fd);
	if (m != MAP_FAILED) {
		l->page_bytes = HUGE_PAGE_BYTES;
	} else {
		m = map_memfd(huge_bytes, 0, &l->mem_fd);
		if (m == MAP_FAILED)
			return -errno;
		/* transparent huge pages, where shmem_enabled allows them */
		madvise(m, huge_bytes, MADV_HUGEPAGE);
		l->page_bytes = (size_t)sysconf(_SC_PAGESIZE);
	}
	l->map_bytes = huge_bytes;
	l->num_pieces = 1;
	l->piece_bytes = huge_bytes;
	*mem = m;
	return 0;
}

int kvpd_host_pool_adopt(struct kvpd_kv_layout *l, void **mem, int fd, char *why, size_t why_len)
{
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;
	void *m;

	if (fstat(fd, &st) || (size_t)st.st_size != l->map_bytes || seals < 0 ||
	    (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return kvpd_refuse(why, why_len, -EINVAL, "the KV memory handed over is not a "
				   "sealed memfd of %zu bytes", l->map_bytes);
	/* A memfd on huge pages says so in its block size: its pages are reserved already. */
	m = mmap(NULL, l->map_bytes, PROT_READ | PROT_WRITE,
		 MAP_SHARED | ((size_t)st.st_blksize >= HUGE_PAGE_BYTES ? 0 : MAP_NORESERVE), fd, 0);
	if (m == MAP_FAILED)
		return kvpd_refuse(why, why_len, -errno, "the KV memory handed over: mmap: %s",
				   strerror(errno));
	munmap(*mem, l->map_bytes);
	close(l->mem_fd);
	fcntl(fd, F_SETFD, FD_CLOEXEC); /* inherited for this run alone */
	*mem = m;
	l->mem_fd = fd;
	l->page_bytes = (size_t)st.st_blksize >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES :
								  (size_t)sysconf(_SC_PAGESIZE);
	if (l->page_bytes != HUGE_PAGE_BYTES)
		madvise(m, l->map_bytes, MADV_HUGEPAGE);
	return 0;
}

static void host_pool_fini(const struct kvpd_kv_layout *l, void *mem)
{
	if (mem)
		munmap(mem, l->map_bytes);
	if (l->mem_fd >= 0)
		close(l->mem_fd);
}

/* One piece: the memfd, of map_bytes. */
static int host_export_fds(const struct kvpd_kv_layout *l, void *mem, int *fds, unsigned max)
{
	(void)mem;
	if (max < 1)
		return -ENOSPC;
	fds[0] = fcntl(l->mem_fd, F_DUPFD_CLOEXEC, 0);
	return fds[0] < 0 ? -errno : 1;
}

/* WRITE_KV and READ_KV: task chunk * kv_heads + h copies kv head h of the chunk's tokens. */
static void copy_kv(struct kvpd_job *job, uint32_t task)
{
	const struct kvpd_kv_layout *l = job->layout;
	uint32_t head = task % l->kv_heads, chunk = task / l->kv_heads;
	uint32_t t0 = chunk * job->chunk_tokens, t1 = t0 + job->chunk_tokens;
	size_t k_off = kvpd_k_off(l, job->layer, head), v_delta = l->v_delta;
	size_t token_bytes = l->kv_heads * l->row_bytes;
	uint8_t *k = job->data + head * l->row_bytes;
	uint8_t *v = k + job->count * token_bytes;

	if (t1 > job->count)
		t1 = job->count;
	for (uint32_t t = t0; t < t1; t++) {
		uint8_t *row = kvpd_row(job->mem, l, &job->map, job->first_pos + t, k_off);

		if (job->type == KVPD_JOB_WRITE) {
			memcpy(row, k + t * token_bytes, l->row_bytes);
			memcpy(row + v_delta, v + t * token_bytes, l->row_bytes);
		} else {
			memcpy(k + t * token_bytes, row, l->row_bytes);
			memcpy(v + t * token_bytes, row + v_delta, l->row_bytes);
		}
	}
}

/* The unit that task @task belongs to, in a mapped job (task0 ascending). */
static struct kvpd_attend_unit *unit_of(struct kvpd_job *job, uint32_t task)
{
	uint32_t lo = 0, hi = job->nunits;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (job->units[mid].task0 <= task)
			lo = mid;
		else
			hi = mid;
	}
	return &job->units[lo];
}

/*
 * Where part c of S starts among a query's n keys: whole tiles of the kernels, so
 * only the last part has a partial one. A pure function of (n, c, S): the same
 * request is always cut the same way.
 */
static uint32_t part_start(uint32_t n, uint32_t c, uint32_t parts)
{
	if (c >= parts)
		return n;
	return (uint32_t)((uint64_t)n * c / parts) & ~(uint32_t)(ATTN_TILE - 1);
}

/* Narrows q's ranges to its keys [k0, k1), counted along the ranges in order. */
static void sub_ranges(struct attn_query *q, uint32_t k0, uint32_t k1)
{
	uint32_t lo[2], hi[2], n = 0, seen = 0;

	for (uint32_t r = 0; r < q->nranges; r++) {
		uint32_t len = q->hi[r] - q->lo[r];
		uint32_t a = k0 > seen ? k0 - seen : 0, b = k1 - seen < len ? k1 - seen : len;

		if (k1 > seen && a < b) {
			lo[n] = q->lo[r] + a;
			hi[n] = q->lo[r] + b;
			n++;
		}
		seen += len;
	}
	for (uint32_t r = 0; r < n; r++) {
		q->lo[r] = lo[r];
		q->hi[r] = hi[r];
	}
	q->nranges = n;
}

/* One part of a split unit: partials of every query; the last part of the head merges. */
static void attend_part(struct kvpd_job *job, struct kvpd_attend_unit *u, const struct attn_keys *keys,
			uint32_t head, uint32_t c)
{
	uint32_t g = job->params.g, hd = job->layout->head_dim, parts = u->split;
	size_t q_row = (size_t)hd * attn_dtype_size(job->params.q_dtype), gq = (size_t)g * hd;
	size_t first = ((size_t)head * parts + c) * u->count;  /* this part's first partial */
	size_t head0 = (size_t)head * parts * u->count;       /* this head's part 0 */

	for (uint32_t i = 0; i < u->count; i++) {
		size_t off = ((size_t)i * job->q_heads + (size_t)head * g) * q_row;
		struct attn_query q = { .q = u->q + off };
		uint32_t n = 0, k0, k1;
		float *lse = u->lse + (first + i) * g;

		q.nranges = kvpd_mask_ranges(&u->mask, u->first_pos + i, q.lo, q.hi);
		for (uint32_t r = 0; r < q.nranges; r++)
			n += q.hi[r] - q.lo[r];
		k0 = part_start(n, c, parts);
		k1 = part_start(n, c + 1, parts);
		if (k0 >= k1) { /* a query with fewer keys than the unit's split wants */
			for (uint32_t h = 0; h < g; h++)
				lse[h] = -INFINITY;
			continue;
		}
		sub_ranges(&q, k0, k1);
		q.out = u->part + (first + i) * gq;
		q.lse = lse;
		attn_one(keys, &q, &job->params);
	}
	/* Release our partials; the last part acquires everyone's. */
	if (__atomic_sub_fetch(&u->left[head], 1, __ATOMIC_ACQ_REL) != 0)
		return;
	for (uint32_t i = 0; i < u->count; i++) {
		size_t off = ((size_t)i * job->q_heads + (size_t)head * g) * q_row;

		attn_merge(u->part + (head0 + i) * gq, u->count * gq, u->lse + (head0 + i) * g,
			   (size_t)u->count * g, parts, g, hd, u->out + off, job->params.q_dtype);
	}
}

/*
 * ATTEND: task = unit * kv_heads + kv head, the g query heads of that kv head, every
 * query; in a mapped job, (unit, kv head, part) from the unit's task0, a part being
 * a share of the keys (split), or of the queries (qparts) and of the query heads
 * (hparts, the faster-moving index).
 */
static void attend(struct kvpd_job *job, uint32_t task)
{
	const struct kvpd_kv_layout *l = job->layout;
	struct kvpd_attend_unit *u;
	struct attn_params p = job->params; /* p.g: this task's slice of the kv head's heads */
	uint32_t head, c = 0, parts, i0 = 0, i1, h0 = 0;
	size_t q_row = (size_t)l->head_dim * attn_dtype_size(job->params.q_dtype);

	if (job->mapped) {
		u = unit_of(job, task);
		parts = u->split * u->qparts * u->hparts;
		head = (task - u->task0) / parts;
		c = (task - u->task0) % parts;
	} else {
		u = &job->units[task / l->kv_heads];
		head = task % l->kv_heads;
	}
	if (u->hparts > 1) {
		uint32_t per = (p.g + u->hparts - 1) / u->hparts;

		h0 = c % u->hparts * per;
		p.g = per < p.g - h0 ? per : p.g - h0;
		c /= u->hparts;
	}
	i1 = u->count;
	if (u->qparts > 1) {
		uint32_t per = (u->count + u->qparts - 1) / u->qparts;

		i0 = c * per;
		i1 = i0 + per < u->count ? i0 + per : u->count;
	}

	struct attn_keys keys = {
		.pool = job->mem,
		.block_stride = l->block_stride,
		.row_stride = l->token_stride,
		.k_off = kvpd_k_off(l, job->layer, head),
		.v_delta = l->v_delta,
		.block_size = l->block_size,
		.head_dim = l->head_dim,
		.dtype = l->dtype,
		.ids = u->map.ids,
		.first_block = u->map.first_block,
		.nblocks = u->map.nblocks,
		.ring_tokens = u->map.ring_tokens,
	};

	if (u->split > 1) {
		attend_part(job, u, &keys, head, c);
		return;
	}
	for (uint32_t i = i0; i < i1; i++) {
		size_t off = ((size_t)i * job->q_heads + (size_t)head * job->params.g + h0) * q_row;
		struct attn_query q = { .q = u->q + off, .out = u->out + off };

		q.nranges = kvpd_mask_ranges(&u->mask, u->first_pos + i, q.lo, q.hi);
		attn_one(&keys, &q, &p);
	}
}

/* Exchanges @n bytes at @a and @b, a bounce buffer at a time. */
static void swap_bytes(uint8_t *a, uint8_t *b, size_t n)
{
	uint8_t bounce[4096];

	for (size_t at = 0; at < n; at += sizeof(bounce)) {
		size_t k = n - at < sizeof(bounce) ? n - at : sizeof(bounce);

		memcpy(bounce, a + at, k);
		memcpy(a + at, b + at, k);
		memcpy(b + at, bounce, k);
	}
}

/* A tier's task: one block between the pool and its slot (or the two swapped), chunk by chunk. */
static void copy_tier(struct kvpd_job *job, uint32_t task)
{
	const struct kvpd_kv_layout *l = job->layout;
	size_t chunk = kvpd_block_chunk_bytes(l);
	uint8_t *slot = job->tier_mem + (size_t)job->slots[task] * 2 * l->layers * chunk;
	bool swap = job->type == KVPD_JOB_TIER_UP && job->swap && job->swap[task];

	if (job->delay_us)
		usleep(job->delay_us);
	for (uint32_t i = 0; i < 2 * l->layers; i++, slot += chunk) {
		uint8_t *block = job->mem + kvpd_block_chunk_off(l, job->blocks[task], i);

		if (swap)
			swap_bytes(block, slot, chunk);
		else if (job->type == KVPD_JOB_TIER_DOWN)
			memcpy(slot, block, chunk);
		else
			memcpy(block, slot, chunk);
	}
}

/* A window snapshot's task: one block into another, chunk by chunk (either layout). */
static void copy_block(struct kvpd_job *job, uint32_t task)
{
	const struct kvpd_kv_layout *l = job->layout;
	size_t chunk = kvpd_block_chunk_bytes(l);

	for (uint32_t i = 0; i < 2 * l->layers; i++)
		memcpy(job->mem + kvpd_block_chunk_off(l, job->dsts[task], i),
		       job->mem + kvpd_block_chunk_off(l, job->blocks[task], i), chunk);
}

static int host_run_task(struct kvpd_job *job, uint32_t task)
{
	if (job->type == KVPD_JOB_ATTEND)
		attend(job, task);
	else if (job->type == KVPD_JOB_TIER_DOWN || job->type == KVPD_JOB_TIER_UP)
		copy_tier(job, task);
	else if (job->type == KVPD_JOB_COPY)
		copy_block(job, task);
	else
		copy_kv(job, task);
	return 0;
}

const struct kvpd_backend_ops kvpd_host_backend = {
	.name = "host",
	.pool_init = host_pool_init,
	.pool_fini = host_pool_fini,
	.export_fds = host_export_fds,
	.mem_kind = KVP_MEM_HOST_MEMFD,
	.run_task = host_run_task,
};
