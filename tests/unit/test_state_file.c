/* SPDX-License-Identifier: MIT */
/*
 * The handover state's container (daemon/handover/state_file.c): sections
 * come back as written, in order; a state not sealed, of another format
 * version, with a byte flipped in its header or a section's header, or cut
 * short, is refused, saying why; a byte flipped in a section's data, or a
 * section of another version, costs that section alone.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "handover/state_file.h"

#define SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

static int sealed_state_damaged(enum kvpd_state_damage damage, const char *name)
{
	struct kvpd_state_writer w;
	uint8_t *a, *c;
	int fd = -1;

	kvpd_state_writer_init(&w);
	w.damage = damage;
	if (name)
		snprintf(w.damage_name, sizeof(w.damage_name), "%s", name);
	assert_non_null(kvpd_state_add(&w, 7, 3, "empty", 0));
	a = kvpd_state_add(&w, 1, 1, "greeting", 5);
	assert_non_null(a);
	memcpy(a, "hello", 5);
	c = kvpd_state_add(&w, 2, 1, "a name longer than sixty-four bytes, cut to fit in its header...", 100000);
	assert_non_null(c);
	for (unsigned i = 0; i < 100000; i++)
		c[i] = (uint8_t)(i * 7);
	assert_int_equal(kvpd_state_seal(&w, "0.2.0 test", &fd), 0);
	assert_true(fd >= 0);
	return fd;
}

static int sealed_state(void)
{
	return sealed_state_damaged(KVPD_STATE_INTACT, NULL);
}

static void test_sections_come_back_as_written(void **state)
{
	struct kvpd_state_section sec;
	struct kvpd_state st;
	const uint8_t *d;
	char why[128] = "";
	bool intact = false;
	int fd = sealed_state();

	(void)state;
	assert_int_equal(fcntl(fd, F_GET_SEALS) & SEALS, SEALS);
	assert_int_equal(kvpd_state_open(fd, &st, why, sizeof(why)), 0);
	assert_string_equal(st.head.build, "0.2.0 test");
	assert_int_equal(st.head.version, KVPD_STATE_VERSION);
	d = kvpd_state_next(&st, &sec, &intact);
	assert_non_null(d);
	assert_true(intact);
	assert_int_equal(sec.kind, 7);
	assert_int_equal(sec.version, 3);
	assert_string_equal(sec.name, "empty");
	assert_int_equal(sec.bytes, 0);
	d = kvpd_state_next(&st, &sec, &intact);
	assert_true(intact);
	assert_int_equal(sec.kind, 1);
	assert_int_equal(sec.bytes, 5);
	assert_string_equal(sec.name, "greeting");
	assert_memory_equal(d, "hello", 5);
	d = kvpd_state_next(&st, &sec, &intact);
	assert_true(intact);
	assert_int_equal(sec.kind, 2);
	assert_int_equal(sec.bytes, 100000);
	assert_string_equal(sec.name, "a name longer than sixty-four bytes, cut to fit in its header..");
	assert_int_equal(((uintptr_t)d) % 8, 0);
	for (unsigned i = 0; i < 100000; i++)
		assert_int_equal(d[i], (uint8_t)(i * 7));
	assert_null(kvpd_state_next(&st, &sec, &intact));
	kvpd_state_close(&st);
	close(fd);
}

/* A copy of @fd's bytes, @edit applied, in a memfd sealed (or not). */
static int copy_of(int fd, void (*edit)(uint8_t *buf, size_t *len), bool seal)
{
	off_t size = lseek(fd, 0, SEEK_END);
	size_t len = (size_t)size;
	uint8_t *buf = malloc(len);
	int out = memfd_create("copy", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, len, 0), (ssize_t)len);
	if (edit)
		edit(buf, &len);
	assert_int_equal(write(out, buf, len), (ssize_t)len);
	if (seal)
		assert_int_equal(fcntl(out, F_ADD_SEALS, SEALS), 0);
	free(buf);
	return out;
}

