#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh: the GPU machine's whole run, as one command, from a tree that carries .device/
# (tests/gpu/pack.sh): what the machine is and what its sandbox allows (.device/gpu/cuda_probe),
# the GPU tests, the vLLM connector's copies on cuda tensors (tests/vllm/copies_check.py, with
# their GB/s each way), the torch engine on cuda against its own reference (engine_check.sh),
# the daemon's host kernels there, and kvbench attend --backend cuda last. Each step's output
# goes to $OUT (or /tmp/kvpool-gpu) as well; the last lines are a summary.
# The whole run keeps within BUDGET seconds (default 420: a device session has about 15
# minutes, start-up included, and a second run must fit): each step gets its own limit or what
# is left of the budget, whichever is less, in order of what a run is for; a step with under
# 10 s left is skipped and said so. Usage: tests/gpu/run.sh [--full]
# (--full: the benchmark's whole table, not --quick).
set -u
cd "$(dirname "$0")/../.."
D=$PWD/.device
OUT=${OUT:-/tmp/kvpool-gpu}
BUDGET=${BUDGET:-420}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KVPOOLD=$D/bin/kvpoold KVCTL=$D/bin/kvctl PYTHONPATH=$D/python PYTHONUNBUFFERED=1
summary=()

step() { # step NAME LIMIT COMMAND...: runs it, its output to $OUT/NAME.log and here
	local name=$1 limit=$2 left rc
	shift 2
	left=$((BUDGET - SECONDS))
	if [ "$left" -lt 10 ]; then
		summary+=("$(printf '%-28s skipped: the %s s budget is spent' "$name" "$BUDGET")")
		return 0
	fi
	[ "$limit" -le "$left" ] || limit=$left
	echo "== $name (at most $limit s): $*"
	timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
	rc=$?
	tail -n 40 "$OUT/$name.log"
	[ $rc = 124 ] && rc="124 (over $limit s)"
	summary+=("$(printf '%-28s exit %s' "$name" "$rc")")
	return 0
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
	2>&1 | sed 's/^/gpu: /'
uname -r | sed 's/^/kernel: /'
ldd --version 2>&1 | head -n 1 | sed 's/^/glibc: /'
step probe 30 "$D/gpu/cuda_probe"
# Memory and import first (everything else stands on them), then the kernels, then the tier.
for t in test_cuda_pool test_cuda_shared test_cuda_attend test_cuda_tier; do
	[ -x "$D/tests/integration/$t" ] && step "$t" 90 "$D/tests/integration/$t"
done
# Window snapshots' copies on the device (the plugin's cuMemcpyDtoDAsync, #55).
[ -x "$D/tests/integration/test_snapshots" ] &&
	step snapshots-cuda 60 env KVPOOL_TEST_BACKEND=cuda "$D/tests/integration/test_snapshots"

dir=$(mktemp -d)
printf '[namespace.bench]\nuids = %s\n[namespace.copies]\nuids = %s\n' "$(id -u)" "$(id -u)" \
	>"$dir/kvpool.conf"
"$KVPOOLD" --socket "$dir/sock" --config "$dir/kvpool.conf" 2>"$OUT/engine-kvpoold.log" &
kvpid=$!
for _ in $(seq 100); do [ -S "$dir/sock" ] && break; sleep 0.05; done
# The vLLM connector's copies between vLLM-shaped cuda tensors and a cuda pool's mapping.
step vllm-copies-cuda 60 python3 tests/vllm/copies_check.py --socket "$dir/sock" --device cuda \
	--backend cuda --rate
# The torch engine on cuda: the daemon's kernels (--attend daemon) and torch over the mapped
# pool (--attend local) give the tokens of its own private-cache reference.
step engine-cuda 120 tests/gpu/engine_check.sh "$dir/sock"
kill "$kvpid" 2>/dev/null
rm -rf "$dir"
step host-attend 30 "$D/tests/integration/test_kv_masks"

quick=--quick
[ "${1:-}" = --full ] && quick=
step kvbench-attend-cuda 150 "$D/bin/kvbench" attend --backend cuda $quick

echo "== summary ($SECONDS s of a $BUDGET s budget)"
printf '%s\n' "${summary[@]}"
# vLLM itself is not on the GPU machine: its GPU backends' KV layouts (FLASH_ATTN, FLASHINFER)
# are checked only as copies_check.py writes them from their descriptions.
echo "not checked here: vLLM's GPU attention backends' own KV layouts (no vLLM on this machine;" \
	"copies_check.py checks the layouts as their descriptions give them)"
grep -h '^tier copies:\|^copies rate' "$OUT"/test_cuda_tier.log "$OUT"/vllm-copies-cuda.log 2>/dev/null
