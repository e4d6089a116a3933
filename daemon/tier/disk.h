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

#endif
