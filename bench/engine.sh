#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# engine.sh: tokens/s of python3 -m kvpool.engine with --attend daemon, --attend local and
# --reference, the same workload, alternated ROUNDS times (each kvpool run on a fresh
# kvpoold, so no run finds another's prompts cached). Prints each run's summary line and
# the median tokens/s of each mode. Usage: bench/engine.sh [ROUNDS] [engine options...]
# (default: --model gemma3 --seed 2 --requests 16 --prompt-tokens 200 --shared-prefix 128
# --max-new 64). Needs torch and a built tree; KVPOOLD overrides build/bin/kvpoold.
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
[ $# -gt 0 ] || set -- --model gemma3 --seed 2 --requests 16 --prompt-tokens 200 \
	--shared-prefix 128 --max-new 64
py=${PYTHON:-/usr/bin/python3}
daemon=${KVPOOLD:-build/bin/kvpoold}
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
pid=
# Namespace bench lets this uid map the pool that --attend local creates.
printf '[namespace.bench]\nuids = %s\n' "$(id -u)" > "$dir/kvpool.conf"
export PYTHONPATH=lib/python

start_daemon() {
	rm -f "$dir/sock"
	"$daemon" --socket "$dir/sock" --config "$dir/kvpool.conf" 2>"$dir/kvpoold.log" &
	pid=$!
	for _ in $(seq 100); do [ -S "$dir/sock" ] && return; sleep 0.05; done
	echo "kvpoold did not start: $(cat "$dir/kvpoold.log")" >&2
	exit 1
}

for round in $(seq "$rounds"); do
	for mode in reference daemon local; do
		case $mode in
		reference) extra=(--reference) ;;
		daemon) extra=(--attend daemon) ;;
		local) extra=(--attend local --namespace bench) ;;
		esac
		[ $mode = reference ] || start_daemon
		line=$("$py" -m kvpool.engine --socket "$dir/sock" "$@" "${extra[@]}" 2>/dev/null | tail -1)
		[ $mode = reference ] || { kill $pid; wait $pid 2>/dev/null || true; }
		echo "round $round $mode: $line"
		echo "$mode ${line##*tokens_per_s }" >> "$dir/rates"
	done
done
for mode in reference daemon local; do
	awk -v m=$mode '$1 == m {print $2}' "$dir/rates" | sort -n |
		awk -v m=$mode '{v[NR] = $1} END {printf "%-9s median tokens_per_s %s\n", m, v[int((NR + 1) / 2)]}'
done
