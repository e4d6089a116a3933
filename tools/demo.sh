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

cat >"$dir/kvpool.ini" <<'INI'
[pool.default]
blocks = 512
block_size = 16
groups = full swa:64
INI
echo "== kvpoold --config kvpool.ini --socket $sock (pool: 512 blocks of 16 tokens, groups full + swa:64)"
daemon/kvpoold --config "$dir/kvpool.ini" --socket "$sock" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done

engine() { tools/kvengine --socket "$sock" --name "$1" --seed "$2" --hold-ms 1500 >"$dir/$1.out" & }
echo "== three engines, one 64-token system prompt, each its own 24-token question"
engine engine-A 1
until grep -q decoded "$dir/engine-A.out" 2>/dev/null; do sleep 0.05; done
engine engine-B 2
engine engine-C 3
until [ "$(cat "$dir"/engine-*.out | grep -c decoded)" = 3 ]; do sleep 0.05; done
cat "$dir/engine-A.out" "$dir/engine-B.out" "$dir/engine-C.out"
echo "== kvctl stats (engines holding their sequences)"
tools/kvctl --socket "$sock" stats
wait $(jobs -p | grep -v "^$daemon_pid$") 2>/dev/null || true
echo "== kvctl stats (engines gone: their published blocks stay cached)"
tools/kvctl --socket "$sock" stats
kill -TERM "$daemon_pid"
wait "$daemon_pid"
daemon_pid=
echo "== kvpoold exited cleanly"
