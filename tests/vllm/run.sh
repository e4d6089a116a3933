#!/usr/bin/env bash
# The vLLM connector's tests (pytest in .venv, which tools/deps.sh --vllm makes), against the
# daemon KVPOOLD (default build/bin/kvpoold). Exits 77 (skipped) when .venv lacks vLLM or pytest,
# or the binding is not built.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/vllm/needs_venv.sh
needs_venv .venv --vllm
# No GPU here: vLLM's CUDA wheels may load libcuda.so.1 on import, which the toolkit's stub
# satisfies. On the tests' library path only: the daemon gets the environment without it, so
# its own CUDA refusals stay what they are (tests/vllm/conftest.py).
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
if ! "$py" -c 'import vllm' 2>/dev/null && [ -e /usr/local/cuda/lib64/stubs/libcuda.so ]; then
	ln -s /usr/local/cuda/lib64/stubs/libcuda.so "$stub/libcuda.so.1"
fi
KVPOOL_TEST_STUB_DIR=$stub LD_LIBRARY_PATH=$stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
	"$py" -m pytest -q -p no:cacheprovider tests/vllm "$@"
