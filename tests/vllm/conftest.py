# SPDX-License-Identifier: MIT
"""tests/vllm: a kvpoold of the test's own (KVPOOLD, default build/bin/kvpoold) with pools for the
fake model (fake_model.py: 2 layers, 2 kv heads, head size 16, bf16, blocks of 16), and the
model's directory. kvpool is imported from lib/python."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "lib", "python"), os.path.join(ROOT, "tests", "python")]

from daemon_proc import Daemon  # noqa: E402
from fake_model import write_model_dir  # noqa: E402

DAEMON = os.environ.get("KVPOOLD", os.path.join(ROOT, "build", "bin", "kvpoold"))
NS = "team"
BLOCK = 16

_MODEL_POOL = ("block_size = 16\ngroups = full\nkv_heads = {heads}\nhead_dim = 16\n"
               "dtype = bf16\nlayers_per_group = 2\nlayout = {layout}\nnamespace = team\n")

# The hybrid model's pool (hybrid_model_dir), as pool-config prints it.
HYBRID_POOL = ("[pool.hyb]\nblocks = 129\nblock_size = 16\ngroups = swa:32 full\nkv_heads = 2\n"
               "head_dim = 16\ndtype = bf16\nlayers_per_group = 2\nlayout = layer\n"
               "namespace = team\n")
HYBRID_LAYERS = ["sliding_attention", "full_attention"] * 2
WINDOW = 32

# vllm: the model's pool. small: 8 usable blocks (the eviction test). heads4, blocklayout,
# open (no namespace: not mappable), hybrid: one thing wrong each (the refusals). tight: in
# namespace tight, 2 blocks at most (a quota refusal).
CONFIG = (
    "[pool.vllm]\nblocks = 129\n" + _MODEL_POOL.format(heads=2, layout="layer") +
    "\n[pool.small]\nblocks = 9\n" + _MODEL_POOL.format(heads=2, layout="layer") +
    "\n[pool.heads4]\nblocks = 16\n" + _MODEL_POOL.format(heads=4, layout="layer") +
    "\n[pool.blocklayout]\nblocks = 16\n" + _MODEL_POOL.format(heads=2, layout="block") +
    "\n[pool.open]\nblocks = 16\n" +
    _MODEL_POOL.format(heads=2, layout="layer").replace("namespace = team\n", "") +
    "\n[pool.hybrid]\nblocks = 16\n" +
    _MODEL_POOL.format(heads=2, layout="layer").replace("groups = full", "groups = full swa:32") +
    "\n[pool.tight]\nblocks = 16\n" +
    _MODEL_POOL.format(heads=2, layout="layer").replace("namespace = team", "namespace = tight") +
    "\n[namespace.tight]\nuids = 0\nmax_blocks = 2\n\n" + HYBRID_POOL
)


def daemon_env():
    """Never the stub libcuda.so.1 run.sh gives the tests: the daemon's CUDA stays as it is."""
    env = dict(os.environ)
    stub = env.pop("KVPOOL_TEST_STUB_DIR", None)
    if stub and "LD_LIBRARY_PATH" in env:
        paths = [p for p in env["LD_LIBRARY_PATH"].split(":") if p and p != stub]
        env["LD_LIBRARY_PATH"] = ":".join(paths)
    return env


def start_daemon(tmp_path):
    return Daemon(tmp_path, CONFIG, DAEMON, env=daemon_env())


@pytest.fixture
def daemon(tmp_path):
    d = start_daemon(tmp_path)
    yield d
    d.stop()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return write_model_dir(str(tmp_path_factory.mktemp("model")))


@pytest.fixture(scope="session")
def hybrid_model_dir(tmp_path_factory):
    """4 layers: sliding window (32 tokens), full, sliding, full."""
    return write_model_dir(str(tmp_path_factory.mktemp("hybrid")), num_layers=4,
                           layer_types=HYBRID_LAYERS, sliding_window=WINDOW)


def connector_config(daemon, pool="vllm", namespace=NS):
    """The --kv-transfer-config of an engine on daemon's pool."""
    return {"kv_connector": "KvpoolConnector", "kv_connector_module_path": "kvpool.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"socket": daemon.socket, "pool": pool,
                                          "namespace": namespace}}
