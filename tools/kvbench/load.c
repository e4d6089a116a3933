/* SPDX-License-Identifier: MIT */
/*
 * kvbench load: engines' schedulers against one pool, allocation only (no
 * KV): through a kvpoold, each engine a process with its own connection,
 * and in process on the core allocator (the same schedules, the engines
 * taking their steps in turn) as the baseline. Every workload in every wait
 * mode ends with the pool's blocks all free, or the run fails.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load.h"
#include "kvbench.h"

enum { W_DECODE, W_SHARED, W_LONG, NWORKLOADS };
static const char *const workload_names[NWORKLOADS] = { "decode", "shared-prefix", "long-context" };

#define BLOCK_SIZE 16
#define CHUNK 2048        /* most prompt tokens a sequence prefills in one step */
#define WINDOW 4096       /* long-context's swa and rswa windows */

struct load_opts {
	unsigned engines;
	int workload;         /* -1: all */
	int wait;             /* -1: both; 0 spin, 1 sleep */
	uint32_t seqs, steps, requests; /* 0: the workload's */
	uint64_t seed;
	bool json;
	char daemon[PATH_MAX];
	const char *socket;   /* a running daemon's, instead of one of our own */
};

static uint32_t cdiv(uint64_t a, uint32_t b)
{
	return (uint32_t)((a + b - 1) / b);
}

/*
 * The workloads, per engine: the figures (#26). Pools: decode
 * and shared-prefix get room for every running sequence of every engine at
 * its longest, nothing shared: never a preemption. long-context gets 3/4 of
 * what the engines' running sequences need at their longest, so that they
 * preempt some (about 23 for 2 engines' 64 requests in process; through the
 * daemon it depends on how the engines overlap). Preemptions are a cliff:
 * 7/10 makes about 300, half thousands, since a victim is re-admitted as
 * soon as there is room for its first chunk, and is the newest again at the
 * next collision (vLLM's scheduler does the same).
 */
static void workload_init(struct ld_workload *w, int which, const struct load_opts *o)
{
	static const uint32_t seqs[NWORKLOADS] = { 64, 32, 4 };
	static const uint32_t steps[NWORKLOADS] = { 256, 128, 128 };
	uint64_t per_seq;

	memset(w, 0, sizeof(*w));
	w->name = workload_names[which];
	w->seqs = o->seqs ? o->seqs : seqs[which];
	w->steps = o->steps ? o->steps : steps[which];
	/* 8 generations of running sequences: steadier figures, still a fraction of a second */
	w->requests = o->requests ? o->requests : 8 * w->seqs;
	w->arrivals = w->seqs / 16 ? w->seqs / 16 : 1;
	w->chunk = CHUNK;
	w->block_size = BLOCK_SIZE;
	w->seed = o->seed;
	w->num_groups = 1;
	w->groups[0].kind = KVC_FULL;
	switch (which) {
	case W_DECODE: /* 512-token prompts sharing 256 */
		w->prompt = 512;
		w->shared = 256;
		w->systems = 1;
		break;
	case W_SHARED: /* one of 4 system prompts of 2048 tokens, Zipf-popular, then 256 of its own */
		w->prompt = 2048 + 256;
		w->shared = 2048;
		w->systems = 4;
		break;
	default: /* 32k prompts, nothing shared; sliding-window and R-SWA layers */
		w->prompt = 32768;
		w->num_groups = 2;
		w->groups[0] = (struct kvc_group_spec){ KVC_SWA, WINDOW };
		w->groups[1] = (struct kvc_group_spec){ KVC_RSWA, WINDOW };
		break;
	}
	if (which != W_LONG) {
		per_seq = cdiv((uint64_t)w->prompt + w->steps, BLOCK_SIZE);
		w->pool_blocks = (uint32_t)(1 + (uint64_t)o->engines * w->seqs * per_seq);
	} else {
		/* swa: its window and a chunk; rswa: the prompt (its prefix), a window and a chunk */
		per_seq = 2 * (cdiv(WINDOW + CHUNK, BLOCK_SIZE) + 1) + cdiv(w->prompt, BLOCK_SIZE);
		w->pool_blocks = (uint32_t)(1 + (uint64_t)o->engines * w->seqs * per_seq * 3 / 4);
	}
}

