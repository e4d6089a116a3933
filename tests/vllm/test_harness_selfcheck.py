# SPDX-License-Identifier: MIT
"""The harness checked against vLLM alone, before kvpool is put in it: a plain engine
(no connector) runs requests to the end with the KV and tokens the fake model promises,
and vLLM's own ExampleConnector carries a prompt's KV from one engine to a second one.

Run: /work/main/.venv/bin/python -m pytest tests/vllm/test_harness_selfcheck.py -q"""
import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before vLLM imports huggingface_hub
try:  # vLLM takes ~5 s to import; one import serves every test in the process
    import vllm  # noqa: F401
except Exception as e:  # not installed, or installed but unloadable (no libcuda, ...)
    pytest.skip(f"vllm is not importable: {e!r}", allow_module_level=True)

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

BLOCK = 16
PROMPT = [(7 * i + 100) % harness.VOCAB_SIZE for i in range(40)]  # 2 full blocks + 8


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return harness.write_model_dir(str(tmp_path_factory.mktemp("model")))


expected_outputs = harness.expected_outputs


def assert_kv_is_models(engine, req_id, positions=None):
    for layer in range(engine.num_layers):
        k, v = engine.request_kv(req_id, layer, positions)
        ek, ev = engine.expected_kv(req_id, layer, positions)
        assert torch.equal(k, ek), f"{req_id}: K of layer {layer} differs"
        assert torch.equal(v, ev), f"{req_id}: V of layer {layer} differs"


def test_kv_value_exact_and_distinct():
    k, v = harness.kv_value([3, 999], [0, 2047], 1, num_kv_heads=2, head_size=16)
    assert k.shape == v.shape == (2, 2, 16)
    for dtype in (torch.bfloat16, torch.float16):
        assert torch.equal(k.to(dtype).float(), k) and torch.equal(v.to(dtype).float(), v)
    assert (k >= 0).all() and (v < 0).all()
    assert len(set(k[0].flatten().tolist())) > 16  # heads and dims differ


def test_plain_engine(model_dir):
    with harness.Engine(model_dir, block_size=BLOCK, num_gpu_blocks=64) as engine:
        # What 0.33.0's FlashAttention gets: [blocks, kv_heads, block_size, 2*head_size],
        # laid out block, token, head in memory (LBNHC).
        assert engine.kv_layout.name == "LBNHC"
        assert tuple(engine.kv(0).shape) == (64, 2, BLOCK, 32)
        assert engine.kv(0).dtype == torch.bfloat16
        assert engine.scheduler_connector is None and engine.worker_connector is None

        engine.add_request("a", PROMPT, max_tokens=5)
        a = engine.run_until_done()["a"]
        assert a.finish_reason == "length"
        assert a.output_tokens == expected_outputs(PROMPT, 5)
        # The forward computed the prompt and every output token but the last.
        assert a.computed_positions == list(range(len(PROMPT) + 4))
        assert a.num_external_tokens == 0 and a.num_local_cached_tokens == 0
        assert len(a.block_ids) == 3
        assert_kv_is_models(engine, "a")

        # The same prompt again hits vLLM's own prefix cache for its 2 full blocks.
        engine.add_request("b", PROMPT, max_tokens=3)
        b = engine.run_until_done()["b"]
        assert b.num_local_cached_tokens == 2 * BLOCK and b.num_external_tokens == 0
        assert b.computed_positions == list(range(2 * BLOCK, len(PROMPT) + 2))
        assert b.block_ids[:2] == a.block_ids[:2]
        assert b.output_tokens == expected_outputs(PROMPT, 3)
        assert_kv_is_models(engine, "b")


