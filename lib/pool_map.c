/* SPDX-License-Identifier: MIT */
/*
 * kvp_map_pool: the attached pool's memory, mapped into the engine. The
 * descriptors come on the connection socket after POOL_MAP's completion and
 * are read here only: everywhere else a readable socket means nothing but a
 * possible hang-up.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "cuda_import.h"

static void close_fds(const int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
}

/*
 * One message off the socket, if one is there: its header into @m, its
 * descriptors (a copy of each, ours to close) into @in. Returns 1 with a whole
 * message, 0 when none is waiting, or -errno (-EPROTO: not a map message).
 */
static int recv_map_msg(struct kvp_client *c, struct kvp_map_msg *m,
			int in[KVP_MAP_FDS_PER_MSG], size_t *nin)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVP_MAP_FDS_PER_MSG)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = m, .iov_len = sizeof(*m) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(c->sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	*nin = 0;
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0) {
		c->broken = -ECONNRESET;
		return -ECONNRESET;
	}
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    k > KVP_MAP_FDS_PER_MSG - *nin)
			continue;
		memcpy(in + *nin, CMSG_DATA(cm), k * sizeof(int));
		*nin += k;
	}
	if (n != (ssize_t)sizeof(*m) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    m->magic != KVP_MAP_MAGIC)
		return -EPROTO;
	return 1;
}

/*
 * One message of POOL_MAP @tag: its descriptors into fds[m.first...]. A
 * leftover of an earlier call that gave up is dropped. Returns how many came
 * (0 for a leftover, or none yet), or -errno.
 */
static int recv_piece_msg(struct kvp_client *c, uint64_t tag, uint32_t got, uint32_t total,
			  int *fds)
{
	int in[KVP_MAP_FDS_PER_MSG];
	struct kvp_map_msg m;
	size_t nin;
	int ret = recv_map_msg(c, &m, in, &nin);

	if (ret == 1 && m.tag == tag && m.total == total && m.first == got && m.count == nin &&
	    m.count <= total - got) {
		memcpy(fds + got, in, nin * sizeof(int));
		return (int)nin;
	}
	close_fds(in, nin);
	if (ret == 1 && m.tag == tag)
		return -EPROTO;
	return ret < 0 ? ret : 0;
}

/*
 * What an earlier POOL_MAP left on the socket (one that timed out, or a raw
 * one): read off and its descriptors closed, or the daemon refuses the next
 * map (-EBUSY) for as long as it lies there. The daemon sends nothing else.
 */
static int drop_leftovers(struct kvp_client *c)
{
	for (;;) {
		int in[KVP_MAP_FDS_PER_MSG];
		struct kvp_map_msg m;
		size_t nin;
		int ret = recv_map_msg(c, &m, in, &nin);

		close_fds(in, nin);
		/* -EPROTO took a message off that is not a map's: read on. */
		if (ret <= 0 && ret != -EPROTO)
			return ret;
	}
}

static int recv_pieces(struct kvp_client *c, uint64_t tag, uint32_t total, int *fds)
{
	uint64_t deadline = kvp_now_ns() + c->timeout_ns;
	uint32_t got = 0;

	while (got < total) {
		int n = kvp_wait_readable(c->sock, deadline) ?:
			recv_piece_msg(c, tag, got, total, fds);

		if (n < 0) {
			close_fds(fds, got);
			return n;
		}
		got += (uint32_t)n;
	}
	return 0;
}

/* The layout, from a first guess of its size, then its real one. */
static int get_layout(struct kvp_client *c, uint8_t **out)
{
	size_t bytes = 4096;

	for (int attempt = 0; attempt < 2; attempt++) {
		uint8_t *buf = malloc(bytes);
		int ret;

		if (!buf)
			return -ENOMEM;
		ret = kvp_pool_layout(c, buf, bytes);
		if (ret > 0 && (size_t)ret <= bytes) {
			*out = buf;
			return ret;
		}
		free(buf);
		if (ret <= 0)
			return ret ? ret : -EPROTO;
		bytes = (size_t)ret;
	}
	return -EPROTO;
}

