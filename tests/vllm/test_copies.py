# SPDX-License-Identifier: MIT
"""The worker's copies in every KV layout kvpool knows, and from tensor-parallel ranks holding a slice
of the heads each, on CPU tensors and a host pool (copies_check.py; tests/gpu/run.sh runs the
same on a GPU)."""
import pytest

import copies_check


@pytest.mark.parametrize("layout", list(copies_check.layouts()))
def test_copies(daemon, layout):
    copies_check.check(daemon.socket, "cpu", "host", layout)


def test_tensor_parallel_ranks(daemon):
    copies_check.check_tp(daemon.socket, "cpu", "host")
