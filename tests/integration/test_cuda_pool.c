/* SPDX-License-Identifier: MIT */
/*
 * GPU pools owned by the daemon and mapped by engines (#22): the memory half.
 * Without a GPU it exits 77 with the reason: the plugin not built,
 * libcuda.so.1 not loadable (dlerror), or cuInit failed (the driver's words).
 * With one:
 *   - a cuda pool of more than 1 GiB is made of 1 GiB pieces (the last the
 *     rest), all reported by POOL_LAYOUT, in the layer layout;
 *   - A maps it and writes, through its device pointers, a pattern at the
 *     first and last element of every layer's K and V (the last block lies in
 *     the second piece); B, another process of the namespace, maps it and
 *     reads the same bytes; mapping is refused (-EPERM) for a cuda pool open
 *     to all namespaces, and attach to another namespace's;
 *   - A killed while mapped: the daemon serves on and B's mapping still reads;
 *   - WRITE_KV then READ_KV over every block of a pool, every layer, bit for
 *     bit, and each row where the layout's strides put it (read through the
 *     mapping): the staged copy and the scatter and gather kernels;
 *   - the daemon killed: B's mapping still reads the marks (CUDA keeps the
 *     memory while it is mapped) and B's next request fails -ECONNRESET.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cudatest.h"
#include "harness.h"

/* bf16, 8 kv heads of 128, 16 tokens a block, 2 layers: 128 KiB a block; 9000 blocks > 1 GiB. */
#define BLOCKS "9000"
#define GEOMETRY "blocks=" BLOCKS, "block_size=16", "groups=full", "kv_heads=8", \
		 "head_dim=128", "dtype=bf16", "layers_per_group=2", "backend=cuda"

static struct daemon dmn;

static struct kvp_client *connect_map(const char *ns)
{
	char why[KVP_REASON_MAX];
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = "g", .namespace_ = ns,
				      .pool_map = true, .why = why, .why_len = sizeof(why) };
	struct kvp_client *c;
	int ret = kvp_connect(&o, &c);

	if (ret) {
		fprintf(stderr, "connect: %s: %s\n", strerror(-ret), why);
		exit(1);
	}
	return c;
}

/* Pieces of 1 GiB, the last the rest; the layer layout's strides. */
static void check_layout(const struct kvp_pool_map *m)
{
	const struct kvp_kv_layout *h = &m->layout;
	uint64_t kv = 16ull * 8 * 128 * 2, sum = 0;

	CHECK_EQ(h->mem_kind, KVP_MEM_CUDA);
	CHECK_EQ(h->layout, KVP_LAYOUT_LAYER);
	CHECK_EQ(h->num_pieces, 2);
	CHECK_EQ(m->num_pieces, 2);
	CHECK_EQ(m->piece_bytes[0], 1ull << 30);
	for (uint32_t p = 0; p < m->num_pieces; p++)
		sum += m->piece_bytes[p];
	CHECK_EQ(sum, h->total_bytes);
	CHECK(h->total_bytes >= 9000 * 2 * 2 * kv);
	CHECK_EQ((char *)m->piece[1] - (char *)m->piece[0], 1ll << 30);
	for (uint32_t l = 0; l < 2; l++) {
		CHECK_EQ(m->layers[l].block_stride, kv);
		CHECK_EQ(m->layers[l].token_stride, 8 * 128 * 2);
		CHECK_EQ(m->layers[l].head_stride, 128 * 2);
		CHECK_EQ(m->layers[l].k - (uint8_t *)m->piece[0], l * 2 * 9000 * kv);
		CHECK_EQ(m->layers[l].v - m->layers[l].k, 9000 * kv);
	}
}

/* The device address of the first or the last element of K or V of @layer. */
static unsigned long long elem(const struct kvp_pool_map *m, uint32_t layer, bool v, bool last)
{
	const struct kvp_map_layer *e = &m->layers[layer];
	uint8_t *base = v ? e->v : e->k;

	if (last)
		base += 8999 * e->block_stride + 15 * e->token_stride + 7 * e->head_stride + 127 * 2;
	return (unsigned long long)(uintptr_t)base;
}

static uint16_t mark(uint32_t layer, bool v, bool last)
{
	return (uint16_t)(0x3f80 + layer * 4 + v * 2 + last);
}

static void write_marks(const struct kvp_pool_map *m)
{
	for (uint32_t i = 0; i < 8; i++) {
		uint16_t x = mark(i >> 2, i & 2, i & 1);

		CHECK_EQ(cu.htod(elem(m, i >> 2, i & 2, i & 1), &x, sizeof(x)), 0);
	}
}

static void read_marks(const struct kvp_pool_map *m)
{
	for (uint32_t i = 0; i < 8; i++) {
		uint16_t x = 0;

		CHECK_EQ(cu.dtoh(&x, elem(m, i >> 2, i & 2, i & 1), sizeof(x)), 0);
		CHECK_EQ(x, mark(i >> 2, i & 2, i & 1));
	}
}

/* A: maps, writes the marks, says so, and waits to be killed, mapping held. */
static int writer(void *arg)
{
	struct kvp_client *c = connect_map("ns1");
	struct kvp_pool_map m;

	(void)arg;
	cuda_use_device();
	CHECK_EQ(kvp_map_pool(c, &m), 0);
	check_layout(&m);
	write_marks(&m);
	printf("ready\n");
	fflush(stdout);
	pause();
	return 0;
}

/* The round trip's pool: 64 blocks of 16 tokens, 2 kv heads of 64, bf16, 2 layers. */
#define RT_BLOCKS 64
#define RT_TOKENS ((RT_BLOCKS - 1) * 16)
#define RT_ROW (2 * 64)

