# SPDX-License-Identifier: MIT
"""Failures never reach vLLM: kvpoold absent when the engines start, killed while they serve (no
hits, no exception, the KV still the model's), back (hits resume); the pool full and a quota
refusal (saves skipped and counted)."""
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import vllm  # noqa: F401
except Exception as e:
    pytest.skip(f"vllm is not importable: {e!r}", allow_module_level=True)

from conftest import BLOCK, NS, ROOT, connector_config, start_daemon  # noqa: E402
import harness  # noqa: E402
from kvcheck import kv_is_model  # noqa: E402
import kvpool.vllm.link  # noqa: E402


def tokens(n, seed):
    return [(seed * 97 + 5 * i) % harness.VOCAB_SIZE for i in range(n)]


def serve(engine, req_id, prompt):
    engine.add_request(req_id, prompt, max_tokens=2)
    rec = engine.run_until_done()[req_id]
    assert rec.output_tokens == harness.expected_outputs(prompt, 2), req_id
    assert kv_is_model(engine, req_id), req_id
    return rec


def counts(engine):
    return engine.scheduler_connector._sched.counts


def hits_resume(a, b, tmp_path, seed):
    """kvpoold started (again) in tmp_path: within three rounds of A saving a prompt and B
    serving it, B hits. The first save or load after a restart may be dropped (a worker that
    finds its daemon replaced makes none of that step's copies)."""
    d = start_daemon(tmp_path)
    try:
        time.sleep(0.2)
        hits = []
        for i in range(4):
            R = tokens(40, seed + i)
            serve(a, f"r{i}", R)
            hits.append(serve(b, f"r{i}", R + [1]).num_external_tokens)
            if hits[-1]:
                break
        assert hits[-1] == 32 and len(hits) <= 3, (hits, str(counts(a)), str(counts(b)))
    finally:
        d.stop()


def test_daemon_killed_then_back(daemon, model_dir, tmp_path, monkeypatch):
    """A saves, B (another engine: A's own hits would be vLLM's) loads."""
    # The back-off (1 s doubling to 30 s) shortened: reconnects within a round of requests.
    monkeypatch.setattr(kvpool.vllm.link, "BACKOFF_FIRST", 0.05)
    monkeypatch.setattr(kvpool.vllm.link, "BACKOFF_MAX", 0.1)
    cfg = connector_config(daemon)
    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg) as a, \
            harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg) as b:
        P = tokens(40, 1)
        serve(a, "p", P)
        assert serve(b, "p", P + [1]).num_external_tokens == 32
        daemon.kill()
        # Away: both serve all the same, computing in full; nothing saved, nothing loaded.
        Q = tokens(40, 2)
        assert serve(a, "q", Q).computed_positions == list(range(41))
        assert serve(b, "q", Q + [1]).computed_positions == list(range(42))
        assert counts(a)["daemon_away"] >= 1 and counts(b)["daemon_away"] >= 1
        # Back, with an empty pool: hits resume.
        hits_resume(a, b, tmp_path, seed=10)


def test_a_planned_restart_keeps_what_was_saved(daemon, model_dir, monkeypatch):
    """kvctl daemon restart while two engines serve: the pool and its cache are handed over.
    A request after it loads the prefix A saved before it, its KV the model's; the worker's
    views of the pool are kept (the same generation: the same memory)."""
    monkeypatch.setattr(kvpool.vllm.link, "BACKOFF_FIRST", 0.05)
    monkeypatch.setattr(kvpool.vllm.link, "BACKOFF_MAX", 0.1)
    cfg = connector_config(daemon)
    kvctl = os.path.join(ROOT, "build", "bin", "kvctl")
    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg) as a, \
            harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg) as b:
        saved = [tokens(40, 1 + i) for i in range(3)]
        for i, P in enumerate(saved):
            serve(a, f"p{i}", P)
        worker = b.worker_connector._worker
        serve(b, "warm", tokens(40, 9))  # B's worker has mapped the pool
        views = worker.layers
        r = subprocess.run([kvctl, "--socket", daemon.socket, "daemon", "restart"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        # B's first request meets the restart (its connection reset: computed in full, as in
        # an outage); the next ones load what A saved before it (each prompt once: what B
        # computed itself, vLLM's own cache hits).
        hits = [serve(b, f"q{i}", P + [1]).num_external_tokens for i, P in enumerate(saved)]
        assert hits[1:] == [32, 32] or hits == [32, 32, 32], (hits, str(counts(b)))
        assert worker.layers is views  # kept: not mapped again


def test_daemon_absent_at_start(tmp_path, model_dir, monkeypatch):
    """No kvpoold when the engines start: they start and serve without hits; once it is there,
    hits come."""
    monkeypatch.setattr(kvpool.vllm.link, "BACKOFF_FIRST", 0.05)
    monkeypatch.setattr(kvpool.vllm.link, "BACKOFF_MAX", 0.1)
    cfg = connector_config(SimpleNamespace(socket=str(tmp_path / "kvpool.sock")))
    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg) as a, \
            harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg) as b:
        P = tokens(40, 4)
        serve(a, "p", P)
        assert serve(b, "p", P + [1]).num_external_tokens == 0
        assert counts(a)["daemon_away"] >= 1 and counts(a)["saved_tokens"] == 0
        hits_resume(a, b, tmp_path, seed=20)


