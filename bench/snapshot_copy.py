#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""snapshot_copy: what a window-snapshot hit costs against writing the same KV (#55).

A pool of `full` + `cyclic W` (bs 16, f16, --kv-heads x --head-dim, --layers per group, a
prefill step of 512). Sequence a computes a prompt of --prompt tokens, its KV written and
committed: its commit of the prompt's end makes the snapshot (the last W-1 tokens' KV of the
cyclic group, cdiv(W-1, 16) blocks). Then, --rounds times: an ALLOC with the cache of a
sequence with a's prompt and one token more (its hit copies the snapshot into its new ring),
against the same ALLOC of a sequence that shares nothing (no hit, no copy); and the WRITE_KVs
that put the same W-1 tokens' KV of the cyclic group into a ring from the client, as an
engine without the snapshot would (after recomputing them). Medians, in ms.

Starts a private kvpoold (KVPOOLD, default build/bin/kvpoold) unless --socket names one
(whose admin it must be: it creates an owned pool).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "lib", "python"))
import kvpool  # noqa: E402

BS = 16
STEP = 512


def start_daemon(sock):
    binary = os.environ.get("KVPOOLD", os.path.join(ROOT, "build", "bin", "kvpoold"))
    daemon = subprocess.Popen([binary, "-q", "--socket", sock])
    while True:  # ready once it accepts
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
            if probe.connect_ex(sock) == 0:
                return daemon
        if daemon.poll() is not None:
            sys.exit("snapshot_copy: kvpoold did not start")
        time.sleep(0.01)


def prefill(seq, first, end, k, v, layers):
    """Slots, KV of both groups and every layer, and the commit, STEP tokens at a time."""
    while first < end:
        n = min(STEP, end - first)
        seq.alloc(n)
        for g in (0, 1):
            for layer in range(layers):
                seq.write_kv(g, layer, first, k[:n], v[:n])
        first += n
        seq.commit(first)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", help="a running kvpoold (default: start one)")
    ap.add_argument("--window", type=int, default=1024, help="the cyclic group's W (1024)")
    ap.add_argument("--prompt", type=int, default=4096, help="a's prompt, tokens (4096)")
    ap.add_argument("--kv-heads", type=int, default=8, help="kv heads (8)")
    ap.add_argument("--head-dim", type=int, default=128, help="head dim (128)")
    ap.add_argument("--layers", type=int, default=4, help="layers per group (4)")
    ap.add_argument("--rounds", type=int, default=9, help="rounds, medians kept (9)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = ap.parse_args()
    w1 = args.window - 1
    token_bytes = 2 * args.kv_heads * args.head_dim * 2 * args.layers  # K and V, f16, a group
    ring_blocks = -(-(w1 + STEP) // BS)
    per_seq = 2 * (-(-(args.prompt + 1) // BS)) + ring_blocks
    blocks = 1 + (args.rounds + 2) * 2 * per_seq + 2 * -(-w1 // BS)
    rng = np.random.default_rng(1)
    k = rng.standard_normal((STEP, args.kv_heads, args.head_dim)).astype(np.float16)
    v = rng.standard_normal((STEP, args.kv_heads, args.head_dim)).astype(np.float16)

    tmp = daemon = None
    sock = args.socket
    if not sock:
        tmp = tempfile.mkdtemp(prefix="snapshot_copy.")
        sock = os.path.join(tmp, "kvpool.sock")
        daemon = start_daemon(sock)
    hit_ms, cold_ms, write_ms, hits = [], [], [], []
    try:
        arena = 2 * STEP * args.kv_heads * args.head_dim * 2 + (1 << 20)
        with kvpool.Client(sock, admin=True, arena_bytes=max(arena, 16 << 20)) as c:
            name = "snapshot-copy-%d" % os.getpid()
            c.create_pool(name, blocks, BS, [("full", 0), ("cyclic", args.window)],
                          kv_heads=args.kv_heads, head_dim=args.head_dim,
                          layers_per_group=args.layers, dtype="f16", owned=True,
                          max_step_tokens=STEP, keys="snapshot_every = 0\n")
            c.attach(name)
            prompt = list(range(1, args.prompt + 1))
            a = c.open(prompt)
            prefill(a, 0, args.prompt, k, v, args.layers)
            a.lookup()  # an entry on a waits for its last COMMIT's snapshot copies
            for r in range(args.rounds):
                b = c.open(prompt + [7])
                t = time.perf_counter()
                hits.append(b.alloc(1, use_cache=True))
                hit_ms.append((time.perf_counter() - t) * 1e3)
                cold = c.open(list(range(10**6 * (r + 1), 10**6 * (r + 1) + args.prompt + 1)))
                t = time.perf_counter()
                cold.alloc(1, use_cache=True)
                cold_ms.append((time.perf_counter() - t) * 1e3)
                cold.free()
                # The window's KV from the client instead: W-1 tokens, every layer, into a
                # ring (timed), the full group's and the commits around them not.
                first, spent = 0, 0.0
                while first < w1:
                    n = min(STEP, w1 - first)
                    cold.alloc(n)
                    t = time.perf_counter()
                    for layer in range(args.layers):
                        cold.write_kv(1, layer, first, k[:n], v[:n])
                    spent += time.perf_counter() - t
                    for layer in range(args.layers):
                        cold.write_kv(0, layer, first, k[:n], v[:n])
                    first += n
                    cold.commit(first)
                write_ms.append(spent * 1e3)
                b.close()
                cold.close()
            a.close()
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait()
            os.rmdir(tmp)
    hit, cold, write = (statistics.median(x) for x in (hit_ms, cold_ms, write_ms))
    mb = w1 * token_bytes / 1e6
    out = {"window": args.window, "prompt": args.prompt, "kv_heads": args.kv_heads,
           "head_dim": args.head_dim, "layers": args.layers, "hit_tokens": hits[0],
           "snapshot_blocks": -(-w1 // BS), "window_mb": round(mb, 1),
           "alloc_hit_ms": round(hit, 2), "alloc_cold_ms": round(cold, 2),
           "copy_ms": round(hit - cold, 2), "write_kv_ms": round(write, 2)}
    if args.json:
        print(json.dumps(out))
        return
    print("snapshot-copy: cyclic %d, %d-token prompt, %d kv heads x %d, %d layers, f16: "
          "hit %d tokens" % (args.window, args.prompt, args.kv_heads, args.head_dim,
                             args.layers, hits[0]))
    print("  ALLOC with the snapshot's copy (%d blocks, %.1f MB): %.2f ms; without: %.2f ms; "
          "the copy: %.2f ms" % (out["snapshot_blocks"], mb, hit, cold, hit - cold))
    print("  the same KV by WRITE_KV from the client: %.2f ms" % write)


if __name__ == "__main__":
    main()
