/* SPDX-License-Identifier: MIT */
/*
 * A mapped pool shared by two processes of one namespace (KVP_OP_POOL_MAP,
 * kvp_map_pool), on a host pool:
 *   1, 2. map_shared.h's scenario: A writes through its mapping, B hits its
 *      prefix and reads and attends over it, A is killed mid-run;
 *   3. The protocol's edges: no .pool_map, or a pool open to all namespaces:
 *      -EPERM with a reason; a raw POOL_MAP completes with res 1 (one memfd)
 *      and, while its message is queued or unread, the next POOL_MAP is
 *      -EBUSY with its reason in the out buffer (two in one submission: the
 *      second, always); kvp_map_pool reads such a leftover off, closing its
 *      descriptor, and maps; kvp_map_pool twice in a row gives two usable
 *      mappings of the same memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "map_shared.h"

#define RAW_TAG 0xfeed000000000001ull
#define FD_SCAN 1024

static struct daemon dmn;

/* The one socket not in @known (-1: none), after which every socket is in @known. */
static int new_socket(bool *known)
{
	int found = -1;

	for (int fd = 0; fd < FD_SCAN; fd++) {
		struct stat st;

		if (fstat(fd, &st) || !S_ISSOCK(st.st_mode) || known[fd])
			continue;
		CHECK_EQ(found, -1);
		found = fd;
		known[fd] = true;
	}
	return found;
}

/* One raw POOL_MAP, its completion: res, and the reason's length in cqe.aux. */
static int raw_map(struct kvp_client *c, uint64_t tag, uint32_t out_len, uint64_t *aux)
{
	struct kvp_sqe *sqe = kvp_get_sqe(c);
	struct kvp_cqe *cqe;
	int res;

	CHECK(sqe != NULL);
	*sqe = (struct kvp_sqe){ .opcode = KVP_OP_POOL_MAP, .user_data = tag,
				 .out_addr = 4096, .out_len = out_len };
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	CHECK(cqe->user_data == tag);
	res = cqe->res;
	*aux = cqe->aux;
	kvp_cqe_seen(c, cqe);
	return res;
}

/* Reads the leftover message of POOL_MAP @tag off @sock: one memfd, the pool's size. */
static void drain_leftover(int sock, uint64_t tag, uint64_t total_bytes)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} ctl;
	struct kvp_map_msg msg;
	struct iovec iov = { .iov_base = &msg, .iov_len = sizeof(msg) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	struct stat st;
	int fd;

	CHECK_EQ(recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC), sizeof(msg));
	CHECK(msg.magic == KVP_MAP_MAGIC && msg.tag == tag);
	CHECK(msg.first == 0 && msg.count == 1 && msg.total == 1 && msg.resv == 0);
	cm = CMSG_FIRSTHDR(&mh);
	CHECK(cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS);
	CHECK_EQ(cm->cmsg_len, CMSG_LEN(sizeof(int)));
	memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK((uint64_t)st.st_size >= total_bytes);
	close(fd);
}

/* -EPERM, a reason, and nothing left in @m. */
static void expect_refused(struct kvp_client *c)
{
	struct kvp_pool_map m;

	memset(&m, 0x5a, sizeof(m));
	CHECK_EQ(kvp_map_pool(c, &m), -EPERM);
	CHECK(m.why[0] != '\0' && strnlen(m.why, sizeof(m.why)) < sizeof(m.why));
	CHECK(m.layers == NULL && m.piece == NULL && m.num_pieces == 0);
	kvp_close(c);
}

/* Two mappings of the same memory: a byte stored through one is read through the other. */
static void map_twice(struct kvp_client *c)
{
	struct kvp_pool_map m, m2;
	uint16_t old, mark = 0x3c01;
	uint8_t *a, *b;

	CHECK_EQ(kvp_map_pool(c, &m), 0);
	CHECK_EQ(kvp_map_pool(c, &m2), 0);
	map_check(&m);
	map_check(&m2);
	CHECK(m.piece[0] != m2.piece[0]);
	a = map_elem(&m, 1, 1, NBLOCKS - 1, BS - 1, KVH - 1, HD - 1);
	b = map_elem(&m2, 1, 1, NBLOCKS - 1, BS - 1, KVH - 1, HD - 1);
	memcpy(&old, a, 2);
	memcpy(a, &mark, 2);
	CHECK(!memcmp(b, &mark, 2));
	kvp_unmap_pool(&m);
	CHECK(!memcmp(b, &mark, 2)); /* m2 outlives m */
	memcpy(b, &old, 2);
	kvp_unmap_pool(&m2);
}

