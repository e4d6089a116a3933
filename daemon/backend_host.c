/* SPDX-License-Identifier: MIT */
/*
 * The host backend: pool memory in a memfd (huge pages where the system has
 * them), KV copies and attention on the worker threads.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "jobs.h"

/* The memfd is kept open only while mapping: the mapping holds the memory. */
static void *map_memfd(size_t bytes, unsigned flags)
{
	int fd = memfd_create("kvpool-kv", MFD_CLOEXEC | flags);
	void *mem = MAP_FAILED;

	if (fd < 0)
		return MAP_FAILED;
	/* Huge pages are reserved at mmap (ENOMEM when there are too few); never NORESERVE them,
	 * or a shortage shows up later as SIGBUS on first touch. */
	if (ftruncate(fd, (off_t)bytes) == 0)
		mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			   MAP_SHARED | (flags & MFD_HUGETLB ? 0 : MAP_NORESERVE), fd, 0);
	close(fd);
	return mem;
}

static int host_pool_init(const struct kvpd_kv_layout *l, void **mem)
{
	size_t bytes = (size_t)l->num_blocks * l->slot_bytes;
	void *m;

	if (l->slot_bytes && bytes / l->slot_bytes != l->num_blocks)
		return -EOVERFLOW;
	/* Explicit huge pages only work when the admin reserved some (and the size fits them). */
	m = (bytes % (2u << 20)) ? MAP_FAILED : map_memfd(bytes, MFD_HUGETLB);
	if (m == MAP_FAILED) {
		m = map_memfd(bytes, 0);
		if (m == MAP_FAILED)
			return -errno;
		madvise(m, bytes, MADV_HUGEPAGE);
	}
	*mem = m;
	return 0;
}

static void host_pool_fini(const struct kvpd_kv_layout *l, void *mem)
{
	if (mem)
		munmap(mem, (size_t)l->num_blocks * l->slot_bytes);
}

/* WRITE_KV and READ_KV: task h copies kv head h of every token. */
static void copy_kv(struct kvpd_job *job, uint32_t head)
{
	const struct kvpd_kv_layout *l = job->layout;
	size_t k_off = kvpd_k_off(l, job->layer, head), v_delta = kvpd_v_delta(l);
	size_t token_bytes = l->kv_heads * l->row_bytes;
	uint8_t *k = job->data + head * l->row_bytes;
	uint8_t *v = k + job->count * token_bytes;

	for (uint32_t t = 0; t < job->count; t++) {
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

/* ATTEND: task = unit * kv_heads + kv head; the g query heads of that kv head, every query. */
static void attend(struct kvpd_job *job, uint32_t task)
{
	const struct kvpd_kv_layout *l = job->layout;
	const struct kvpd_attend_unit *u = &job->units[task / l->kv_heads];
	uint32_t head = task % l->kv_heads;
	size_t q_row = (size_t)l->head_dim * attn_dtype_size(job->params.q_dtype);
	struct attn_keys keys = {
		.pool = job->mem,
		.slot_bytes = l->slot_bytes,
		.k_off = kvpd_k_off(l, job->layer, head),
		.v_delta = kvpd_v_delta(l),
		.block_size = l->block_size,
		.head_dim = l->head_dim,
		.dtype = l->dtype,
		.ids = u->map.ids,
		.first_block = u->map.first_block,
		.nblocks = u->map.nblocks,
		.ring_tokens = u->map.ring_tokens,
	};

	for (uint32_t i = 0; i < u->count; i++) {
		size_t off = ((size_t)i * job->q_heads + (size_t)head * job->params.g) * q_row;
		struct attn_query q = { .q = u->q + off, .out = u->out + off };

		q.nranges = kvpd_mask_ranges(&u->mask, u->first_pos + i, q.lo, q.hi);
		attn_one(&keys, &q, &job->params);
	}
}

static void host_run_task(struct kvpd_job *job, uint32_t task)
{
	if (job->type == KVPD_JOB_ATTEND)
		attend(job, task);
	else
		copy_kv(job, task);
}

const struct kvpd_backend_ops kvpd_host_backend = {
	.name = "host",
	.pool_init = host_pool_init,
	.pool_fini = host_pool_fini,
	.run_task = host_run_task,
};
