# SPDX-License-Identifier: MIT
"""Tensor parallelism, 2 ranks: vLLM's scheduler here, each rank a worker process of its own
holding one of the model's 2 KV heads (harness.Engine(tp_size=2)), their outputs merged by
vLLM's KVOutputAggregator. Each rank copies only its head into and out of the pool, which
holds both: B's loaded KV equals A's on both ranks, and is the model's."""
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import vllm  # noqa: F401
except Exception as e:
    pytest.skip(f"vllm is not importable: {e!r}", allow_module_level=True)

from conftest import BLOCK, connector_config  # noqa: E402
import harness  # noqa: E402


def tokens(n, seed):
    return [(seed * 71 + 3 * i) % harness.VOCAB_SIZE for i in range(n)]


def rank_kv(e, rank, req_id, positions):
    """K and V of every layer that rank holds at positions of a request."""
    table = e.records[req_id].block_ids
    return [e.rank(rank, "read_kv", table, list(positions), layer)
            for layer in range(e.num_layers)]


def model_kv(e, req_id, positions, rank):
    """What the fake model writes there, in rank's head."""
    rec = e.records[req_id]
    all_tokens = rec.prompt_token_ids + rec.output_tokens
    out = []
    for layer in range(e.num_layers):
        k, v = harness.kv_value([all_tokens[p] for p in positions], list(positions), layer,
                                e.num_kv_heads, e.head_size)
        out.append((k[:, rank:rank + 1], v[:, rank:rank + 1]))
    return out


def same(a, b):
    return all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))


def test_two_ranks_save_and_load_their_heads(daemon, model_dir):
    P, suffix = tokens(53, 1), tokens(12, 2)
    cfg = connector_config(daemon)
    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg, tp_size=2) as a:
        a.add_request("p", P, max_tokens=2)
        ra = a.run_until_done()["p"]
        assert ra.output_tokens == harness.expected_outputs(P, 2)
        assert a.scheduler_connector._sched.counts["saved_tokens"] == 48
        halves = [rank_kv(a, r, "p", range(48)) for r in range(2)]
        for r in range(2):
            assert same(halves[r], model_kv(a, "p", range(48), r))
    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg, tp_size=2) as b:
        b.add_request("q", P + suffix, max_tokens=2)
        rb = b.run_until_done()["q"]
        # The load is done once both ranks said so: then B computes past the hit.
        assert rb.num_external_tokens == 48
        assert rb.computed_positions == list(range(48, 66))
        for r in range(2):
            assert same(rank_kv(b, r, "q", range(48)), halves[r]), f"rank {r}"
            everything = range(66)
            assert same(rank_kv(b, r, "q", everything), model_kv(b, "q", everything, r))
        assert rb.output_tokens == harness.expected_outputs(P + suffix, 2)


def test_a_save_one_rank_could_not_make_is_not_published(daemon, model_dir):
    """Rank 1's copies into the pool fail: the step's save is published only if every rank
    made it (vLLM merges their answers), so nothing of the prompt is, and B finds no hit."""
    P = tokens(53, 3)
    cfg = connector_config(daemon)
    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg, tp_size=2) as a:
        a.rank(1, "fail_saves")
        a.add_request("p", P, max_tokens=2)
        ra = a.run_until_done()["p"]
        assert ra.output_tokens == harness.expected_outputs(P, 2)
        c = a.scheduler_connector._sched.counts
        assert (c["saved_tokens"], c["save_skipped"]) == (0, 1), str(c)
    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg, tp_size=2) as b:
        b.add_request("q", P + [1, 2], max_tokens=2)
        rb = b.run_until_done()["q"]
        assert rb.num_external_tokens == 0
        assert rb.computed_positions == list(range(56))
