#!/usr/bin/env bash
# kvctl acct against a real kvpoold: the BPF accounting from the USDT probes
# must agree with the daemon's own counters.
#  - two engines (kvengine, no model) hold their sequences: for each, ops and
#    blocks_held from `kvctl acct --json` equal `kvctl stats --json` exactly;
#  - once they are gone: acct shows them disconnected, holding 0 blocks, one op
#    more (their SEQ_CLOSE), and block-seconds of about blocks x hold time;
#  - a kvtrace replay with known evictions (tests/bpf/evictions.trace): 1 reuse,
#    2 evict, 4 reset, charged to the kvtrace client;
#  - an engine killed with its sequence open: gone, holding 0 blocks.
# Usage: test_acct.sh KVPOOLD KVCTL (kvengine and kvtrace: next to KVCTL,
# or $KVENGINE and $KVTRACE).
# Exit 77 (skipped) without root, jq, or a kernel that can run BPF on uprobes.
set -u
cd "$(dirname "$0")/../.." || exit 1
kvpoold=${1:-build/bin/kvpoold} kvctl=${2:-build/bin/kvctl}
bindir=$(dirname "$kvctl")
kvengine=${KVENGINE:-$bindir/kvengine} kvtrace=${KVTRACE:-$bindir/kvtrace}
hold_ms=1000

