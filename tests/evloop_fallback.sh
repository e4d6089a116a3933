#!/usr/bin/env bash
# Where io_uring is refused (here: a seccomp filter, as Docker's default profile
# and gVisor refuse it), kvpoold's default event loop falls back to epoll, says
# why, and serves engines as before: two kvengines run to completion, the
# second hitting the first's prefix, and kvctl stats reports the loop in all
# three formats. Forcing io_uring there exits 1 with the reason.
# Usage: evloop_fallback.sh KVPOOLD KVCTL KVENGINE NO_IO_URING
set -u
kvpoold=$1 kvctl=$2 kvengine=$3 no_uring=$4
command -v jq >/dev/null || { echo "jq is not installed"; exit 77; }
dir=$(mktemp -d)
sock=$dir/kvpool.sock
daemon=
trap '[ -n "$daemon" ] && kill -9 $daemon 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
failures=0
fail() { echo "$*"; failures=$((failures + 1)); }

"$no_uring" "$kvpoold" --socket "$sock" --event-loop io_uring 2>"$dir/forced.log"
rc=$?
[ $rc = 1 ] || fail "--event-loop io_uring under the filter: exit $rc, expected 1"
grep -qx 'kvpoold: event loop: io_uring unavailable: Operation not permitted' "$dir/forced.log" ||
	fail "--event-loop io_uring under the filter said: $(cat "$dir/forced.log")"
[ -e "$sock" ] && fail "the refused daemon left its socket behind"

# The demo's pool: kvengine's model fits it.
"$no_uring" "$kvpoold" --config tools/demo.ini --socket "$sock" 2>"$dir/log" &
daemon=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
grep -qx 'kvpoold: event loop: epoll (io_uring unavailable: Operation not permitted)' "$dir/log" ||
	fail "auto under the filter logged: $(cat "$dir/log")"

"$kvengine" --socket "$sock" --name A --seed 1 >"$dir/a.out" || fail "engine A failed"
"$kvengine" --socket "$sock" --name B --seed 2 >"$dir/b.out" || fail "engine B failed"
grep -qx 'A: decoded 32 tokens' "$dir/a.out" || fail "engine A: $(cat "$dir/a.out")"
grep -qx 'B: prompt 88 tokens (system 64), prefix-cache hit 64 tokens' "$dir/b.out" ||
	fail "engine B did not hit A's system prompt: $(cat "$dir/b.out")"
grep -qx 'B: decoded 32 tokens' "$dir/b.out" || fail "engine B: $(cat "$dir/b.out")"

"$kvctl" --socket "$sock" stats >"$dir/stats.txt" || fail "kvctl stats failed"
grep -qx 'event loop: epoll' "$dir/stats.txt" || fail "kvctl stats has no 'event loop: epoll' line"
[ "$("$kvctl" --socket "$sock" stats --json | jq -r .event_loop)" = epoll ] ||
	fail "kvctl stats --json: event_loop is not \"epoll\""
"$kvctl" --socket "$sock" stats --prometheus | grep -qx 'kvpool_info{event_loop="epoll",abi="2"} 1' ||
	fail "kvctl stats --prometheus has no kvpool_info{event_loop=\"epoll\",...} 1"

kill -TERM $daemon
wait $daemon
rc=$?
daemon=
[ $rc = 0 ] || fail "kvpoold exited $rc after SIGTERM; its log: $(cat "$dir/log")"
[ "$failures" -eq 0 ]
