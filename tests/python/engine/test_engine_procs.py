# SPDX-License-Identifier: MIT
"""Engines in processes of their own on one pool: the second hits the first's prompts, both
give the reference's tokens, one killed mid-run changes nothing for the other and leaves
nothing held. And the engine's refusals, each naming its cause."""
import signal

import pytest

pytest.importorskip("torch", reason="the engine needs torch (apt-get install python3-torch)")

from engine_helpers import SEEDS, parse, reference, run_here, spawn  # noqa: E402
from helpers import pool_stats, wait_for  # noqa: E402

MODEL = "gemma3"  # hybrid: 5 sliding-window groups and a full one
SEED = SEEDS[MODEL]
POOL = f"engine-{MODEL}-{SEED}-f32"


def argv(daemon, first_id, requests=4, max_new=40):
    return ["--socket", daemon.socket, "--model", MODEL, "--seed", str(SEED), "--first-id",
            str(first_id), "--requests", str(requests), "--prompt-tokens", "40",
            "--shared-prefix", "32", "--max-new", str(max_new)]


def finish(proc):
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return parse(out)[0]


def check(got, first_id, requests=4, max_new=40):
    want, margin = reference(MODEL, SEED, 40, first_id, requests, max_new)
    assert margin >= 1e-3
    assert {rid: tokens for rid, (tokens, _) in got.items()} == want


def assert_every_block_free(daemon):
    with daemon.client() as c:
        assert wait_for(lambda: pool_stats(c, POOL)["sequences"] == 0)
        p = pool_stats(c, POOL)
        assert (p["blocks_used"], p["blocks_free"]) == (0, p["blocks_total"] - 1)


def test_two_engines_one_after_the_other(daemon):
    first = finish(spawn(argv(daemon, 0)))
    check(first, 0)
    second = finish(spawn(argv(daemon, 100)))
    check(second, 100)
    # Every request of the second finds the shared prefix's 2 whole blocks cached.
    assert [hit for _, hit in second.values()] == [32, 32, 32, 32]
    assert_every_block_free(daemon)


def test_two_engines_at_once(daemon):
    first = spawn(argv(daemon, 0, requests=8))
    with daemon.client() as c:
        # The second starts once the first has published its shared prefix.
        assert wait_for(lambda: POOL in [p["name"] for p in c.stats()["pools"]] and
                        pool_stats(c, POOL)["blocks_cached"] >= 2 * 6, timeout=60)
        second = spawn(argv(daemon, 100))
        assert wait_for(lambda: pool_stats(c, POOL)["clients"] == 2 or
                        second.poll() is not None or first.poll() is not None)
    got_first, got_second = finish(first), finish(second)
    check(got_first, 0, requests=8)
    check(got_second, 100)
    assert all(hit >= 32 for _, hit in got_second.values())
    assert_every_block_free(daemon)


def test_killing_one_engine_leaves_the_other_unchanged(daemon):
    victim = spawn(argv(daemon, 0, requests=8, max_new=400))
    with daemon.client() as c:
        assert wait_for(lambda: POOL in [p["name"] for p in c.stats()["pools"]] and
                        pool_stats(c, POOL)["sequences"] > 0, timeout=60)
        other = spawn(argv(daemon, 100))
        assert wait_for(lambda: pool_stats(c, POOL)["clients"] == 2, timeout=60)
        assert wait_for(lambda: pool_stats(c, POOL)["sequences"] > 4, timeout=60)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    assert victim.returncode == -signal.SIGKILL
    check(finish(other), 100)
    assert_every_block_free(daemon)


