# SPDX-License-Identifier: MIT
"""KvpoolConnector under vLLM's own Scheduler, KVCacheManager and connector factory (harness.py),
on one kvpoold: a prompt one engine served is a hit for another, byte for byte; a hit is only
what was published; a hit the pool loses before the pin is recomputed, never served."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:  # ~5 s: one import serves every test in the process
    import vllm  # noqa: F401
except Exception as e:
    pytest.skip(f"vllm is not importable: {e!r}", allow_module_level=True)

from conftest import BLOCK, HERE, NS, ROOT, connector_config  # noqa: E402
import harness  # noqa: E402
import kvpool  # noqa: E402
from kvcheck import kv_digest, kv_is_model  # noqa: E402


def tokens(n, seed):
    return [(seed * 131 + 7 * i) % harness.VOCAB_SIZE for i in range(n)]


def counts(engine):
    return engine.scheduler_connector._sched.counts


def engine(model_dir, daemon, pool="vllm", **kw):
    return harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=connector_config(
        daemon, pool), **kw)


def pool_stats(daemon, pool):
    with daemon.client() as c:
        return next(p for p in c.stats()["pools"] if p["name"] == pool)


def test_second_process_loads_the_first_ones_prompt(daemon, model_dir):
    """A serves P (3 full blocks and 5 tokens); B, another process, serves P and a suffix:
    exactly P's 3 full blocks are external hits, equal to A's byte for byte, and B's forward
    runs over the rest only."""
    P, suffix = tokens(53, 1), tokens(20, 2)
    with engine(model_dir, daemon) as a:
        a.add_request("p", P, max_tokens=4)
        ra = a.run_until_done()["p"]
        assert ra.num_external_tokens == 0
        assert ra.computed_positions == list(range(56))
        digest = kv_digest(a, "p", range(48))
        # Saved: P's 3 full blocks (the 4th holds P's tail and 3 generated tokens: not full).
        assert counts(a)["saved_tokens"] == 48
    args = dict(model_dir=model_dir, kv_transfer_config=connector_config(daemon),
                requests=[["q", P + suffix, 4]], digest_positions=list(range(48)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.path.join(ROOT, "lib", "python")]))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "engine_proc.py"),
                           json.dumps(args)], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rb = json.loads(proc.stdout)["q"]
    assert rb["num_external_tokens"] == 48
    assert rb["computed_positions"] == list(range(48, 73 + 3))
    assert rb["digest"] == digest
    assert rb["kv_is_model"]
    assert rb["output_tokens"] == harness.expected_outputs(P + suffix, 4)


def test_hit_is_what_was_published(daemon, model_dir):
    """A computes P one block a step, each copied in its step and published with the next
    step's batch. B serves P from inside A's 4th step, while A's copy of the 4th block is on
    its way (allocated in the pool, not written): B's hit is exactly the 3 blocks A
    published. Once A is done, C's hit is all A computed."""
    P = tokens(101, 3)
    with engine(model_dir, daemon, max_num_batched_tokens=16) as a, \
            engine(model_dir, daemon) as b:
        a.add_request("p", P, max_tokens=4)
        for _ in range(3):
            a.step()
        assert a.records["p"].computed_positions == list(range(48))
        assert counts(a)["saved_tokens"] == 32  # the 3rd block: with the 4th step's batch
        worker = a.worker_connector._worker
        save, seen = worker.save, {}

        def serve_b_first(meta):
            if meta.saves and not seen:
                seen["q"] = b.add_request("q", P, max_tokens=2) and b.run_until_done()["q"]
            save(meta)
        worker.save = serve_b_first
        a.step()
        rq = seen["q"]
        assert rq.num_external_tokens == 48
        assert rq.computed_positions == list(range(48, 102))
        assert kv_is_model(b, "q")
        a.run_until_done()
        # 101 prompt tokens and 3 of the 4 generated have KV: 6 full blocks.
        assert counts(a)["saved_tokens"] == 96
    with engine(model_dir, daemon) as c:
        c.add_request("r", P + [1], max_tokens=2)
        rr = c.run_until_done()["r"]
        assert rr.num_external_tokens == 96
        assert rr.computed_positions == list(range(96, 103))
        assert kv_is_model(c, "r")


# A third process that takes N blocks (the pool's LRU end first: A's last blocks), then
# lets them go: what it evicted stays evicted.
FILLER = """
import sys
sys.path.insert(0, sys.argv[1])
import kvpool
c = kvpool.Client(sys.argv[2], pool="small", namespace=sys.argv[3])
s = c.open([900 + i for i in range(16 * int(sys.argv[4]))])
s.alloc(16 * int(sys.argv[4]))
s.close()
print("done", flush=True)
"""


