/* SPDX-License-Identifier: MIT */
/*
 * The events room: KV events in vLLM's wire format (vllm/distributed/
 * kv_events.py), for the KV-aware routers of multi-node deployments (llm-d,
 * Dynamo). Here, so far, the encoding of a batch: msgpack of [timestamp,
 * [events], data_parallel_rank nil], each event a map tagged "type" (vLLM's
 * msgspec form) or, in the older form, an array whose first element is the tag.
 *
 * It may use the shared headers and nothing else of the daemon.
 */
#ifndef KVPOOLD_EVENTS_ENCODE_H
#define KVPOOLD_EVENTS_ENCODE_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

enum kvpd_event_type { KVPD_EVENT_STORED, KVPD_EVENT_REMOVED, KVPD_EVENT_CLEARED };

/* vLLM's BlockStored, BlockRemoved or AllBlocksCleared, as kvpool fills them. */
struct kvpd_kv_event {
	enum kvpd_event_type type;
	uint32_t group;            /* group_idx */
	uint32_t nblocks;
	const uint64_t *hashes;    /* block_hashes: the low 64 bits of the chained hashes */
	bool has_parent;           /* parent_block_hash, else nil (the sequence's first block) */
	uint64_t parent;
	const uint32_t *tokens;    /* STORED: token_ids, nblocks * block_size */
	uint32_t block_size;
	const char *medium;        /* "GPU", "CPU", "DISK" */
	const char *spec_kind;     /* STORED: "full_attention", "sliding_window", ... */
	uint32_t window;           /* STORED: kv_cache_spec_sliding_window; 0: nil */
};

enum kvpd_event_format {
	KVPD_EVENTS_MAP,   /* vLLM's current form: each event a map with "type" */
	KVPD_EVENTS_ARRAY, /* the older tagged array: ["BlockStored", fields in order] */
};

/* Appends the batch of @n events at @ts (seconds) to @sb: 0, or -ENOMEM. */
int kvpd_events_encode(msgpack_sbuffer *sb, double ts, const struct kvpd_kv_event *ev, uint32_t n,
		       enum kvpd_event_format format);

#endif
