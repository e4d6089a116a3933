/* SPDX-License-Identifier: MIT */
/*
 * A pool's section of the handover state (KVPD_SECTION_POOL, version
 * KVPD_SECTION_POOL_VERSION): this header, then its arrays, each 8-aligned,
 * at the offsets it gives from the section's start. Internal to the handover
 * room; a change to it, or to a struct it holds (the spec as the config room
 * lays it out, the core's, tier's and events' saved records), is a new
 * section version: the next run then starts that pool empty, saying why.
 */
#ifndef KVPOOLD_HANDOVER_POOL_STATE_H
#define KVPOOLD_HANDOVER_POOL_STATE_H

#include <stdint.h>

#include "config/config.h"
#include "tier/tier.h"

struct kvpd_pool_state {
	struct kvpd_pool_spec spec;    /* as it was created */
	uint64_t generation;
	int32_t kv_fd;                 /* the memfds the exec hands on; -1: none */
	int32_t tier_fd, tier_index_fd;
	uint64_t kv_bytes;             /* its size (the next run checks the memfd's own) */
	uint32_t num_blocks;           /* the core's: num_blocks - 1 saved blocks; 0: none saved */
	uint32_t events, event_block_size;
	uint8_t configured, has_tier, pad[2];
	struct kvpd_tier_head tier;    /* has_tier */
	uint64_t blocks_off;           /* struct kvc_saved_block[num_blocks - 1] */
	uint64_t owners_off;           /* struct kvpd_tier_saved_owner[tier.nowners - 1] */
	uint64_t block_owner_off;      /* uint32_t[num_blocks] (has_tier) */
	uint64_t walk_off;             /* uint32_t[num_blocks] (has_tier) */
	uint64_t events_off;           /* struct kvpd_events_saved[events] */
	uint64_t tokens_off;           /* uint32_t[events * event_block_size] */
	uint64_t end;                  /* the section's bytes */
};

#endif
