#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# pack.sh: builds here (make all, nvcc found) and packs into .device/ what the GPU machine's
# run (tests/gpu/run.sh) needs: the daemon, the CUDA plugin and its probe, kvctl and kvbench,
# the GPU tests and a host one, the Python binding, and the Debian runtime libraries these
# load that a CUDA image lacks (liburing, inih, json-c, xxhash, libbpf, libelf). The run's
# machine then needs glibc >= this one's. Usage: tests/gpu/pack.sh; then run tests/gpu/run.sh
# there with .device carried.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s -j"$(nproc)" all >/dev/null
[ -x build/gpu/libkvpool_cuda.so ] && [ -x build/gpu/cuda_probe ] || {
	echo "pack.sh: the CUDA plugin is not built (nvcc not found)" >&2
	exit 1
}
rm -rf .device
# As in build/: the daemon finds its plugin in gpu/ beside its bin/, kvbench the daemon beside it.
mkdir -p .device/bin .device/gpu .device/lib .device/tests/integration .device/python
cp build/bin/kvpoold build/bin/kvctl build/bin/kvbench .device/bin/
cp build/gpu/libkvpool_cuda.so build/gpu/cuda_probe .device/gpu/
for t in test_cuda_attend test_cuda_pool test_cuda_shared test_cuda_tier test_kv_masks \
	test_pool_map_shared test_snapshots; do
	cp build/tests/integration/$t .device/tests/integration/
done
mkdir .device/python/kvpool
cp lib/python/kvpool/*.py lib/python/kvpool/_kvpool.abi3.so .device/python/kvpool/
# The vLLM connector's worker copies run on the GPU without vLLM (tests/vllm/copies_check.py).
mkdir .device/python/kvpool/vllm
cp lib/python/kvpool/vllm/*.py .device/python/kvpool/vllm/
# Every library these load but glibc's own and the driver (the machine's).
for f in .device/bin/* .device/gpu/* .device/tests/integration/* \
	.device/python/kvpool/*.so; do
	ldd "$f" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libgcc_s)\.so' |
	while read -r lib; do cp -L "$lib" .device/lib/; done
du -sh .device | sed 's/^/pack.sh: /'
ls .device/lib | sed 's/^/pack.sh: lib /'
# What the device tool carries to the GPU machine: 64 MiB in all, the tree's tracked files too.
mib=$(du -sm .device | cut -f1)
[ "$mib" -lt 56 ] || { echo "pack.sh: .device is $mib MiB: over what can be carried (64 MiB with the tree)" >&2; exit 1; }
