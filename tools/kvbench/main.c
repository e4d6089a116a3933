/* SPDX-License-Identifier: MIT */
/* kvbench: the project's benchmarks; every one prints figures, none asserts them. */
#include <json-c/json.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvbench.h"

static const char usage[] =
	"Usage: kvbench BENCHMARK [OPTION]...\n"
	"Measure kvpool and print the figures.\n"
	"\n"
	"Benchmarks:\n"
	"  core [--rounds N] [--json]\n"
	"                      the allocator in process: ns per prefix lookup of a\n"
	"                      512-token prompt, per prefill and decode-step alloc,\n"
	"                      per commit and per free; 64 live sequences sharing a\n"
	"                      256-token prefix, 256 decode steps each, on one full\n"
	"                      group and on full+swa (default 20 rounds)\n"
	"  limits [--json]     this machine's cross-process round trips without kvpool:\n"
	"                      busy-polled shared memory (ring), and a sleep/wake by\n"
	"                      kvpool's own mechanisms (wake: an eventfd the other\n"
	"                      side waits for in epoll_wait, a futex back)\n"
	"  rtt [--iters N] [--daemon PATH] [--event-loop io_uring|epoll|both] [--json]\n"
	"                      NOP and ALLOC through a kvpoold it starts (median, p99,\n"
	"                      batched ns/op) in spin and in sleep mode, next to the\n"
	"                      in-process ALLOC and the limits (default 20000 round\n"
	"                      trips); each row names the daemon's event loop (default\n"
	"                      both: a daemon each, measured in 10 alternating turns);\n"
	"                      daemons run on the last core, the client on the first;\n"
	"                      --json: one object per row\n"
	"  attend [--backend host] [--json] [--quick] [--daemon PATH]\n"
	"         [--dtype f16|bf16|f32] [--context N] [--seqs N] [--gqa N]\n"
	"                      decode ATTEND through a kvpoold it starts, as GB/s of KV\n"
	"                      read, for contexts 1k..32k, 1..64 sequences, GQA 1 and 4,\n"
	"                      f16/bf16/f32 (KV, q and out in that dtype), head_dim 128,\n"
	"                      next to this machine's read bandwidth and their ratio;\n"
	"                      each step reads the next sequences of 64, round-robin,\n"
	"                      so KV comes from memory, not cache; --json: one object\n"
	"                      per row; --dtype, --context (1024 4096 8192 16384\n"
	"                      32768), --seqs (1 8 64) and --gqa (1 4) keep only the\n"
	"                      rows with that value;\n"
	"                      the daemon runs with --spin-us 200 and the client spins\n"
	"                      200 us for each step, as a latency-bound engine would\n"
	"  attend --backend cuda [--json] [--quick] [--daemon PATH] [--dtype f16|bf16]\n"
	"         [--context N] [--seqs N] [--gqa N]\n"
	"                      decode ATTEND on a cuda pool (device 0) through a\n"
	"                      kvpoold it starts: KV filled through a mapping, head_dim\n"
	"                      128, 8 kv heads, q heads 8 x GQA, block_size 16; rows for\n"
	"                      contexts 1k..128k, 1..256 sequences, GQA 1/4/8, f16 and\n"
	"                      bf16, every one that fits the device's free memory;\n"
	"                      kv_read GB/s (KV bytes / the kernels' time, CUDA events),\n"
	"                      copy GB/s (a device-to-device copy's bytes read and\n"
	"                      written / its time, the same run), their ratio, and the\n"
	"                      round trip through the daemon; --quick: 8k, 32k, 128k x\n"
	"                      8, 64 sequences x GQA 1, 8, bf16; --context (1024 2048\n"
	"                      4096 8192 16384 32768 65536 131072), --seqs (1 8 64\n"
	"                      256) and --gqa (1 4 8) keep only the rows with that value\n"
	"  overhead [--iters N] [--daemon PATH] [--json]\n"
	"                      batched NOP and ALLOC throughput through a kvpoold it\n"
	"                      starts, without and with the BPF accounting program\n"
	"                      (kvctl acct) attached (root)\n"
	"  capacity [--json] [--model NAME] [--budget-gib G] [--budget-mib M]\n"
	"           [--context L,...] [--block-size N] [--dtype bf16|f16|f32]\n"
	"           [--max-step-tokens S] [--rswa-prefix P]\n"
	"           [--layers PATTERN] [--kv-heads N] [--head-dim N]\n"
	"                      the most sequences of L tokens a KV budget holds, found\n"
	"                      by running the allocator in process: each reaches L by\n"
	"                      chunked prefill (S tokens an ALLOC, a COMMIT each, so\n"
	"                      windows drop as they go), tokens its own (no prefix\n"
	"                      shared), added until the pool is out of blocks;\n"
	"                      (a) every layer full attention, one group of all of\n"
	"                      them (an engine without a hybrid allocator); (b)\n"
	"                      kvpool's groups as vLLM forms them (each kind's layers\n"
	"                      in groups of the smallest kind's count, or the\n"
	"                      largest's when within 1.25x of it, as vLLM does, the\n"
	"                      last one padded); (c) the bound: budget / (sum over\n"
	"                      groups of\n"
	"                      cdiv(tokens its mask needs at L, block size) x bytes\n"
	"                      per block); a block is block_size x kv_heads x head_dim\n"
	"                      x 2 (K, V) x dtype bytes x layers per group, the pool\n"
	"                      budget / that blocks, the null block 0 among them; the\n"
	"                      mask at L (what token L reads): full L, swa:W W-1,\n"
	"                      rswa:W P + W-1, chunked:C L mod C, cyclic:W its ring\n"
	"                      W-1+S; presets llama3-8b, mistral-7b, gemma3-27b,\n"
	"                      gpt-oss-20b, rswa (default: all); --layers takes a\n"
	"                      model of one's own, \"full*10,swa:1024*52\" (kinds as\n"
	"                      kvctl's), of --kv-heads (8) and --head-dim (128);\n"
	"                      defaults: 64 GiB, L 8192,32768,131072, block size 16,\n"
	"                      bf16, S 2048, R-SWA prefix P 2048 tokens of the prompt\n"
	"  load [--json] [--engines N] [--workload NAME] [--wait spin|sleep|both]\n"
	"       [--seqs N] [--steps N] [--requests N] [--seed N]\n"
	"       [--daemon PATH | --socket PATH]\n"
	"                      engines' schedulers on one pool, allocation only: N\n"
	"                      processes (default 2) through a kvpoold it starts, or\n"
	"                      the one at PATH, each step one ring batch per engine\n"
	"                      (arrivals, prefill with the prefix cache, decode ALLOC\n"
	"                      and COMMIT, finish, preemption when the pool is short),\n"
	"                      next to the same schedules in process; ops/s, latency\n"
	"                      median/p99/p99.9 per operation, prefix hit rate, pool\n"
	"                      usage, preemptions; fails if a block is left in use.\n"
	"                      Workloads (default all): decode (64 sequences per\n"
	"                      engine, 512-token prompts sharing 256, 256 steps),\n"
	"                      shared-prefix (32, one of 4 2048-token system prompts\n"
	"                      by Zipf popularity, 128 steps), long-context (4, 32k\n"
	"                      prompts, swa+rswa, a pool that makes them preempt);\n"
	"                      --seqs, --steps, --requests (default 8 x seqs) scale\n"
	"                      them, per engine; wait (default both): spin, engines\n"
	"                      and daemon spin; sleep, both sleep at once\n"
	"  replay TRACE [--json] [--engines N] [--speed X] [--no-decode]\n"
	"         [--pool-tokens N] [--tier-host-tokens N] [--block-size N]\n"
	"         [--tier-disk-tokens N] [--tier-disk-path DIR] [--tier-policy P]\n"
	"         [--kv-bytes-per-token N] [--bystander]\n"
	"         [--groups \"G...\"] [--max-step-tokens S] [--snapshot-every N]\n"
	"         [--tier-remote URL | --redis-cluster M --tier-remote-tokens T]\n"
	"         [--tier-remote-timeout-ms MS] [--nodes N]\n"
	"         [--route round_robin | session | random --seed S]\n"
	"         [--daemon PATH | --socket PATH] [--restart-at F]\n"
	"                      a request trace in Mooncake's format (JSONL: timestamp\n"
	"                      ms, input_length, output_length, hash_ids, one id a\n"
	"                      512-token block) through a pool of its own on a kvpoold\n"
	"                      it starts, or the one at PATH: N engine processes\n"
	"                      (default 1) take the requests in turn, each opened\n"
	"                      with its prompt, allocated with the cache, its missed\n"
	"                      tokens' KV written and committed, its output decoded\n"
	"                      (unless --no-decode), closed; arrivals at the trace's\n"
	"                      times divided by X, else back to back; a request\n"
	"                      longer than the pool is not served (an error). One\n"
	"                      row: hit rate by tier (pool, host, disk) and in all,\n"
	"                      the ceiling (a block hits if any earlier request\n"
	"                      computed it), one LRU cache of the pool's and tier's\n"
	"                      summed size on the same trace, bytes copied each way,\n"
	"                      the evicted blocks the tier did not hold, by reason,\n"
	"                      ALLOC p50/p99 with and without promotion, seconds.\n"
	"                      Default pool 65536 tokens, no tier, blocks of 16\n"
	"                      tokens, 16 bytes of KV a token (f32, one kv head, one\n"
	"                      layer). A disk tier's file goes in DIR (default: a\n"
	"                      directory of the run's own under $TMPDIR, else\n"
	"                      /var/tmp) and is removed after, as the directory made\n"
	"                      for it is, on every exit; P: the tier's policy, lru\n"
	"                      (default) or\n"
	"                      second_sight; --bystander: a client of another pool\n"
	"                      times a NOP every 200 us meanwhile (p50/p99 in the row).\n"
	"                      --groups: the pool's groups (default full; \"full\n"
	"                      cyclic:1024\" for in-place windows, hit by window\n"
	"                      snapshots), every group's KV written; prompts are\n"
	"                      computed in steps of S tokens (default 2048, the\n"
	"                      pool's max_step_tokens); the row adds each group's\n"
	"                      blocks held (mean and most, sampled every 20 ms)\n"
	"                      and the window snapshots' blocks made, hit, evicted;\n"
	"                      --snapshot-every: the pool's snapshot_every;\n"
	"                      --tier-remote: the pool's tier_remote (redis://HOST:PORT):\n"
	"                      the row's hit_rate_remote, remote_bytes_in/_out and\n"
	"                      remote_round_p50_us/_p99_us (0 without it);\n"
	"                      --redis-cluster M: M Redis masters the run starts on\n"
	"                      loopback (1: one server; 3 and more: a cluster) as the\n"
	"                      cluster tier, their memory T tokens of KV (maxmemory,\n"
	"                      allkeys-lru, maxmemory-samples 10, from the bytes a\n"
	"                      block's key takes there, measured), stopped after;\n"
	"                      --tier-remote-timeout-ms: the pools'\n"
	"                      tier_remote_timeout_ms. --restart-at F: once a\n"
	"                      fraction F of the requests is served, the daemon\n"
	"                      restarts (kvctl daemon restart: its cache handed\n"
	"                      over); the engines connect again and serve the\n"
	"                      request they were on again (its hit the first try's);\n"
	"                      the row adds restart_s, the request to the next\n"
	"                      run's first hit, and its tier counters span both\n"
	"                      runs (one node only). --nodes N: N kvpoold,\n"
	"                      each a pool and its tier as above and --engines N\n"
	"                      engines, all on the one cluster tier; a request goes\n"
	"                      to node i mod N (round_robin, the default), where the\n"
	"                      earlier request its ids extend (longest) went, else\n"
	"                      i mod N (session), or at random (seeded). The row\n"
	"                      adds nodes, route, remote_timeouts and per_node (each\n"
	"                      node's hit_rate, hit_rate_pool, hit_rate_remote); one\n"
	"                      LRU then sums every node's pool and tier and T\n"
	"  tier-disk [--dir DIR] [--gib N] [--promotions N] [--json] [--daemon PATH]\n"
	"                      a pool's disk tier (a file of N GiB, default 10, in\n"
	"                      DIR, required, removed after): filled with prompts of\n"
	"                      64 blocks of 256 KiB; N ALLOCs (default 12) whose\n"
	"                      prompt comes up whole from the disk, MB/s beside\n"
	"                      fio's io_uring O_DIRECT random reads of 256 KiB at\n"
	"                      depth 32 and 64 in DIR (0 without fio); the daemon\n"
	"                      restarted\n"
	"                      and the pool made again: seconds to a stored prompt's\n"
	"                      first hit\n"
	"  restart [--blocks N] [--tier-blocks N] [--json] [--daemon PATH]\n"
	"                      a planned restart (kvctl daemon restart) of a full\n"
	"                      cache: a pool of N blocks (default 65536) of 16 tokens\n"
	"                      (512 bytes of KV each) and a host tier of T blocks\n"
	"                      (default 4194304) filled by prompts of 1024 blocks;\n"
	"                      milliseconds from the request to the next run's answer\n"
	"                      and to its first LOOKUP hit, the daemon's parts (drain,\n"
	"                      state, teardown, exec, restore), and whether 64 sampled\n"
	"                      lookups and the cached and held counts are as before\n"
	"  events [--seconds N] [--steps N] [--rounds N] [--json] [--daemon PATH]\n"
	"                      a pool's KV events (kv_events): commits of 1 and of\n"
	"                      64 blocks as fast as one client makes them for N\n"
	"                      seconds (default 3) each, a subscriber reading every\n"
	"                      batch: commits/s, blocks announced a second, batches\n"
	"                      received and dropped; then decode steps (an ALLOC of\n"
	"                      one token and a COMMIT) of 32 sequences, N steps\n"
	"                      (default 64) a round, on two pools alike but for\n"
	"                      kv_events, turn about for N rounds (default 16): the\n"
	"                      median ns a step on each and how much slower with\n"
	"                      events\n"
	"\n"
	"Every benchmark's --json prints JSON Lines: one object a row, units in the\n"
	"field names, \"cores\" (the online cores) in each.\n"
	"\n"
	"  -h, --help          show this help and exit\n"
	"  -V, --version       print \"kvbench VERSION\" and exit\n";

