#!/usr/bin/env bash
# Every opcode uapi/kvpool.h defines has its name in kvctl's and the exporter's table
# (lib/stats_view.c: kvp_opcode_name), spelled as the opcode: a new opcode without one would
# be counted as UNKNOWN by kvctl stats, its JSON and Prometheus.
set -u
cd "$(dirname "$0")/.." || exit 1
ops=$(sed -n '/^enum kvp_opcode {/,/^};/p' uapi/kvpool.h | grep -o '^[[:space:]]*KVP_OP_[A-Z0-9_]*' |
	sed 's/^[[:space:]]*KVP_OP_//' | grep -vx LAST)
[ "$(wc -l <<<"$ops")" -ge 24 ] || { echo "FAIL: found only $(wc -l <<<"$ops") opcodes in uapi/kvpool.h"; exit 1; }
missing=()
for op in $ops; do
	grep -q "\[KVP_OP_$op\] = \"$op\"" lib/stats_view.c || missing+=("$op")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "FAIL: lib/stats_view.c names no ${missing[*]}"
	exit 1
fi
echo "$(wc -l <<<"$ops") opcodes, each named"
