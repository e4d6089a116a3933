#!/usr/bin/env bash
# Runs one libFuzzer fuzzer of tests/fuzz/ for a while and says how it went.
#
#   tests/fuzz/run.sh NAME SECONDS   NAME: fuzz_session, fuzz_config, fuzz_kvtrace
#                                    (or session, config, kvtrace)
#   tests/fuzz/run.sh --check        is clang's libFuzzer runtime there? (exit 0 or 77)
#
# Builds build/fuzz/NAME if needed, then fuzzes with the corpus in
# build/fuzz/corpus/NAME (kept between runs) seeded from tests/fuzz/corpus/NAME,
# and tests/fuzz/NAME.dict when there is one. Prints one line:
#   fuzz_session: 123456 execs in 30 s (4115/s), 0 crashes
# Exit 0; 1 on a crash, leak, timeout or out-of-memory (the report's tail and
# the reproducer under build/fuzz/artifacts/ follow the line); 2 for a usage or
# build error; 77 when clang or its libFuzzer runtime is missing (the last line
# says which). The whole log is build/fuzz/logs/NAME.log. FUZZ_CC (default
# clang) is the compiler; FUZZ_ARGS adds libFuzzer flags.
set -u
cd "$(dirname "$0")/../.." || exit 2
FUZZ_CC=${FUZZ_CC:-clang}

check_runtime() {
	local tmp rc=0

	if ! command -v "$FUZZ_CC" >/dev/null; then
		echo "$FUZZ_CC is not installed"
		return 77
	fi
	tmp=$(mktemp -d) || return 2
	echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return (void)d, (int)n * 0; }' \
		>"$tmp/probe.c"
	if ! "$FUZZ_CC" -fsanitize=fuzzer,address,undefined "$tmp/probe.c" -o "$tmp/probe" \
		2>"$tmp/err"; then
		echo "$FUZZ_CC cannot link -fsanitize=fuzzer (its libFuzzer runtime, Debian's" \
			"libclang-rt-dev, is missing?): $(grep -m1 -i error "$tmp/err")"
		rc=77
	fi
	rm -rf "$tmp"
	return $rc
}

if [ "${1:-}" = --check ]; then
	check_runtime
	exit $?
fi
if [ $# != 2 ] || ! [[ $2 =~ ^[0-9]+$ ]] || [ "$2" = 0 ]; then
	echo "usage: tests/fuzz/run.sh NAME SECONDS" >&2
	exit 2
fi
short=${1#fuzz_}
name=fuzz_$short
secs=$2
if [ ! -f "tests/fuzz/$name.c" ]; then
	echo "$name: no such fuzzer (tests/fuzz/$name.c)" >&2
	exit 2
fi
check_runtime || exit $?

mkdir -p build/fuzz/logs build/fuzz/artifacts "build/fuzz/corpus/$short"
log=build/fuzz/logs/$name.log
if ! make -s --no-print-directory "build/fuzz/$name" >"$log" 2>&1; then
	echo "$name: build failed"
	tail -n 30 "$log"
	exit 2
fi

args=(-max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
      -close_fd_mask=3 -artifact_prefix="build/fuzz/artifacts/$name-")
[ -f "tests/fuzz/$short.dict" ] && args+=(-dict="tests/fuzz/$short.dict")
seeds=()
[ -d "tests/fuzz/corpus/$short" ] && seeds=("tests/fuzz/corpus/$short")
marker=build/fuzz/logs/$name.start
touch "$marker"
start=$(date +%s)
# ${FUZZ_ARGS} unquoted: it is a list of flags.
# shellcheck disable=SC2086
timeout -k 10 $((secs + 300)) "build/fuzz/$name" "${args[@]}" ${FUZZ_ARGS:-} \
	"build/fuzz/corpus/$short" "${seeds[@]}" >>"$log" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
[ $elapsed -gt 0 ] || elapsed=1

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
if [ -z "$execs" ]; then
	# No final stats (killed): the last progress line's count.
	execs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
fi
execs=${execs:-0}
mapfile -t found < <(find build/fuzz/artifacts -newer "$marker" -type f \
	\( -name "$name-crash-*" -o -name "$name-leak-*" -o -name "$name-timeout-*" \
	-o -name "$name-oom-*" \) 2>/dev/null)
crashes=${#found[@]}
[ $rc != 0 ] && [ "$crashes" = 0 ] && crashes=1

echo "$name: $execs execs in $elapsed s ($((execs / elapsed))/s), $crashes crashes"
if [ $rc != 0 ]; then
	[ $rc = 124 ] && echo "$name: killed after $((secs + 300)) s"
	grep -v '^#[0-9]' "$log" | tail -n 60 | sed 's/^/  /'
	for f in "${found[@]}"; do
		echo "$name: reproduce with: build/fuzz/$name $f"
	done
	echo "$name: log: $log"
	exit 1
fi
exit 0
