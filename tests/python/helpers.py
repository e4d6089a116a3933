# SPDX-License-Identifier: MIT
"""What the binding's tests share: pool figures and waiting for the daemon."""
import time

import numpy as np

SMALL_USABLE = 7  # blocks of `small`, the null block 0 excluded
BS = 4            # every pool's block_size


def pool_stats(client, name):
    pools = [p for p in client.stats()["pools"] if p["name"] == name]
    assert len(pools) == 1, [p["name"] for p in client.stats()["pools"]]
    return pools[0]


def wait_for(pred, timeout=5.0):
    """The daemon learns of a hang-up from its event loop: poll for what follows from it."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.01)


def assert_clean(client, name):
    """No sequence open and no block in use in pool @name, nor held by any client."""
    p = pool_stats(client, name)
    assert p["sequences"] == 0
    assert p["blocks_used"] == 0
    assert p["blocks_free"] == p["blocks_total"] - 1
    for row in client.stats()["clients"]:
        assert row["sequences"] == 0, row
        assert row["blocks_held"] == 0, row


def kv_rows(seed, n=4):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 2, 8), dtype=np.float32),
            rng.standard_normal((n, 2, 8), dtype=np.float32))