static void groups_text(const struct ld_workload *w, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (uint32_t g = 0; g < w->num_groups && off < len; g++) {
		const struct kvc_group_spec *s = &w->groups[g];

		off += (size_t)snprintf(buf + off, len - off, "%s%s", g ? " " : "", kvp_kind_name(s->kind));
		if (s->kind != KVC_FULL && off < len)
			off += (size_t)snprintf(buf + off, len - off, ":%u", s->param);
	}
}

static bool scheduler_bound(const struct load_opts *o, bool spin)
{
	return spin && o->engines + 1 > (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
}

static void json_pct(json_object *j, const char *op, const struct ld_pct *p)
{
	char key[40];

	snprintf(key, sizeof(key), "%s_count", op);
	json_object_object_add(j, key, json_object_new_int64((int64_t)p->count));
	snprintf(key, sizeof(key), "%s_median_ns", op);
	json_object_object_add(j, key, p->count ? json_object_new_int64((int64_t)p->median) : NULL);
	snprintf(key, sizeof(key), "%s_p99_ns", op);
	json_object_object_add(j, key, p->count ? json_object_new_int64((int64_t)p->p99) : NULL);
	snprintf(key, sizeof(key), "%s_p999_ns", op);
	json_object_object_add(j, key, p->count ? json_object_new_int64((int64_t)p->p999) : NULL);
}

static double hit_rate(const struct ld_result *r)
{
	return r->n.query_tokens ? (double)r->n.hit_tokens / (double)r->n.query_tokens : 0;
}

static int print_json(const struct load_opts *o, const struct ld_workload *w, bool spin,
		      const char *mode, const struct ld_result *r)
{
	json_object *j = bench_json_row();
	char groups[64];

#define ADD(key, value) json_object_object_add(j, key, value)
#define INT(v) json_object_new_int64((int64_t)(v))
	groups_text(w, groups, sizeof(groups));
	ADD("workload", json_object_new_string(w->name));
	ADD("wait", json_object_new_string(spin ? "spin" : "sleep"));
	ADD("engines", INT(o->engines));
	ADD("mode", json_object_new_string(mode));
	ADD("seqs", INT(w->seqs));
	ADD("requests", INT(w->requests));
	ADD("prompt_tokens", INT(w->prompt));
	ADD("shared_tokens", INT(w->shared));
	ADD("decode_steps", INT(w->steps));
	ADD("groups", json_object_new_string(groups));
	ADD("pool_blocks", INT(w->pool_blocks));
	ADD("scheduler_bound", json_object_new_boolean(!strcmp(mode, "daemon") &&
						      scheduler_bound(o, spin)));
	if (r->err) {
		ADD("error", json_object_new_string(r->why));
		ADD("blocks_leaked", r->blocks_leaked >= 0 ? INT(r->blocks_leaked) : NULL);
		return bench_json_line(j);
	}
	ADD("ops", INT(r->n.ops));
	ADD("seconds", bench_json_fixed(r->seconds, 4));
	ADD("ops_per_s", bench_json_fixed((double)r->n.ops / r->seconds, 0));
	ADD("tokens_per_s", bench_json_fixed((double)r->n.tokens / r->seconds, 0));
	ADD("engine_steps", INT(r->n.steps));
	ADD("tokens", INT(r->n.tokens));
	for (int k = 0; k < LD_NKINDS; k++)
		json_pct(j, ld_kind_names[k], &r->lat[k]);
	ADD("prefix_hit_rate", bench_json_fixed(hit_rate(r), 4));
	ADD("prefix_hit_tokens", INT(r->n.hit_tokens));
	ADD("prefix_query_tokens", INT(r->n.query_tokens));
	ADD("pool_peak_used_blocks", INT(r->peak_used));
	ADD("pool_peak_usage", bench_json_fixed((double)r->peak_used / (w->pool_blocks - 1), 4));
	ADD("pool_mean_usage", bench_json_fixed(r->mean_usage, 4));
	ADD("preemptions", INT(r->n.preemptions));
	ADD("nospace", INT(r->n.nospace));
	ADD("blocks_leaked", INT(r->blocks_leaked));
#undef INT
#undef ADD
	return bench_json_line(j);
}

static void print_text(const struct load_opts *o, const struct ld_workload *w, bool spin,
		       const char *mode, const struct ld_result *r)
{
	const char *wait = spin ? "spin" : "sleep";

	if (r->err) {
		printf("%-13s %-5s %-10s  FAILED: %s\n", w->name, wait, mode, r->why);
		return;
	}
	printf("%-13s %-5s %-10s %10.0f %9.0f %8.3f %8.3f %8llu %7lld %6s\n", w->name, wait, mode,
	       (double)r->n.ops / r->seconds, (double)r->n.tokens / r->seconds, hit_rate(r),
	       (double)r->peak_used / (w->pool_blocks - 1), (unsigned long long)r->n.preemptions,
	       (long long)r->blocks_leaked,
	       !strcmp(mode, "daemon") && scheduler_bound(o, spin) ? "yes" : "");
	for (int k = 0; k < LD_NKINDS; k++) {
		const struct ld_pct *p = &r->lat[k];

		if (p->count)
			printf("    %-7s %9llu  median %9llu ns  p99 %9llu ns  p99.9 %9llu ns\n",
			       ld_kind_names[k], (unsigned long long)p->count,
			       (unsigned long long)p->median, (unsigned long long)p->p99,
			       (unsigned long long)p->p999);
	}
}

static void print_header(const struct load_opts *o, const struct ld_workload *ws, int nw)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);

	bench_print_machine();
	printf("# kvbench load: %u engines (a process and a connection each) on one pool of\n"
	       "#   %s, allocation only, one ring batch per engine step; in_process: the\n"
	       "#   same engines' steps in turn on the core allocator, in one process; seed %llu\n"
	       "# latency: from the start of a step's batch to the engine's having the op's answer\n",
	       o->engines, o->socket ? o->socket : "a kvpoold it starts", (unsigned long long)o->seed);
	printf("# spin: engines spin %d us for completions%s;\n#   sleep: both sleep at once\n",
	       LD_SPIN_US, o->socket ? "" : ", the daemon --spin-us 1000");
	if (o->wait != 1 && o->engines + 1 > (unsigned)cores)
		printf("# NOTE: spin mode runs %u spinners (%u engines and the daemon) on %ld cores: its\n"
		       "#   figures measure the kernel's scheduler more than kvpool (column sched)\n",
		       o->engines + 1, o->engines, cores);
	for (int i = 0; i < nw; i++) {
		const struct ld_workload *w = &ws[i];
		char groups[64];

		groups_text(w, groups, sizeof(groups));
		printf("# %s: per engine %u requests, %u arriving a step, at most %u running;\n"
		       "#   %u-token prompts", w->name, w->requests, w->arrivals, w->seqs, w->prompt);
		if (w->systems == 1)
			printf(" sharing %u", w->shared);
		else if (w->systems)
			printf(", each one of %u %u-token system prompts (Zipf) and its own", w->systems,
			       w->shared);
		else
			printf(", nothing shared");
		printf("\n#   %u decode steps, prefill chunks of %u; pool: %u blocks of %u tokens, %s:\n"
		       "#   %s\n", w->steps, w->chunk, w->pool_blocks, w->block_size, groups,
		       w->num_groups > 1 ? "3/4 of what the running sequences need at their longest" :
					   "room for every running sequence at its longest");
	}
	printf("%-13s %-5s %-10s %10s %9s %8s %8s %8s %7s %6s\n", "workload", "wait", "mode", "ops/s",
	       "tokens/s", "hit_rate", "peak_use", "preempt", "leaked", "sched");
}

