# SPDX-License-Identifier: MIT
"""KvpoolConnector under vLLM's AsyncScheduler (vLLM's default): each step is scheduled before
the previous one's output is taken, so the connector plans step N+1's saves before it hears
what the workers did in step N. Saves still cover what was computed, hits are byte for byte,
for a full-attention and a hybrid model."""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import vllm  # noqa: F401
except Exception as e:
    pytest.skip(f"vllm is not importable: {e!r}", allow_module_level=True)

from conftest import BLOCK, connector_config  # noqa: E402
import harness  # noqa: E402
from kvcheck import kv_is_model  # noqa: E402


def tokens(n, seed):
    return [(seed * 89 + 13 * i) % harness.VOCAB_SIZE for i in range(n)]


def engine(model_dir, daemon, pool, **kw):
    return harness.Engine(model_dir, block_size=BLOCK, async_scheduling=True,
                          kv_transfer_config=connector_config(daemon, pool), **kw)


def counts(e):
    return e.scheduler_connector._sched.counts


def test_full_attention(daemon, model_dir):
    """A computes P 16 tokens a step and decodes 20 tokens; B's hit is every full block A
    computed (P's and the output's)."""
    P = tokens(53, 1)
    with engine(model_dir, daemon, "vllm", max_num_batched_tokens=16) as a:
        assert type(a.scheduler).__name__ == "AsyncScheduler"
        a.add_request("p", P, max_tokens=20)
        ra = a.run_until_done()["p"]
        assert ra.output_tokens == harness.expected_outputs(P, 20)
        assert kv_is_model(a, "p")
        # 53 + 19 tokens have KV: 4 full blocks.
        assert counts(a)["saved_tokens"] == 64
        everything = P + ra.output_tokens
    with engine(model_dir, daemon, "vllm") as b:
        b.add_request("q", everything + [7], max_tokens=2)
        rb = b.run_until_done()["q"]
        assert rb.num_external_tokens == 64
        assert rb.computed_positions == list(range(64, 75))
        assert kv_is_model(b, "q")


def test_hybrid(daemon, hybrid_model_dir):
    """A hybrid model's prompt computed 32 tokens a step: a hit inside its first chunk loads
    the window that step saved."""
    P = tokens(130, 2)
    with engine(hybrid_model_dir, daemon, "hyb", max_num_batched_tokens=32,
                num_gpu_blocks=24) as a:
        a.add_request("p", P, max_tokens=2)
        a.run_until_done()
        assert counts(a)["saved_tokens"] == 128
    with engine(hybrid_model_dir, daemon, "hyb") as b:
        b.add_request("q", P[:40] + tokens(30, 3), max_tokens=2)
        rb = b.run_until_done()["q"]
        assert rb.num_external_tokens == 32
        assert rb.computed_positions == list(range(32, 71))
        assert kv_is_model(b, "q")
