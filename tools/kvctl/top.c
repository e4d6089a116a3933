/* SPDX-License-Identifier: MIT */
/* kvctl top: a refreshing view of the stats page; q quits. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "kvctl.h"

static void print_rates(const struct kvp_stats_view *now, const struct kvp_stats_view *prev)
{
	double secs = (double)(now->taken_ns - prev->taken_ns) / 1e9;

	printf("\n%-14s %12s %10s %10s\n", "OPERATION", "PER SECOND", "p50<=", "p99<=");
	for (unsigned o = 0; o < KVP_STATS_OPS; o++) {
		uint64_t n = now->ops[o].count - prev->ops[o].count;

		if (!now->ops[o].count)
			continue;
		printf("%-14s %12.0f %7llu ns %7llu ns\n", kvp_opcode_name(o), secs > 0 ? (double)n / secs : 0,
		       (unsigned long long)kvp_hist_percentile(now->ops[o].hist, KVP_HIST_BUCKETS, 0.5),
		       (unsigned long long)kvp_hist_percentile(now->ops[o].hist, KVP_HIST_BUCKETS, 0.99));
	}
}

/* Waits up to @ms for a key; true when it is q (or stdin closed). */
static bool wait_for_quit(bool tty, unsigned ms)
{
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
	char ch;

	if (!tty) {
		usleep(ms * 1000u);
		return false;
	}
	if (poll(&p, 1, (int)ms) <= 0)
		return false;
	return read(STDIN_FILENO, &ch, 1) != 1 || ch == 'q' || ch == 'Q';
}

int kvctl_top(struct kvp_client *c, bool json, unsigned interval_ms, unsigned count)
{
	struct kvp_stats_view snaps[2] = { { 0 }, { 0 } };
	bool tty = !json && isatty(STDIN_FILENO);
	struct termios saved, raw;
	int ret = 0;

	if (tty) {
		tcgetattr(STDIN_FILENO, &saved);
		raw = saved;
		raw.c_lflag &= ~(ICANON | ECHO);
		tcsetattr(STDIN_FILENO, TCSANOW, &raw);
	}
	for (unsigned i = 0; !count || i < count; i++) {
		struct kvp_stats_view *now = &snaps[i % 2], *prev = &snaps[(i + 1) % 2];

		ret = kvp_stats_view_take(c, now);
		if (ret)
			break;
		if (json) {
			print_stats_json(now, false);
		} else {
			printf("\033[H\033[2Jkvctl top (every %u ms, q quits)\n\n", interval_ms);
			print_stats_table(now);
			if (prev->page)
				print_rates(now, prev);
		}
		fflush(stdout);
		if ((!count || i + 1 < count) && wait_for_quit(tty, interval_ms))
			break;
	}
	if (tty)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
	kvp_stats_view_release(&snaps[0]);
	kvp_stats_view_release(&snaps[1]);
	return ret;
}
