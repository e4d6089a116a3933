/* SPDX-License-Identifier: MIT */
/*
 * A disk tier's file (disk_format.h has its layout): made, or found and
 * checked, locked against a second daemon, and its records read back into
 * the tier's index, so that a daemon restarted with the same pool hits what
 * the last one stored. A file that is not a tier, or is another geometry's,
 * is never overwritten: the pool is refused, naming it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include "refuse.h"
#include "tier/disk.h"

static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

void kvpd_tier_geometry(const struct kvpd_pool *pool, struct kvtier_geometry *g)
{
	const struct kvp_pool_params *p = &pool->spec.v2.v1;

	memset(g, 0, sizeof(*g));
	g->block_size = p->block_size;
	g->num_groups = p->num_groups;
	g->kv_heads = p->kv_heads;
	g->head_dim = p->head_dim;
	g->dtype = p->dtype;
	g->layers_per_group = p->layers_per_group;
	for (uint32_t i = 0; i < p->num_groups && i < KVP_MAX_GROUPS; i++) {
		g->group_kind[i] = p->group_kind[i];
		g->group_param[i] = p->group_kind[i] == KVP_KIND_FULL ? 0 : p->group_param[i];
	}
}

static void group_text(const struct kvtier_geometry *g, char *buf, size_t len)
{
	static const char *const kinds[] = { "full", "swa", "rswa", "chunked", "cyclic" };
	size_t n = 0;

	*buf = '\0';
	for (uint32_t i = 0; i < g->num_groups && i < KVP_MAX_GROUPS && n < len; i++) {
		const char *kind = g->group_kind[i] < 5 ? kinds[g->group_kind[i]] : "?";
		int k = g->group_kind[i] == KVP_KIND_FULL ?
				snprintf(buf + n, len - n, "%s%s", i ? "," : "", kind) :
				snprintf(buf + n, len - n, "%s%s:%u", i ? "," : "", kind,
					 g->group_param[i]);

		n += k > 0 ? (size_t)k : 0;
	}
}

/*
 * What differs between the file's geometry and the pool's, as kvpool.conf
 * names it ("head_dim 8, the pool's 16"): both, in the few words a refusal
 * holds (KVP_REASON_MAX).
 */
static void geometry_diff(const struct kvtier_geometry *f, const struct kvtier_geometry *p,
			  char *buf, size_t len)
{
	static const char *const dtypes[] = { "f32", "f16", "bf16" };
	const struct {
		const char *name;
		uint32_t file, pool;
	} nums[] = {
		{ "block_size", f->block_size, p->block_size },
		{ "kv_heads", f->kv_heads, p->kv_heads },
		{ "head_dim", f->head_dim, p->head_dim },
		{ "layers_per_group", f->layers_per_group, p->layers_per_group },
	};
	char fg[64], pg[64];
	size_t n = 0;

	*buf = '\0';
	group_text(f, fg, sizeof(fg));
	group_text(p, pg, sizeof(pg));
	if (strcmp(fg, pg))
		n += (size_t)snprintf(buf, len, "groups %s, the pool's %s", fg, pg);
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]) && n < len; i++)
		if (nums[i].file != nums[i].pool)
			n += (size_t)snprintf(buf + n, len - n, "%s%s %u, the pool's %u",
					      n ? "; " : "", nums[i].name, nums[i].file,
					      nums[i].pool);
	if (f->dtype != p->dtype && n < len)
		snprintf(buf + n, len - n, "%sdtype %s, the pool's %s", n ? "; " : "",
			 f->dtype < 3 ? dtypes[f->dtype] : "?", p->dtype < 3 ? dtypes[p->dtype] : "?");
}

/*
 * The file for dk->capacity blocks and a window's room: a block of half a
 * page or less packed into 4 KiB pages with others (written a page at a time,
 * so small blocks cost the disk their bytes, not a page each), a larger one
 * padded to pages of its own.
 */
