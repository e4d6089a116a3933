# SPDX-License-Identifier: MIT
"""The binding's tests: each gets its own kvpoold (KVPOOLD, default daemon/kvpoold) on a
socket in a temporary directory, with the pools below, and imports kvpool from lib/python."""
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "lib", "python"))

import kvpool  # noqa: E402

DAEMON = os.environ.get("KVPOOLD", os.path.join(ROOT, "daemon", "kvpoold"))

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

[namespace.ns1]
uids = 0

[namespace.tight]
uids = 0
max_blocks = 2
"""


class Daemon:
    def __init__(self, tmp_path):
        self.socket = str(tmp_path / "kvpool.sock")
        config = tmp_path / "kvpool.ini"
        config.write_text(CONFIG)
        self.log = open(tmp_path / "kvpoold.log", "w+")
        self.proc = subprocess.Popen([DAEMON, "--socket", self.socket, "--config", str(config)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        # Ready once it accepts: the socket's path appears at bind(), before listen().
        deadline = time.monotonic() + 10
        while not self._accepts():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                raise RuntimeError("kvpoold did not start: " + self.log.read())
            time.sleep(0.01)

    def _accepts(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            try:
                s.connect(self.socket)
                return True
            except OSError:
                return False

    def client(self, **kw):
        return kvpool.Client(self.socket, **kw)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
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
