#!/usr/bin/env bash
# Every trace in tests/traces/ must print the same through a running kvpoold
# (kvtrace --socket) as in process, and the daemon must exit 0 on SIGTERM.
# Usage: daemon_traces.sh KVPOOLD KVTRACE
set -u
kvpoold=$1 kvtrace=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sock=$dir/kvpool.sock

"$kvpoold" --socket "$sock" -v 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done

failures=0
for trace in tests/traces/*.trace; do
	if ! diff <("$kvtrace" "$trace" 2>&1) <("$kvtrace" --socket "$sock" "$trace" 2>&1) >"$dir/diff"; then
		echo "${trace##*/}: differs through the daemon"
		head -n 10 "$dir/diff"
		failures=$((failures + 1))
	fi
done
kill -TERM "$pid"
wait "$pid"
rc=$?
if [ "$rc" != 0 ]; then
	echo "kvpoold exited $rc after SIGTERM"
	tail -n 20 "$dir/log"
	failures=$((failures + 1))
fi
[ "$failures" -eq 0 ]