static void layout(struct tier_disk *dk)
{
	dk->nslots = dk->capacity + kvpd_tier_window_slots(dk->capacity, dk->slot_bytes);
	dk->origin_stride = round_up(sizeof(struct kvtier_origin) + 4ull * dk->geo.block_size, 64);
	if (2 * dk->slot_bytes <= KVTIER_ALIGN) {
		dk->pack = (uint32_t)(KVTIER_ALIGN / dk->slot_bytes);
		dk->stride = dk->slot_bytes;
		dk->page_bytes = KVTIER_ALIGN;
	} else {
		dk->pack = 1;
		dk->stride = dk->page_bytes = round_up(dk->slot_bytes, KVTIER_ALIGN);
	}
	dk->npages = (dk->nslots + dk->pack - 1) / dk->pack;
	dk->records_off = KVTIER_ALIGN;
	dk->origins_off = dk->records_off + round_up(dk->nslots * 64, KVTIER_ALIGN);
	dk->data_off = dk->origins_off + round_up(dk->nslots * dk->origin_stride, KVTIER_ALIGN);
	dk->file_bytes = dk->data_off + dk->npages * dk->page_bytes;
}

void kvpd_tier_disk_header(const struct tier_disk *dk, struct kvtier_header *h)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, KVTIER_MAGIC, sizeof(KVTIER_MAGIC));
	h->version = KVTIER_VERSION;
	h->pack = dk->pack;
	h->slot_bytes = dk->slot_bytes;
	h->stride = dk->stride;
	h->nslots = dk->nslots;
	h->records_off = dk->records_off;
	h->data_off = dk->data_off;
	h->file_bytes = dk->file_bytes;
	h->origins_off = dk->origins_off;
	h->origin_stride = dk->origin_stride;
	h->geo = dk->geo;
	h->page_bytes = dk->page_bytes;
	h->capacity = dk->capacity;
	h->check = XXH3_64bits(h, offsetof(struct kvtier_header, check));
}