FILL = """
import sys
sys.path.insert(0, sys.argv[1])
import kvpool
c = kvpool.Client(sys.argv[2], pool="small", namespace="team")
s = c.open([900 + i for i in range(128)])
s.alloc(128)
print("full", flush=True)
sys.stdin.read()
"""


def test_pool_full_and_quota(daemon, model_dir):
    P = tokens(40, 2)
    holder = subprocess.Popen([sys.executable, "-c", FILL, os.path.join(ROOT, "lib", "python"),
                               daemon.socket], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "full\n"
        with harness.Engine(model_dir, block_size=BLOCK,
                            kv_transfer_config=connector_config(daemon, "small")) as a:
            serve(a, "full", P)
            c = counts(a)
            assert (c["pool_full"], c["save_skipped"], c["saved_tokens"]) == (1, 1, 0)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # Namespace tight may hold 2 blocks: the pin takes 1, the save's 3 more are refused.
    with harness.Engine(model_dir, block_size=BLOCK,
                        kv_transfer_config=connector_config(daemon, "tight", "tight")) as b:
        serve(b, "quota", tokens(60, 3))
        c = counts(b)
        assert (c.get("quota"), c["save_skipped"], c["saved_tokens"]) == (1, 1, 0), str(c)


HOLD = """
import sys
sys.path.insert(0, sys.argv[1])
import kvpool
c = kvpool.Client(sys.argv[2], pool="small", namespace="team")
seqs = []
try:
    while True:
        seqs.append(c.open([700 + len(seqs)] * 16))
        seqs[-1].alloc(16)
except kvpool.Error:
    pass
print("full", flush=True)
sys.stdin.read()
"""


def test_a_failed_pin_saves_nothing(daemon, model_dir):
    """The pool is full at B's pin (another client holds every block, A's cached ones too),
    and has room again at once: B's load is recomputed, and none of B's blocks is ever
    published (its pin's blocks are not known, so none of them could be paired with vLLM's);
    another client finds nothing of B's prompt."""
    P, suffix = tokens(69, 7), tokens(10, 8)
    with harness.Engine(model_dir, block_size=BLOCK,
                        kv_transfer_config=connector_config(daemon, "small")) as a:
        serve(a, "p", P)
        assert counts(a)["saved_tokens"] == 64
    with harness.Engine(model_dir, block_size=BLOCK,
                        kv_transfer_config=connector_config(daemon, "small")) as b:
        side = b.scheduler_connector._sched
        pin = side._pin

        def pin_in_a_full_pool(r):
            holder = subprocess.Popen([sys.executable, "-c", HOLD,
                                       os.path.join(ROOT, "lib", "python"), daemon.socket],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                assert holder.stdout.readline() == "full\n"
                return pin(r)
            finally:
                holder.stdin.close()
                holder.wait(timeout=30)
        side._pin = pin_in_a_full_pool
        rec = serve(b, "q", P + suffix)
        assert rec.computed_positions == list(range(0, 80))
        c = counts(b)
        assert (c["pool_full"], c["saved_tokens"], c["save_skipped"]) == (1, 0, 1), str(c)
    with daemon.client(pool="small", namespace=NS) as c, c.open(P + suffix + [1]) as s:
        assert s.lookup() == 0
