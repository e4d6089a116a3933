#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""remote_promote: promotion from the cluster tier against redis-benchmark (#56, #57).

One Redis of its own on a loopback port (standalone: one node, as redis-benchmark measures
one), two kvpoold (machine A and machine B as far as the pool goes), each with the same pool:
`full`, blocks of 16 tokens, --kv-heads x --head-dim f16, --layers layers (a block's value is
its KV plus a 64-byte header: 256 KiB + 64 by default), `tier_remote` on that Redis. A
computes a prompt of --prompt tokens (KV written, committed: written through), then B, --rounds
times: a LOOKUP (one EXISTS round over the prompt's blocks) and an ALLOC with the cache of the
prompt and one token more (its whole hit read from Redis, checked and filled into its blocks),
timed; B's pool forgets the blocks after each round. Beside them, `redis-benchmark -t set,get`
on the same Redis at the same value size and pipeline depth (64, the tier's GET chunk) on one
connection: its GET line, the median of 5 runs. Medians. --tls: Redis on a TLS port only, a CA
and certificate of the run's own (openssl), the pool on rediss://, redis-benchmark --tls.
--key: the pools share a 32-byte key file (tier_remote_key_file): every value tagged on its way
out and its tag checked on its way in.

KVPOOLD (default build/bin/kvpoold); redis-server and redis-benchmark from PATH.
"""
import argparse
import json
import os
import re
import shutil
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
HEAD = 64
PIPELINE = 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, ready, proc):
    for _ in range(1000):
        if ready():
            return
        if proc.poll() is not None:
            sys.exit("remote_promote: %s did not start" % what)
        time.sleep(0.01)
    sys.exit("remote_promote: %s did not start" % what)


def accepts_unix(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
        return probe.connect_ex(path) == 0


def accepts_tcp(port):
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def start_daemon(tmp, name, config):
    sock = os.path.join(tmp, name + ".sock")
    conf = os.path.join(tmp, name + ".ini")
    with open(conf, "w") as f:
        f.write(config)
    binary = os.environ.get("KVPOOLD", os.path.join(ROOT, "build", "bin", "kvpoold"))
    proc = subprocess.Popen([binary, "-q", "--socket", sock, "--config", conf])
    wait_for("kvpoold", lambda: accepts_unix(sock), proc)
    return proc, sock


def make_tls(tmp):
    """A CA and a certificate for 127.0.0.1 signed by it, in tmp: their paths."""
    ca_key, ca, key, csr, crt = (os.path.join(tmp, n) for n in
                                 ("ca.key", "ca.crt", "redis.key", "redis.csr", "redis.crt"))
    ext = os.path.join(tmp, "san.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName = IP:127.0.0.1\n")
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key,
        "-out", ca, "-days", "1", "-subj", "/CN=remote_promote CA")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
        "-subj", "/CN=127.0.0.1")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", crt, "-days", "1", "-extfile", ext)
    return ca, crt, key


def remote_row(client):
    return next(p["tier_remote"] for p in client.stats()["pools"] if p["name"] == "p")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=4096, help="A's prompt, tokens (4096)")
    ap.add_argument("--kv-heads", type=int, default=8, help="kv heads (8)")
    ap.add_argument("--head-dim", type=int, default=128, help="head dim (128)")
    ap.add_argument("--layers", type=int, default=4, help="layers (4)")
    ap.add_argument("--rounds", type=int, default=9, help="rounds, medians kept (9)")
    ap.add_argument("--tls", action="store_true", help="Redis over TLS (rediss://)")
    ap.add_argument("--key", action="store_true", help="tagged values (tier_remote_key_file)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = ap.parse_args()
    for tool in ("redis-server", "redis-benchmark"):
        if not shutil.which(tool):
            sys.exit("remote_promote: no %s (apt-get install redis-server redis-tools)" % tool)
    data = BS * args.kv_heads * args.head_dim * 2 * 2 * args.layers
    nblocks = args.prompt // BS
    # A's send queue is a sixteenth of its pool: room for the whole prompt's blocks in flight.
    # B's pool holds the prompt twice: its rounds reuse blocks already faulted in (a warm pool).
    blocks_a, blocks = 16 * (nblocks + 2) + 1, 2 * (nblocks + 2) + 1
    port = free_port()
    config = """[pool.p]
blocks = {blocks}
block_size = %d
groups = full
kv_heads = %d
head_dim = %d
dtype = f16
layers_per_group = %d
tier_remote = %s://127.0.0.1:%d
tier_remote_timeout_ms = 100
""" % (BS, args.kv_heads, args.head_dim, args.layers, "rediss" if args.tls else "redis", port)
    rng = np.random.default_rng(1)
    k = rng.standard_normal((STEP, args.kv_heads, args.head_dim)).astype(np.float16)
    v = rng.standard_normal((STEP, args.kv_heads, args.head_dim)).astype(np.float16)
    tmp = tempfile.mkdtemp(prefix="remote_promote.")
    listen, tls_args = ["--port", str(port)], []
    if args.tls:
        ca, crt, key = make_tls(tmp)
        listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", crt,
                  "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"]
        tls_args = ["--tls", "--cacert", ca]
        config += "tier_remote_ca_file = %s\n" % ca
    if args.key:
        key_file = os.path.join(tmp, "values.key")
        with open(key_file, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(key_file, 0o600)
        config += "tier_remote_key_file = %s\n" % key_file
    redis = subprocess.Popen(["redis-server", *listen, "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--logfile", "/dev/null"])
    procs = [redis]
    lookup_ms, alloc_ms, mbps, hits = [], [], [], []
    try:
        wait_for("redis-server", lambda: accepts_tcp(port), redis)
        a_proc, a_sock = start_daemon(tmp, "a", config.format(blocks=blocks_a))
        b_proc, b_sock = start_daemon(tmp, "b", config.format(blocks=blocks))
        procs += [a_proc, b_proc]
        prompt = list(range(1, args.prompt + 1))
        arena = 2 * STEP * args.kv_heads * args.head_dim * 2 + (1 << 20)
        with kvpool.Client(a_sock, pool="p", arena_bytes=arena) as a, \
                kvpool.Client(a_sock, admin=True) as admin_a:
            seq = a.open(prompt)
            for first in range(0, args.prompt, STEP):
                n = min(STEP, args.prompt - first)
                seq.alloc(n)
                for layer in range(args.layers):
                    seq.write_kv(0, layer, first, k[:n], v[:n])
                seq.commit(first + n)
            admin_a.pool_sync("p")
            sent = remote_row(admin_a)["sent"]
            assert sent == nblocks, "sent %d of %d blocks" % (sent, nblocks)
        with kvpool.Client(b_sock, pool="p") as b, \
                kvpool.Client(b_sock, pool="p", admin=True) as admin_b:
            for _ in range(args.rounds):
                before = remote_row(admin_b)["bytes_in"]
                s = b.open(prompt + [7])
                t = time.perf_counter()
                s.lookup()
                lookup_ms.append((time.perf_counter() - t) * 1e3)
                t = time.perf_counter()
                hits.append(s.alloc(1, use_cache=True))
                spent = time.perf_counter() - t
                alloc_ms.append(spent * 1e3)
                mbps.append((remote_row(admin_b)["bytes_in"] - before) / spent / 1e6)
                s.close()
                admin_b.evict(list(range(1, blocks)))  # B forgets: the next round reads again
            row = remote_row(admin_b)
        # SET first: the GETs then read a value of that size (alone, -t get reads a nil).
        # Its median of 5 runs of 8 prompts' worth: one run swings by 2x on this machine.
        runs = []
        for _ in range(5):
            bench = subprocess.run(["redis-benchmark", *tls_args, "-p", str(port), "-t", "set,get",
                                    "-d", str(data + HEAD), "-P", str(PIPELINE), "-c", "1",
                                    "-n", str(8 * nblocks), "-q"],
                                   check=True, capture_output=True, text=True).stdout
            runs.append(float(re.search(r"GET: ([0-9.]+) requests per second",
                                        bench).group(1)))
        rps = statistics.median(runs)
    finally:
        for p in procs[::-1]:
            p.terminate()
            p.wait()
        shutil.rmtree(tmp)
    redis_mbps = rps * (data + HEAD) / 1e6
    out = {"prompt": args.prompt, "blocks": nblocks, "value_bytes": data + HEAD,
           "tls": args.tls, "tagged": args.key,
           "hit_tokens": hits[0], "lookup_ms": round(statistics.median(lookup_ms), 2),
           "alloc_ms": round(statistics.median(alloc_ms), 2),
           "promote_mb_per_s": round(statistics.median(mbps), 1),
           "redis_benchmark_get_mb_per_s": round(redis_mbps, 1),
           "ratio": round(statistics.median(mbps) / redis_mbps, 3),
           "round_p50_us": row["round_p50_us"], "round_p99_us": row["round_p99_us"]}
    if args.json:
        print(json.dumps(out))
    else:
        print("a %d-token prompt (%d blocks of %d bytes) from Redis%s%s: LOOKUP %.2f ms, ALLOC "
              "%.2f ms, %.1f MB/s; redis-benchmark GET -P %d: %.1f MB/s; ratio %.3f; rounds p50 "
              "%.1f us, p99 %.1f us" % (args.prompt, nblocks, data + HEAD,
                                       " over TLS" if args.tls else "",
                                       ", tagged" if args.key else "", out["lookup_ms"],
                                       out["alloc_ms"], out["promote_mb_per_s"], PIPELINE,
                                       redis_mbps, out["ratio"], out["round_p50_us"],
                                       out["round_p99_us"]))


if __name__ == "__main__":
    main()