int bench_usage_error(const char *name, const char *fmt, const char *arg)
{
	fprintf(stderr, "kvbench %s: ", name);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'kvbench --help' for more information.\n");
	return 2;
}

void bench_print_machine(void)
{
	char line[256], model[256] = "unknown";
	FILE *f = fopen("/proc/cpuinfo", "r");

	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (!strncmp(line, "model name", 10) && colon) {
			snprintf(model, sizeof(model), "%s", colon + 2);
			model[strcspn(model, "\n")] = '\0';
			break;
		}
	}
	if (f)
		fclose(f);
	printf("# machine: %ld online cores, %s\n", sysconf(_SC_NPROCESSORS_ONLN), model);
}

json_object *bench_json_fixed(double v, int decimals)
{
	char text[32];

	snprintf(text, sizeof(text), "%.*f", decimals, v);
	return json_object_new_double_s(v, text);
}

int bench_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

json_object *bench_json_row(void)
{
	json_object *o = json_object_new_object();

	if (o)
		json_object_object_add(o, "cores", json_object_new_int64(sysconf(_SC_NPROCESSORS_ONLN)));
	return o;
}

int bench_json_line(json_object *o)
{
	const char *text = o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : NULL;

	if (text)
		puts(text);
	json_object_put(o);
	return text ? 0 : -ENOMEM;
}

int main(int argc, char **argv)
{
	/* Every benchmark's options are in the one help text. */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage, stdout);
			return 0;
		}
		if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version")) {
			puts("kvbench " KVPOOL_VERSION);
			return 0;
		}
	}
	if (argc >= 2 && !strcmp(argv[1], "core"))
		return bench_core(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "limits"))
		return bench_limits(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "rtt"))
		return bench_rtt(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "attend"))
		return bench_attend(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "overhead"))
		return bench_overhead(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "capacity"))
		return bench_capacity(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "load"))
		return bench_load(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "replay"))
		return bench_replay(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "tier-disk"))
		return bench_tier_disk(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "restart"))
		return bench_restart(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "events"))
		return bench_events(argc - 1, argv + 1);
	fprintf(stderr, argc < 2 ? "kvbench: no benchmark named\n" : "kvbench: unknown benchmark '%s'\n",
		argv[1]);
	fputs("Try 'kvbench --help' for more information.\n", stderr);
	return 2;
}
