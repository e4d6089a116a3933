/* SPDX-License-Identifier: MIT */
/*
 * The host backend's pool memory and its pages:
 *   - with enough explicit 2 MiB huge pages reserved, a pool whose KV is not a
 *     whole number of them (1000 blocks of 3 kv heads of 16 x 128 f32, K and V:
 *     49,152,000 bytes, 23.4 pages) gets them, its memfd rounded up to 24 pages,
 *     and KV written over every block reads back;
 *   - with none reserved, the same pool lives on the system's small pages, same
 *     size.
 * The daemon's mapping is read from /proc/PID/smaps. Needs root: the test
 * reserves the huge pages itself (POOL_PAGES more than there were) and gives them
 * back at exit; it runs the 4 KiB half only when none were reserved before.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"
#define BLOCKS 1000
#define BS 16
#define KV_HEADS 3
#define HD 128
#define POOL_PAGES 24 /* 2 MiB pages for BLOCKS * 2 * KV_HEADS * BS * HD * 4 bytes */
#define CHUNK 256     /* tokens a WRITE_KV / READ_KV: 768 KiB of the 4 MiB arena */

static long hugepages_before = -1;

static int write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	int ret;

	if (!f)
		return -errno;
	ret = fprintf(f, "%ld\n", v) < 0 ? -EIO : 0;
	if (fclose(f) && !ret)
		ret = -errno;
	return ret;
}

static void give_back_hugepages(void)
{
	if (hugepages_before >= 0)
		write_long(NR_HUGEPAGES, hugepages_before);
}

/* Size and KernelPageSize (KiB) of the daemon's pool memfd mapping; 0 when found. */
static int pool_mapping(const struct daemon *d, long *size_kib, long *page_kib)
{
	char path[64], line[256];
	bool in_pool = false;
	int ret = -ENOENT;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)d->pid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		long v;

		/* a mapping's first line: "start-end perms offset dev inode path" */
		if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' '))
			in_pool = strstr(line, "memfd:kvpool-kv") != NULL;
		else if (in_pool && sscanf(line, "Size: %ld kB", &v) == 1)
			*size_kib = v;
		else if (in_pool && sscanf(line, "KernelPageSize: %ld kB", &v) == 1) {
			*page_kib = v;
			ret = 0;
		}
	}
	fclose(f);
	return ret;
}

/* One pool on a fresh daemon: its pages are @want_page_kib; KV written everywhere reads back. */
static void check_pool(long want_page_kib)
{
	static const char *const kv[] = { "blocks=1000", "block_size=16", "groups=full",
					  "kv_heads=3", "head_dim=128", "dtype=f32",
					  "layers_per_group=1", NULL };
	static float k[CHUNK * KV_HEADS * HD], v[CHUNK * KV_HEADS * HD],
		k2[CHUNK * KV_HEADS * HD], v2[CHUNK * KV_HEADS * HD];
	static uint32_t tokens[(BLOCKS - 1) * BS];
	const uint32_t n = (BLOCKS - 1) * BS; /* every block but the null block 0 */
	struct daemon d;
	struct kvp_client *c;
	long size_kib = 0, page_kib = 0;
	uint64_t h;

	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	create_pool_or_die(&d, "p", kv);
	CHECK_EQ(pool_mapping(&d, &size_kib, &page_kib), 0);
	CHECK_EQ(page_kib, want_page_kib);
	CHECK_EQ(size_kib, POOL_PAGES * 2048);

	c = connect_or_die(&d, "p", "", false);
	for (uint32_t i = 0; i < n; i++)
		tokens[i] = i + 1;
	CHECK_EQ(kvp_seq_open(c, tokens, n, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, n, 0, false, NULL, NULL, 0), 0);
	for (uint32_t first = 0; first < n; first += CHUNK) {
		uint32_t count = n - first < CHUNK ? n - first : CHUNK;

		for (uint32_t i = 0; i < count * KV_HEADS * HD; i++) {
			k[i] = (float)(first * KV_HEADS * HD + i);
			v[i] = -k[i];
		}
		CHECK_EQ(kvp_write_kv(c, h, 0, 0, first, count, k, v), 0);
		CHECK_EQ(kvp_read_kv(c, h, 0, 0, first, count, k2, v2), 0);
		CHECK(!memcmp(k, k2, count * KV_HEADS * HD * sizeof(float)));
		CHECK(!memcmp(v, v2, count * KV_HEADS * HD * sizeof(float)));
	}
	kvp_close(c);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
}

int main(void)
{
	watchdog_start("test_kv_hugepages", 60);

	if (geteuid() != 0) {
		printf("needs root: the test reserves huge pages (%s)\n", NR_HUGEPAGES);
		return 77;
	}
	hugepages_before = proc_field(NR_HUGEPAGES, "%ld");
	if (hugepages_before < 0) {
		printf("no %s: no huge pages here\n", NR_HUGEPAGES);
		return 77;
	}
	atexit(give_back_hugepages);
	if (write_long(NR_HUGEPAGES, hugepages_before + POOL_PAGES) ||
	    proc_field("/proc/meminfo", "HugePages_Free: %ld") < POOL_PAGES) {
		printf("could not reserve %d huge pages of 2 MiB\n", POOL_PAGES);
		return 77;
	}
	check_pool(2048);
	give_back_hugepages();
	if (hugepages_before == 0)
		check_pool(sysconf(_SC_PAGESIZE) / 1024);
	printf("ok\n");
	return 0;
}