static void flip_body(uint8_t *buf, size_t *len)
{
	buf[*len - 3] ^= 0x10;
}

/* The second section's length, in its header: the shape's sum catches it. */
static void flip_section_header(uint8_t *buf, size_t *len)
{
	size_t second = sizeof(struct kvpd_state_head) + sizeof(struct kvpd_state_section);

	(void)len;
	buf[second + offsetof(struct kvpd_state_section, bytes)] ^= 0x01;
}

static void flip_build(uint8_t *buf, size_t *len)
{
	(void)len;
	buf[offsetof(struct kvpd_state_head, build)] ^= 0x01;
}

static void next_version(uint8_t *buf, size_t *len)
{
	uint32_t v = KVPD_STATE_VERSION + 1;

	(void)len;
	memcpy(buf + offsetof(struct kvpd_state_head, version), &v, sizeof(v));
}

static void cut_short(uint8_t *buf, size_t *len)
{
	(void)buf;
	*len -= 8;
}

static void bad_magic(uint8_t *buf, size_t *len)
{
	(void)len;
	buf[0] = 'X';
}

static void expect_refused(int fd, int err, const char *reason)
{
	struct kvpd_state st;
	char why[128] = "";

	assert_int_equal(kvpd_state_open(fd, &st, why, sizeof(why)), err);
	assert_string_equal(why, reason);
	assert_null(st.map);
	close(fd);
}

static void test_a_damaged_state_is_refused_naming_why(void **state)
{
	int fd = sealed_state();

	(void)state;
	expect_refused(copy_of(fd, NULL, false), -EPERM,
		       "the state is not sealed: a handover left half done");
	expect_refused(copy_of(fd, flip_section_header, true), -EBADMSG,
		       "the state's checksum is wrong");
	expect_refused(copy_of(fd, flip_build, true), -EBADMSG, "the state's checksum is wrong");
	expect_refused(copy_of(fd, cut_short, true), -EBADMSG, "the state's checksum is wrong");
	expect_refused(copy_of(fd, bad_magic, true), -EBADMSG, "not a kvpool state (magic)");
	expect_refused(copy_of(fd, next_version, true), -EPROTO,
		       "state format 2, this build reads 1");
	close(fd);
}

/* The sections in @fd: whether each is intact, and its version, as "1v3 1v1 0v1". */
static void expect_sections(int fd, const char *want)
{
	struct kvpd_state_section sec;
	struct kvpd_state st;
	char got[64] = "", why[128] = "";
	bool intact;

	assert_int_equal(kvpd_state_open(fd, &st, why, sizeof(why)), 0);
	while (kvpd_state_next(&st, &sec, &intact))
		snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%dv%u", *got ? " " : "",
			 intact, sec.version);
	assert_string_equal(got, want);
	kvpd_state_close(&st);
	close(fd);
}

static void test_a_damaged_section_costs_itself_alone(void **state)
{
	int fd = sealed_state();

	(void)state;
	expect_sections(copy_of(fd, NULL, true), "1v3 1v1 1v1");
	expect_sections(copy_of(fd, flip_body, true), "1v3 1v1 0v1");
	close(fd);
	expect_sections(sealed_state_damaged(KVPD_STATE_FLIP_BYTE, "greeting"), "1v3 0v1 1v1");
	expect_sections(sealed_state_damaged(KVPD_STATE_NEXT_VERSION, "greeting"), "1v3 1v2 1v1");
	/* A section of no bytes has none to flip. */
	expect_sections(sealed_state_damaged(KVPD_STATE_FLIP_BYTE, "empty"), "1v3 1v1 1v1");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sections_come_back_as_written),
		cmocka_unit_test(test_a_damaged_state_is_refused_naming_why),
		cmocka_unit_test(test_a_damaged_section_costs_itself_alone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
