/* SPDX-License-Identifier: MIT */
/* Internal to the tier room: a disk tier's file and the two threads that read and write it. */
#ifndef KVPOOLD_TIER_DISK_H
#define KVPOOLD_TIER_DISK_H

#include "tier/tier_internal.h"

struct disk_lane; /* disk_io.c: a thread's ring and staging buffers */

struct tier_disk {
	char path[KVPD_TIER_PATH_MAX + KVP_NAME_MAX + 8];
	int fd;                   /* O_DIRECT: the slots' data */
	int rfd;                  /* buffered: the header and the records; holds the lock */
	uint64_t asked;           /* tier_disk_bytes */
	uint64_t slot_bytes, stride, nslots;
	uint64_t capacity;        /* blocks it keeps; nslots adds the window's room */
	uint32_t pack;            /* slots a page holds (disk_format.h) */
	uint64_t page_bytes, npages;
	uint64_t records_off, data_off, file_bytes;
	uint64_t origins_off, origin_stride;
	uint64_t found_bytes;     /* the file's size when opened: past it, no record is kept */
	struct kvtier_geometry geo;
	uint64_t geometry;        /* XXH3-64 of geo, in every record */
	uint64_t stamp;           /* the last record's; the down lane's after start */
	int write_error;          /* atomic: the first write refused; none are made after */
	uint64_t restore_ns;      /* reading the records back and indexing them, at start */
	bool made;                /* the file is this open's: removed if the pool is refused */
	bool opened;              /* open and read back: the pool has it */
	struct disk_lane *down, *up;
};

/* disk_file.c: the header a file of @dk's layout carries. */
void kvpd_tier_disk_header(const struct tier_disk *dk, struct kvtier_header *h);
/*
 * disk_convert.c: the format-2 file at dk->path (open at dk->rfd, locked, of
 * this geometry) replaced by one of this format holding its blocks, newest
 * first, up to the capacity; dk->rfd is the new file's then. -errno with the
 * reason in @why; the old file is left as it was.
 */
int kvpd_tier_disk_convert(struct kvpd_tier *t, const char *file, char *why, size_t len);

/* Where slot @slot's page starts in the file, and where the slot lies in it. */
static inline uint64_t kvpd_disk_page_off(const struct tier_disk *dk, uint32_t slot)
{
	return dk->data_off + (uint64_t)(slot / dk->pack) * dk->page_bytes;
}

static inline size_t kvpd_disk_in_page(const struct tier_disk *dk, uint32_t slot)
{
	return (size_t)(slot % dk->pack) * dk->stride;
}

#endif
