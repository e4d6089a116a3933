#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh: the GPU machine's whole run, as one command, from a tree that carries .device/
# (tests/gpu/pack.sh): what the machine is and what its sandbox allows (.device/gpu/cuda_probe),
# the daemon on it (a host test), the GPU tests, the torch engine on cuda against its own
# reference (engine_check.sh), the vLLM connector's copies on cuda tensors
# (tests/vllm/copies_check.py), and kvbench attend --backend cuda. Each step's output goes to $OUT (or
# /tmp/kvpool-gpu) as well; the last lines are a summary. Usage: tests/gpu/run.sh [--full]
# (--full: the benchmark's whole table, not --quick).
set -u
cd "$(dirname "$0")/../.."
D=$PWD/.device
OUT=${OUT:-/tmp/kvpool-gpu}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KVPOOLD=$D/bin/kvpoold KVCTL=$D/bin/kvctl PYTHONPATH=$D/python PYTHONUNBUFFERED=1
summary=()

step() { # step NAME TIMEOUT COMMAND...: runs it, its output to $OUT/NAME.log and here
	local name=$1 limit=$2 rc
	shift 2
	echo "== $name: $*"
	timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
	rc=$?
	tail -n 40 "$OUT/$name.log"
	summary+=("$(printf '%-28s exit %s' "$name" "$rc")")
	return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
	2>&1 | sed 's/^/gpu: /'
uname -r | sed 's/^/kernel: /'
ldd --version 2>&1 | head -n 1 | sed 's/^/glibc: /'
step probe 60 "$D/gpu/cuda_probe"
step host-attend 120 "$D/tests/integration/test_kv_masks"
for t in "$D"/tests/integration/test_cuda_*; do
	step "${t##*/}" 300 "$t"
done

# The torch engine on cuda: the daemon's kernels (--attend daemon) and torch over the mapped
# pool (--attend local) give the tokens of its own private-cache reference.
dir=$(mktemp -d)
printf '[namespace.bench]\nuids = %s\n[namespace.copies]\nuids = %s\n' "$(id -u)" "$(id -u)" \
	>"$dir/kvpool.conf"
"$KVPOOLD" --socket "$dir/sock" --config "$dir/kvpool.conf" 2>"$OUT/engine-kvpoold.log" &
kvpid=$!
for _ in $(seq 100); do [ -S "$dir/sock" ] && break; sleep 0.05; done
step engine-cuda 400 tests/gpu/engine_check.sh "$dir/sock"
# The vLLM connector's copies between vLLM-shaped cuda tensors and a cuda pool's mapping.
step vllm-copies-cuda 120 python3 tests/vllm/copies_check.py --socket "$dir/sock" --device cuda \
	--backend cuda
kill "$kvpid" 2>/dev/null
rm -rf "$dir"

quick=--quick
[ "${1:-}" = --full ] && quick=
step kvbench-attend-cuda 500 "$D/bin/kvbench" attend --backend cuda $quick

echo "== summary"
printf '%s\n' "${summary[@]}"