skip() { echo "$*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || skip "not root: kvctl acct needs root for BPF and uprobes"
command -v jq >/dev/null || skip "jq is not installed"
for b in "$kvpoold" "$kvctl" "$kvengine" "$kvtrace"; do
	[ -x "$b" ] || fail "$b is not built"
done

dir=$(mktemp -d)
sock=$dir/kvpool.sock
daemon_pid='' acct_pid='' victim=''
cleanup() {
	[ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
	[ -n "$acct_pid" ] && kill "$acct_pid" 2>/dev/null
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT

"$kvpoold" --socket "$sock" 2>"$dir/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || fail "kvpoold did not create $sock"
"$kvctl" --socket "$sock" pool create p blocks=64 block_size=4 groups=full ||
	fail "kvctl pool create"

# Attach; the first report means the probes are attached. The daemon's pid comes from the socket.
"$kvctl" --socket "$sock" acct --json --interval 0.1 --count 150 >"$dir/acct.json" 2>"$dir/acct.err" &
acct_pid=$!
for _ in $(seq 200); do
	[ -s "$dir/acct.json" ] && break
	if ! kill -0 "$acct_pid" 2>/dev/null; then
		wait "$acct_pid"
		err=$(tail -n 1 "$dir/acct.err")
		case $err in
		*"needs root"* | *"no uprobe events"* | *"without BPF"* | *"not allowed"*) skip "$err" ;;
		esac
		cat "$dir/acct.err"
		fail "kvctl acct exited before its first report"
	fi
	sleep 0.05
done
[ -s "$dir/acct.json" ] || fail "no report from kvctl acct within 10 s"

# Waits until the acct output has $1 more lines than now.
await_reports() {
	local want=$(($(wc -l <"$dir/acct.json") + $1))
	for _ in $(seq 100); do
		[ "$(wc -l <"$dir/acct.json")" -ge "$want" ] && return 0
		sleep 0.05
	done
	fail "kvctl acct stopped reporting"
}

# Two engines; B shares A's 16-token system prompt. Both hold their sequence for hold_ms.
engines=()
for name in A B; do
	"$kvengine" --socket "$sock" --pool p --name "$name" --seed "${#engines[@]}" --system 16 \
		--question 8 --decode 8 --hold-ms "$hold_ms" >"$dir/$name.out" 2>&1 &
	engines+=($!)
done
for name in A B; do
	for _ in $(seq 200); do grep -qs decoded "$dir/$name.out" && break; sleep 0.01; done
	grep -qs decoded "$dir/$name.out" || { cat "$dir/$name.out"; fail "engine $name did not decode"; }
done
# Both hold now, idle: the daemon's counters and the BPF ones must be equal.
"$kvctl" --socket "$sock" stats --json >"$dir/stats.json" || fail "kvctl stats"
await_reports 2
tail -n 1 "$dir/acct.json" >"$dir/holding.json"
checked=0 ids=()
declare -A ops held
for pid in "${engines[@]}"; do
	daemon_row=$(jq -c --argjson pid "$pid" '.clients[] | select(.pid == $pid)' "$dir/stats.json")
	[ -n "$daemon_row" ] || fail "engine pid $pid missing from kvctl stats"
	id=$(jq '.client_id' <<<"$daemon_row")
	acct_row=$(jq -c --argjson id "$id" '.clients[] | select(.client_id == $id)' "$dir/holding.json")
	[ -n "$acct_row" ] || fail "client $id (pid $pid) missing from kvctl acct: $(cat "$dir/holding.json")"
	for f in ops blocks_held; do
		d=$(jq ".$f" <<<"$daemon_row") a=$(jq ".$f" <<<"$acct_row")
		[ "$d" = "$a" ] || fail "client $id $f: daemon $d, BPF $a"
	done
	[ "$(jq '.pid' <<<"$acct_row")" = "$pid" ] || fail "client $id: acct pid is not $pid"
	[ "$(jq '.connected' <<<"$acct_row")" = true ] || fail "client $id: not connected in acct"
	held[$id]=$(jq .blocks_held <<<"$acct_row")
	[ "${held[$id]}" -gt 0 ] || fail "client $id holds no blocks"
	jq -e '.latency_p50_ns > 0 and .latency_p50_ns <= .latency_p99_ns' <<<"$acct_row" >/dev/null ||
		fail "client $id latency quantiles: $acct_row"
	# Every request is in the latency histogram, once; the uid is the engine's (root here).
	jq -e '(.latency_log2_ns | add) == .ops and .uid == 0' <<<"$acct_row" >/dev/null ||
		fail "client $id latency histogram or uid: $acct_row"
	echo "client $id (pid $pid): ops $(jq .ops <<<"$acct_row") blocks_held ${held[$id]}, BPF = daemon"
	ops[$id]=$(jq .ops <<<"$acct_row")
	ids+=("$id")
	checked=$((checked + 1))
done
[ "$checked" = 2 ] || fail "checked $checked engines, not 2"

for pid in "${engines[@]}"; do wait "$pid" || fail "an engine failed"; done
await_reports 1
# The last report naming each engine: gone, 0 blocks, its SEQ_CLOSE counted, block-seconds.
for id in "${ids[@]}"; do
	row=$(jq -c --argjson id "$id" '.clients[] | select(.client_id == $id)' "$dir/acct.json" | tail -n 1)
	[ "$(jq .connected <<<"$row")" = false ] || fail "client $id still connected in acct: $row"
	[ "$(jq .blocks_held <<<"$row")" = 0 ] || fail "client $id gone with blocks: $row"
	want=$((ops[$id] + 1))
	[ "$(jq .ops <<<"$row")" = "$want" ] || fail "client $id: $(jq .ops <<<"$row") ops after closing, not $want"
	# Its blocks for the hold (hold_ms), at most as many while prefilling and decoding (< 1 s).
	lo=$(awk -v b="${held[$id]}" -v h="$hold_ms" 'BEGIN { print b * h / 1000 * 0.95 }')
	hi=$(awk -v b="${held[$id]}" -v h="$hold_ms" 'BEGIN { print b * (h / 1000 + 1) }')
	jq -e --argjson lo "$lo" --argjson hi "$hi" '.block_seconds >= $lo and .block_seconds <= $hi' \
		<<<"$row" >/dev/null ||
		fail "client $id block_seconds $(jq .block_seconds <<<"$row"), not in [$lo, $hi]"
	echo "client $id gone: ops $want, block_seconds $(jq .block_seconds <<<"$row")"
done

# Evictions with known causes and counts, by one kvtrace client.
"$kvtrace" --socket "$sock" tests/bpf/evictions.trace >"$dir/trace.out" 2>&1 &
trace_pid=$!
wait "$trace_pid" || { cat "$dir/trace.out"; fail "kvtrace evictions.trace"; }
await_reports 2
row=$(jq -c --argjson pid "$trace_pid" '.clients[] | select(.pid == $pid)' "$dir/acct.json" | tail -n 1)
[ -n "$row" ] || fail "the kvtrace client (pid $trace_pid) is missing from kvctl acct"
for ev in reuse:1 evict:2 reset:4; do
	got=$(jq ".evictions_${ev%:*}" <<<"$row")
	[ "$got" = "${ev#*:}" ] || fail "kvtrace client: evictions_${ev%:*} $got, not ${ev#*:}: $row"
done
echo "kvtrace client $(jq .client_id <<<"$row"): evictions reuse 1, evict 2, reset 4"

# A client killed with its sequence open: gone, holding nothing, once the daemon tore it down.
"$kvengine" --socket "$sock" --pool p --name C --seed 7 --system 16 --question 8 --decode 8 \
	--hold-ms 20000 >"$dir/C.out" 2>&1 &
victim=$!
disown "$victim" # killed below: no "Killed" job notice
for _ in $(seq 200); do grep -qs decoded "$dir/C.out" && break; sleep 0.01; done
grep -qs decoded "$dir/C.out" || { cat "$dir/C.out"; fail "engine C did not decode"; }
await_reports 2
row=$(jq -c --argjson pid "$victim" '.clients[] | select(.pid == $pid)' "$dir/acct.json" | tail -n 1)
[ "$(jq .blocks_held <<<"$row")" -gt 0 ] || fail "engine C holds nothing: $row"
kill -KILL "$victim"
killed=0
for _ in $(seq 100); do
	killed=$("$kvctl" --socket "$sock" stats --json | jq '.clients_killed')
	[ "$killed" = 1 ] && break
	sleep 0.05
done
[ "$killed" = 1 ] || fail "the daemon counts $killed killed clients, not 1"
await_reports 2
row=$(jq -c --argjson pid "$victim" '.clients[] | select(.pid == $pid)' "$dir/acct.json" | tail -n 1)
jq -e '.connected == false and .blocks_held == 0' <<<"$row" >/dev/null ||
	fail "killed engine C: $row"
echo "killed client $(jq .client_id <<<"$row"): gone, 0 blocks held"

kill "$acct_pid" 2>/dev/null
wait "$acct_pid"
acct_pid=
grep -v "^$" "$dir/acct.err" && fail "kvctl acct wrote to stderr"
echo "ok"
