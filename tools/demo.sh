#!/usr/bin/env bash
# make demo: kvpoold on a temporary socket with one hybrid pool, three engine
# processes that share a system prompt (the second and third hit the first's
# cached prefix), kvctl stats while they run and after, then SIGTERM.
set -eu
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
sock=$dir/kvpool.sock
daemon_pid=
cleanup() {
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT

echo "== kvpoold --config tools/demo.ini --socket $sock"
echo "   (pool: 512 blocks of 16 tokens, groups full + swa:64, 2 layers each, bf16 KV)"
build/bin/kvpoold --config tools/demo.ini --socket "$sock" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done

engines=()
engine() {
	build/bin/kvengine --socket "$sock" --name "$1" --seed "$2" --hold-ms 1500 >"$dir/$1.out" &
	engines+=($!)
}
# Waits until every engine named has decoded (and holds its sequence), or fails.
await() {
	for name in "$@"; do
		until grep -q decoded "$dir/$name.out" 2>/dev/null; do
			for pid in "${engines[@]}"; do
				kill -0 "$pid" 2>/dev/null || wait "$pid" || { echo "demo: an engine failed"; exit 1; }
			done
			sleep 0.05
		done
	done
}
echo "== three engines, one 64-token system prompt, each its own 24-token question;"
echo "   a 4-layer synthetic model (2 full-attention, 2 sliding-window layers) writes its KV"
echo "   and attends through kvpoold"
engine engine-A 1
await engine-A
engine engine-B 2
engine engine-C 3
await engine-B engine-C
cat "$dir/engine-A.out" "$dir/engine-B.out" "$dir/engine-C.out"
echo "== kvctl stats (engines holding their sequences)"
build/bin/kvctl --socket "$sock" stats
for pid in "${engines[@]}"; do wait "$pid"; done
echo "== kvctl stats (engines gone: their published blocks stay cached)"
build/bin/kvctl --socket "$sock" stats
kill -TERM "$daemon_pid"
wait "$daemon_pid"
daemon_pid=
echo "== kvpoold exited cleanly"
