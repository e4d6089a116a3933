# SPDX-License-Identifier: MIT
"""A hybrid model (sliding window and full attention layers) under vLLM's hybrid allocator,
kept with KvpoolConnector on: one kvpool group per vLLM KV cache group; a load moves all of
the full group's blocks and only the window's of the sliding-window group, byte for byte;
saves are made as blocks are computed, before the window leaves them; a load the pool
cannot serve whole is recomputed whole."""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import vllm  # noqa: F401
except Exception as e:
    pytest.skip(f"vllm is not importable: {e!r}", allow_module_level=True)

from conftest import BLOCK, HYBRID_POOL, NS, WINDOW, connector_config  # noqa: E402
import harness  # noqa: E402
import kvpool  # noqa: E402
import torch  # noqa: E402
from kvcheck import kv_is_model  # noqa: E402
from kvpool.vllm.geometry import from_model_dir, pool_section  # noqa: E402


def tokens(n, seed):
    return [(seed * 53 + 11 * i) % harness.VOCAB_SIZE for i in range(n)]


def engine(model_dir, daemon, **kw):
    return harness.Engine(model_dir, block_size=BLOCK,
                          kv_transfer_config=connector_config(daemon, "hyb"), **kw)


def counts(e):
    return e.scheduler_connector._sched.counts


def assert_hybrid_allocator(e):
    assert e.vllm_config.scheduler_config.disable_hybrid_kv_cache_manager is False
    assert type(e.scheduler.kv_cache_manager.coordinator).__name__ == \
        "HybridKVCacheCoordinator"
    groups = e.kv_cache_config.kv_cache_groups
    assert [(type(g.kv_cache_spec).__name__, g.layer_names) for g in groups] == [
        ("SlidingWindowSpec", [harness.LAYER_NAME.format(i) for i in (0, 2)]),
        ("FullAttentionSpec", [harness.LAYER_NAME.format(i) for i in (1, 3)])]
    assert groups[0].kv_cache_spec.sliding_window == WINDOW


def block_bytes(e, layer, block_ids):
    """The raw K and V of whole blocks of a layer."""
    ids = torch.as_tensor(block_ids, dtype=torch.int64)
    return b"".join(half[ids].contiguous().view(torch.int16).numpy().tobytes()
                    for half in (e._k[layer], e._v[layer]))


def recording_loads(e):
    """The loads B's worker makes, with each layer's loaded blocks as they are right after
    the load (the window moves on later, and vLLM drops them)."""
    worker, seen = e.worker_connector._worker, []
    load = worker.load

    def record(meta):
        load(meta)
        for c in meta.loads:
            seen.append((c, {layer: block_bytes(e, layer, c.vllm_blocks[e.layer_group[name]])
                             for layer, name in enumerate(e.layer_names)}))
    worker.load = record
    return seen


def test_pool_config_is_vllms_grouping(hybrid_model_dir):
    """pool-config's groups for the model are the groups vLLM forms (asserted below)."""
    geo = from_model_dir(hybrid_model_dir, BLOCK)
    assert pool_section(geo, "hyb", NS, 129) == HYBRID_POOL