static const char usage_hint[] = "Try 'kvbench --help' for more information.\n";

static int pick(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

static int parse_args(int argc, char **argv, struct load_opts *o)
{
	static const char *const waits[] = { "spin", "sleep", "both" };
	static const char *const workloads[] = { "decode", "shared-prefix", "long-context", "all" };

	bench_default_daemon(o->daemon, sizeof(o->daemon));
	o->engines = 2;
	o->workload = o->wait = -1;
	o->seed = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t n;
		int ok = 1;

		if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		}
		if (!v) {
			ok = 0;
		} else if (!strcmp(a, "--engines")) {
			ok = !bench_parse_u64(v, 1, 64, &n) && (o->engines = (unsigned)n);
		} else if (!strcmp(a, "--seqs")) {
			ok = !bench_parse_u64(v, 1, 1024, &n) && (o->seqs = (uint32_t)n);
		} else if (!strcmp(a, "--requests")) {
			ok = !bench_parse_u64(v, 1, 1u << 20, &n) && (o->requests = (uint32_t)n);
		} else if (!strcmp(a, "--steps")) {
			ok = !bench_parse_u64(v, 1, 65536, &n) && (o->steps = (uint32_t)n);
		} else if (!strcmp(a, "--seed")) {
			ok = !bench_parse_u64(v, 0, UINT32_MAX, &o->seed);
		} else if (!strcmp(a, "--workload")) {
			o->workload = pick(v, workloads, 4);
			ok = o->workload >= 0;
			o->workload = o->workload == 3 ? -1 : o->workload;
		} else if (!strcmp(a, "--wait")) {
			o->wait = pick(v, waits, 3);
			ok = o->wait >= 0;
			o->wait = o->wait == 2 ? -1 : o->wait;
		} else if (!strcmp(a, "--daemon")) {
			snprintf(o->daemon, sizeof(o->daemon), "%s", v);
		} else if (!strcmp(a, "--socket")) {
			o->socket = v;
		} else {
			ok = 0;
		}
		if (!ok) {
			fprintf(stderr, "kvbench load: bad argument '%s%s%s'\n", a, v ? " " : "", v ? v : "");
			fputs(usage_hint, stderr);
			return -EINVAL;
		}
		i++;
	}
	return 0;
}

