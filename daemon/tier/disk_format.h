/* SPDX-License-Identifier: MIT */
/*
 * A disk tier's file, NAME.kvtier: a header (4 KiB), a region of records
 * (64 bytes a slot), a region of origins (a slot's block's place in its
 * sequence and its tokens, kept for KV events), then the slots, each a
 * block's KV (K and V of every layer, the host tier's slot) padded to 4 KiB
 * for O_DIRECT. Each region starts on a 4 KiB boundary.
 *
 * A slot's data and origin are written first, its record after (and cleared before the
 * slot is written again), so a record names data that was whole when it was
 * written. Nothing is synced on the way: a process crash loses nothing the
 * page cache took, and what a power loss tears is caught by the checksums (a
 * record's own, over its bytes and seeded by its slot; the data's, kept in
 * the record and checked at every read). Every field is little-endian, as
 * the machines kvpool runs on.
 */
#ifndef KVPOOLD_TIER_DISK_FORMAT_H
#define KVPOOLD_TIER_DISK_FORMAT_H

#include <stdint.h>

#include "../uapi/kvpool.h"

#define KVTIER_MAGIC "KVPTIER"
#define KVTIER_VERSION 2 /* 2: the origins */
#define KVTIER_ALIGN 4096u /* O_DIRECT's offsets, lengths and buffers */
#define KVTIER_RECORD_VALID 0x4b565252u

/* Everything that decides a block's bytes and its hash: a file of another is never read. */
struct kvtier_geometry {
	uint32_t block_size;
	uint32_t num_groups;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t dtype;
	uint32_t layers_per_group;
	uint8_t group_kind[KVP_MAX_GROUPS];
	uint32_t group_param[KVP_MAX_GROUPS];
};

struct kvtier_header {
	char magic[8];            /* KVTIER_MAGIC */
	uint32_t version;         /* KVTIER_VERSION */
	uint32_t resv;
	uint64_t slot_bytes;      /* a block's KV */
	uint64_t stride;          /* slot_bytes rounded up to KVTIER_ALIGN */
	uint64_t nslots;
	uint64_t records_off, data_off, file_bytes;
	uint64_t origins_off, origin_stride;
	struct kvtier_geometry geo;
	uint64_t check;           /* XXH3-64 of the bytes above */
};

/* Slot i's record, at records_off + 64 i; all zero: an empty slot. */
struct kvtier_record {
	uint32_t valid;           /* KVTIER_RECORD_VALID */
	uint32_t group;
	uint64_t key_lo, key_hi;  /* the block's chained hash */
	uint64_t sum;             /* XXH3-64 of its slot_bytes of KV */
	uint64_t geometry;        /* XXH3-64 of the header's geo */
	uint64_t stamp;           /* write order: of two records of one block the later wins */
	uint64_t origin_sum;      /* XXH3-64 of its origin seeded with the slot's index; 0: none
				   * kept (a pool without kv_events wrote it) */
	uint64_t check;           /* XXH3-64 of the bytes above, seeded with the slot's index */
};

/*
 * Slot i's origin, at origins_off + origin_stride i: what KV events announce
 * of its block after a restart. origin_stride: 16 + 4 block_size, rounded up
 * to 64.
 */
#define KVTIER_ORIGIN_PARENT 1u   /* flags: the block has a parent (not its sequence's first) */
struct kvtier_origin {
	uint32_t pos;             /* the block's index in its sequence */
	uint32_t flags;
	uint64_t parent;          /* the parent's chained hash, low 64 bits */
	uint32_t tokens[];        /* block_size */
};

_Static_assert(sizeof(struct kvtier_record) == 64, "kvtier_record");
_Static_assert(sizeof(struct kvtier_origin) == 16, "kvtier_origin");
_Static_assert(sizeof(struct kvtier_header) <= KVTIER_ALIGN, "kvtier_header");

#endif
