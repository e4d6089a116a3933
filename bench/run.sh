#!/usr/bin/env bash
# make bench: the standard set of figures, each with the command that made it
# (bench/README.md keeps them). About 2 minutes on 2 cores; nothing else should
# run meanwhile (the figures are wall-clock). CI runs only smoke versions.
#   bench/run.sh [NAME...]   only those: limits core rtt attend capacity load
#                            replay tier-disk events overhead python engine vllm
# tier-disk writes a 10 GiB file and fio's 2 GiB in $KVBENCH_DISK_DIR (default
# /var/tmp: a disk, not tmpfs), removed after; it is not in the default set.
set -u
cd "$(dirname "$0")/.." || exit 1
kvbench=${KVBENCH:-build/bin/kvbench}
py=$(test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
failed=0

run() {
	echo
	echo "\$ $*"
	"$@" || { echo "(exit $?)"; failed=$((failed + 1)); }
}

wanted() {
	[ ${#names[@]} -eq 0 ] && return 0
	for n in "${names[@]}"; do [ "$n" = "$1" ] && return 0; done
	return 1
}

names=("$@")
# Only when named: it writes 10 GiB and takes a minute or two.
all_but_disk() { [ ${#names[@]} -eq 0 ] && return 1; wanted "$1"; }
wanted limits && run "$kvbench" limits
wanted core && run "$kvbench" core
wanted rtt && run "$kvbench" rtt
wanted attend && run "$kvbench" attend
wanted capacity && run "$kvbench" capacity
if wanted load; then
	for workload in decode shared-prefix long-context; do
		for wait in spin sleep; do
			run "$kvbench" load --workload "$workload" --wait "$wait"
		done
	done
fi
if wanted replay; then
	trace=$(mktemp)
	bench/conversations.sh 8 96 5 >"$trace"
	for tier in 0 65536 131072 262144 524288; do
		run "$kvbench" replay "$trace" --pool-tokens 65536 --tier-host-tokens "$tier"
	done
	run "$kvbench" replay "$trace" --pool-tokens 65536 --tier-host-tokens 262144 \
		--kv-bytes-per-token 4096 --bystander
	rm -f "$trace"
fi
if all_but_disk tier-disk; then
	dir=$(mktemp -d "${KVBENCH_DISK_DIR:-/var/tmp}/kvbench-tier.XXXXXX")
	trace=$(mktemp)
	bench/conversations.sh 8 96 5 >"$trace"
	# At the trace's own pace: a disk takes what arrives, not what a back-to-back
	# replay can produce.
	run "$kvbench" replay "$trace" --pool-tokens 65536 --tier-host-tokens 262144 --speed 1
	for policy in lru second_sight; do
		run "$kvbench" replay "$trace" --pool-tokens 65536 --tier-disk-tokens 262144 \
			--tier-disk-path "$dir" --tier-policy "$policy" --speed 1
	done
	# The production trace back to back: the eviction rate the tier sustains,
	# beside fio's random 4 KiB O_DIRECT writes (a packed page's) on the same disk.
	# Mooncake's trace (bench/README.md says where it comes from): skipped without it.
	mooncake=${KVBENCH_TRACE:-../shared/traces/synthetic_trace.jsonl}
	if [ -f "$mooncake" ]; then
		run "$kvbench" replay "$mooncake" --pool-tokens 1000000 \
			--tier-disk-tokens 19000000 --tier-disk-path "$dir" --no-decode
	else
		echo; echo "# the production trace: skipped ($mooncake: not there; set KVBENCH_TRACE)"
	fi
	if command -v fio >/dev/null; then
		for depth in 1 64; do
			run fio --name=kvbench-write --filename="$dir/fio.dat" --size=2g \
				--rw=randwrite --bs=4k --direct=1 --ioengine=io_uring \
				--iodepth=$depth --runtime=8 --time_based --group_reporting
		done
		rm -f "$dir/fio.dat"
	fi
	run "$kvbench" tier-disk --dir "$dir"
	rm -rf "$dir" "$trace"
fi
wanted events && run "$kvbench" events
if wanted overhead; then
	if [ "$(id -u)" = 0 ]; then
		run "$kvbench" overhead
	else
		echo; echo "# kvbench overhead: skipped (BPF: root only)"
	fi
fi
wanted python && run "$py" bench/python_step.py
if wanted engine; then
	if "$py" -c 'import torch' 2>/dev/null; then
		run bench/engine.sh 1
	else
		echo; echo "# bench/engine.sh: skipped (no torch)"
	fi
fi
if wanted vllm; then
	if [ -x .venv/bin/python ] && .venv/bin/python -c 'import vllm' 2>/dev/null; then
		run .venv/bin/python bench/vllm_step.py
	else
		echo; echo "# bench/vllm_step.py: skipped (no .venv with vLLM: tools/deps.sh --vllm)"
	fi
fi
exit $((failed > 0))
