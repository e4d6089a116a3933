#!/usr/bin/env bash
# Every trace in tests/traces/ must print the same through a running kvpoold
# (kvtrace --socket) as in process, but those marked "# core only: WHY" (what
# they replay the daemon refuses by its own rules, e.g. APPEND past max_len); a replay killed half way leaves no pool
# behind (its private pool is owned by its connection); and the daemon must
# exit 0 on SIGTERM. $KVPOOL_EVENT_LOOP, when set, is the daemon's --event-loop.
# Usage: daemon_traces.sh KVPOOLD KVTRACE
set -u
kvpoold=$1 kvtrace=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sock=$dir/kvpool.sock

"$kvpoold" --socket "$sock" -v ${KVPOOL_EVENT_LOOP:+--event-loop "$KVPOOL_EVENT_LOOP"} 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done

failures=0
for trace in tests/traces/*.trace; do
	grep -q '^# core only: ' "$trace" && continue
	if ! diff <("$kvtrace" "$trace" 2>&1) <("$kvtrace" --socket "$sock" "$trace" 2>&1) >"$dir/diff"; then
		echo "${trace##*/}: differs through the daemon"
		head -n 10 "$dir/diff"
		failures=$((failures + 1))
	fi
done
# Waits (at most 5 s) for a line matching $1 in the daemon's log.
await_log() {
	for _ in $(seq 100); do grep -q "$1" "$dir/log" && return 0; sleep 0.05; done
	return 1
}
mkfifo "$dir/fifo"
"$kvtrace" --socket "$sock" "$dir/fifo" >/dev/null 2>&1 &
replay=$!
exec 3>"$dir/fifo"
printf 'pool blocks=8 block_size=4\ngroup full\nstats\n' >&3
if ! await_log "pool kvtrace-$replay-[0-9]* created"; then
	echo "the replay's pool was never created"
	failures=$((failures + 1))
fi
disown "$replay" # killed: no "Killed" job notice
kill -KILL "$replay"
exec 3>&-
if ! await_log "pool kvtrace-$replay-[0-9]* destroyed"; then
	echo "a killed replay left its pool behind"
	failures=$((failures + 1))
fi

kill -TERM "$pid"
wait "$pid"
rc=$?
if [ "$rc" != 0 ]; then
	echo "kvpoold exited $rc after SIGTERM"
	tail -n 20 "$dir/log"
	failures=$((failures + 1))
fi
[ "$failures" -eq 0 ]