@pytest.mark.parametrize("kinds", [
    # Gemma 3 1B (5 sliding : 1 full, 26 layers), gpt-oss (alternating), 12 sliding + 13
    # full (within 1.5: groups of 13), and a uniform model.
    [("full", 0) if (i + 1) % 6 == 0 else ("swa", 512) for i in range(26)],
    [("swa", 128), ("full", 0)] * 12,
    [("swa", 64)] * 12 + [("full", 0)] * 13,
    [("full", 0)] * 8,
])
def test_vllm_groups_are_vllms(kinds):
    """pool-config's grouping (vllm_groups) is what vLLM's planner forms for those layers:
    the same kinds and windows in the same order, as many layers per group."""
    import kvpool.vllm.geometry as geometry
    from vllm.v1.core.kv_cache_planning import get_kv_cache_groups
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    shape = dict(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
    specs = {harness.LAYER_NAME.format(i): SlidingWindowSpec(sliding_window=w, **shape)
             if kind == "swa" else FullAttentionSpec(**shape) for i, (kind, w) in
             enumerate(kinds)}
    config = vllm_config()
    with harness.set_current_vllm_config(config):
        groups = get_kv_cache_groups(config, specs)
    want = ([geometry.group_kind(i, g.kv_cache_spec) for i, g in enumerate(groups)],
            max(len(g.layer_names) for g in groups))
    assert geometry.vllm_groups(kinds) == want


def vllm_config():
    """A VllmConfig with the hybrid allocator on (the planner reads nothing else here)."""
    from vllm.config import DeviceConfig, SchedulerConfig, VllmConfig
    config = VllmConfig(scheduler_config=SchedulerConfig(max_model_len=2048,
                                                         is_encoder_decoder=False),
                        device_config=DeviceConfig(device="cpu"))
    config.cache_config.kv_cache_layout = "LBNHC"  # as the harness's engines resolve it
    return config


def test_a_then_b_loads_the_window(daemon, hybrid_model_dir):
    """A serves P (100 tokens); B serves P and a suffix: its hit is P's 6 full blocks; it
    loads the 6 blocks of the full group and the 2 of the window before the hit (positions
    64-95; the window is 32 tokens) of the sliding-window group, equal to A's."""
    P, suffix = tokens(100, 1), tokens(20, 2)
    # Full layers (1, 3; group 1): blocks 0-5. Sliding-window layers (0, 2; group 0): the
    # window's blocks 4 and 5 (positions 64-95).
    loaded = {layer: range(6) if layer % 2 else range(4, 6) for layer in range(4)}
    with engine(hybrid_model_dir, daemon) as a:
        assert_hybrid_allocator(a)
        a.add_request("p", P, max_tokens=2)
        ra = a.run_until_done()["p"]
        assert ra.computed_positions == list(range(101))
        assert kv_is_model(a, "p")
        want = {layer: block_bytes(a, layer, [a.table("p", layer)[i] for i in blocks])
                for layer, blocks in loaded.items()}
        # Saved in the step that computed them: 6 blocks of each group (the window had not
        # moved yet); the pool drops the sliding-window ones behind it as vLLM does.
        assert counts(a)["saved_tokens"] == 96
        assert a.worker_connector._worker.counts["saved_blocks"] == 12
    with engine(hybrid_model_dir, daemon) as b:
        assert_hybrid_allocator(b)
        loads = recording_loads(b)
        b.add_request("q", P + suffix, max_tokens=2)
        rb = b.run_until_done()["q"]
        assert rb.num_external_tokens == 96
        assert rb.computed_positions == list(range(96, 121))
        assert [[len(g) for g in c.vllm_blocks] for c, _ in loads] == [[2, 6]]
        # A block of a group: 2 layers, K and V, 16 tokens x 2 heads x 16 dims of bf16.
        w = b.worker_connector._worker.counts
        assert (w["loaded_blocks"], w["loaded_bytes"]) == (8, 8 * 4096)
        assert loads[0][1] == want
        assert kv_is_model(b, "q")
        assert rb.output_tokens == harness.expected_outputs(P + suffix, 2)


def test_chunked_prefill_saves_before_the_window_moves(daemon, hybrid_model_dir):
    """A computes P 32 tokens a step: each step's blocks are saved in that step, while vLLM
    still holds them. B's hit on a longer prompt sharing P is all of P's blocks."""
    P = tokens(130, 3)
    with engine(hybrid_model_dir, daemon, max_num_batched_tokens=32) as a:
        a.add_request("p", P, max_tokens=2)
        a.run_until_done()
        assert counts(a)["saved_tokens"] == 128
        assert counts(a)["save_skipped"] == 0
    with engine(hybrid_model_dir, daemon) as b:
        loads = recording_loads(b)
        b.add_request("q", P + [5, 6, 7], max_tokens=2)
        rb = b.run_until_done()["q"]
        assert rb.num_external_tokens == 128
        assert [[len(g) for g in c.vllm_blocks] for c, _ in loads] == [[2, 8]]
        assert kv_is_model(b, "q")


def test_a_hit_inside_the_first_chunk(daemon, hybrid_model_dir):
    """A computes P 32 tokens a step; vLLM drops a sliding-window block as soon as the window
    has passed it (blocks 0-1 once 64 tokens are computed). B shares only P's first 40 tokens:
    its hit is 32, whose window (blocks 0-1 of the sliding-window group) only a save made in
    A's first step holds; a small vLLM pool reuses what A freed."""
    P = tokens(130, 5)
    with engine(hybrid_model_dir, daemon, max_num_batched_tokens=32, num_gpu_blocks=24) as a:
        a.add_request("p", P, max_tokens=2)
        a.run_until_done()
        assert counts(a)["saved_tokens"] == 128
    with engine(hybrid_model_dir, daemon) as b:
        loads = recording_loads(b)
        b.add_request("q", P[:40] + tokens(30, 6), max_tokens=2)
        rb = b.run_until_done()["q"]
        assert rb.num_external_tokens == 32
        assert [[len(g) for g in c.vllm_blocks] for c, _ in loads] == [[2, 2]]
        assert rb.computed_positions == list(range(32, 71))
        assert kv_is_model(b, "q")


def evict_all(daemon):
    """Another client takes every free block of the pool (the cached ones too), then lets
    them go unpublished: nothing A saved is left."""
    with kvpool.Client(daemon.socket, pool="hyb", namespace=NS) as c:
        seqs = []
        with pytest.raises(kvpool.Error):
            while True:
                seqs.append(c.open([900 + len(seqs)] * BLOCK))
                seqs[-1].alloc(BLOCK)
        for seq in seqs:
            seq.close()


def test_a_load_lost_is_recomputed_whole(daemon, hybrid_model_dir):
    """The pool loses B's hit between offer and pin (the pin finds none): vLLM takes a load
    error of a hybrid model only for a whole request, so B recomputes P whole, its KV the
    model's, and is not offered it again."""
    P = tokens(70, 4)
    with engine(hybrid_model_dir, daemon) as a:
        a.add_request("p", P, max_tokens=2)
        a.run_until_done()
        assert counts(a)["saved_tokens"] == 64
    with engine(hybrid_model_dir, daemon) as b:
        side = b.scheduler_connector._sched
        pin = side._pin

        def pin_after_eviction(r):
            evict_all(daemon)
            return pin(r)
        side._pin = pin_after_eviction
        b.add_request("q", P + [9], max_tokens=2)
        rb = b.run_until_done()["q"]
        # Offered 64, lost whole: the prefill vLLM counts is the one after, with no hit.
        assert rb.num_external_tokens == 0
        assert rb.computed_positions == list(range(72))
        assert kv_is_model(b, "q")
        c = counts(b)
        assert (c["offered_tokens"], c["loaded_tokens"], c["lost_tokens"]) == (64, 0, 64)
