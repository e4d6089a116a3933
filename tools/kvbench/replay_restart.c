/* SPDX-License-Identifier: MIT */
/*
 * kvbench replay --restart-at F: once a fraction F of the requests are
 * served, the daemon restarts (what `kvctl daemon restart` sends), its cache
 * handed over, while the engines go on: each meets the restart as
 * -ECONNRESET, connects again and serves the request it was in the middle
 * of once more (its hit the one it had measured, if it had). restart_s is the
 * time from the request to the first hit the next run serves: a LOOKUP of the
 * last request served before.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../lib/libkvpool.h"
#include "replay.h"
#include "kvbench.h"

#define NEXT_RUN_WAIT_NS (60ull * 1000000000ull)

bool replay_restart_due(const struct replay_opts *o, const struct replay_result *res, uint32_t n)
{
	uint32_t done = 0;

	for (uint32_t i = 0; i < n; i++)
		done += __atomic_load_n(&res[i].done, __ATOMIC_ACQUIRE) != 0;
	return o->restart_at > 0 && n && (double)done >= o->restart_at * n;
}

/* The last request served without an error, or n when none was. */
static uint32_t last_served(const struct replay_result *res, uint32_t n)
{
	uint32_t last = n;

	for (uint32_t i = 0; i < n; i++)
		if (__atomic_load_n(&res[i].done, __ATOMIC_ACQUIRE) && !res[i].error)
			last = i;
	return last;
}

/* Request @i's prompt looked up on a connection of its own: the hit, or -errno. */
static int look(const char *sock, const char *pool, const struct replay_req *r)
{
	struct kvp_client *c;
	uint32_t *tokens = malloc((size_t)r->in_len * sizeof(*tokens) + 1);
	uint64_t h;
	int ret = tokens ? kvp_connect(&(struct kvp_connect_opts){
					       .socket_path = sock, .pool = pool,
					       .arena_bytes = (uint64_t)r->in_len * 4 + (1u << 20) }, &c)
			 : -ENOMEM;

	if (ret) {
		free(tokens);
		return ret;
	}
	for (uint32_t j = 0; j < r->in_len; j++)
		tokens[j] = replay_token(r->ids, j);
	ret = kvp_seq_open(c, tokens, r->in_len, NULL, 0, -1, &h);
	if (!ret) {
		ret = kvp_lookup(c, h, NULL, 0);
		kvp_seq_close(c, h);
	}
	kvp_close(c);
	free(tokens);
	return ret;
}

int replay_restart(struct kvp_client **admin, const char *sock, const char *pool,
		   const struct replay_req *reqs, const struct replay_result *res, uint32_t n,
		   double *restart_s)
{
	struct kvp_connect_opts ao = { .socket_path = sock, .admin = true, .stats_page = true,
				       .monitor = true, .timeout_ms = 60000 };
	uint32_t last = last_served(res, n);
	uint64_t t0 = bench_now_ns(), boot = kvp_boot_id(*admin);
	char why[KVP_REASON_MAX] = "";
	int ret = kvp_daemon_restart(*admin, NULL, why, sizeof(why)), hit = 0;

	if (ret) {
		fprintf(stderr, "kvbench replay: restart: %s\n", *why ? why : strerror(-ret));
		return ret;
	}
	kvp_close(*admin);
	*admin = NULL;
	while (bench_now_ns() - t0 < NEXT_RUN_WAIT_NS) {
		ret = kvp_connect(&ao, admin);
		if (!ret && kvp_boot_id(*admin) != boot && !kvp_nop(*admin))
			break;
		if (!ret)
			kvp_close(*admin);
		*admin = NULL;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	if (!*admin) {
		fprintf(stderr, "kvbench replay: restart: the next run did not answer\n");
		return -ETIMEDOUT;
	}
	/* The first hit served: the last request's prompt, which the pool kept. */
	do
		hit = last < n ? look(sock, pool, &reqs[last]) : 0;
	while (hit < 0 && (hit == -ECONNRESET || hit == -EAGAIN) &&
	       bench_now_ns() - t0 < NEXT_RUN_WAIT_NS);
	*restart_s = (double)(bench_now_ns() - t0) / 1e9;
	if (hit <= 0)
		fprintf(stderr, "kvbench replay: restart: the last request's prompt %s after it\n",
			hit < 0 ? strerror(-hit) : "hits nothing");
	return 0;
}