/* Descriptors this process has open. */
static int open_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < FD_SCAN; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* Two raw POOL_MAPs in one submission: the second finds the first's message still queued. */
static void two_in_one_batch(struct kvp_client *c)
{
	struct kvp_sqe *a = kvp_get_sqe(c), *b = kvp_get_sqe(c);
	int res[2] = { 0, 0 };

	CHECK(a && b);
	*a = (struct kvp_sqe){ .opcode = KVP_OP_POOL_MAP, .user_data = RAW_TAG + 10 };
	*b = (struct kvp_sqe){ .opcode = KVP_OP_POOL_MAP, .user_data = RAW_TAG + 11 };
	CHECK_EQ(kvp_submit(c), 2);
	for (int i = 0; i < 2; i++) {
		struct kvp_cqe *cqe;

		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		CHECK(cqe->user_data == RAW_TAG + 10 || cqe->user_data == RAW_TAG + 11);
		res[cqe->user_data - RAW_TAG - 10] = cqe->res;
		kvp_cqe_seen(c, cqe);
	}
	CHECK_EQ(res[0], 1);
	CHECK_EQ(res[1], -EBUSY);
}

/*
 * One POOL_MAP's descriptors at a time: while a raw POOL_MAP's message is
 * queued or unread the next POOL_MAP is -EBUSY, whatever the courier's
 * timing; kvp_map_pool reads such leftovers off first (closing their
 * descriptors) and maps.
 */
static void leftover_busy(void)
{
	static bool known[FD_SCAN];
	struct kvp_kv_layout lay;
	struct kvp_pool_map m;
	struct kvp_client *c;
	uint8_t lbuf[1024];
	struct pollfd pfd;
	char *arena;
	uint64_t aux;
	int fds, ret;

	new_socket(known);
	c = map_connect_ns(POOL, true);
	pfd = (struct pollfd){ .fd = new_socket(known), .events = POLLIN };
	CHECK(pfd.fd >= 0);
	arena = kvp_arena(c, NULL);
	CHECK(kvp_pool_layout(c, lbuf, sizeof(lbuf)) > (int)sizeof(lay));
	memcpy(&lay, lbuf, sizeof(lay));

	two_in_one_batch(c);
	CHECK_EQ(poll(&pfd, 1, 5000), 1);
	memset(arena + 4096, 0, KVP_REASON_MAX);
	CHECK_EQ(raw_map(c, RAW_TAG + 1, KVP_REASON_MAX, &aux), -EBUSY);
	CHECK(aux > 0 && aux == strlen(arena + 4096));
	drain_leftover(pfd.fd, RAW_TAG + 10, lay.total_bytes);

	/*
	 * Read off, the message is out of the socket before the courier's lane has heard its
	 * process say it was sent: until then the daemon still counts it on its way (-EBUSY).
	 */
	fds = open_fds();
	for (unsigned tries = 0; (ret = raw_map(c, RAW_TAG, 0, &aux)) == -EBUSY; tries++) {
		CHECK(tries < 100);
		usleep(10000);
	}
	CHECK_EQ(ret, 1);
	/* Leftovers kvp_map_pool meets are dropped, their descriptors closed. */
	CHECK_EQ(poll(&pfd, 1, 5000), 1);
	CHECK_EQ(kvp_map_pool(c, &m), 0);
	map_check(&m);
	kvp_unmap_pool(&m);
	CHECK_EQ(open_fds(), fds);
	map_twice(c);
	kvp_close(c);
}

int main(void)
{
	static const char *const pool_kv[] = {
		"blocks=24", "block_size=4", "groups=full swa:8", "kv_heads=2", "head_dim=8",
		"dtype=f16", "layers_per_group=2", "namespace=ns1", "layout=layer", NULL };
	static const char *const open_kv[] = { "blocks=4", "block_size=4", "groups=full",
					       "kv_heads=1", "head_dim=8", "layers_per_group=1",
					       NULL };
	struct kvp_client *adm;

	watchdog_start("test_pool_map_shared", 30);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	map_shared_init(&dmn, false);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, POOL, pool_kv);
	create_pool_or_die(&dmn, "open", open_kv);
	adm = connect_or_die(&dmn, POOL, NS, true);
	map_expect_stats(adm, NBLOCKS - 1, 0, 0);

	map_shared_prefix(adm);
	expect_refused(map_connect_ns(POOL, false));
	expect_refused(map_connect_ns("open", true));
	leftover_busy();
	map_expect_stats(adm, NBLOCKS - 1, 0, 10);

	kvp_close(adm);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
