/* SPDX-License-Identifier: MIT */
/* The handover state's container: checksummed sections under a checksummed header, in a sealed memfd. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "handover/state_file.h"

#define ALIGN8(x) (((x) + 7) & ~(uint64_t)7)
#define SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

/* Walks the sections' headers of a body of @body_bytes: false at one past its end. */
static bool section_at(const uint8_t *body, uint64_t body_bytes, uint64_t off,
		       struct kvpd_state_section *s)
{
	if (off > body_bytes || body_bytes - off < sizeof(*s))
		return false;
	memcpy(s, body + off, sizeof(*s));
	return s->bytes <= body_bytes - off - sizeof(*s) &&
	       ALIGN8(s->bytes) <= body_bytes - off - sizeof(*s);
}

/*
 * XXH3-64 of the header (its sum 0) and the sections' headers: the shape. 0
 * (never a sum) when @sections do not fit the body exactly.
 */
static uint64_t shape_sum(const struct kvpd_state_head *head, const uint8_t *body)
{
	struct kvpd_state_head h = *head;
	struct kvpd_state_section s;
	XXH3_state_t *x = XXH3_createState();
	uint64_t sum, off = 0;
	uint32_t i;

	if (!x)
		return 0; /* never a valid sum: the reader refuses the state, safely */
	h.sum = 0;
	XXH3_64bits_reset(x);
	XXH3_64bits_update(x, &h, sizeof(h));
	for (i = 0; i < h.sections && section_at(body, h.body_bytes, off, &s); i++) {
		XXH3_64bits_update(x, &s, sizeof(s));
		off += sizeof(s) + ALIGN8(s.bytes);
	}
	sum = XXH3_64bits_digest(x);
	XXH3_freeState(x);
	if (i != h.sections || off != h.body_bytes)
		return 0;
	return sum ? sum : 1;
}

void kvpd_state_writer_init(struct kvpd_state_writer *w)
{
	*w = (struct kvpd_state_writer){ .len = sizeof(struct kvpd_state_head) };
}

static int reserve(struct kvpd_state_writer *w, uint64_t more)
{
	size_t cap = w->cap ? w->cap : 1u << 16;
	uint8_t *buf;

	if (more > SIZE_MAX - w->len)
		return -EOVERFLOW;
	while (cap < w->len + more)
		cap *= 2;
	if (cap == w->cap)
		return 0;
	buf = realloc(w->buf, cap);
	if (!buf)
		return -ENOMEM;
	memset(buf + w->cap, 0, cap - w->cap);
	w->buf = buf;
	w->cap = cap;
	return 0;
}

void *kvpd_state_add(struct kvpd_state_writer *w, uint32_t kind, uint32_t version,
		     const char *name, uint64_t bytes)
{
	struct kvpd_state_section *s;

	if (!w->err && bytes > UINT64_MAX - sizeof(*s) - 8)
		w->err = -EOVERFLOW;
	if (!w->err)
		w->err = reserve(w, sizeof(*s) + ALIGN8(bytes));
	if (w->err)
		return NULL;
	s = (struct kvpd_state_section *)(w->buf + w->len);
	*s = (struct kvpd_state_section){ .kind = kind, .version = version, .bytes = bytes };
	snprintf(s->name, sizeof(s->name), "%s", name ? name : "");
	w->len += sizeof(*s) + ALIGN8(bytes);
	w->sections++;
	return s + 1;
}

/* Each section's sum over its data; then the one a test build was told to spoil, spoilt. */
static void sum_sections(struct kvpd_state_writer *w)
{
	size_t off = sizeof(struct kvpd_state_head);

	for (uint32_t i = 0; i < w->sections; i++) {
		struct kvpd_state_section *s = (struct kvpd_state_section *)(w->buf + off);
		uint8_t *data = (uint8_t *)(s + 1);

		s->sum = XXH3_64bits(data, s->bytes);
		if (w->damage && !strncmp(s->name, w->damage_name, sizeof(s->name))) {
			if (w->damage == KVPD_STATE_NEXT_VERSION)
				s->version++;
			else if (s->bytes)
				data[s->bytes / 2] ^= 0x10;
		}
		off += sizeof(*s) + ALIGN8(s->bytes);
	}
}