/* The directory: there, a directory, writable, on a filesystem that takes O_DIRECT. */
static int check_dir(const char *dir, char *why, size_t len)
{
	char probe[KVPD_TIER_PATH_MAX + 32];
	struct stat st;
	int fd;

	if (stat(dir, &st))
		return kvpd_refuse(why, len, -errno, "tier_disk_path %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return kvpd_refuse(why, len, -ENOTDIR, "tier_disk_path %s: not a directory", dir);
	if (access(dir, W_OK))
		return kvpd_refuse(why, len, -errno, "tier_disk_path %s: not writable (%s)", dir,
				   strerror(errno));
	snprintf(probe, sizeof(probe), "%s/.kvtier-probe.XXXXXX", dir);
	fd = mkostemp(probe, O_CLOEXEC);
	if (fd < 0)
		return kvpd_refuse(why, len, -errno, "tier_disk_path %s: not writable (%s)", dir,
				   strerror(errno));
	close(fd);
	fd = open(probe, O_RDWR | O_DIRECT | O_CLOEXEC);
	unlink(probe);
	if (fd < 0)
		return kvpd_refuse(why, len, -errno, "tier_disk_path %s: its filesystem refuses "
				   "O_DIRECT (%s)", dir, strerror(errno));
	close(fd);
	return 0;
}

/*
 * A file found at the path: a tier of this pool's geometry and size (0), one
 * of format 2 of this geometry, to convert (1: disk_convert.c), or refused.
 */
static int check_header(struct tier_disk *dk, const char *file, char *why, size_t len)
{
	struct kvtier_header h, want;
	char diff[KVP_REASON_MAX];
	ssize_t n = pread(dk->rfd, &h, sizeof(h), 0);
	size_t checked;

	if (n < 0)
		return kvpd_refuse(why, len, -errno, "tier_disk_path: %s: %s", file,
				   strerror(errno));
	if ((size_t)n < sizeof(struct kvtier_header_v2) ||
	    memcmp(h.magic, KVTIER_MAGIC, sizeof(KVTIER_MAGIC)))
		return kvpd_refuse(why, len, -EEXIST, "tier_disk_path: %s is not a kvpool tier "
				   "file: not touched (remove it or name another path)", file);
	checked = h.version == 2 ? offsetof(struct kvtier_header_v2, check) :
		  offsetof(struct kvtier_header, check);
	if ((h.version != 2 && h.version != KVTIER_VERSION) || (size_t)n < checked + 8 ||
	    XXH3_64bits(&h, checked) != *(uint64_t *)((uint8_t *)&h + checked))
		return kvpd_refuse(why, len, -EUCLEAN, "tier_disk_path: %s: its header is damaged "
				   "or of another version (%u): remove it", file, h.version);
	if (memcmp(&h.geo, &dk->geo, sizeof(h.geo))) {
		geometry_diff(&h.geo, &dk->geo, diff, sizeof(diff));
		return kvpd_refuse(why, len, -EEXIST, "tier_disk_path: %s is of another geometry: "
				   "%s", file, diff);
	}
	if (h.version == 2)
		return 1;
	kvpd_tier_disk_header(dk, &want);
	if (memcmp(&h, &want, sizeof(h)))
		return kvpd_refuse(why, len, -EEXIST, "tier_disk_bytes %llu: %s holds %llu blocks, "
				   "not %llu: set %llu or remove it", (unsigned long long)dk->asked,
				   file, (unsigned long long)h.capacity,
				   (unsigned long long)dk->capacity,
				   (unsigned long long)(h.capacity * h.slot_bytes));
	return 0;
}

/* Room for the file, counting what it already has; then its blocks taken, header written. */
static int make_room(struct tier_disk *dk, const char *dir, const char *file, bool fresh,
		     char *why, size_t len)
{
	struct kvtier_header h;
	struct statvfs vfs;
	struct stat st;
	uint64_t have, avail;
	int ret;

	if (fstat(dk->rfd, &st) || fstatvfs(dk->rfd, &vfs))
		return kvpd_refuse(why, len, -errno, "tier_disk_path: %s: %s", file,
				   strerror(errno));
	have = (uint64_t)st.st_blocks * 512;
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (dk->file_bytes > have && dk->file_bytes - have > avail)
		return kvpd_refuse(why, len, -ENOSPC, "tier_disk_bytes %llu: %s has %llu bytes "
				   "free", (unsigned long long)dk->asked, dir,
				   (unsigned long long)(avail + have));
	dk->found_bytes = (uint64_t)st.st_size;
	/* Preallocated: a full disk refuses the pool now, not its writes later. */
	ret = posix_fallocate(dk->rfd, 0, (off_t)dk->file_bytes);
	if (ret)
		return kvpd_refuse(why, len, -ret, "tier_disk_bytes %llu: %s: %s",
				   (unsigned long long)dk->asked, file, strerror(ret));
	if (!fresh)
		return 0;
	kvpd_tier_disk_header(dk, &h);
	if (pwrite(dk->rfd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || fdatasync(dk->rfd))
		return kvpd_refuse(why, len, -EIO, "tier_disk_path: %s: writing its header: %s",
				   file, strerror(errno));
	return 0;
}

int kvpd_tier_disk_open(struct kvpd_tier *t, char *why, size_t len)
{
	const struct kvpd_pool_spec *spec = &t->pool->spec;
	const char *dir = *spec->tier_disk_path ? spec->tier_disk_path : KVPD_TIER_DISK_PATH;
	struct tier_disk *dk = calloc(1, sizeof(*dk));
	const char *file;
	struct stat st;
	bool fresh;
	int ret;

	if (!dk)
		return -ENOMEM;
	dk->fd = dk->rfd = -1;
	t->disk = dk;
	dk->asked = spec->tier_disk_bytes;
	dk->slot_bytes = t->slot_bytes;
	dk->capacity = spec->tier_disk_bytes / (t->slot_bytes ? t->slot_bytes : 1);
	kvpd_tier_geometry(t->pool, &dk->geo);
	dk->geometry = XXH3_64bits(&dk->geo, sizeof(dk->geo));
	if (!dk->capacity || dk->capacity > KVC_MAX_BLOCKS)
		return kvpd_refuse(why, len, -EINVAL, "tier_disk_bytes %llu: holds %llu blocks of "
				   "%zu bytes, must be 1..%u", (unsigned long long)dk->asked,
				   (unsigned long long)dk->capacity, t->slot_bytes, KVC_MAX_BLOCKS);
	layout(dk);
	ret = check_dir(dir, why, len);
	if (ret)
		return ret;
	snprintf(dk->path, sizeof(dk->path), "%s/%s.kvtier", dir, t->pool->name);
	/* Refusals name the file, NAME.kvtier, not its path: a reason holds 127 bytes. */
	file = strrchr(dk->path, '/') + 1;
	dk->rfd = open(dk->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (dk->rfd < 0)
		return kvpd_refuse(why, len, -errno, "tier_disk_path: %s: %s", file,
				   strerror(errno));
	/* Another daemon's (or a pool's of this one not yet gone): never two writers. */
	if (flock(dk->rfd, LOCK_EX | LOCK_NB))
		return kvpd_refuse(why, len, errno == EWOULDBLOCK ? -EBUSY : -errno,
				   "tier_disk_path: %s is held by another kvpoold (its lock)",
				   file);
	if (fstat(dk->rfd, &st))
		return kvpd_refuse(why, len, -errno, "tier_disk_path: %s: %s", file,
				   strerror(errno));
	fresh = st.st_size == 0;
	dk->made = fresh;
	ret = fresh ? 0 : check_header(dk, file, why, len);
	if (ret == 1) /* format 2: converted once, then opened as any file of this format */
		ret = kvpd_tier_disk_convert(t, file, why, len);
	if (!ret)
		ret = make_room(dk, dir, file, fresh, why, len);
	if (ret)
		return ret;
	dk->fd = open(dk->path, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (dk->fd < 0)
		return kvpd_refuse(why, len, -errno, "tier_disk_path: %s: O_DIRECT: %s", file,
				   strerror(errno));
	t->nslots = (uint32_t)dk->nslots;
	return 0;
}

struct found {
	uint32_t slot;
	uint64_t stamp;
};

static int by_stamp(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	return x->stamp < y->stamp ? -1 : x->stamp > y->stamp;
}

/* The origins' region, for a pool with KV events (NULL when it cannot be read: none announced). */
static uint8_t *read_origins(const struct tier_disk *dk)
{
	size_t bytes = dk->nslots * dk->origin_stride;
	uint8_t *buf = malloc(bytes ? bytes : 1);

	if (buf && pread(dk->rfd, buf, bytes, (off_t)dk->origins_off) != (ssize_t)bytes) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Slot @slot's origin when its record names one and its checksum holds; else NULL. */
static const struct kvpd_block_origin *origin_of(const struct tier_disk *dk, const uint8_t *origins,
						 uint32_t slot, const struct kvtier_record *r,
						 struct kvpd_block_origin *o)
{
	const struct kvtier_origin *x;

	if (!origins || !r->origin_sum)
		return NULL;
	x = (const struct kvtier_origin *)(origins + (size_t)slot * dk->origin_stride);
	if (XXH3_64bits_withSeed(x, dk->origin_stride, slot) != r->origin_sum)
		return NULL;
	*o = (struct kvpd_block_origin){ .pos = x->pos, .parent = x->parent,
					 .has_parent = x->flags & KVTIER_ORIGIN_PARENT,
					 .tokens = x->tokens };
	return o;
}

/*
 * A record is kept when its own checksum holds, it is of this geometry, and
 * its slot lies whole inside what the file held before it was preallocated
 * again (a truncated file's zeros are not its data). Of two of one block, the
 * later; the others are counted refused, never hit.
 */
int kvpd_tier_disk_restore(struct kvpd_tier *t, char *why, size_t len)
{
	struct tier_disk *dk = t->disk;
	size_t bytes = dk->nslots * sizeof(struct kvtier_record);
	struct kvtier_record *recs = malloc(bytes);
	struct found *found = malloc(dk->nslots * sizeof(*found));
	uint64_t t0 = kvpd_now_ns();
	uint8_t *origins;
	uint32_t n = 0;
	ssize_t got;

	if (!recs || !found) {
		free(recs);
		free(found);
		return kvpd_refuse(why, len, -ENOMEM, "tier_disk_bytes: no memory to read %zu "
				   "bytes of records", bytes);
	}
	got = pread(dk->rfd, recs, bytes, (off_t)dk->records_off);
	if (got < 0) {
		free(recs);
		free(found);
		return kvpd_refuse(why, len, -errno, "tier_disk_path: %s: reading its records: %s",
				   strrchr(dk->path, '/') + 1, strerror(errno));
	}
	if ((size_t)got < bytes)
		memset((uint8_t *)recs + got, 0, bytes - (size_t)got);
	for (uint32_t i = 0; i < dk->nslots; i++) {
		const struct kvtier_record *r = &recs[i];

		if (!r->valid && !r->check)
			continue; /* empty */
		if (r->valid != KVTIER_RECORD_VALID ||
		    r->check != XXH3_64bits_withSeed(r, offsetof(struct kvtier_record, check), i) ||
		    r->geometry != dk->geometry || r->group >= dk->geo.num_groups ||
		    kvpd_disk_page_off(dk, i) + dk->page_bytes > dk->found_bytes) {
			t->st.refused++;
			continue;
		}
		if (r->stamp > dk->stamp)
			dk->stamp = r->stamp;
		found[n++] = (struct found){ .slot = i, .stamp = r->stamp };
	}
	/* Oldest first: the LRU order the last daemon left. */
	qsort(found, n, sizeof(*found), by_stamp);
	origins = t->pool->events ? read_origins(dk) : NULL;
	for (uint32_t k = n; k-- > 0;) {
		const struct kvtier_record *r = &recs[found[k].slot];
		struct kvc_hash key = { .lo = r->key_lo, .hi = r->key_hi };
		struct kvpd_block_origin o;

		if (kvpd_tier_find(t, r->group, &key) != TIER_END) {
			t->st.refused++; /* an older copy of a block restored already */
			continue;
		}
		/*
		 * The window's copies of blocks the last pool still had are blocks like
		 * any now: the newest up to the capacity are kept, the rest as evicted.
		 */
		if (t->st.restored == dk->capacity) {
			t->st.evicted++;
			continue;
		}
		kvpd_tier_restore(t, found[k].slot, r->group, &key, r->sum,
				  origin_of(dk, origins, found[k].slot, r, &o));
		t->st.restored++;
	}
	free(origins);
	kvpd_tier_free_rest(t);
	dk->opened = true;
	dk->restore_ns = kvpd_now_ns() - t0;
	free(recs);
	free(found);
	return 0;
}

void kvpd_tier_disk_close(struct kvpd_tier *t, bool drop)
{
	struct tier_disk *dk = t->disk;

	if (!dk)
		return;
	kvpd_tier_disk_stop(t);
	if (dk->rfd >= 0) {
		/* A file this pool made and never used (its refusal came later) goes too. */
		if (drop || (dk->made && !dk->opened))
			unlink(dk->path);
		else
			fdatasync(dk->rfd); /* what the page cache holds, on disk at a clean stop */
		close(dk->rfd);
	}
	if (dk->fd >= 0)
		close(dk->fd);
	free(dk);
	t->disk = NULL;
}
