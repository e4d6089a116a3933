#!/usr/bin/env bash
# kvbench load: every workload in both wait modes, through a daemon it starts and in process,
# as JSON Lines: every row has its fields, none an error, no block is left in use, long-context
# preempts in process and decode never does, decode and shared-prefix hit the prefix cache. Then a run on a
# daemon of our own through --socket, and usage errors exit 2.
# $KVBENCH (default build/bin/kvbench); $KVPOOLD (default: the one kvbench finds, build/bin/kvpoold
# in a build tree) is the daemon kvbench starts, and the one started here for --socket.
set -eu
cd "$(dirname "$0")/.."

kvbench=${KVBENCH:-build/bin/kvbench}
kvpoold=${KVPOOLD:-build/bin/kvpoold}
command -v jq >/dev/null || { echo "jq is not installed"; exit 77; }
dir=$(mktemp -d)
daemon=
trap '[ -z "$daemon" ] || kill "$daemon" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
failures=0

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# check FILE JQ-FILTER WHAT: every row must pass the filter.
check() {
	local bad
	if ! bad=$(jq -c "select(($2) | not) | {workload, wait, mode, error}" "$1" 2>&1); then
		fail "$3: jq: $bad"
	elif [ -n "$bad" ]; then
		fail "$3:"$'\n'"$bad"
	fi
}

# shellcheck disable=SC2016 # $row and $op are jq's
fields='has("workload") and has("wait") and has("engines") and has("mode") and has("cores")
	and has("ops_per_s") and has("tokens_per_s") and has("prefix_hit_rate")
	and has("pool_peak_usage") and has("preemptions") and has("blocks_leaked")
	and has("scheduler_bound") and has("step_p999_ns")
	and (. as $row | all("open", "lookup", "append", "alloc", "commit", "close";
		. as $op | $row | has($op + "_median_ns") and has($op + "_p99_ns") and has($op + "_p999_ns")))'

rc=0
"$kvbench" load --json --daemon "$kvpoold" >"$dir/all.json" 2>"$dir/all.err" || rc=$?
[ "$rc" = 0 ] || fail "kvbench load exited $rc: $(cat "$dir/all.err")"
rows=$(jq -s 'length' "$dir/all.json")
[ "$rows" = 12 ] || fail "$rows rows, not 12 (3 workloads x 2 waits x daemon, in_process)"
for w in decode shared-prefix long-context; do
	for wait in spin sleep; do
		for mode in daemon in_process; do
			n=$(jq -s --arg w "$w" --arg t "$wait" --arg m "$mode" \
				'map(select(.workload == $w and .wait == $t and .mode == $m)) | length' \
				"$dir/all.json")
			[ "$n" = 1 ] || fail "$n rows for $w, $wait, $mode"
		done
	done
done
check "$dir/all.json" "$fields" "rows without every field"
check "$dir/all.json" 'has("error") | not' "rows with an error"
check "$dir/all.json" '.blocks_leaked == 0' "blocks left in use"
check "$dir/all.json" '.engines == 2 and .cores >= 1 and .ops_per_s > 0 and .alloc_count > 0' \
	"rows without figures"
# In process the engines' steps interleave the same way every run: there it must preempt. Through
# the daemon it does only while both engines' long prompts overlap, which a busy machine's
# scheduler decides: not asserted.
check "$dir/all.json" '.workload != "long-context" or .mode != "in_process" or .preemptions > 0' \
	"long-context without preemption in process"
check "$dir/all.json" '.workload != "decode" or .preemptions == 0' "decode with preemptions"
check "$dir/all.json" '.workload == "long-context" or .prefix_hit_rate > 0' \
	"decode or shared-prefix without a prefix hit"
check "$dir/all.json" '.scheduler_bound == (.mode == "daemon" and .wait == "spin" and .cores < 3)' \
	"scheduler_bound wrong"

# A daemon of our own, through --socket: the pool is kvbench's (owned), gone after it.
sock=$dir/kvpool.sock
"$kvpoold" -q --socket "$sock" --spin-us 0 2>"$dir/daemon.err" &
daemon=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
rc=0
"$kvbench" load --json --socket "$sock" --workload long-context --wait sleep --engines 3 --seqs 2 \
	--steps 16 >"$dir/socket.json" 2>"$dir/socket.err" || rc=$?
[ "$rc" = 0 ] || fail "kvbench load --socket exited $rc: $(cat "$dir/socket.err")"
[ "$(jq -s 'length' "$dir/socket.json")" = 2 ] || fail "--socket: not 2 rows"
check "$dir/socket.json" '(has("error") | not) and .blocks_leaked == 0 and .engines == 3' \
	"--socket rows"
kill "$daemon"
wait "$daemon" || fail "kvpoold exited $? after the --socket run: $(cat "$dir/daemon.err")"
daemon=

for args in "--wait never" "--engines 0" "--workload none" "--seqs" "--bogus"; do
	rc=0
	# shellcheck disable=SC2086
	"$kvbench" load $args >/dev/null 2>&1 || rc=$?
	[ "$rc" = 2 ] || fail "kvbench load $args exited $rc, not 2"
done

if [ "$failures" -gt 0 ]; then
	echo "bench_load: $failures failures"
	exit 1
fi
echo "bench_load: $(jq -s 'length' "$dir/all.json") rows, every workload in both wait modes," \
	"no block left in use"
