# SPDX-License-Identifier: MIT
"""tests/vllm_engine: vLLM's CPU build running models written here (tests/vllm/tiny_models.py)
with KvpoolConnector, each engine a process of its own (engine_proc.py), on a kvpoold of the
tests' own (KVPOOLD, default build/bin/kvpoold). Engines start once a module and serve several
scenarios: they take most of the time."""
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "tests", "vllm"), os.path.join(ROOT, "lib", "python"),
                os.path.join(ROOT, "tests", "python")]

from daemon_proc import Daemon  # noqa: E402
from servers import kvpool_transfer, wait_or_kill  # noqa: E402
import tiny_models  # noqa: E402

DAEMON = os.environ.get("KVPOOLD", os.path.join(ROOT, "build", "bin", "kvpoold"))
BLOCK = 32  # vLLM's CPU attention takes multiples of 32
NS = "team"
CONFIG = (
    # tiny_models.LLAMA: 4 layers, 2 kv heads of 64, bf16.
    "[pool.llama]\nblocks = 1024\nblock_size = 32\ngroups = full\nkv_heads = 2\n"
    "head_dim = 64\ndtype = bf16\nlayers_per_group = 4\nlayout = layer\nnamespace = team\n"
    # tiny_models.GEMMA3: sliding (64), full, sliding, full: vLLM's groups swa, full.
    "\n[pool.gemma]\nblocks = 512\nblock_size = 32\ngroups = swa:64 full\nkv_heads = 2\n"
    "head_dim = 64\ndtype = bf16\nlayers_per_group = 2\nlayout = layer\nnamespace = team\n")


class Kvpoold:
    """The tests' kvpoold, which a test may kill and start again on the same socket."""

    def __init__(self, path):
        self.path = path
        self.d = None

    def start(self):
        self.d = Daemon(self.path, CONFIG, DAEMON)
        return self

    @property
    def socket(self):
        return self.d.socket

    def client(self, **kw):
        return self.d.client(pool=kw.pop("pool", "llama"), namespace=NS, **kw)

    def kill(self):
        self.d.kill()
        self.d.log.close()

    def stop(self):
        if self.d.proc.poll() is None:
            self.d.stop()


@pytest.fixture(scope="module")
def kvpoold(tmp_path_factory):
    d = Kvpoold(tmp_path_factory.mktemp("kvpoold")).start()
    yield d
    d.stop()


def connector(socket_path, pool):
    return kvpool_transfer(socket_path, pool, NS)


class Engine:
    """engine_proc.py in a process of its own; call(op, ...) -> its answer."""

    def __init__(self, name, log_dir, model, connector=None, num_blocks=None,
                 max_model_len=4096, log_stats=False):
        self.name = name
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.log = open(self.log_path, "w")
        config = dict(model=model, block_size=BLOCK, connector=connector,
                      num_blocks=num_blocks, max_model_len=max_model_len, log_stats=log_stats)
        r, w = os.pipe()
        # 1 GiB of KV cache each (vLLM's CPU build takes most of the memory otherwise); its
        # threads unbound (engines share the cores); stats logged each second.
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
                   VLLM_LOG_STATS_INTERVAL="1", PYTHONPATH=os.path.join(ROOT, "lib", "python"))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "engine_proc.py"), str(w), json.dumps(config)],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(w,),
            env=env, text=True)
        os.close(w)
        self.answers = os.fdopen(r)
        self.started = None

    def wait_ready(self, timeout=300):
        """The engine's start (imports, model, KV cache): about 30 s here."""
        if self.started is None:
            t = time.monotonic()
            line = self.answers.readline()
            if not line:
                raise RuntimeError(f"engine {self.name} did not start:\n{self.tail()}")
            self.started = time.monotonic() - t
        return self

    def call(self, op, **kw):
        self.send(op, **kw)
        return self.receive()

    def send(self, op, **kw):
        """A command, its answer left for receive(): engines working at once."""
        self.wait_ready()
        self.proc.stdin.write(json.dumps(dict(op=op, **kw)) + "\n")
        self.proc.stdin.flush()

    def receive(self):
        line = self.answers.readline()
        if not line:
            raise RuntimeError(f"engine {self.name} died:\n{self.tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"engine {self.name}: {answer['error']}")
        return answer

    def generate(self, prompts, max_tokens=8):
        return self.call("generate", prompts=prompts, max_tokens=max_tokens)

    def tail(self, n=40):
        return "".join(self.output().splitlines(keepends=True)[-n:])

    def output(self):
        """What the engine printed: vLLM's log."""
        with open(self.log_path) as f:
            return f.read()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.call("quit")
            except Exception:
                pass
            wait_or_kill(self.proc, 60)
        self.log.close()


def prompt(seed, n):
    """n tokens of the tiny models' vocabulary (3 .. 511), seeded."""
    import random

    r = random.Random(seed)
    return [r.randrange(3, tiny_models.LLAMA["vocab_size"]) for _ in range(n)]


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    return tiny_models.write_model(str(tmp_path_factory.mktemp("llama")), "llama")


@pytest.fixture(scope="session")
def gemma_dir(tmp_path_factory):
    return tiny_models.write_model(str(tmp_path_factory.mktemp("gemma3")), "gemma3")


def _salt():
    from kvpool.vllm.scheduler import salt_of

    return salt_of(type("Request", (), {"lora_request": None, "cache_salt": None})())


SALT = _salt()  # what the connector salts an unsalted request's sequence with


def pool_kv(kvpoold, pool, tokens, hit, reads):
    """K and V as pool holds them for tokens (READ_KV through a sequence salted as the
    connector's, its hit of `hit` tokens pinned): per (group, layer, first, n) of reads,
    float32 [n, kv_heads, head_dim] each."""
    import numpy as np
    import torch

    with kvpoold.client(pool=pool) as c:
        seq = c.open(tokens, salt=SALT)
        try:
            assert seq.alloc(len(tokens), use_cache=True) == hit
            out = []
            for group, layer, first, n in reads:
                k, v = seq.read_kv(group, layer, first, n)
                out.append(tuple(torch.from_numpy(x.astype(np.int32) << 16).view(torch.float32)
                                 for x in (k, v)))
            return out
        finally:
            seq.close()


def assert_kv_close(k, v, reference, first, worst, mean, what):
    """k and v (from the pool, positions first ..) within relative errors worst (any position
    and head) and mean of the reference forward's (K, V) for that layer."""
    n = k.shape[0]
    for name, got, want in (("K", k, reference[0][first:first + n]),
                            ("V", v, reference[1][first:first + n])):
        err = (got - want).norm(dim=-1) / want.norm(dim=-1)
        assert err.max() < worst and err.mean() < mean, \
            (what, name, err.max().item(), err.mean().item())