int bench_load(int argc, char **argv)
{
	struct ld_workload ws[NWORKLOADS];
	struct load_opts o = { 0 };
	int nw = 0, failures = 0;

	if (parse_args(argc, argv, &o))
		return 2;
	for (int i = 0; i < NWORKLOADS; i++) {
		if (o.workload >= 0 && o.workload != i)
			continue;
		workload_init(&ws[nw], i, &o);
		if (ws[nw].pool_blocks > KVC_MAX_BLOCKS) {
			fprintf(stderr, "kvbench load: %s would need a pool of %u blocks, more than %u\n%s",
				ws[nw].name, ws[nw].pool_blocks, KVC_MAX_BLOCKS, usage_hint);
			return 2;
		}
		nw++;
	}
	if (!o.json)
		print_header(&o, ws, nw);
	for (int m = 0; m < 2; m++) {
		struct ld_run_opts ro = { .engines = o.engines, .spin = m == 0, .socket = o.socket };
		struct bench_daemon d = { 0 };

		if (o.wait >= 0 && o.wait != m)
			continue;
		if (!o.socket) {
			int ret = bench_daemon_start(&d, o.daemon, ro.spin ? LD_SPIN_US : 0, NULL, -1);

			if (ret) {
				fprintf(stderr, "kvbench load: %s did not start: %s\n", o.daemon,
					strerror(-ret));
				return 1;
			}
			ro.socket = d.socket;
		}
		for (int i = 0; i < nw; i++) {
			struct ld_result r;

			for (int k = 0; k < 2; k++) {
				const char *mode = k ? "in_process" : "daemon";

				if (k ? ld_run_in_process(&ws[i], o.engines, &r) : ld_run_daemon(&ws[i], &ro, &r)) {
					fprintf(stderr, "kvbench load: %s, %s, %s: %s\n", ws[i].name,
						ro.spin ? "spin" : "sleep", mode, r.why);
					failures++;
				}
				if (o.json)
					print_json(&o, &ws[i], ro.spin, mode, &r);
				else
					print_text(&o, &ws[i], ro.spin, mode, &r);
				fflush(stdout);
			}
		}
		if (!o.socket)
			bench_daemon_stop(&d);
	}
	return failures ? 1 : 0;
}
