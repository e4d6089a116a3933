#!/usr/bin/env bash
# The bpftrace scripts in tools/bpftrace/ against a real kvpoold, each checked
# against a workload whose numbers are known (and against kvctl stats):
#  - alloc_latency.bt: one engine (no model, 8 decoded tokens) makes 9 ALLOCs;
#  - blocks_by_client.bt: while the engine holds its sequence, its line shows
#    the blocks kvctl stats reports for it, and it goes when the engine is
#    killed (the teardown's last blocks_held must not bring it back);
#  - evictions.bt: tests/bpf/evictions.trace through kvtrace: 1 reuse, 2 evict,
#    4 reset, all charged to the kvtrace client;
#  - slow_attends.bt: one engine with a 2-layer model, 8 decoded tokens makes
#    (1 + 8) x 2 = 18 ATTENDs of one sequence each: the top 10, slowest first;
#  - tier_promote.bt: an engine's blocks evicted into a pool's tier and hit
#    again: one ALLOC waits for the tier, stores and loads as kvctl stats.
# Usage: test_bpftrace.sh KVPOOLD KVCTL (kvengine and kvtrace: next to KVCTL,
# or $KVENGINE and $KVTRACE).
# Exit 77 (skipped) without root, bpftrace or jq, or when bpftrace cannot run BPF.
set -u
cd "$(dirname "$0")/../.." || exit 1
kvpoold=${1:-build/bin/kvpoold} kvctl=${2:-build/bin/kvctl}
bindir=$(dirname "$kvctl")
kvengine=${KVENGINE:-$bindir/kvengine} kvtrace=${KVTRACE:-$bindir/kvtrace}

