# SPDX-License-Identifier: MIT
"""kvpool.engine in one process: the tokens through kvpool equal the reference's for every
preset, through the daemon and through a mapping, prompts ending inside and on a block
boundary, windows dropping blocks; bf16 logits within a tolerance; preemption; refusals."""
import pytest

torch = pytest.importorskip("torch", reason="the engine needs torch (apt-get install "
                                            "python3-torch)")

from engine_helpers import RUN, SEEDS, parse, reference, run_here  # noqa: E402
from conftest import start_daemon  # noqa: E402
from helpers import pool_stats  # noqa: E402

from kvpool import engine  # noqa: E402

WINDOWED = ("swa", "rswa", "chunked")  # kinds that drop blocks (cyclic reuses its ring)
# bf16 logits: a K or V element rounded the other way (2^-8 relative), when the daemon's f32
# attention differs from torch's in the last bit before the rounding, moves logits (standard
# deviation about 8) by up to 0.05 in these runs; allow 5 times that.
BF16_LOGIT_TOLERANCE = 0.25


def argv_for(daemon, model, mode, prompt):
    argv = ["--socket", daemon.socket, "--model", model, "--seed", str(SEEDS[model]),
            "--prompt-tokens", str(prompt)] + RUN
    return argv + (["--attend", "local", "--namespace", "ns1"] if mode == "local" else [])


@pytest.mark.parametrize("mode", ["daemon", "local"])
@pytest.mark.parametrize("model", list(SEEDS))
def test_tokens_equal_the_reference(daemon, model, mode):
    seed = SEEDS[model]
    name = f"engine-{model}-{seed}-f32"
    # 40: the prompt ends inside a block (16 tokens); 48: on a boundary. The second run
    # finds the first's shared prefix in the pool's prefix cache.
    for run, prompt in enumerate((40, 48)):
        want, margin = reference(model, seed, prompt)
        assert margin >= 1e-3
        rc, out, err = run_here(argv_for(daemon, model, mode, prompt))
        assert rc == 0, err
        got, summary = parse(out)
        assert {rid: tokens for rid, (tokens, _) in got.items()} == want
        assert summary["requests"] == 4 and summary["tokens"] == 160
        hits = [hit for _, hit in got.values()]
        # The shared prefix's 2 whole blocks, once a request has committed them; a cyclic
        # group's by the window snapshot its prompt's end (32, 48) left, copied into the ring.
        assert hits == ([0, 32, 32, 32] if run == 0 else [32, 32, 32, 32])
        with daemon.client() as c:
            p = pool_stats(c, name)
            assert (p["sequences"], p["blocks_used"]) == (0, 0)
            for g in p["groups"]:
                if g["kind"] in WINDOWED:
                    assert g["window_drops"] > 0, g
        assert err == "kvpool.engine: 0 preemptions\n"


@pytest.mark.parametrize("model", list(SEEDS))
def test_bf16_logits_within_tolerance_of_the_reference(daemon, tmp_path, model):
    def logits(argv):
        _, requests, _ = engine.run(engine.parse_args(argv), keep_logits=True)
        return requests

    base = ["--model", model, "--seed", str(SEEDS[model]), "--prompt-tokens", "40",
            "--dtype", "bf16"] + RUN
    want = logits(base + ["--reference"])
    # --attend local needs a pool restricted to a namespace: a daemon of its own makes it.
    (tmp_path / "local").mkdir()
    local = start_daemon(tmp_path / "local")
    try:
        for argv in (["--socket", daemon.socket],
                     ["--socket", local.socket, "--attend", "local", "--namespace", "ns1"]):
            compared = 0
            for a, b in zip(want, logits(base + argv)):
                assert a.id == b.id
                for step, (la, lb) in enumerate(zip(a.logits, b.logits)):
                    assert float((la - lb).abs().max()) <= BF16_LOGIT_TOLERANCE, (argv, step)
                    compared += 1
                    if a.generated[step] != b.generated[step]:
                        break  # past a flipped token the sequences differ: nothing to compare
            assert compared >= 4
    finally:
        local.stop()


def test_preemption_when_the_pool_holds_too_few_blocks(daemon):
    # 8 usable blocks; a request needs 6 at its longest (88 tokens) and 6 run at once.
    want, _ = reference("llama", SEEDS["llama"], 48, requests=6)
    rc, out, err = run_here(["--socket", daemon.socket, "--model", "llama", "--seed",
                             str(SEEDS["llama"]), "--requests", "6", "--prompt-tokens", "48",
                             "--shared-prefix", "32", "--max-new", "40", "--blocks", "9"])
    assert rc == 0, err
    got, _ = parse(out)
    assert {rid: tokens for rid, (tokens, _) in got.items()} == want
    preemptions = int(err.split()[1])
    assert err == f"kvpool.engine: {preemptions} preemptions\n" and preemptions > 0
    with daemon.client() as c:
        p = pool_stats(c, f"engine-llama-{SEEDS['llama']}-f32")
        assert (p["blocks_total"], p["sequences"], p["blocks_used"]) == (9, 0, 0)
        assert p["nospace"] > 0
