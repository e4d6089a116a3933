/* SPDX-License-Identifier: MIT */
/*
 * A batch of KV events in vLLM's msgpack form. The fields are those of the
 * pinned vLLM's msgspec structs, in their declaration order (the order the
 * array form needs); of the optional ones, kvpool sends those the issue's
 * routers read (group and cache spec) and leaves the others out, as msgspec
 * does with a field at its default.
 */
#include <errno.h>
#include <string.h>

#include "events/encode.h"

static int str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	return msgpack_pack_str(pk, n) ?: msgpack_pack_str_body(pk, s, n);
}

/* A key of a map form, or nothing in the array form. */
static int key(msgpack_packer *pk, enum kvpd_event_format f, const char *k)
{
	return f == KVPD_EVENTS_MAP ? str(pk, k) : 0;
}

static int head(msgpack_packer *pk, enum kvpd_event_format f, const char *tag, uint32_t fields)
{
	int ret = f == KVPD_EVENTS_MAP ? msgpack_pack_map(pk, fields + 1) :
					 msgpack_pack_array(pk, fields + 1);

	return ret ?: key(pk, f, "type") ?: str(pk, tag);
}

static int hashes(msgpack_packer *pk, const struct kvpd_kv_event *e)
{
	int ret = msgpack_pack_array(pk, e->nblocks);

	for (uint32_t i = 0; i < e->nblocks && !ret; i++)
		ret = msgpack_pack_uint64(pk, e->hashes[i]);
	return ret;
}

static int stored(msgpack_packer *pk, const struct kvpd_kv_event *e, enum kvpd_event_format f)
{
	uint64_t ntok = (uint64_t)e->nblocks * e->block_size;
	int ret = head(pk, f, "BlockStored", 11) ?:
		  key(pk, f, "block_hashes") ?: hashes(pk, e) ?:
		  key(pk, f, "parent_block_hash") ?:
		  (e->has_parent ? msgpack_pack_uint64(pk, e->parent) : msgpack_pack_nil(pk)) ?:
		  key(pk, f, "token_ids") ?: msgpack_pack_array(pk, (size_t)ntok);

	for (uint64_t i = 0; i < ntok && !ret; i++)
		ret = msgpack_pack_uint32(pk, e->tokens[i]);
	return ret ?: key(pk, f, "block_size") ?: msgpack_pack_uint32(pk, e->block_size) ?:
	       key(pk, f, "lora_id") ?: msgpack_pack_nil(pk) ?:
	       key(pk, f, "medium") ?: str(pk, e->medium) ?:
	       key(pk, f, "lora_name") ?: msgpack_pack_nil(pk) ?:
	       key(pk, f, "extra_keys") ?: msgpack_pack_nil(pk) ?:
	       key(pk, f, "group_idx") ?: msgpack_pack_uint32(pk, e->group) ?:
	       key(pk, f, "kv_cache_spec_kind") ?: str(pk, e->spec_kind) ?:
	       key(pk, f, "kv_cache_spec_sliding_window") ?:
	       (e->window ? msgpack_pack_uint32(pk, e->window) : msgpack_pack_nil(pk));
}

static int removed(msgpack_packer *pk, const struct kvpd_kv_event *e, enum kvpd_event_format f)
{
	return head(pk, f, "BlockRemoved", 3) ?: key(pk, f, "block_hashes") ?: hashes(pk, e) ?:
	       key(pk, f, "medium") ?: str(pk, e->medium) ?:
	       key(pk, f, "group_idx") ?: msgpack_pack_uint32(pk, e->group);
}

int kvpd_events_encode(msgpack_sbuffer *sb, double ts, const struct kvpd_kv_event *ev, uint32_t n,
		       enum kvpd_event_format format)
{
	msgpack_packer pk;
	int ret;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	ret = msgpack_pack_array(&pk, 3) ?: msgpack_pack_double(&pk, ts) ?:
	      msgpack_pack_array(&pk, n);
	for (uint32_t i = 0; i < n && !ret; i++) {
		if (ev[i].type == KVPD_EVENT_STORED)
			ret = stored(&pk, &ev[i], format);
		else if (ev[i].type == KVPD_EVENT_REMOVED)
			ret = removed(&pk, &ev[i], format);
		else
			ret = head(&pk, format, "AllBlocksCleared", 0);
	}
	/* data_parallel_rank: kvpool is one publisher a pool. */
	ret = ret ?: msgpack_pack_nil(&pk);
	return ret ? -ENOMEM : 0; /* msgpack-c's only failure: the buffer could not grow */
}