static size_t dtype_size(uint32_t dtype)
{
	return dtype == KVP_DTYPE_F32 ? 4 : 2;
}

/* The last byte element (b, t, h, d) can reach from @off, inside a piece of @bytes? */
static bool extent_fits(const struct kvp_kv_layout *h, const struct kvp_kv_layer_layout *e,
			uint64_t off, uint64_t bytes)
{
	uint64_t last = off + (uint64_t)(h->num_blocks - 1) * e->block_stride +
			(uint64_t)(h->block_size - 1) * e->token_stride +
			(uint64_t)(h->kv_heads - 1) * e->head_stride +
			(uint64_t)h->head_dim * dtype_size(h->dtype);

	return h->num_blocks && h->block_size && h->kv_heads && h->head_dim && last <= bytes;
}

/*
 * The bytes from piece @p's start to the end of the last piece: an array may
 * run on into the pieces after its own, which are mapped right after it where
 * there are several (cuda); a host pool is one piece.
 */
static uint64_t bytes_from(const struct kvp_pool_map *map, uint32_t p)
{
	uint64_t bytes = 0;

	for (; p < map->num_pieces; p++)
		bytes += map->piece_bytes[p];
	return bytes;
}

/* Takes the layout's header, layers and piece sizes apart, checking them against each other. */
static int parse_layout(struct kvp_pool_map *map, const uint8_t *buf, size_t len,
			struct kvp_kv_layer_layout **layers)
{
	const struct kvp_kv_layout *h = &map->layout;
	size_t need;

	if (len < sizeof(*h))
		return -EPROTO;
	memcpy(&map->layout, buf, sizeof(*h));
	need = sizeof(*h) + (size_t)h->num_layers * sizeof(**layers) +
	       (size_t)h->num_pieces * sizeof(uint64_t);
	if (need != len || !h->num_layers || !h->num_pieces)
		return -EPROTO;
	*layers = calloc(h->num_layers, sizeof(**layers));
	map->layers = calloc(h->num_layers, sizeof(*map->layers));
	map->piece = calloc(h->num_pieces, sizeof(*map->piece));
	map->piece_bytes = calloc(h->num_pieces, sizeof(*map->piece_bytes));
	if (!*layers || !map->layers || !map->piece || !map->piece_bytes)
		return -ENOMEM;
	memcpy(*layers, buf + sizeof(*h), h->num_layers * sizeof(**layers));
	memcpy(map->piece_bytes, buf + sizeof(*h) + h->num_layers * sizeof(**layers),
	       h->num_pieces * sizeof(uint64_t));
	map->num_pieces = h->num_pieces;
	for (uint32_t l = 0; l < h->num_layers; l++) {
		const struct kvp_kv_layer_layout *e = &(*layers)[l];

		if (e->k_piece >= h->num_pieces || e->v_piece >= h->num_pieces ||
		    !extent_fits(h, e, e->k_off, bytes_from(map, e->k_piece)) ||
		    !extent_fits(h, e, e->v_off, bytes_from(map, e->v_piece)))
			return -EPROTO;
	}
	return 0;
}

/* Host pieces: each memfd mapped shared, if it is as large as the layout says. */
static int map_host_pieces(struct kvp_pool_map *map, const int *fds)
{
	for (uint32_t p = 0; p < map->num_pieces; p++) {
		struct stat st;
		void *m;

		if (fstat(fds[p], &st))
			return -errno;
		/* Past the file's end a touch is SIGBUS: the daemon's word is checked. */
		if ((uint64_t)st.st_size < map->piece_bytes[p])
			return -EPROTO;
		m = mmap(NULL, map->piece_bytes[p], PROT_READ | PROT_WRITE, MAP_SHARED, fds[p], 0);
		if (m == MAP_FAILED)
			return -errno;
		map->piece[p] = m;
	}
	return 0;
}

