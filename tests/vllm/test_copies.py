# SPDX-License-Identifier: MIT
"""The worker's copies on every KV tensor shape, and from tensor-parallel ranks holding a slice
of the heads each, on CPU tensors and a host pool (copies_check.py; tests/gpu/run.sh runs the
same on a GPU)."""
import pytest

import copies_check


@pytest.mark.parametrize("shape", list(copies_check.shapes()))
def test_copies(daemon, shape):
    copies_check.check(daemon.socket, "cpu", "host", shape)


def test_tensor_parallel_ranks(daemon):
    copies_check.check_tp(daemon.socket, "cpu", "host")
