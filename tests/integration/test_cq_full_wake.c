/* SPDX-License-Identifier: MIT */
/*
 * A client that lets its CQ fill: the daemon leaves the rest in the SQ and
 * sleeps (--spin-us 0); the first reap must wake it. libkvpool reads the SQ
 * head for that only while more requests are out than the CQ holds, so this
 * is the case that read is for.
 */
#include <unistd.h>

#include "harness.h"

#define SQ 4 /* the CQ gets 2 x SQ */

int main(void)
{
	const char *const args[] = { "--spin-us", "0", NULL };
	struct kvp_connect_opts o = { .sq_entries = SQ };
	struct daemon dmn;
	struct kvp_client *c;
	struct kvp_cqe *cqe;
	unsigned got = 0;

	watchdog_start("test_cq_full_wake", 30);
	CHECK_EQ(daemon_start(&dmn, args), 0);
	watchdog_watch(&dmn);
	o.socket_path = dmn.socket;
	CHECK_EQ(kvp_connect(&o, &c), 0);
	/* 3 x SQ requests: the daemon completes 2 x SQ, the CQ is full, SQ stay behind. */
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < SQ; i++) {
			struct kvp_sqe *sqe = kvp_get_sqe(c);

			CHECK(sqe != NULL);
			sqe->opcode = KVP_OP_NOP;
			sqe->user_data = (uint64_t)(round * SQ + i);
		}
		CHECK_EQ(kvp_submit(c), SQ);
		usleep(20000);
	}
	usleep(100000); /* long past any spinning: the daemon sleeps */
	while (got < 3 * SQ) {
		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		CHECK_EQ(cqe->res, 0);
		CHECK_EQ(cqe->user_data, (uint64_t)got);
		kvp_cqe_seen(c, cqe);
		got++;
	}
	kvp_close(c);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("test_cq_full_wake: %u completions, the last %u after a reap woke the daemon\n", got, SQ);
	return 0;
}