/* Cuda pieces: imported into the device's primary context, back to back in one range. */
static int map_cuda_pieces(struct kvp_pool_map *map, const int *fds)
{
	unsigned long long base;
	int ret = kvp_cuda_import(map->layout.device, fds, map->piece_bytes, map->num_pieces,
				  &map->cuda, &base, map->why, sizeof(map->why));

	if (ret)
		return ret;
	for (uint32_t p = 0; p < map->num_pieces; p++) {
		map->piece[p] = (void *)(uintptr_t)base;
		base += map->piece_bytes[p];
	}
	return 0;
}

/*
 * POOL_MAP, once what earlier maps left is read off. The daemon says -EBUSY
 * while an earlier map's message is queued or unread; with everything read
 * here, that is its courier still finishing the send, or a message still on
 * its way (read off next time round): a moment's wait, within the timeout.
 */
static int request_map(struct kvp_client *c, struct kvp_pool_map *map, uint64_t *tag)
{
	uint64_t deadline = kvp_now_ns() + c->timeout_ns;
	useconds_t pause_us = 20;
	int n;

	for (;;) {
		n = drop_leftovers(c) ?: kvp_pool_map_request(c, tag, map->why, sizeof(map->why));
		if (n != -EBUSY || kvp_now_ns() >= deadline)
			return n;
		usleep(pause_us);
		if (pause_us < 5000)
			pause_us *= 2;
	}
}

int kvp_map_pool(struct kvp_client *c, struct kvp_pool_map *map)
{
	struct kvp_kv_layer_layout *layers = NULL;
	char why[KVP_REASON_MAX];
	uint8_t *buf = NULL;
	int *fds = NULL;
	uint64_t tag;
	int ret, n;

	memset(map, 0, sizeof(*map));
	ret = get_layout(c, &buf);
	if (ret < 0)
		return ret;
	ret = parse_layout(map, buf, (size_t)ret, &layers);
	if (ret)
		goto err_unmap;
	fds = calloc(map->num_pieces, sizeof(*fds));
	if (!fds) {
		ret = -ENOMEM;
		goto err_unmap;
	}
	n = request_map(c, map, &tag);
	if (n < 0) {
		ret = n;
		goto err_unmap;
	}
	if ((uint32_t)n != map->num_pieces) {
		ret = -EPROTO;
		goto err_unmap;
	}
	ret = recv_pieces(c, tag, map->num_pieces, fds);
	if (ret)
		goto err_unmap;
	if (map->layout.mem_kind == KVP_MEM_HOST_MEMFD)
		ret = map_host_pieces(map, fds);
	else if (map->layout.mem_kind == KVP_MEM_CUDA)
		ret = map_cuda_pieces(map, fds);
	else
		ret = -EPROTO;
	close_fds(fds, map->num_pieces);
	if (ret)
		goto err_unmap;
	for (uint32_t l = 0; l < map->layout.num_layers; l++)
		map->layers[l] = (struct kvp_map_layer){
			.k = (uint8_t *)map->piece[layers[l].k_piece] + layers[l].k_off,
			.v = (uint8_t *)map->piece[layers[l].v_piece] + layers[l].v_off,
			.block_stride = layers[l].block_stride,
			.token_stride = layers[l].token_stride,
			.head_stride = layers[l].head_stride,
		};
	free(fds);
	free(layers);
	free(buf);
	return 0;

err_unmap:
	free(fds);
	free(layers);
	free(buf);
	memcpy(why, map->why, sizeof(why));
	kvp_unmap_pool(map);
	memcpy(map->why, why, sizeof(why));
	return ret;
}

void kvp_unmap_pool(struct kvp_pool_map *map)
{
	if (map->cuda)
		kvp_cuda_unmap(map->cuda);
	else
		for (uint32_t p = 0; p < map->num_pieces; p++)
			if (map->piece && map->piece[p])
				munmap(map->piece[p], map->piece_bytes[p]);
	free(map->layers);
	free(map->piece);
	free(map->piece_bytes);
	memset(map, 0, sizeof(*map));
}