def test_refusals_name_their_cause(daemon):
    rc, out, err = run_here(["--model", MODEL, "--attend", "local"])
    assert (rc, out) == (2, "")
    assert "--attend local maps the pool, and only a pool restricted to a namespace can be " \
           "mapped: give --namespace NAME" in err
    rc, _, err = run_here(["--model", "gpt5"])
    assert rc == 2 and "invalid choice: 'gpt5'" in err
    rc, _, err = run_here(["--model", MODEL, "--shared-prefix", "50", "--prompt-tokens", "40"])
    assert rc == 2 and "--shared-prefix must be 0..--prompt-tokens" in err
    rc, _, err = run_here(["--model", MODEL, "--blocks", "1"])
    assert rc == 2 and "--blocks must be at least 2 (block 0 is the null block)" in err
    rc, _, err = run_here(["--model", MODEL, "--device", "cuda:x"])
    assert rc == 2 and "--device cuda:x: cpu or cuda[:N]" in err

    # A pool of this name with another geometry.
    with daemon.client(admin=True) as c:
        c.create_pool(POOL, 64, 16, [("full", 0)], kv_heads=2, head_dim=32, dtype="f32")
    rc, out, err = run_here(argv(daemon, 0))
    assert (rc, out) == (1, "")
    assert err.startswith(f"kvpool.engine: pool {POOL} exists with another geometry: groups "
                          "[('full', 0)], layers_per_group 1")

    # --attend local on a pool open to every namespace.
    with daemon.client(admin=True) as c:
        c.create_pool(f"engine-llama-{SEED}-f32", 64, 16, [("full", 0)], kv_heads=2,
                      head_dim=32, layers_per_group=4, dtype="f32")
    rc, out, err = run_here(argv(daemon, 0) + ["--attend", "local", "--namespace", "ns1",
                                                "--model", "llama"])
    assert (rc, out) == (1, "")
    assert err == (f"kvpool.engine: --attend local maps the pool, and only a pool restricted "
                   f"to the client's namespace can be mapped: pool engine-llama-{SEED}-f32 is "
                   "not restricted to namespace 'ns1' (a new pool is, with --namespace NAME)\n")

    # A pool too small for one request, with nothing else in it: at admission (4 groups of
    # 2 blocks for the first chunk) and later (one group; the fourth block at token 48).
    for model, at in (("llama4", " at 40 tokens"), ("llama", " at 49 tokens")):
        rc, out, err = run_here(argv(daemon, 0) + ["--model", model, "--seed", "99",
                                                    "--blocks", "4"])
        assert (rc, out) == (1, "")
        assert err == (f"kvpool.engine: request 0{at} needs more blocks than the pool has "
                       "(3 usable, none in use): use a pool with more blocks (--blocks when "
                       "this engine creates it)\n")

    # A namespace quota (tight: 2 blocks a pool) too small for one request.
    rc, out, err = run_here(argv(daemon, 0) + ["--namespace", "tight", "--seed", "98"])
    assert (rc, out) == (1, "")
    assert err.startswith("kvpool.engine: request 0 at 40 tokens: ") and err.endswith(
        ", with nothing of this engine running: a quota of this uid or namespace is too small "
        "for it (kvctl clients shows the quotas)\n"), err

    # A cyclic pool made elsewhere with max_step_tokens below the engine's chunks.
    with daemon.client(admin=True) as c:
        c.create_pool("engine-cyclic-97-f32", 64, 16, [("cyclic", 24)], kv_heads=2,
                      head_dim=32, layers_per_group=4, dtype="f32")
    rc, out, err = run_here(argv(daemon, 0) + ["--model", "cyclic", "--seed", "97"])
    assert (rc, out) == (1, "")
    assert err == ("kvpool.engine: pool engine-cyclic-97-f32 refuses an alloc of 32 tokens: its "
                   "max_step_tokens is below the 32 this engine's prefill chunks need (a pool "
                   "made elsewhere: destroy it, or use another --seed)\n")

    # No daemon at the socket.
    rc, out, err = run_here(argv(daemon, 0) + ["--socket", daemon.socket + ".none"])
    assert (rc, out) == (1, "")
    assert "is kvpoold running?" in err and daemon.socket + ".none" in err


def test_help_names_every_option_and_preset():
    rc, out, _ = run_here(["--help"])
    assert rc == 0
    for word in ("--socket PATH", "--model PRESET", "--seed N", "--first-id N", "--requests N",
                 "--prompt-tokens N", "--shared-prefix N", "--max-new N", "--blocks N",
                 "--namespace NAME", "--attend {daemon,local}", "--reference",
                 "--dtype {f32,bf16}", "--device cpu|cuda", "llama ", "mistral ", "gemma3 ",
                 "llama4 ", "rswa ", "cyclic ", "request ID tokens T1 ... TN prefix_hit H",
                 "summary requests R tokens T seconds S tokens_per_s X min_margin M"):
        assert word in out, word
