/* SPDX-License-Identifier: MIT */
/*
 * KV events in vLLM's msgpack form (daemon/events/encode.c): a batch decoded
 * back with msgpack-c and printed, field for field, in both forms. With
 * KVPOOL_EVENTS_DUMP=PATH it writes the batch's map form there instead, for
 * tests/vllm/test_events_wire.py to decode with vLLM's own classes.
 */
#include <msgpack.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "events/encode.h"

static const uint64_t hashes[] = { 0xfedcba9876543210ull, 7 };
static const uint32_t tokens[] = { 1, 2, 3, 4 };
static const struct kvpd_kv_event batch[] = {
	{ .type = KVPD_EVENT_STORED, .group = 1, .nblocks = 2, .hashes = hashes,
	  .has_parent = true, .parent = 42, .tokens = tokens, .block_size = 2, .medium = "CPU",
	  .spec_kind = "sliding_window", .window = 128 },
	{ .type = KVPD_EVENT_STORED, .group = 0, .nblocks = 1, .hashes = hashes, .tokens = tokens,
	  .block_size = 2, .medium = "GPU", .spec_kind = "full_attention" },
	{ .type = KVPD_EVENT_REMOVED, .group = 1, .nblocks = 1, .hashes = hashes + 1,
	  .medium = "DISK" },
	{ .type = KVPD_EVENT_CLEARED },
};

/* The batch encoded in @format, decoded and printed as msgpack-c prints objects. */
static void decoded(enum kvpd_event_format format, char *out, size_t len)
{
	msgpack_sbuffer sb;
	msgpack_unpacked u;
	size_t off = 0;

	msgpack_sbuffer_init(&sb);
	assert_int_equal(kvpd_events_encode(&sb, 1.5, batch, 4, format), 0);
	msgpack_unpacked_init(&u);
	assert_int_equal(msgpack_unpack_next(&u, sb.data, sb.size, &off), MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(off, sb.size); /* one object, nothing after it */
	assert_true(msgpack_object_print_buffer(out, len, u.data) > 0);
	msgpack_unpacked_destroy(&u);
	msgpack_sbuffer_destroy(&sb);
}

static void test_map_form(void **state)
{
	char got[2048];

	(void)state;
	decoded(KVPD_EVENTS_MAP, got, sizeof(got));
	assert_string_equal(got,
		"[1.500000, ["
		"{\"type\"=>\"BlockStored\", \"block_hashes\"=>[18364758544493064720, 7], "
		"\"parent_block_hash\"=>42, \"token_ids\"=>[1, 2, 3, 4], \"block_size\"=>2, "
		"\"lora_id\"=>nil, \"medium\"=>\"CPU\", \"lora_name\"=>nil, \"extra_keys\"=>nil, "
		"\"group_idx\"=>1, \"kv_cache_spec_kind\"=>\"sliding_window\", "
		"\"kv_cache_spec_sliding_window\"=>128}, "
		"{\"type\"=>\"BlockStored\", \"block_hashes\"=>[18364758544493064720], "
		"\"parent_block_hash\"=>nil, \"token_ids\"=>[1, 2], \"block_size\"=>2, "
		"\"lora_id\"=>nil, \"medium\"=>\"GPU\", \"lora_name\"=>nil, \"extra_keys\"=>nil, "
		"\"group_idx\"=>0, \"kv_cache_spec_kind\"=>\"full_attention\", "
		"\"kv_cache_spec_sliding_window\"=>nil}, "
		"{\"type\"=>\"BlockRemoved\", \"block_hashes\"=>[7], \"medium\"=>\"DISK\", "
		"\"group_idx\"=>1}, "
		"{\"type\"=>\"AllBlocksCleared\"}], nil]");
}

static void test_array_form(void **state)
{
	char got[2048];

	(void)state;
	decoded(KVPD_EVENTS_ARRAY, got, sizeof(got));
	assert_string_equal(got,
		"[1.500000, ["
		"[\"BlockStored\", [18364758544493064720, 7], 42, [1, 2, 3, 4], 2, nil, \"CPU\", "
		"nil, nil, 1, \"sliding_window\", 128], "
		"[\"BlockStored\", [18364758544493064720], nil, [1, 2], 2, nil, \"GPU\", nil, nil, "
		"0, \"full_attention\", nil], "
		"[\"BlockRemoved\", [7], \"DISK\", 1], "
		"[\"AllBlocksCleared\"]], nil]");
}

static int dump(const char *path)
{
	msgpack_sbuffer sb;
	FILE *f = fopen(path, "wb");
	int ok;

	msgpack_sbuffer_init(&sb);
	ok = f && !kvpd_events_encode(&sb, 1.5, batch, 4, KVPD_EVENTS_MAP) &&
	     fwrite(sb.data, 1, sb.size, f) == sb.size;
	if (f)
		ok &= fclose(f) == 0;
	msgpack_sbuffer_destroy(&sb);
	return ok ? 0 : 1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_map_form),
		cmocka_unit_test(test_array_form),
	};

	if (getenv("KVPOOL_EVENTS_DUMP"))
		return dump(getenv("KVPOOL_EVENTS_DUMP"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
