# SPDX-License-Identifier: MIT
"""KvpoolConnector across machines: two kvpoold (two machines, as far as their pools go) on one
Redis Cluster (tests/python/redis_cluster.py), an engine on each under vLLM's own scheduler
(harness.py). A prompt engine A served is loaded by engine B from the cluster, byte for byte;
B's offer waits for the cluster's round without holding B's scheduler (vLLM is answered None,
"not known yet", and schedules others); a round that times out makes the request a miss,
computed whole."""
import os
import signal
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import vllm  # noqa: F401
except Exception as e:
    pytest.skip(f"vllm is not importable: {e!r}", allow_module_level=True)

from conftest import BLOCK, DAEMON, _MODEL_POOL, connector_config, daemon_env  # noqa: E402
from daemon_proc import Daemon  # noqa: E402
from redis_cluster import Cluster  # noqa: E402
import harness  # noqa: E402
from kvcheck import kv_digest  # noqa: E402

TIMEOUT_MS = 400


def tokens(n, seed):
    return [(seed * 131 + 7 * i) % harness.VOCAB_SIZE for i in range(n)]


@pytest.fixture
def machines(tmp_path):
    """(cluster, daemon A, daemon B): pool vllm on each, both on the cluster."""
    cluster = Cluster(tmp_path)
    config = ("[pool.vllm]\nblocks = 129\n" + _MODEL_POOL.format(heads=2, layout="layer") +
              "tier_remote = %s\ntier_remote_timeout_ms = %d\n" % (cluster.url, TIMEOUT_MS))
    daemons = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            daemons.append(Daemon(tmp_path / name, config, DAEMON, env=daemon_env()))
        yield cluster, *daemons
    finally:
        for d in daemons:
            d.stop()
        cluster.stop()


def engine(model_dir, daemon, lookup_wait_ms=0, **kw):
    """lookup_wait_ms 0: an offer that needs the cluster is deferred at least once."""
    config = connector_config(daemon)
    config["kv_connector_extra_config"]["lookup_wait_ms"] = lookup_wait_ms
    return harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=config, **kw)


def counts(e):
    return e.scheduler_connector._sched.counts


def serve_on_a(model_dir, daemon, prompt):
    """Engine A serves prompt; its 3 full blocks go to the cluster. Their KV's digest."""
    with engine(model_dir, daemon) as a:
        a.add_request("p", prompt, max_tokens=4)
        assert a.run_until_done()["p"].num_external_tokens == 0
        digest = kv_digest(a, "p", range(48))
        assert counts(a)["saved_tokens"] == 48
    with daemon.client(admin=True) as admin:
        admin.pool_sync("vllm")  # the sends are back: the cluster holds them
    return digest


def test_a_prompt_served_on_one_machine_is_loaded_on_another(machines, model_dir):
    _, one, two = machines
    P, suffix = tokens(53, 41), tokens(20, 42)
    digest = serve_on_a(model_dir, one, P)
    with engine(model_dir, two) as b:
        b.add_request("q", P + suffix, max_tokens=4)
        rb = b.run_until_done()["q"]
        assert rb.num_external_tokens == 48
        assert rb.computed_positions == list(range(48, 73 + 3))
        assert kv_digest(b, "q", range(48)) == digest
        assert rb.output_tokens == harness.expected_outputs(P + suffix, 4)
        c = counts(b)
        assert (c["offered_tokens"], c["loaded_tokens"], c["lost_tokens"]) == (48, 48, 0)
        assert c["offers_deferred"] >= 1
    with two.client(admin=True) as admin:
        r = next(p["tier_remote"] for p in admin.stats()["pools"] if p["name"] == "vllm")
        assert (r["promoted"], r["hit_tokens"]) == (3, 48)


def test_a_round_that_times_out_holds_no_scheduler_and_is_a_miss(machines, model_dir):
    cluster, one, two = machines
    P, suffix = tokens(53, 43), tokens(20, 44)
    serve_on_a(model_dir, one, P)
    # Long enough for a local answer on a loaded machine, far less than the round.
    with engine(model_dir, two, lookup_wait_ms=50) as b:
        # B's first round makes its connections and reads the slot map: before the stop.
        b.add_request("warm", tokens(40, 45), max_tokens=1)
        b.run_until_done()
        stopped = []
        try:
            for port in cluster.ports:
                os.kill(cluster.procs[port].pid, signal.SIGSTOP)
                stopped.append(port)
            b.add_request("r", P + suffix, max_tokens=4)
            # Under a block: nothing a hit could cover, so its offer asks no one.
            b.add_request("s", tokens(10, 46), max_tokens=4)
            t0 = time.monotonic()
            so, _ = b.step()
            assert time.monotonic() - t0 < TIMEOUT_MS / 2000
            assert set(so.num_scheduled_tokens) == {"s"}
            # Steps with nothing to schedule while r waits: as fast as the loop goes.
            rec = b.run_until_done(max_steps=10 ** 7)
            assert time.monotonic() - t0 >= TIMEOUT_MS / 1000 * 0.95
        finally:
            for port in stopped:
                os.kill(cluster.procs[port].pid, signal.SIGCONT)
        r = rec["r"]
        assert r.num_external_tokens == 0
        assert r.computed_positions == list(range(73 + 3))
        assert r.output_tokens == harness.expected_outputs(P + suffix, 4)
        assert rec["s"].output_tokens == harness.expected_outputs(tokens(10, 46), 4)
        c = counts(b)
        assert c["offers_deferred"] >= 1 and c["offered_tokens"] == 0
    with two.client(admin=True) as admin:
        r = next(p["tier_remote"] for p in admin.stats()["pools"] if p["name"] == "vllm")
        assert r["timeouts"] >= 1 and r["hit_tokens"] == 0


@pytest.mark.parametrize("wait", ["soon", -1, None])
def test_a_bad_lookup_wait_is_refused_naming_it(wait):
    from kvpool.vllm.geometry import ConfigError
    from kvpool.vllm.scheduler import lookup_wait_of
    with pytest.raises(ConfigError) as ei:
        lookup_wait_of({"lookup_wait_ms": wait})
    assert str(ei.value) == f"lookup_wait_ms {wait!r}: milliseconds, 0 or more"
    assert (lookup_wait_of({}), lookup_wait_of({"lookup_wait_ms": 0})) == (0.0005, 0.0)
