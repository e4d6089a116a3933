/* SPDX-License-Identifier: MIT */
/*
 * A disk tier of format 2 (every block padded to pages of its own, no window
 * room, as many blocks as its size held) carried over to this format once,
 * so that an upgrade keeps what the tier held: its blocks whose record and
 * data check, newest first, up to the pool's capacity, are written into a
 * new file beside it (NAME.kvtier.new), in their old LRU order, which then
 * takes the old one's name. Until that rename the old file is untouched: a
 * conversion cut short leaves it as it was, and the next start tries again.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include "log.h"
#include "refuse.h"
#include "tier/disk.h"

/* A block of the old file to keep: its slot there, its record. */
struct kept {
	uint32_t slot;
	struct kvtier_record r;
};

static int newest_first(const void *a, const void *b)
{
	const struct kept *x = a, *y = b;

	return x->r.stamp > y->r.stamp ? -1 : x->r.stamp < y->r.stamp;
}

/* The old file's valid records, newest first, one a block: into *@out (malloc'd). */
static int old_records(struct tier_disk *dk, const struct kvtier_header_v2 *h, struct kept **out,
		       uint32_t *n, uint64_t *refused)
{
	size_t bytes = h->nslots * sizeof(struct kvtier_record);
	struct kvtier_record *recs = malloc(bytes ? bytes : 1);
	struct kept *kept = malloc((h->nslots ? h->nslots : 1) * sizeof(*kept));
	uint32_t m = 0;

	if (!recs || !kept || pread(dk->rfd, recs, bytes, (off_t)h->records_off) != (ssize_t)bytes) {
		int err = !recs || !kept ? -ENOMEM : -EIO;

		free(recs);
		free(kept);
		return err;
	}
	for (uint32_t i = 0; i < h->nslots; i++) {
		const struct kvtier_record *r = &recs[i];

		if (!r->valid && !r->check)
			continue;
		if (r->valid != KVTIER_RECORD_VALID || r->geometry != dk->geometry ||
		    r->check != XXH3_64bits_withSeed(r, offsetof(struct kvtier_record, check), i) ||
		    r->group >= dk->geo.num_groups) {
			(*refused)++;
			continue;
		}
		kept[m++] = (struct kept){ .slot = i, .r = *r };
	}
	free(recs);
	qsort(kept, m, sizeof(*kept), newest_first);
	*out = kept;
	*n = m;
	return 0;
}

/* Old slot @from's block, checked against its sum, into new slot @to (page @page, in memory). */
static int carry(struct tier_disk *dk, const struct kvtier_header_v2 *h, const struct kept *k,
		 uint8_t *slot_buf, uint8_t *page)
{
	ssize_t n = pread(dk->rfd, slot_buf, h->slot_bytes,
			  (off_t)(h->data_off + (uint64_t)k->slot * h->stride));

	if (n != (ssize_t)h->slot_bytes || XXH3_64bits(slot_buf, h->slot_bytes) != k->r.sum)
		return -EIO;
	memcpy(page, slot_buf, h->slot_bytes);
	return 0;
}

/* Block @k (new slot @j, stamp @stamp): its record and, where it had one, its origin. */
static int put_record(struct tier_disk *dk, int fd, const struct kvtier_header_v2 *h,
		      const struct kept *k, uint32_t j, uint64_t stamp, uint8_t *origin)
{
	struct kvtier_record r = k->r;
	off_t at = (off_t)(h->origins_off + (uint64_t)k->slot * h->origin_stride);

	r.origin_sum = 0;
	if (k->r.origin_sum &&
	    pread(dk->rfd, origin, dk->origin_stride, at) == (ssize_t)dk->origin_stride &&
	    XXH3_64bits_withSeed(origin, dk->origin_stride, k->slot) == k->r.origin_sum) {
		r.origin_sum = XXH3_64bits_withSeed(origin, dk->origin_stride, j) ?: 1;
		if (pwrite(fd, origin, dk->origin_stride,
			   (off_t)(dk->origins_off + (uint64_t)j * dk->origin_stride)) !=
		    (ssize_t)dk->origin_stride)
			return -EIO;
	}
	r.stamp = stamp;
	r.check = XXH3_64bits_withSeed(&r, offsetof(struct kvtier_record, check), j);
	return pwrite(fd, &r, sizeof(r), (off_t)(dk->records_off + (uint64_t)j * sizeof(r))) ==
	       (ssize_t)sizeof(r) ? 0 : -EIO;
}