static uint16_t rt_val(uint32_t layer, uint32_t pos, uint32_t head, uint32_t d)
{
	return (uint16_t)(pos * 131 + head * 17 + d * 3 + layer * 5000 + 1);
}

/* Every block, every layer, both directions; then the rows through the mapping. */
static void round_trip(void)
{
	static const char *const rt[] = { "blocks=64", "block_size=16", "groups=full",
					  "kv_heads=2", "head_dim=64", "dtype=bf16",
					  "layers_per_group=2", "backend=cuda", "namespace=ns1",
					  NULL };
	static uint16_t k[RT_TOKENS * 2 * 64], v[RT_TOKENS * 2 * 64], back[2][RT_TOKENS * 2 * 64];
	static uint32_t tokens[RT_TOKENS];
	union {
		struct kvp_block_lists l;
		uint8_t bytes[sizeof(struct kvp_block_lists) + RT_BLOCKS * sizeof(uint32_t)];
	} t;
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = "rt", .namespace_ = "ns1",
				      .pool_map = true, .arena_bytes = 4u << 20 };
	struct kvp_pool_map m;
	struct kvp_client *c;
	uint64_t h;

	create_pool_or_die(&dmn, "rt", rt);
	CHECK_EQ(kvp_connect(&o, &c), 0);
	for (uint32_t i = 0; i < RT_TOKENS; i++)
		tokens[i] = i + 1;
	CHECK_EQ(kvp_seq_open(c, tokens, RT_TOKENS, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, RT_TOKENS, 0, false, NULL, NULL, 0), 0);
	CHECK(kvp_get_table(c, h, &t.l, sizeof(t)) > 0);
	CHECK_EQ(t.l.counts[0], RT_BLOCKS - 1);
	CHECK_EQ(kvp_map_pool(c, &m), 0);
	for (uint32_t layer = 0; layer < 2; layer++) {
		for (uint32_t p = 0; p < RT_TOKENS; p++)
			for (uint32_t e = 0; e < 2 * 64; e++) {
				k[p * 128 + e] = rt_val(layer, p, e / 64, e % 64);
				v[p * 128 + e] = (uint16_t)~rt_val(layer, p, e / 64, e % 64);
			}
		CHECK_EQ(kvp_write_kv(c, h, 0, layer, 0, RT_TOKENS, k, v), 0);
		CHECK_EQ(kvp_read_kv(c, h, 0, layer, 0, RT_TOKENS, back[0], back[1]), 0);
		CHECK(!memcmp(back[0], k, sizeof(k)) && !memcmp(back[1], v, sizeof(v)));
		for (uint32_t p = 0; p < RT_TOKENS; p += 5)
			for (uint32_t head = 0; head < 2; head++) {
				const struct kvp_map_layer *e = &m.layers[layer];
				uint64_t at = t.l.ids[p / 16] * e->block_stride +
					      p % 16 * e->token_stride + head * e->head_stride;
				uint16_t row[2][64];

				CHECK_EQ(cu.dtoh(row[0], (uintptr_t)e->k + at, RT_ROW), 0);
				CHECK_EQ(cu.dtoh(row[1], (uintptr_t)e->v + at, RT_ROW), 0);
				CHECK(!memcmp(row[0], &k[p * 128 + head * 64], RT_ROW));
				CHECK(!memcmp(row[1], &v[p * 128 + head * 64], RT_ROW));
			}
	}
	kvp_unmap_pool(&m);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
}

static void refusals(void)
{
	static const char *const shared[] = { GEOMETRY, NULL };
	struct kvp_client *c;
	struct kvp_pool_map m;
	char why[KVP_REASON_MAX];
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = "g", .namespace_ = "ns2",
				      .why = why, .why_len = sizeof(why) };

	CHECK_EQ(kvp_connect(&o, &c), -EPERM);
	CHECK_EQ(strcmp(why, "pool 'g' is restricted to namespace 'ns1'"), 0);
	create_pool_or_die(&dmn, "open", shared);
	o = (struct kvp_connect_opts){ .socket_path = dmn.socket, .pool = "open", .pool_map = true };
	CHECK_EQ(kvp_connect(&o, &c), 0);
	CHECK_EQ(kvp_map_pool(c, &m), -EPERM);
	CHECK_EQ(strcmp(m.why, "pool 'open' is shared by all namespaces: only a pool restricted "
			       "to one namespace is mapped"), 0);
	kvp_close(c);
}

int main(void)
{
	static const char *const restricted[] = { GEOMETRY, "namespace=ns1", NULL };
	struct kvp_client *b;
	struct kvp_pool_map m;
	pid_t a;

	watchdog_start("test_cuda_pool", 120);
	cuda_need_mapping("test_cuda_pool");
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, "g", restricted);

	a = fork_child_ready(writer, NULL);
	cuda_use_device();
	b = connect_map("ns1");
	CHECK_EQ(kvp_map_pool(b, &m), 0);
	check_layout(&m);
	read_marks(&m);

	CHECK_EQ(kill(a, SIGKILL), 0);
	CHECK_EQ(wait_child(a), 128 + SIGKILL);
	CHECK_EQ(kvp_nop(b), 0);
	read_marks(&m);
	refusals();
	round_trip();

	watchdog_watch(NULL);
	CHECK_EQ(kill(dmn.pid, SIGKILL), 0);
	CHECK_EQ(wait_child(dmn.pid), 128 + SIGKILL);
	read_marks(&m);
	CHECK_EQ(kvp_nop(b), -ECONNRESET);
	read_marks(&m);
	kvp_unmap_pool(&m);
	kvp_close(b);
	return 0;
}