@pytest.mark.parametrize("layout", ["LBHNC", "BLNHC"])
def test_other_layouts(model_dir, layout):
    # A layout vLLM may resolve to instead (VLLM_KV_CACHE_LAYOUT, or a connector's
    # get_required_kvcache_layout): the same logical view, other strides.
    with harness.Engine(model_dir, block_size=BLOCK, kv_layout=layout) as engine:
        assert engine.kv_layout.name == layout
        kv = engine.kv(0)
        assert tuple(kv.shape) == (64, 2, BLOCK, 32)
        # LBHNC: heads outside tokens in memory; BLNHC: layers interleaved per block.
        assert (kv.stride(1) > kv.stride(2)) == (layout == "LBHNC")
        assert (kv.stride(0) > kv[0].numel()) == (layout == "BLNHC")
        engine.add_request("a", PROMPT, max_tokens=3)
        assert engine.run_until_done()["a"].output_tokens == expected_outputs(PROMPT, 3)
        assert_kv_is_models(engine, "a")


def run_five(engine, max_tokens):
    """Five requests of 20 to 56 prompt tokens, run to the end: (prompts, records)."""
    prompts = {f"r{i}": [(i * 31 + j) % 997 for j in range(20 + 9 * i)] for i in range(5)}
    for req_id, prompt in prompts.items():
        engine.add_request(req_id, prompt, max_tokens=max_tokens)
    return prompts, engine.run_until_done()


def test_preemption(model_dir):
    # Too few blocks for every decode: vLLM preempts, and V2 resends a resumed request's
    # whole block table; the harness's tables must follow (it asserts that every step).
    with harness.Engine(model_dir, block_size=BLOCK, num_gpu_blocks=10,
                        max_num_batched_tokens=24, max_num_seqs=4) as engine:
        prompts, records = run_five(engine, max_tokens=40)
        for req_id, prompt in prompts.items():
            assert records[req_id].output_tokens == expected_outputs(prompt, 40), req_id
        recomputed = sum(r.computed_tokens - (len(r.prompt_token_ids) + 39)
                         for r in records.values())
        assert recomputed > 0, "no request was preempted and recomputed"


def test_chunked_prefill_and_many_requests(model_dir):
    # A small token budget splits prefills over steps; all requests still finish right.
    with harness.Engine(model_dir, block_size=BLOCK, num_gpu_blocks=64,
                        max_num_batched_tokens=24, max_num_seqs=4) as engine:
        prompts, records = run_five(engine, max_tokens=4)
        for req_id, prompt in prompts.items():
            rec = records[req_id]
            assert rec.output_tokens == expected_outputs(prompt, 4), req_id
            assert rec.computed_positions == list(range(len(prompt) + 3)), req_id
        # Blocks are reused between requests, so only the last one's KV is intact.
        assert_kv_is_models(engine, "r4")


def test_example_connector_roundtrip(model_dir, tmp_path):
    """ExampleConnector saves a prompt's KV (its block-aligned part short of the last
    token: 32 of 40 tokens) in engine 1; engine 2, with its own empty cache, loads it."""
    config = {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
              "kv_connector_extra_config": {"shared_storage_path": str(tmp_path)}}
    hit = 2 * BLOCK
    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=config) as e1:
        assert e1.scheduler_connector is not None
        assert type(e1.worker_connector).__name__ == "ExampleConnector"
        e1.add_request("a", PROMPT, max_tokens=4)
        r1 = e1.run_until_done()["a"]
        assert r1.num_external_tokens == 0
        assert r1.computed_positions == list(range(len(PROMPT) + 3))
        saved = [e1.request_kv("a", layer, range(hit)) for layer in range(e1.num_layers)]
    assert os.listdir(tmp_path), "ExampleConnector saved nothing"

    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=config) as e2:
        assert not e2.kv(0).any()  # nothing there before the load
        e2.add_request("a", PROMPT, max_tokens=4)
        r2 = e2.run_until_done()["a"]
        assert r2.num_external_tokens == hit and r2.num_local_cached_tokens == 0
        # Positions below the hit were loaded, not computed.
        assert r2.computed_positions == list(range(hit, len(PROMPT) + 3))
        assert r2.output_tokens == r1.output_tokens == expected_outputs(PROMPT, 4)
        for layer in range(e2.num_layers):
            k, v = e2.request_kv("a", layer, range(hit))
            assert torch.equal(k, saved[layer][0]) and torch.equal(v, saved[layer][1])
        assert_kv_is_models(e2, "a")
