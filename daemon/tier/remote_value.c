/* SPDX-License-Identifier: MIT */
/*
 * The cluster tier's values: a header that says whose block a value is, then
 * its KV. Anyone who can reach the cluster can write it, so a value is
 * checked whole before a byte of it is served; with a key, tagged too
 * (remote.h has the format).
 */
#include <string.h>
#include <sodium.h>
#include <xxhash.h>

#include <hiredis/hiredis.h>

#include "tier/remote.h"

_Static_assert(sizeof(struct remote_value_head) == 64, "a value's header: 64 bytes");

/* The tag of @value (its header's tag zero) under @key. */
static void tag_of(const struct remote_tag_key *k, const char *key, size_t key_len,
		   const uint8_t *value, size_t data_bytes, uint8_t tag[REMOTE_TAG_BYTES])
{
	struct remote_value_head h;
	crypto_generichash_state st;

	memcpy(&h, value, sizeof(h));
	memset(h.tag, 0, sizeof(h.tag));
	crypto_generichash_init(&st, k->bytes, k->len, REMOTE_TAG_BYTES);
	crypto_generichash_update(&st, (const uint8_t *)key, key_len);
	crypto_generichash_update(&st, (const uint8_t *)&h, sizeof(h));
	crypto_generichash_update(&st, value + sizeof(h), data_bytes);
	crypto_generichash_final(&st, tag, REMOTE_TAG_BYTES);
}

void remote_value_seal(const struct remote_tag_key *k, const char *key, size_t key_len,
		       uint8_t *value, uint64_t geometry, size_t data_bytes)
{
	struct remote_value_head h = { .version = REMOTE_VALUE_VERSION, .geometry = geometry,
				       .bytes = data_bytes };

	memcpy(h.magic, REMOTE_VALUE_MAGIC, sizeof(h.magic));
	h.sum = XXH3_64bits(value + sizeof(h), data_bytes);
	memcpy(value, &h, sizeof(h));
	if (k->len) {
		tag_of(k, key, key_len, value, data_bytes, h.tag);
		memcpy(value + offsetof(struct remote_value_head, tag), h.tag, sizeof(h.tag));
	}
}

int remote_value_check(const struct remote_tag_key *k, const char *key, size_t key_len,
		       const redisReply *rep, uint64_t geometry, size_t data_bytes)
{
	static const uint8_t untagged[REMOTE_TAG_BYTES];
	uint8_t tag[REMOTE_TAG_BYTES];
	struct remote_value_head h;

	if (!rep || rep->type == REDIS_REPLY_NIL)
		return rep ? KVP_REMOTE_REFUSED_MISSING : KVP_REMOTE_REFUSED_LATE;
	if (rep->type != REDIS_REPLY_STRING || rep->len != sizeof(h) + data_bytes)
		return KVP_REMOTE_REFUSED_HEADER;
	memcpy(&h, rep->str, sizeof(h));
	if (memcmp(h.magic, REMOTE_VALUE_MAGIC, sizeof(h.magic)) ||
	    h.version != REMOTE_VALUE_VERSION || h.bytes != data_bytes)
		return KVP_REMOTE_REFUSED_HEADER;
	if (h.geometry != geometry)
		return KVP_REMOTE_REFUSED_GEOMETRY;
	if (k->len) {
		/* Compared in constant time: a forger learns nothing from how long a refusal took. */
		tag_of(k, key, key_len, (const uint8_t *)rep->str, data_bytes, tag);
		if (!sodium_memcmp(h.tag, untagged, sizeof(tag)) ||
		    sodium_memcmp(h.tag, tag, sizeof(tag)))
			return KVP_REMOTE_REFUSED_TAG;
	}
	if (XXH3_64bits(rep->str + sizeof(h), data_bytes) != h.sum)
		return KVP_REMOTE_REFUSED_CHECKSUM;
	return REMOTE_SOUND;
}