/* The new file, made beside the old: its header, then the kept blocks, oldest first. */
static int write_new(struct tier_disk *dk, int fd, const struct kvtier_header_v2 *h,
		     const struct kept *kept, uint32_t n, uint32_t *carried, uint64_t *refused)
{
	uint8_t *page = calloc(1, dk->page_bytes), *slot_buf = malloc(h->slot_bytes);
	uint8_t *origin = malloc(dk->origin_stride);
	struct kvtier_header nh;
	uint32_t j = 0;
	int ret = page && slot_buf && origin ? 0 : -ENOMEM;

	kvpd_tier_disk_header(dk, &nh);
	if (!ret && (posix_fallocate(fd, 0, (off_t)dk->file_bytes) ||
		     pwrite(fd, &nh, sizeof(nh), 0) != (ssize_t)sizeof(nh)))
		ret = -errno ?: -EIO;
	/* Oldest first, so that stamps keep the old LRU order. */
	for (uint32_t i = n; !ret && i-- > 0;) {
		if (carry(dk, h, &kept[i], slot_buf, page + kvpd_disk_in_page(dk, j))) {
			(*refused)++;
			continue;
		}
		ret = put_record(dk, fd, h, &kept[i], j, ++dk->stamp, origin);
		if (!ret && ++j % dk->pack == 0) {
			if (pwrite(fd, page, dk->page_bytes, (off_t)kvpd_disk_page_off(dk, j - 1)) !=
			    (ssize_t)dk->page_bytes)
				ret = -EIO;
			memset(page, 0, dk->page_bytes);
		}
	}
	/* The last page, when the last block checked was not its last. */
	if (!ret && j % dk->pack && pwrite(fd, page, dk->page_bytes,
					  (off_t)kvpd_disk_page_off(dk, j - 1)) !=
				    (ssize_t)dk->page_bytes)
		ret = -EIO;
	if (!ret && fdatasync(fd))
		ret = -errno;
	*carried = j;
	free(page);
	free(slot_buf);
	free(origin);
	return ret;
}

int kvpd_tier_disk_convert(struct kvpd_tier *t, const char *file, char *why, size_t len)
{
	struct tier_disk *dk = t->disk;
	char path[sizeof(dk->path) + 8];
	struct kvtier_header_v2 h;
	uint64_t t0 = kvpd_now_ns(), refused = 0;
	struct kept *kept = NULL;
	uint32_t n = 0, past = 0, carried = 0;
	int fd, ret;

	if (pread(dk->rfd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.slot_bytes != dk->slot_bytes)
		return kvpd_refuse(why, len, -EUCLEAN, "tier_disk_path: %s: a format 2 file whose "
				   "header does not read back: remove it", file);
	ret = old_records(dk, &h, &kept, &n, &refused);
	if (ret)
		return kvpd_refuse(why, len, ret, "tier_disk_path: %s: reading its format 2 "
				   "records: %s", file, strerror(-ret));
	if (n > dk->capacity) {
		past = n - (uint32_t)dk->capacity;
		n = (uint32_t)dk->capacity;
	}
	snprintf(path, sizeof(path), "%s.new", dk->path);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		free(kept);
		return kvpd_refuse(why, len, -errno, "tier_disk_path: %s.new: %s", file,
				   strerror(errno));
	}
	ret = flock(fd, LOCK_EX | LOCK_NB) ? -errno :
	      write_new(dk, fd, &h, kept, n, &carried, &refused);
	free(kept);
	if (!ret && rename(path, dk->path))
		ret = -errno;
	if (ret) {
		close(fd);
		unlink(path);
		return kvpd_refuse(why, len, ret, "tier_disk_path: %s: converting it from format 2: "
				   "%s (left as it was)", file, strerror(-ret));
	}
	close(dk->rfd);
	dk->rfd = fd;
	kvpd_log(t->d, KVPD_LOG_NOTICE, "pool %s: disk tier %s: format 2 converted to %u in %.1f "
		 "ms: %u blocks kept, %u past its %llu blocks, %llu refused", t->pool->name,
		 dk->path, KVTIER_VERSION, (kvpd_now_ns() - t0) / 1e6, carried, past,
		 (unsigned long long)dk->capacity, (unsigned long long)refused);
	return 0;
}
