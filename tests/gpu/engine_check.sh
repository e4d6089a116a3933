#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# engine_check.sh SOCKET: the torch engine on cuda, every preset, f32 and bf16: the tokens of
# --attend daemon (the daemon's GPU kernels) and --attend local (torch over the mapped cuda
# pool, namespace bench) against its private-cache --reference. Exit 1 if any differs.
set -u
sock=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

engine() { # engine PRESET DTYPE MODE: the request lines, up to prefix_hit
	local extra=()
	case $3 in
	reference) extra=(--reference) ;;
	daemon) extra=(--attend daemon --socket "$sock") ;;
	local) extra=(--attend local --namespace bench --socket "$sock") ;;
	esac
	python3 -m kvpool.engine --model "$1" --seed 3 --dtype "$2" --device cuda --requests 6 \
		--prompt-tokens 40 --shared-prefix 24 --max-new 24 "${extra[@]}" >"$tmp/out" 2>&1
	sed -n 's/^\(request [0-9]* tokens.*\) prefix_hit.*/\1/p' "$tmp/out"
}

bad=0
for preset in llama mistral gemma3 llama4 rswa cyclic; do
	for dtype in f32 bf16; do
		engine "$preset" "$dtype" reference >"$tmp/ref"
		[ -s "$tmp/ref" ] || { echo "engine $preset $dtype reference: no tokens"; cat "$tmp/out"; }
		for mode in daemon local; do
			engine "$preset" "$dtype" "$mode" >"$tmp/$mode"
			if [ -s "$tmp/ref" ] && cmp -s "$tmp/ref" "$tmp/$mode"; then
				echo "engine $preset $dtype $mode: tokens equal the reference"
			else
				echo "engine $preset $dtype $mode: DIFFERS from the reference"
				diff "$tmp/ref" "$tmp/$mode" | head -n 6
				tail -n 5 "$tmp/out"
				bad=1
			fi
		done
	done
done
exit $bad
