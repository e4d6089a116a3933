/* SPDX-License-Identifier: MIT */
/*
 * Which free slot a new entry takes. Free slots are a list (the entries'
 * lru links, unused while free, behind a sentinel of their own). A host tier
 * takes the list's head. A packed disk tier (disk_format.h: several slots a
 * 4 KiB page, written a page at a time) takes, in order: a free slot of the
 * page the last entry took, so that blocks going down together share their
 * pages; a slot of a page no entry holds, written whole; any free slot,
 * whose page then holds other entries' data, read before it is written
 * (read-modify-write, down lane). Pages empty as the least recently used
 * entries, stored together, leave together, so the last is rare. And where a
 * host tier's slots live.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tier/tier_internal.h"

static uint32_t sentinel(const struct kvpd_tier *t)
{
	return t->nslots + 1;
}

static void link_free(struct kvpd_tier *t, uint32_t i)
{
	uint32_t s = sentinel(t);

	t->e[i].lru_prev = s;
	t->e[i].lru_next = t->e[s].lru_next;
	t->e[t->e[s].lru_next].lru_prev = i;
	t->e[s].lru_next = i;
	t->nfree++;
}

static void unlink_free(struct kvpd_tier *t, uint32_t i)
{
	struct tier_entry *x = &t->e[i];

	t->e[x->lru_prev].lru_next = x->lru_next;
	t->e[x->lru_next].lru_prev = x->lru_prev;
	x->lru_prev = x->lru_next = TIER_END;
	t->nfree--;
}

int kvpd_tier_slots_init(struct kvpd_tier *t)
{
	uint32_t s = sentinel(t);

	t->pages = t->pack > 1 ? (t->nslots + t->pack - 1) / t->pack : 0;
	if (t->pages) {
		t->live = calloc(t->pages, sizeof(*t->live));
		t->empty = calloc(t->pages, sizeof(*t->empty));
		t->in_empty = calloc(t->pages, 1);
		if (!t->live || !t->empty || !t->in_empty)
			return -1;
	}
	t->current = TIER_END;
	t->e[s].lru_prev = t->e[s].lru_next = s;
	t->nfree = 0;
	return 0;
}

/* Page @page holds no entry: its slots are taken before others (no read before its write). */
static void page_empty(struct kvpd_tier *t, uint32_t page)
{
	if (!t->in_empty[page]) {
		t->in_empty[page] = 1;
		t->empty[t->nempty++] = page;
	}
}

void kvpd_tier_slot_free(struct kvpd_tier *t, uint32_t i)
{
	link_free(t, i);
	if (t->pages && --t->live[i / t->pack] == 0)
		page_empty(t, i / t->pack);
}

void kvpd_tier_slot_held(struct kvpd_tier *t, uint32_t i)
{
	if (t->pages)
		t->live[i / t->pack]++;
}

void kvpd_tier_slots_rest(struct kvpd_tier *t)
{
	for (uint32_t i = t->nslots; i-- > 0;) {
		if (t->e[i].state != TIER_FREE)
			continue;
		link_free(t, i);
		if (t->pages && !t->live[i / t->pack])
			page_empty(t, i / t->pack);
	}
}

/* A free slot of page @page, or TIER_END. */
static uint32_t free_in(const struct kvpd_tier *t, uint32_t page)
{
	uint32_t end = (page + 1) * t->pack < t->nslots ? (page + 1) * t->pack : t->nslots;

	for (uint32_t i = page * t->pack; i < end; i++)
		if (t->e[i].state == TIER_FREE)
			return i;
	return TIER_END;
}

void kvpd_tier_slot_take_at(struct kvpd_tier *t, uint32_t i)
{
	unlink_free(t, i);
	kvpd_tier_slot_held(t, i);
}

uint32_t kvpd_tier_slot_take(struct kvpd_tier *t)
{
	uint32_t i = TIER_END;

	if (!t->nfree)
		return TIER_END;
	if (t->pages && t->current != TIER_END)
		i = free_in(t, t->current);
	while (t->pages && i == TIER_END && t->nempty) {
		uint32_t page = t->empty[--t->nempty];

		t->in_empty[page] = 0;
		if (!t->live[page] && (i = free_in(t, page)) != TIER_END)
			t->current = page;
	}
	if (i == TIER_END) {
		i = t->e[sentinel(t)].lru_next;
		if (t->pages)
			t->current = i / t->pack;
	}
	unlink_free(t, i);
	kvpd_tier_slot_held(t, i);
	return i;
}

/*
 * A host tier's slots: a memfd, sealed at its size, so that a planned restart
 * hands it to the next run as it does the pool's (a memfd outlives its
 * process while one holds it). Untouched pages cost nothing: the tier's
 * memory is taken as blocks are stored. NULL (errno) when it cannot be had.
 */
uint8_t *kvpd_tier_host_memory(struct kvpd_tier *t)
{
	size_t bytes = (size_t)t->nslots * t->slot_bytes;
	void *mem = MAP_FAILED;

	t->mem_fd = memfd_create("kvpool-tier", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (t->mem_fd < 0)
		return NULL;
	if (ftruncate(t->mem_fd, (off_t)bytes) == 0 &&
	    fcntl(t->mem_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
		mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
			   t->mem_fd, 0);
	if (mem == MAP_FAILED) {
		close(t->mem_fd);
		t->mem_fd = -1;
		return NULL;
	}
	return mem;
}

/* The entries' room in the index: nslots and the two sentinels, to a page. */
static size_t entries_bytes(const struct kvpd_tier *t)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return ((size_t)(t->nslots + 2) * sizeof(struct tier_entry) + page - 1) & ~(page - 1);
}

size_t kvpd_tier_index_bytes(const struct kvpd_tier *t, uint32_t nbuckets)
{
	return entries_bytes(t) + (size_t)nbuckets * sizeof(uint32_t);
}

/*
 * The index, entries then buckets, in a memfd of its own: a planned restart
 * hands it to the next run as it is, where rebuilding millions of entries
 * would take most of a second. @fd -1: a new one (zeroed); else the last
 * run's, of the size this tier's takes and sealed at it.
 */
int kvpd_tier_index_map(struct kvpd_tier *t, uint32_t nbuckets, int fd)
{
	size_t bytes = kvpd_tier_index_bytes(t, nbuckets);
	int own = fd < 0, seals;
	struct stat st;
	void *mem;

	if (own) {
		fd = memfd_create("kvpool-tier-index", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0)
			return -errno;
		if (ftruncate(fd, (off_t)bytes) ||
		    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
			goto close_fd;
	} else {
		seals = fcntl(fd, F_GET_SEALS);
		if (fstat(fd, &st) || (size_t)st.st_size != bytes || seals < 0 ||
		    (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
			return -EINVAL;
	}
	mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (mem == MAP_FAILED)
		goto close_fd;
	if (!own)
		fcntl(fd, F_SETFD, FD_CLOEXEC); /* inherited for this run alone */
	t->e = mem;
	t->buckets = (uint32_t *)((uint8_t *)mem + entries_bytes(t));
	t->index_fd = fd;
	t->index_bytes = bytes;
	return 0;

close_fd:
	if (own) {
		int err = errno;

		close(fd);
		return -err;
	}
	return -errno;
}

void kvpd_tier_index_unmap(struct kvpd_tier *t)
{
	if (t->e)
		munmap(t->e, t->index_bytes);
	if (t->index_fd >= 0)
		close(t->index_fd);
	t->e = NULL;
	t->buckets = NULL;
	t->index_fd = -1;
}
