/* SPDX-License-Identifier: MIT */
/*
 * The handover room: what a daemon restarting on purpose hands to the run
 * that follows it. This file: the state's container, a sealed memfd of
 * typed sections under a header that names its format version and the build
 * that wrote it (logged only: any build that reads this version restores it).
 * The header's checksum covers the header and every section's header (the
 * container's shape); each section has a checksum and a version of its own, so
 * a damaged or unknown section costs only what it holds (one pool), not the
 * rest. A reader copies nothing it has not checked: the seals, the magic, the
 * version, the sums, every section's bounds.
 *
 * It may use the shared headers.
 */
#ifndef KVPOOLD_HANDOVER_STATE_FILE_H
#define KVPOOLD_HANDOVER_STATE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVPD_STATE_MAGIC "KVPSTATE"
#define KVPD_STATE_VERSION 1u
#define KVPD_STATE_BUILD_MAX 32
#define KVPD_STATE_NAME_MAX 64

struct kvpd_state_head {
	char magic[8];                    /* KVPD_STATE_MAGIC, no NUL */
	uint32_t version;                 /* KVPD_STATE_VERSION of the writer */
	uint32_t sections;
	uint64_t body_bytes;              /* what follows the header */
	uint64_t sum;                     /* XXH3-64 of this header (sum 0) and the sections' headers */
	char build[KVPD_STATE_BUILD_MAX]; /* the writer's release, NUL-padded */
};

/* Each section: this, then @bytes of its own, then zeros to 8 bytes. */
struct kvpd_state_section {
	uint32_t kind;
	uint32_t version;                 /* of what @kind's data says: its reader checks it */
	uint64_t bytes;
	uint64_t sum;                     /* XXH3-64 of its @bytes */
	char name[KVPD_STATE_NAME_MAX];   /* what it is of (a pool's name), NUL-padded */
};

/* A test build's writer spoils one section, for the reader's refusals to be tested. */
enum kvpd_state_damage { KVPD_STATE_INTACT, KVPD_STATE_FLIP_BYTE, KVPD_STATE_NEXT_VERSION };

struct kvpd_state_writer {
	uint8_t *buf;                     /* the header's room, then the body */
	size_t len, cap;
	uint32_t sections;
	int err;                          /* the first failure: every later call returns it */
	enum kvpd_state_damage damage;    /* applied to the section named damage_name at seal */
	char damage_name[KVPD_STATE_NAME_MAX];
};

void kvpd_state_writer_init(struct kvpd_state_writer *w);
/*
 * Room for a section of @kind at @version, of @name (cut to fit), @bytes long,
 * zeroed; NULL (w->err set) without memory. Valid until the next add.
 */
void *kvpd_state_add(struct kvpd_state_writer *w, uint32_t kind, uint32_t version,
		     const char *name, uint64_t bytes);
/*
 * The state in a memfd, sealed against every change (write, grow, shrink, the
 * seals themselves); @build names the writer. Its descriptor (close-on-exec:
 * the caller clears that to hand it on) into *fd; 0, or -errno. The writer
 * is freed either way.
 */
int kvpd_state_seal(struct kvpd_state_writer *w, const char *build, int *fd);
void kvpd_state_writer_free(struct kvpd_state_writer *w);

struct kvpd_state {
	const uint8_t *map;
	size_t map_bytes;
	struct kvpd_state_head head;      /* a copy: the checked one */
	size_t next;                      /* the next section's offset */
	uint32_t read;
};

/*
 * Maps the state of @fd read-only and checks it: -EPERM not sealed
 * (a half-written state), -EPROTO another format version, -EBADMSG a
 * wrong magic, sum or section bound; @why says which in words.
 */
int kvpd_state_open(int fd, struct kvpd_state *st, char *why, size_t why_len);
/*
 * The next section: its data (8-aligned, valid while @st is open), its header
 * copied to @sec (name NUL-terminated), or NULL at the end. *@intact: its
 * data matches its sum.
 */
const void *kvpd_state_next(struct kvpd_state *st, struct kvpd_state_section *sec, bool *intact);
void kvpd_state_close(struct kvpd_state *st);

#endif