def test_blocks_lost_before_the_pin_are_recomputed(daemon, model_dir, tmp_path):
    """The pool (8 blocks) holds A's 4 blocks of P; a third process takes 6 between B's offer
    and B's pin, evicting the 2 last cached: B loads 2 blocks, recomputes from there, and its
    KV is the model's everywhere."""
    P, suffix = tokens(69, 5), tokens(10, 6)
    with engine(model_dir, daemon, pool="small") as a:
        a.add_request("p", P, max_tokens=2)
        a.run_until_done()
        assert counts(a)["saved_tokens"] == 64
    with engine(model_dir, daemon, pool="small") as b:
        side = b.scheduler_connector._sched
        pin = side._pin

        def fill_then_pin(r):
            filler = subprocess.run(
                [sys.executable, "-c", FILLER, os.path.join(ROOT, "lib", "python"),
                 daemon.socket, NS, "6"], capture_output=True, text=True, timeout=60)
            assert (filler.returncode, filler.stdout) == (0, "done\n"), filler.stderr
            side._pin = pin
            pin(r)
        side._pin = fill_then_pin
        b.add_request("q", P + suffix, max_tokens=2)
        rq = b.run_until_done()["q"]
        assert rq.num_external_tokens == 64  # what was offered
        assert rq.computed_positions == list(range(32, 80))
        assert kv_is_model(b, "q")
        assert rq.output_tokens == harness.expected_outputs(P + suffix, 2)
        c = counts(b)
        assert (c["offered_tokens"], c["loaded_tokens"], c["lost_tokens"]) == (64, 32, 32)


@pytest.mark.parametrize("kind", ["cache_salt", "lora"])
def test_salts_and_adapters_keep_tenants_apart(daemon, model_dir, kind):
    """cache_salt and the LoRA adapter's name salt the kvpool sequence: a prompt saved under one
    is a hit only under the same one, never under another nor without."""
    from vllm.lora.request import LoRARequest

    def tenant(name):
        if name is None:
            return {}
        if kind == "cache_salt":
            return {"cache_salt": name}
        return {"lora_request": LoRARequest(name, abs(hash(name)) % 1000 + 1, "/nonexistent")}

    P = tokens(40, 7)
    with engine(model_dir, daemon) as a:
        a.add_request("a", P, max_tokens=2, **tenant("tenant-a"))
        a.run_until_done()
        assert counts(a)["saved_tokens"] == 32
    with engine(model_dir, daemon) as b:
        for req_id, name, hit in (("other", "tenant-b", 0), ("none", None, 0),
                                  ("same", "tenant-a", 32)):
            b.add_request(req_id, P, max_tokens=2, **tenant(name))
            rec = b.run_until_done()[req_id]
            assert rec.num_external_tokens == hit, req_id
            assert rec.computed_positions == list(range(hit, 41)), req_id
            assert kv_is_model(b, req_id)


def test_a_pool_written_before_the_layout_fix_never_feeds_the_connector(daemon, model_dir):
    """A prompt a version-1 connector saved (its sequences unsalted, vLLM's CPU K stored as the
    kernels arrange it) is no hit: every sequence of this one is salted with
    kv_layout.LAYOUT_VERSION; the same prompt saved by this connector is."""
    from kvpool.vllm.kv_layout import LAYOUT_VERSION

    assert LAYOUT_VERSION == 2
    P = tokens(40, 11)
    with daemon.client(pool="vllm", namespace=NS) as c:  # as version 1 saved it
        with c.open(P) as seq:
            seq.alloc(len(P))
            kv = np.zeros((32, 2, 16), dtype=np.uint16)  # bf16 bits
            for layer in range(2):
                seq.write_kv(0, layer, 0, kv, kv)
            seq.commit(32)
        with c.open(P) as seq:
            assert seq.lookup() == 32
    with engine(model_dir, daemon) as b:
        b.add_request("old", P, max_tokens=2)
        assert b.run_until_done()["old"].num_external_tokens == 0
    with engine(model_dir, daemon) as b:
        b.add_request("new", P, max_tokens=2)
        assert b.run_until_done()["new"].num_external_tokens == 32


def run_collecting_stats(engine):
    """Steps to the end; the connector stats of every step as vLLM's SchedulerStats carry them
    (both sides' counters for the step, summed by vLLM)."""
    collected = []
    while engine.scheduler.has_requests() or not all(r.finished for r in
                                                     engine.records.values()):
        _, outputs = engine.step()
        for eco in outputs.values():
            stats = eco.scheduler_stats
            if stats is not None and stats.kv_connector_stats:
                collected.append(stats.kv_connector_stats)
    return collected


def test_stats_in_vllms_form(daemon, model_dir):
    """Both sides' counters as vLLM's KVConnectorStats, taken by vLLM each step, summed by its
    KVConnectorLogging and logged as one line."""
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorLogging

    P = tokens(53, 8)
    with engine(model_dir, daemon, log_stats=True) as a, \
            engine(model_dir, daemon, log_stats=True) as b:
        a.add_request("p", P, max_tokens=4)
        b.add_request("q", P, max_tokens=2)
        steps = run_collecting_stats(a)
        steps += run_collecting_stats(b)
        logging = KVConnectorLogging(a.vllm_config.kv_transfer_config)
        for data in steps:
            logging.observe(data)
        lines = []
        logging.log(lambda fmt, arg: lines.append(fmt % arg))
        # A block: 2 layers, K and V, 16 tokens x 2 heads x 16 dims of bf16: 4096 bytes.
        assert lines == ["KV Transfer metrics: loaded_blocks=3, loaded_bytes=12288, "
                         "loaded_tokens=48, offered_tokens=48, saved_blocks=3, "
                         "saved_bytes=12288, saved_tokens=48"]
