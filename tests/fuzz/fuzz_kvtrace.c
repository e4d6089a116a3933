/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the kvtrace language (tools/kvtrace/parse.c), and the
 * replay of what parses against the in-process core (tools/kvtrace/core.c), as
 * `kvtrace FILE` runs it: lines in order, stopping at the first syntax error
 * or failed command. The core is built with KVCORE_DEBUG, so every operation
 * is followed by the pool's invariant check; at the end the pool's counts
 * must add up.
 *
 * Bounds, so that one input costs milliseconds: a pool line's sizes are
 * clamped (CLAMP_*: blocks, block size, step, windows), and a line whose
 * `t*n` repeat counts add up past MAX_REPEAT is skipped: kvtrace would build
 * an array of up to 2^30 tokens for it, which is the tool working as meant.
 */
#include <sanitizer/common_interface_defs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtrace/trace.h"

#define CLAMP_BLOCKS 4096u
#define CLAMP_BLOCK_SIZE 1024u
#define CLAMP_TOKENS 65536u
#define MAX_REPEAT 65536u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t clamp(uint32_t v, uint32_t cap)
{
	return v > cap ? cap : v;
}

/* The sum of a line's `*n` counts, saturating: what the parser would allocate for it. */
static uint64_t repeats(const char *line)
{
	uint64_t sum = 0;

	for (const char *s = strchr(line, '*'); s; s = strchr(s + 1, '*')) {
		uint64_t n = 0;

		for (const char *p = s + 1; *p >= '0' && *p <= '9' && n <= MAX_REPEAT; p++)
			n = n * 10 + (uint64_t)(*p - '0');
		sum += n;
	}
	return sum;
}

/* free + used = N - 1 (the null block is neither), cached <= N - 1. */
static void check_counts(struct trace_target *t, const struct kvc_pool_config *cfg,
			 struct trace_out *out)
{
	struct trace_cmd cmd = { .op = TRACE_STATS, .name = "stats" };
	unsigned free_ = 0, used = 0, cached = 0;

	trace_out_reset(out);
	if (t->exec(t, &cmd, out) || out->failed)
		return;
	if (sscanf(out->buf, "stats free=%u used=%u cached=%u", &free_, &used, &cached) != 3 ||
	    free_ + used != cfg->num_blocks - 1 || cached > cfg->num_blocks - 1) {
		char msg[512];

		/* The sanitizers' channel: libFuzzer's -close_fd_mask closes stderr. */
		snprintf(msg, sizeof(msg), "fuzz_kvtrace: pool of %u blocks: '%.400s'",
			 cfg->num_blocks, out->buf);
		__sanitizer_report_error_summary(msg);
		abort();
	}
}

static void replay(char *text, struct trace_target *t)
{
	struct trace_parser parser;
	struct kvc_pool_config pool = { 0 };
	struct trace_out out = { 0 };
	bool created = false;
	char err[256];

	trace_parser_init(&parser);
	for (char *line = text, *next; line; line = next) {
		struct trace_cmd cmd;
		int ret;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (repeats(line) > MAX_REPEAT)
			continue;
		ret = trace_parse_line(&parser, line, &cmd, err, sizeof(err));
		if (ret < 0)
			break;
		if (ret == 0 || cmd.op == TRACE_EXPECT)
			continue;
		if (cmd.op == TRACE_POOL) {
			pool = cmd.pool;
			pool.num_blocks = clamp(pool.num_blocks, CLAMP_BLOCKS);
			pool.block_size = clamp(pool.block_size, CLAMP_BLOCK_SIZE);
			pool.max_step_tokens = clamp(pool.max_step_tokens, CLAMP_TOKENS);
			continue;
		}
		if (cmd.op == TRACE_GROUP) {
			cmd.group.param = clamp(cmd.group.param, CLAMP_TOKENS);
			pool.groups[pool.num_groups++] = cmd.group;
			continue;
		}
		if (!created && t->create_pool(t, &pool))
			break;
		created = true;
		trace_out_reset(&out);
		if (t->exec(t, &cmd, &out))
			break;
	}
	/* kvtrace creates the pool of a trace with no other command too. */
	if (!created && parser.section >= TRACE_IN_GROUPS)
		created = t->create_pool(t, &pool) == 0;
	if (created)
		check_counts(t, &pool, &out);
	free(out.buf);
	trace_parser_release(&parser);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trace_target *t;
	char *text = malloc(size + 1);

	if (!text || trace_core_target(&t))
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	replay(text, t);
	t->destroy(t);
	free(text);
	return 0;
}
