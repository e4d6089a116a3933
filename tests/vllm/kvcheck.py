# SPDX-License-Identifier: MIT
"""Byte-for-byte views of an engine's KV (harness.Engine), shared by the tests and by
engine_proc.py, which reports them from another process."""
import hashlib

import torch


def kv_digest(engine, req_id, positions):
    """sha256 of the raw bytes of K then V, layer by layer, at positions of a request
    (a list for every layer, or a dict layer -> list), through each layer's group's table."""
    h = hashlib.sha256()
    for layer in range(engine.num_layers):
        at = positions[layer] if isinstance(positions, dict) else positions
        pos = torch.as_tensor(list(at), dtype=torch.int64)
        table = torch.as_tensor(engine.table(req_id, layer), dtype=torch.int64)
        blocks = table[pos // engine.block_size]
        offsets = pos % engine.block_size
        for half in (engine._k[layer], engine._v[layer]):
            h.update(half[blocks, offsets].contiguous().view(torch.int16).numpy().tobytes())
    return h.hexdigest()


def kv_is_model(engine, req_id):
    """Whether every position of a request holds what the fake model writes there."""
    for layer in range(engine.num_layers):
        k, v = engine.request_kv(req_id, layer)
        ek, ev = engine.expected_kv(req_id, layer)
        if not (torch.equal(k, ek) and torch.equal(v, ev)):
            return False
    return True
