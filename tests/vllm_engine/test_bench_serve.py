# SPDX-License-Identifier: MIT
"""bench/vllm_serve.py as docs/vllm.md runs it, on a workload small enough for a test: three
conversations of two turns behind round robin, the kvpool leg only (LMCache is the bench's
alone). The hits it reports are exact: which server holds which blocks follows from the
trace."""
import json
import os
import subprocess
import sys

from conftest import ROOT


def test_vllm_serve_bench_counts_the_hits_that_crossed_servers(tmp_path):
    out = tmp_path / "rows.jsonl"
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "vllm_serve.py"), "--connectors", "kvpool",
         "--systems", "1", "--conversations", "3", "--turns", "2", "--block-tokens", "64",
         "--output-tokens", "4", "--decode-reps", "2", "--decode-tokens", "16",
         "--probe-lengths", "100", "--probe-reps", "1", "--json", str(out),
         "--logs", str(tmp_path / "logs"), "--python", sys.executable],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    # Trace blocks of 64 tokens, vLLM's of 32; a system prompt of 128 tokens. Turn 1: 256, 251
    # and 246 tokens (conversations 0, 1, 2 on servers 1, 2, 1); turn 2: 384, 379, 374 (on
    # servers 2, 1, 2), each the other server's turn 1 and 128 tokens more.
    assert row["connector"] == "kvpool" and row["requests"] == 6
    assert row["prompt_tokens"] == 256 + 251 + 246 + 384 + 379 + 374
    # vLLM's own: the system prompt on each server but the first time (4 requests of 128).
    assert row["hit_tokens_own"] == 4 * 128
    # Through the pool: server 2's first request, the system prompt (128); turn 2, the other
    # server's turn 1 beyond the system prompt, in whole blocks of its prompt and output
    # (256 of 256 + 4 tokens: 128; 224 of 251 + 4 and of 246 + 4: 96 each).
    assert row["hit_tokens_connector"] == 128 + 128 + 96 + 96
    assert abs(row["hit_share_connector"] - 448 / 960) < 1e-9
    probe = row["probes"]["100"]
    assert len(probe["each_s"]) == 1 and probe["cross_s"] > 0
    assert row["decode_tokens_per_s"] > 0 and row["decode_ratio"] > 0
    assert "| kvpool |" in run.stdout
