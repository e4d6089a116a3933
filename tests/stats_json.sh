#!/usr/bin/env bash
# A fixed workload through a real kvpoold; `kvctl stats --json` and
# `kvctl clients --json` must show exactly its counters, and the Prometheus
# output must pass promtool. $KVPOOL_EVENT_LOOP, when set, is the daemon's
# --event-loop, and the one the stats must report.
# Usage: stats_json.sh KVPOOLD KVCTL KVENGINE
set -u
kvpoold=$1 kvctl=$2 kvengine=$3
for tool in jq promtool; do
	command -v $tool >/dev/null || { echo "$tool is not installed"; exit 77; }
done
dir=$(mktemp -d)
sock=$dir/kvpool.sock
trap 'kill $daemon 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
"$kvpoold" --socket "$sock" ${KVPOOL_EVENT_LOOP:+--event-loop "$KVPOOL_EVENT_LOOP"} 2>"$dir/log" &
daemon=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
failures=0
expect() { # expect JQ-FILTER VALUE FILE
	local got
	got=$(jq -c "$1" "$3")
	if [ "$got" != "$2" ]; then
		echo "$1: got $got, expected $2"
		failures=$((failures + 1))
	fi
}

"$kvctl" --socket "$sock" pool create p blocks=64 block_size=4 groups=full || exit 1
# Each engine: SEQ_OPEN, LOOKUP, ALLOC, COMMIT, then APPEND + ALLOC + COMMIT per decoded token.
# A: 16 system + 8 own tokens, 4 decoded: 7 blocks, all hashed when it commits 28 tokens.
"$kvengine" --socket "$sock" --pool p --name A --seed 1 --system 16 --question 8 --decode 4 >/dev/null || exit 1
# B hits A's 4 system blocks (16 tokens) and holds its sequence while we look.
"$kvengine" --socket "$sock" --pool p --name B --seed 2 --system 16 --question 8 --decode 4 \
	--hold-ms 3000 >"$dir/b.out" &
b=$!
for _ in $(seq 200); do grep -q decoded "$dir/b.out" && break; sleep 0.02; done

"$kvctl" --socket "$sock" stats --json >"$dir/stats.json" || exit 1
"$kvctl" --socket "$sock" clients --json >"$dir/clients.json" || exit 1
"$kvctl" --socket "$sock" stats --prometheus >"$dir/metrics.txt" || exit 1

expect '.pools | length' 1 "$dir/stats.json"
expect '.pools[0] | [.name, .block_size, .blocks_total, .blocks_free, .blocks_used, .blocks_cached]' \
	'["p",4,64,56,7,10]' "$dir/stats.json"
expect '.pools[0].usage * 63 | round' 7 "$dir/stats.json"
expect '.pools[0].prefix_cache | [.queries_tokens, .hits_tokens, .lookup_queries_tokens, .lookup_hits_tokens]' \
	'[48,16,48,16]' "$dir/stats.json"
expect '.pools[0].evictions | [.reuse, .evict, .reset]' '[0,0,0]' "$dir/stats.json"
expect '.pools[0] | [.nospace, .sequences, .clients]' '[0,1,1]' "$dir/stats.json"
expect '.pools[0].groups[0] | [.kind, .blocks_held, .window_drops]' '["full",7,0]' "$dir/stats.json"
expect '.operations | [.SEQ_OPEN.count, .LOOKUP.count, .ALLOC.count, .COMMIT.count, .APPEND_TOKENS.count, .SEQ_CLOSE.count, .POOL_CREATE.count]' \
	'[2,2,10,10,8,1,1]' "$dir/stats.json"
expect '.operations.ALLOC.errors' 0 "$dir/stats.json"
# Connected: A and B; A is gone. kvctl (pool create, stats) is a monitor: counted apart, never listed.
expect '[.clients_connected, .clients_disconnected, .clients_killed]' '[2,1,0]' "$dir/stats.json"
expect '.monitors' 1 "$dir/stats.json"
expect '[.clients[] | select(.pool == "p") | {sequences, blocks_held, ops}]' \
	'[{"sequences":1,"blocks_held":7,"ops":16}]' "$dir/clients.json"
expect '.clients | length' 1 "$dir/clients.json"
expect '.monitors' 1 "$dir/clients.json"
loop=$(sed -n 's/^kvpoold: event loop: \([a-z_]*\).*/\1/p' "$dir/log")
[ -n "$loop" ] || { echo "the daemon did not log its event loop"; failures=$((failures + 1)); }
[ -z "${KVPOOL_EVENT_LOOP:-}" ] || [ "$loop" = "$KVPOOL_EVENT_LOOP" ] ||
	{ echo "event loop $loop, asked for $KVPOOL_EVENT_LOOP"; failures=$((failures + 1)); }
expect '.event_loop' "\"$loop\"" "$dir/stats.json"

if ! promtool check metrics <"$dir/metrics.txt" >"$dir/promtool.out" 2>&1; then
	echo "promtool check metrics failed:"
	cat "$dir/promtool.out"
	failures=$((failures + 1))
fi
grep -q '^kvpool_prefix_cache_hits_tokens_total{pool="p"} 16$' "$dir/metrics.txt" ||
	{ echo "metrics: prefix hits not 16"; failures=$((failures + 1)); }
grep -q '^kvpool_operation_duration_seconds_count{op="ALLOC"} 10$' "$dir/metrics.txt" ||
	{ echo "metrics: ALLOC histogram count not 10"; failures=$((failures + 1)); }
grep -qx 'kvpool_monitors 1' "$dir/metrics.txt" ||
	{ echo "metrics: kvpool_monitors not 1"; failures=$((failures + 1)); }
grep -qx "kvpool_info{event_loop=\"$loop\",abi=\"2\"} 1" "$dir/metrics.txt" ||
	{ echo "metrics: no kvpool_info{event_loop=\"$loop\",...} 1"; failures=$((failures + 1)); }

wait $b || { echo "engine B failed"; failures=$((failures + 1)); }
kill -TERM $daemon
wait $daemon || { echo "kvpoold did not exit 0"; failures=$((failures + 1)); }
[ "$failures" -eq 0 ]
