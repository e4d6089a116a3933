# SPDX-License-Identifier: MIT
"""kvctl pool reset NAME: a pool's prefix cache forgotten (vLLM's reset_prefix_cache), by name,
from a connection attached to no pool; refused while a block is in use; its tier keeps what it
holds."""
import os
import subprocess

import numpy as np
import pytest

from conftest import DAEMON, ROOT
from daemon_proc import Daemon
from kv_helpers import rows

KVCTL = os.environ.get("KVCTL", os.path.join(ROOT, "build", "bin", "kvctl"))
SLOT = 2 * 2 * 4 * 2 * 8 * 4
CONFIG = """
[pool.p]
blocks = 9
block_size = 4
groups = full

[pool.tiered]
blocks = 9
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_host_bytes = %d
""" % (64 * SLOT)
PROMPT = list(range(100, 117))  # 4 full blocks


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path, CONFIG, DAEMON)
    yield d
    d.stop()


def kvctl(daemon, *args):
    return subprocess.run([KVCTL, "-s", daemon.socket, "pool", *args], capture_output=True,
                          text=True)


def test_reset_forgets_the_cache_by_name(daemon):
    with daemon.client(pool="p") as c:
        with c.open(PROMPT) as s:
            assert s.alloc(len(PROMPT)) == 0
            out = kvctl(daemon, "reset", "p")
            assert (out.returncode, out.stdout, out.stderr) == (
                1, "", "kvctl: pool reset p: 5 blocks in use (sequences open 1): a reset needs "
                "every block free\n")
            s.commit(len(PROMPT))
        with c.open(PROMPT) as s:
            assert s.lookup() == 16
        out = kvctl(daemon, "reset", "p")
        assert (out.returncode, out.stdout, out.stderr) == (0, "pool p reset\n", "")
        with c.open(PROMPT) as s:
            assert s.lookup() == 0
    out = kvctl(daemon, "reset", "nope")
    assert out.returncode == 1 and out.stderr == (
        f"kvctl: pool reset nope: no pool 'nope' on {daemon.socket}\n")
    out = kvctl(daemon, "reset")
    assert out.returncode == 2 and "missing the pool's NAME" in out.stderr


def test_the_tier_keeps_what_it_holds(daemon):
    rng = np.random.default_rng(5)
    with daemon.client(pool="tiered") as c, daemon.client(admin=True) as admin:
        with c.open(PROMPT) as s:
            assert s.alloc(len(PROMPT)) == 0
            for layer in range(2):
                s.write_kv(0, layer, 0, rows(rng, len(PROMPT)), rows(rng, len(PROMPT)))
            s.commit(len(PROMPT))
        admin.pool_sync("tiered")
        with c.open(list(range(5000, 5032))) as other:  # the pool's 8 blocks: PROMPT goes down
            assert other.alloc(32) == 0
        admin.pool_sync("tiered")
        out = kvctl(daemon, "reset", "tiered")
        assert (out.returncode, out.stdout) == (0, "pool tiered reset\n")
        with c.open(PROMPT) as s:
            assert s.lookup() == 16  # from the tier