void kvpd_state_writer_free(struct kvpd_state_writer *w)
{
	free(w->buf);
	w->buf = NULL;
}

int kvpd_state_seal(struct kvpd_state_writer *w, const char *build, int *fd)
{
	struct kvpd_state_head *h;
	int ret = w->err ?: reserve(w, 0), mfd = -1;

	if (!ret && !w->buf)
		ret = reserve(w, 1);
	if (ret)
		goto free_writer;
	h = (struct kvpd_state_head *)w->buf;
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, KVPD_STATE_MAGIC, sizeof(h->magic));
	h->version = KVPD_STATE_VERSION;
	h->sections = w->sections;
	h->body_bytes = w->len - sizeof(*h);
	snprintf(h->build, sizeof(h->build), "%s", build);
	sum_sections(w);
	h->sum = shape_sum(h, w->buf + sizeof(*h));
	mfd = memfd_create("kvpool-state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0) {
		ret = -errno;
		goto free_writer;
	}
	for (size_t off = 0; off < w->len;) {
		ssize_t n = write(mfd, w->buf + off, w->len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			goto close_memfd;
		}
		off += (size_t)n;
	}
	if (fcntl(mfd, F_ADD_SEALS, SEALS)) {
		ret = -errno;
		goto close_memfd;
	}
	*fd = mfd;
	kvpd_state_writer_free(w);
	return 0;

close_memfd:
	close(mfd);
free_writer:
	kvpd_state_writer_free(w);
	return ret;
}

static int refuse(char *why, size_t why_len, int err, const char *what)
{
	if (why && why_len)
		snprintf(why, why_len, "%s", what);
	return err;
}

int kvpd_state_open(int fd, struct kvpd_state *st, char *why, size_t why_len)
{
	int seals = fcntl(fd, F_GET_SEALS);
	off_t size = lseek(fd, 0, SEEK_END);
	void *map;

	*st = (struct kvpd_state){ 0 };
	if (seals < 0 || (seals & SEALS) != SEALS)
		return refuse(why, why_len, -EPERM, "the state is not sealed: a handover left half done");
	if (size < (off_t)sizeof(st->head))
		return refuse(why, why_len, -EBADMSG, "the state is shorter than its header");
	map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return refuse(why, why_len, -errno, "the state cannot be mapped");
	st->map = map;
	st->map_bytes = (size_t)size;
	memcpy(&st->head, map, sizeof(st->head));
	st->next = sizeof(st->head);
	if (memcmp(st->head.magic, KVPD_STATE_MAGIC, sizeof(st->head.magic)))
		goto bad_magic;
	if (st->head.version != KVPD_STATE_VERSION) {
		if (why && why_len)
			snprintf(why, why_len, "state format %u, this build reads %u",
				 st->head.version, KVPD_STATE_VERSION);
		kvpd_state_close(st);
		return -EPROTO;
	}
	if (st->head.body_bytes != st->map_bytes - sizeof(st->head) ||
	    shape_sum(&st->head, st->map + sizeof(st->head)) != st->head.sum) {
		kvpd_state_close(st);
		return refuse(why, why_len, -EBADMSG, "the state's checksum is wrong");
	}
	return 0;

bad_magic:
	kvpd_state_close(st);
	return refuse(why, why_len, -EBADMSG, "not a kvpool state (magic)");
}

const void *kvpd_state_next(struct kvpd_state *st, struct kvpd_state_section *sec, bool *intact)
{
	const uint8_t *body = st->map + sizeof(st->head);
	uint64_t off = st->next - sizeof(st->head);
	const uint8_t *data;

	if (st->read >= st->head.sections || !section_at(body, st->head.body_bytes, off, sec))
		return NULL;
	sec->name[sizeof(sec->name) - 1] = '\0';
	data = body + off + sizeof(*sec);
	*intact = XXH3_64bits(data, sec->bytes) == sec->sum;
	st->next += sizeof(*sec) + ALIGN8(sec->bytes);
	st->read++;
	return data;
}

void kvpd_state_close(struct kvpd_state *st)
{
	if (st->map)
		munmap((void *)st->map, st->map_bytes);
	st->map = NULL;
}