skip() { echo "$*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || skip "not root: bpftrace needs root"
command -v bpftrace >/dev/null || skip "bpftrace is not installed"
command -v jq >/dev/null || skip "jq is not installed"
for b in "$kvpoold" "$kvctl" "$kvengine" "$kvtrace"; do
	[ -x "$b" ] || fail "$b is not built"
done
if ! out=$(timeout 20 bpftrace -e 'BEGIN { exit(); }' 2>&1); then
	skip "bpftrace cannot run BPF here: $(tail -n 1 <<<"$out")"
fi

dir=$(mktemp -d)
sock=$dir/kvpool.sock
daemon_pid='' bt_pid=''
cleanup() {
	[ -n "$bt_pid" ] && kill -KILL "$bt_pid" 2>/dev/null && wait "$bt_pid" 2>/dev/null
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT

"$kvpoold" --socket "$sock" 2>"$dir/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || fail "kvpoold did not create $sock"
"$kvctl" --socket "$sock" pool create p blocks=64 block_size=4 groups=full ||
	fail "kvctl pool create p"
"$kvctl" --socket "$sock" pool create m blocks=64 block_size=4 groups=full kv_heads=2 \
	head_dim=32 layers_per_group=2 || fail "kvctl pool create m"

# Starts tools/bpftrace/$1 on the daemon; returns once its BEGIN has printed (probes attached).
start_bt() {
	bt_out=$dir/${1%.bt}.out
	bpftrace -p "$daemon_pid" "tools/bpftrace/$1" >"$bt_out" 2>&1 &
	bt_pid=$!
	for _ in $(seq 300); do
		grep -qs "Hit Ctrl-C" "$bt_out" && return 0
		kill -0 "$bt_pid" 2>/dev/null || break
		sleep 0.05
	done
	cat "$bt_out"
	fail "$1 did not start"
}
# Stops it with SIGINT, as Ctrl-C would: its END and map printing follow. bpftrace can miss a
# SIGINT that lands just before it blocks in epoll_wait (its handler only sets a flag, then nothing
# wakes it), so the signal is repeated each second, for at most 30 s, until it has exited.
stop_bt() {
	local state
	for _ in $(seq 30); do
		kill -INT "$bt_pid" 2>/dev/null
		for _ in $(seq 20); do
			state=$(awk '{ print $3 }' "/proc/$bt_pid/stat" 2>/dev/null)
			[ -z "$state" ] || [ "$state" = Z ] && break 2
			sleep 0.05
		done
	done
	wait "$bt_pid" || { cat "$bt_out"; fail "bpftrace exited $?"; }
	bt_pid=
}
# An engine on pool $1 (more kvengine options after); sets engine_pid, output in $dir/engine.out.
start_engine() {
	local pool=$1
	shift
	"$kvengine" --socket "$sock" --pool "$pool" --system 16 --question 8 --decode 8 "$@" \
		>"$dir/engine.out" 2>&1 &
	engine_pid=$!
}
client_of() { # the client id kvctl stats gives to pid $1
	"$kvctl" --socket "$sock" stats --json | jq --argjson pid "$1" '.clients[] | select(.pid == $pid) | .client_id'
}

# alloc_latency.bt: 1 ALLOC for the prompt + 1 per decoded token.
start_bt alloc_latency.bt
start_engine p
wait "$engine_pid" || { cat "$dir/engine.out"; fail "engine"; }
stop_bt
grep -q '^@allocs: 9$' "$bt_out" || { cat "$bt_out"; fail "alloc_latency.bt: not 9 ALLOCs"; }
grep -q '^@alloc_failed' "$bt_out" && { cat "$bt_out"; fail "alloc_latency.bt: failed ALLOCs"; }
sum=$(awk '/^@alloc_ns:/ { h = 1; next } h && /^\[/ { sub(/^[^)]*\)[ \t]*/, ""); s += $1 } /^$/ { h = 0 } END { print s + 0 }' "$bt_out")
[ "$sum" = 9 ] || { cat "$bt_out"; fail "alloc_latency.bt: the histogram counts $sum ALLOCs, not 9"; }
echo "alloc_latency.bt: 9 ALLOCs, histogram total 9"

# blocks_by_client.bt: the engine's line while it holds = kvctl stats; gone after.
start_bt blocks_by_client.bt
start_engine p --hold-ms 2500
for _ in $(seq 200); do grep -qs decoded "$dir/engine.out" && break; sleep 0.01; done
grep -qs decoded "$dir/engine.out" || { cat "$dir/engine.out"; fail "engine did not decode"; }
"$kvctl" --socket "$sock" stats --json >"$dir/stats.json"
id=$(jq --argjson pid "$engine_pid" '.clients[] | select(.pid == $pid) | .client_id' "$dir/stats.json")
held=$(jq --argjson pid "$engine_pid" '.clients[] | select(.pid == $pid) | .blocks_held' "$dir/stats.json")
[ "${held:-0}" -gt 0 ] || fail "kvctl stats: the engine holds no blocks ('$held')"
lines=$(wc -l <"$bt_out")
for _ in $(seq 60); do # the next per-second print after kvctl stats
	[ "$(tail -n +$((lines + 1)) "$bt_out" | grep -c "blocks held by client")" -ge 2 ] && break
	sleep 0.05
done
got=$(tail -n +$((lines + 1)) "$bt_out" | grep "^@blocks\[$id\]: " | tail -n 1)
[ "$got" = "@blocks[$id]: $held" ] || { cat "$bt_out"; fail "blocks_by_client.bt: '$got', kvctl stats: $held"; }
disown "$engine_pid" # killed: no "Killed" job notice; the two prints below outlast its teardown
kill -KILL "$engine_pid"
lines=$(wc -l <"$bt_out")
for _ in $(seq 60); do
	[ "$(tail -n +$((lines + 1)) "$bt_out" | grep -c "blocks held by client")" -ge 2 ] && break
	sleep 0.05
done
stop_bt
tail -n +$((lines + 1)) "$bt_out" | grep -q "^@blocks\[$id\]" &&
	{ cat "$bt_out"; fail "blocks_by_client.bt: client $id still listed after it left"; }
echo "blocks_by_client.bt: client $id holds $held blocks = kvctl stats, then leaves"

# evictions.bt: the trace's known evictions, by the kvtrace client.
start_bt evictions.bt
"$kvtrace" --socket "$sock" tests/bpf/evictions.trace >"$dir/trace.out" 2>&1 &
trace_pid=$!
wait "$trace_pid" || { cat "$dir/trace.out"; fail "kvtrace evictions.trace"; }
stop_bt
ids=$(grep -o '^@evictions\[[a-z]*, [0-9]*\]' "$bt_out" | sed 's/.*, \([0-9]*\)\]/\1/' | sort -u)
[ "$(wc -w <<<"$ids")" = 1 ] || { cat "$bt_out"; fail "evictions.bt: clients '$ids', want one"; }
for ev in reuse:1 evict:2 reset:4; do
	grep -q "^@evictions\[${ev%:*}, $ids\]: ${ev#*:}$" "$bt_out" ||
		{ cat "$bt_out"; fail "evictions.bt: want ${ev#*:} ${ev%:*} by client $ids"; }
	grep -q "^@evictions_by_cause\[${ev%:*}\]: ${ev#*:}$" "$bt_out" ||
		{ cat "$bt_out"; fail "evictions.bt: want ${ev#*:} ${ev%:*} in all"; }
done
echo "evictions.bt: client $ids: reuse 1, evict 2, reset 4"

# slow_attends.bt: 18 ATTENDs of one sequence; the top 10, slowest first.
start_bt slow_attends.bt
start_engine m --hold-ms 300
for _ in $(seq 300); do grep -qs decoded "$dir/engine.out" && break; sleep 0.01; done
id=$(client_of "$engine_pid")
[ -n "$id" ] || { cat "$dir/engine.out"; fail "engine on pool m: no client id"; }
wait "$engine_pid" || { cat "$dir/engine.out"; fail "engine on pool m"; }
stop_bt
grep -q '^@attends: 18$' "$bt_out" || { cat "$bt_out"; fail "slow_attends.bt: not 18 ATTENDs"; }
awk -v id="$id" '
	/^slowest ATTENDs:/ { t = 1; next }
	t && $1 == "RANK" { next }
	t && NF == 0 { t = 0 }
	t && NF == 5 {
		n++
		if ($1 != n) { print "rank " $1 " at row " n; bad = 1 }
		if (n > 1 && $2 > prev) { print "rank " n " slower than rank " n - 1; bad = 1 }
		if ($3 != id) { print "client " $3 ", not " id; bad = 1 }
		if ($4 <= 0) { print "no bytes at rank " n; bad = 1 }
		if ($5 != 1) { print "seqs " $5 ", not 1"; bad = 1 }
		prev = $2
	}
	END { if (n != 10) { print n " rows, not 10"; bad = 1 } exit bad }' "$bt_out" ||
	{ cat "$bt_out"; fail "slow_attends.bt: bad top 10"; }
echo "slow_attends.bt: 18 ATTENDs, top 10 in order, client $id, 1 sequence each"

# tier_promote.bt: an engine's prompt evicted from a 4-block pool into its tier by another
# engine's, then hit by a third like the first: one ALLOC waits for the tier, and the blocks
# stored and loaded are those kvctl stats counts.
"$kvctl" --socket "$sock" pool create tp blocks=5 block_size=16 groups=full kv_heads=2 \
	head_dim=32 layers_per_group=2 tier_host_bytes=1048576 >/dev/null || fail "kvctl pool create tp"
start_bt tier_promote.bt
for run in "--seed 1" "--system 0 --question 60 --decode 1 --seed 7" "--seed 1"; do
	# shellcheck disable=SC2086 # the options are words
	start_engine tp $run
	wait "$engine_pid" || { cat "$dir/engine.out"; fail "engine on pool tp ($run)"; }
	"$kvctl" --socket "$sock" pool sync tp >/dev/null || fail "kvctl pool sync tp"
done
stop_bt
"$kvctl" --socket "$sock" stats --json >"$dir/stats.json"
stored=$(jq '.pools[] | select(.name == "tp") | .tier.stored' "$dir/stats.json")
promoted=$(jq '.pools[] | select(.name == "tp") | .tier.promoted' "$dir/stats.json")
[ "${promoted:-0}" -gt 0 ] || { cat "$dir/stats.json"; fail "tier: nothing promoted"; }
grep -q "^@stored\[tp\]: $stored$" "$bt_out" ||
	{ cat "$bt_out"; fail "tier_promote.bt: stored, kvctl stats says $stored"; }
grep -q "^@loaded\[tp\]: $promoted$" "$bt_out" ||
	{ cat "$bt_out"; fail "tier_promote.bt: loaded, kvctl stats says $promoted"; }
sum=$(awk '/^@promote_ns:/ { h = 1; next } h && /^\[/ { sub(/^[^)]*\)[ \t]*/, ""); s += $1 } /^$/ { h = 0 } END { print s + 0 }' "$bt_out")
[ "$sum" = 1 ] || { cat "$bt_out"; fail "tier_promote.bt: $sum promotions, not 1"; }
echo "tier_promote.bt: 1 ALLOC waited for the tier; $stored blocks stored, $promoted loaded = kvctl stats"
echo "ok"
