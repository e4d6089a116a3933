/* SPDX-License-Identifier: MIT */
/*
 * A pool's generation (kvp_setup_reply.pool_generation, ATTACH's reply,
 * kvp_pool_generation): never 0, the same to every client of one pool,
 * another for another pool and for a pool of the same name built again; 0
 * attached to none; ATTACH answers a client that made room only for the
 * pool's info (an older library) with that alone.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static const char *const pool_kv[] = { "blocks=16", "block_size=4", "groups=full", NULL };

/* ATTACH @name with room for the pool's info alone: what it answers in cqe.aux. */
static uint32_t attach_aux_with_info_room(struct kvp_client *c, const char *name)
{
	uint64_t arena_bytes;
	uint8_t *arena = kvp_arena(c, &arena_bytes);
	struct kvp_sqe *sqe = kvp_get_sqe(c);
	struct kvp_cqe *cqe;
	uint32_t aux;

	CHECK(sqe != NULL);
	memcpy(arena, name, strlen(name));
	sqe->opcode = KVP_OP_ATTACH;
	sqe->addr = 0;
	sqe->len = (uint32_t)strlen(name);
	sqe->out_addr = 4096;
	sqe->out_len = sizeof(struct kvp_pool_info);
	sqe->user_data = 5;
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	CHECK_EQ(cqe->res, 0);
	aux = (uint32_t)cqe->aux;
	kvp_cqe_seen(c, cqe);
	return aux;
}

int main(void)
{
	struct kvp_client *a, *b, *q, *none, *admin;
	uint64_t gp, gq;
	struct daemon d;

	watchdog_start("test_pool_generation", 30);
	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	create_pool_or_die(&d, "p", pool_kv);
	create_pool_or_die(&d, "q", pool_kv);
	a = connect_or_die(&d, "p", "", false);
	b = connect_or_die(&d, "p", "", false);
	q = connect_or_die(&d, "q", "", false);
	none = connect_or_die(&d, "", "", false);
	admin = connect_or_die(&d, "", "", true);

	gp = kvp_pool_generation(a);
	gq = kvp_pool_generation(q);
	CHECK(gp != 0 && gq != 0 && gp != gq);
	CHECK_EQ(kvp_pool_generation(b), gp);
	CHECK_EQ(kvp_pool_generation(none), 0);
	/* ATTACH says it too, and detaching forgets it. */
	CHECK_EQ(kvp_attach(none, "q"), 0);
	CHECK_EQ(kvp_pool_generation(none), gq);
	CHECK_EQ(kvp_attach(none, "p"), 0);
	CHECK_EQ(kvp_pool_generation(none), gp);
	CHECK_EQ(kvp_attach(none, ""), 0);
	CHECK_EQ(kvp_pool_generation(none), 0);
	/* A client with room for the pool's info alone gets that alone. */
	CHECK_EQ(attach_aux_with_info_room(none, "p"), sizeof(struct kvp_pool_info));

	/* q built again: another generation, to a new connection and to an ATTACH. */
	kvp_close(q);
	/* -EBUSY until the daemon has seen q's client go. */
	for (uint64_t until = test_now_ns() + 5000000000ull;
	     kvp_pool_destroy(admin, "q") == -EBUSY && test_now_ns() < until;)
		usleep(1000);
	CHECK_EQ(kvp_pool_destroy(admin, "q"), -ENOENT); /* gone: destroyed above */
	create_pool_or_die(&d, "q", pool_kv);
	q = connect_or_die(&d, "q", "", false);
	CHECK(kvp_pool_generation(q) != 0 && kvp_pool_generation(q) != gq);
	CHECK_EQ(kvp_attach(admin, "q"), 0);
	CHECK_EQ(kvp_pool_generation(admin), kvp_pool_generation(q));
	CHECK_EQ(kvp_pool_generation(a), gp); /* p's is p's */

	kvp_close(a);
	kvp_close(b);
	kvp_close(q);
	kvp_close(none);
	kvp_close(admin);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
