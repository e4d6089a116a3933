#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""python_step: one decode step of running sequences, driven from Python through kvpoold.

A step is an ALLOC of one token and a COMMIT for each sequence: as one batch (`with
client.batch()`, a b.alloc and a b.commit call per sequence), as one batch built by the list
form (b.alloc(seqs, 1); b.commit(seqs, n)), and as that many unbatched calls. Client and daemon spin (spin
mode). The figure to beat: vLLM v1's Python KV manager doing the same step in process,
~4 us per sequence on these machines (~260 us for 64 sequences).

Starts a private kvpoold (KVPOOLD, default build/bin/kvpoold) unless --socket names one
(whose admin it must be: it creates an owned pool). Prints the median step of --rounds.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "lib", "python"))
import kvpool  # noqa: E402

VLLM_US_PER_SEQ = 4.0  # ../shared/README.md: allocate_slots, full attention


def steps(client, seqs, n, done, mode):
    t = time.perf_counter()
    for _ in range(n):
        done += 1
        if mode == "batched":
            with client.batch() as b:
                for s in seqs:
                    b.alloc(s, 1)
                for s in seqs:
                    b.commit(s, done)
        elif mode == "lists":
            with client.batch() as b:
                b.alloc(seqs, 1)
                b.commit(seqs, done)
        else:
            for s in seqs:
                s.alloc(1)
            for s in seqs:
                s.commit(done)
    return (time.perf_counter() - t) / n * 1e6, done


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", help="a running kvpoold (default: start one)")
    ap.add_argument("--seqs", type=int, default=64, help="running sequences (default 64)")
    ap.add_argument("--steps", type=int, default=200, help="steps per round (default 200)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, the median kept (default 5)")
    ap.add_argument("--spin-us", type=int, default=200, help="client and daemon spin (default 200)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = ap.parse_args()

    tmp = daemon = None
    sock = args.socket
    if not sock:
        tmp = tempfile.mkdtemp(prefix="python_step.")
        sock = os.path.join(tmp, "kvpool.sock")
        binary = os.environ.get("KVPOOLD", os.path.join(ROOT, "build", "bin", "kvpoold"))
        daemon = subprocess.Popen([binary, "-q", "--socket", sock, "--spin-us", str(args.spin_us)])
        while True:  # ready once it accepts (the path appears at bind, before listen)
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
                if probe.connect_ex(sock) == 0:
                    break
            if daemon.poll() is not None:
                sys.exit("python_step: kvpoold did not start")
            time.sleep(0.01)
    modes = ("batched", "lists", "unbatched")
    prompt = 16 + len(modes) * args.rounds * args.steps + 16
    try:
        with kvpool.Client(sock, admin=True, spin_us=args.spin_us) as c:
            name = "python-step-%d" % os.getpid()
            c.create_pool(name, args.seqs * (prompt // 16 + 2) + 1, 16, [("full", 0)], owned=True)
            c.attach(name)
            seqs = [c.open(range(i * prompt, (i + 1) * prompt)) for i in range(args.seqs)]
            for s in seqs:
                s.alloc(16)
                s.commit(16)
            done, times = 16, {m: [] for m in modes}
            for _ in range(args.rounds):
                for m in modes:
                    us, done = steps(c, seqs, args.steps, done, m)
                    times[m].append(us)
            for s in seqs:
                s.close()
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait()
            os.rmdir(tmp)
    b, li, u = (statistics.median(times[m]) for m in modes)
    vllm = VLLM_US_PER_SEQ * args.seqs
    out = {"seqs": args.seqs, "batched_us": round(b, 1), "batched_lists_us": round(li, 1),
           "unbatched_us": round(u, 1), "vllm_us": vllm,
           "speedup_vs_vllm": round(vllm / b, 2), "speedup_lists_vs_vllm": round(vllm / li, 2)}
    if args.json:
        print(json.dumps(out))
        return
    print("python-step: %d sequences, one ALLOC(1) + one COMMIT each, spin %d us" % (args.seqs, args.spin_us))
    print("  batched   (one batch of %d ops): %7.1f us/step  %5.2f us/seq" % (2 * args.seqs, b, b / args.seqs))
    print("  batched, b.alloc(seqs) form:     %7.1f us/step  %5.2f us/seq" % (li, li / args.seqs))
    print("  unbatched (%d calls):            %7.1f us/step  %5.2f us/seq" % (2 * args.seqs, u, u / args.seqs))
    print("  vLLM v1 KV manager, in process:  %7.1f us/step  %5.2f us/seq (../shared/README.md)" % (vllm, VLLM_US_PER_SEQ))
    print("  batched vs vLLM: %.1fx; b.alloc(seqs) form: %.1fx" % (vllm / b, vllm / li))


if __name__ == "__main__":
    main()
