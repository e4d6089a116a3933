# SPDX-License-Identifier: MIT
"""The binding's tests: each gets its own kvpoold (KVPOOLD, default build/bin/kvpoold) on a
socket in a temporary directory, with the pools below, and imports kvpool from lib/python."""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "lib", "python"))

import kvpool  # noqa: E402
from daemon_proc import Daemon  # noqa: E402

DAEMON = os.environ.get("KVPOOLD", os.path.join(ROOT, "build", "bin", "kvpoold"))

# small: 7 usable blocks of 4 tokens, no KV. kv: f32 KV, a full and a sliding-window group,
# two layers. bf16: the same in bf16. shared-*: restricted to namespace ns1, so mappable,
# in both layouts. Namespace quota: 2 blocks per pool.
CONFIG = """
[pool.small]
blocks = 8
block_size = 4
groups = full

[pool.kv]
blocks = 64
block_size = 4
groups = full swa:8
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2

[pool.bf16]
blocks = 64
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = bf16
layers_per_group = 2

[pool.shared-block]
blocks = 32
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
namespace = ns1
layout = block

[pool.shared-layer]
blocks = 32
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = bf16
layers_per_group = 2
namespace = ns1
layout = layer

[pool.hybrid]
blocks = 32
block_size = 4
groups = full swa:8

[namespace.ns1]
uids = 0

[namespace.tight]
uids = 0
max_blocks = 2
"""


def start_daemon(tmp_path):
    """A kvpoold with the pools above, on a socket in tmp_path."""
    return Daemon(tmp_path, CONFIG, DAEMON)


@pytest.fixture
def daemon(tmp_path):
    d = start_daemon(tmp_path)
    yield d
    d.stop()


@pytest.fixture
def kv(daemon):
    """A client attached to the f32 pool `kv`."""
    with daemon.client(pool="kv") as c:
        yield c


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)
