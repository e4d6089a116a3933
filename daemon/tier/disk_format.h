/* SPDX-License-Identifier: MIT */
/*
 * A disk tier's file, NAME.kvtier: a header (4 KiB), a region of records
 * (64 bytes a slot), a region of origins (a slot's block's place in its
 * sequence and its tokens, kept for KV events), then the slots' pages, the
 * unit O_DIRECT reads and writes. A block's KV (K and V of every layer, the
 * host tier's slot) of half a page or less shares a 4 KiB page with others,
 * slot_bytes apart (packed: `pack` slots a page, written together); a larger
 * one takes pages of its own, padded to 4 KiB. Each region starts on a 4 KiB
 * boundary. Slot i lies in page i / pack, at (i % pack) * stride in it.
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

#include <stddef.h>
#include <stdint.h>

#include "../uapi/kvpool.h"

#define KVTIER_MAGIC "KVPTIER"
#define KVTIER_VERSION 3 /* 2: the origins; 3: small blocks packed, capacity in blocks */
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
	uint32_t pack;            /* slots a page holds; 1: a slot has pages of its own */
	uint64_t slot_bytes;      /* a block's KV */
	uint64_t stride;          /* a slot's place in its page: slot_bytes packed, else
				   * slot_bytes rounded up to KVTIER_ALIGN */
	uint64_t nslots;          /* the capacity asked, and the window's room */
	uint64_t records_off, data_off, file_bytes;
	uint64_t origins_off, origin_stride;
	struct kvtier_geometry geo;
	uint64_t page_bytes;      /* the data's unit of I/O: KVTIER_ALIGN packed, else stride */
	uint64_t capacity;        /* blocks it keeps: tier_disk_bytes / slot_bytes */
	uint64_t check;           /* XXH3-64 of the bytes above */
};

/* Format 2's header (every slot padded to its own pages, no room): read to convert it. */
struct kvtier_header_v2 {
	char magic[8];
	uint32_t version;         /* 2 */
	uint32_t resv;
	uint64_t slot_bytes, stride, nslots;
	uint64_t records_off, data_off, file_bytes;
	uint64_t origins_off, origin_stride;
	struct kvtier_geometry geo;
	uint64_t check;
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
_Static_assert(offsetof(struct kvtier_header, geo) == offsetof(struct kvtier_header_v2, geo),
	       "kvtier_header_v2");

#endif
