# SPDX-License-Identifier: MIT
"""The worker's copies on every KV tensor shape, CPU tensors and a host pool
(copies_check.py; tests/gpu/run.sh runs the same on a GPU)."""
import pytest

import copies_check


@pytest.mark.parametrize("shape", list(copies_check.shapes()))
def test_copies(daemon, shape):
    copies_check.check(daemon.socket, "cpu", "host", shape)
