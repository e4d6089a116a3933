# SPDX-License-Identifier: MIT
"""Several machines: two kvpoold, each in a network namespace of this test's own and publishing
its KV events over TCP, and a router (kv_router.py) in a third that keeps, from the events alone,
the index a KV-aware router keeps. For each request of a generated trace the router predicts
each machine's prefix hit; that machine's LOOKUP then reports exactly that hit. Needs root and
ip(8) (iproute2)."""
import json
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

from conftest import DAEMON, ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "lib", "python"))
import kvpool  # noqa: E402

BS = 4
MACHINES = {"a": "10.77.1.1", "b": "10.77.2.1"}
ROUTER_IPS = {"a": "10.77.1.2", "b": "10.77.2.2"}
CONFIG = """
[pool.llm]
blocks = 41
block_size = 4
groups = full
kv_events = tcp://{ip}:5557
kv_events_replay = tcp://{ip}:5558
kv_events_topic = kv@{name}@llm
"""


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if not shutil.which("ip"):
        pytest.skip("no ip(8): apt-get install iproute2")
    tag = "kvt%d" % os.getpid()
    names = {m: "%s-%s" % (tag, m) for m in ("a", "b", "r")}
    try:
        for n in names.values():
            ip("netns", "add", n)
    except subprocess.CalledProcessError as e:
        for n in names.values():
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        pytest.skip("ip netns add refused: %s" % e.stderr.decode().strip())
    try:
        try:
            for m in ("a", "b"):
                here, there = "%s%s0" % (tag[-8:], m), "%s%s1" % (tag[-8:], m)
                ip("link", "add", here, "type", "veth", "peer", "name", there)
                ip("link", "set", here, "netns", names[m])
                ip("link", "set", there, "netns", names["r"])
                ip("-n", names[m], "addr", "add", MACHINES[m] + "/24", "dev", here)
                ip("-n", names["r"], "addr", "add", ROUTER_IPS[m] + "/24", "dev", there)
                ip("-n", names[m], "link", "set", here, "up")
                ip("-n", names["r"], "link", "set", there, "up")
            for n in names.values():
                ip("-n", n, "link", "set", "lo", "up")
            ip("netns", "exec", names["r"], "true")
        except subprocess.CalledProcessError as e:
            pytest.skip("%s refused: %s" % (" ".join(e.cmd), e.stderr.decode().strip()))
        yield names
    finally:
        for n in names.values():
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def start_daemon(tmp_path, ns, name):
    sock = str(tmp_path / ("%s.sock" % name))
    cfg = tmp_path / ("%s.ini" % name)
    cfg.write_text(CONFIG.format(ip=MACHINES[name], name=name))
    log = open(tmp_path / ("%s.log" % name), "w+")
    proc = subprocess.Popen(["ip", "netns", "exec", ns, DAEMON, "--socket", sock, "--config",
                             str(cfg)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            raise RuntimeError("kvpoold %s did not start: %s" % (name, log.read()))
        time.sleep(0.02)
    time.sleep(0.1)
    return proc, sock


def latest_seq(client):
    client.nop()  # the turn that made the last batch has published it
    ev = [p for p in client.stats()["pools"] if p["name"] == "llm"][0]["events"]
    return ev["batches"] - 1


def trace(seed, n):
    """Requests sharing prefixes: a few documents, each request one of them, cut anywhere, and
    a tail of its own."""
    rng = random.Random(seed)
    docs = [[rng.randrange(1, 50000) for _ in range(rng.randrange(8, 48))] for _ in range(6)]
    out = []
    for i in range(n):
        doc = rng.choice(docs)
        cut = rng.randrange(1, len(doc) + 1)
        out.append((rng.choice("ab"), doc[:cut] + [60000 + i * 10 + k
                                                    for k in range(rng.randrange(1, 10))]))
    return out


def test_a_router_predicts_every_hit_from_the_events_alone(tmp_path, netns):
    daemons, socks = {}, {}
    router = None
    try:
        for m in ("a", "b"):
            daemons[m], socks[m] = start_daemon(tmp_path, netns[m], m)
        env = dict(os.environ, PYTHONPATH=HERE)
        router = subprocess.Popen(
            ["ip", "netns", "exec", netns["r"], sys.executable, os.path.join(HERE, "kv_router.py")]
            + ["%s=tcp://%s:5557,tcp://%s:5558" % (m, MACHINES[m], MACHINES[m]) for m in "ab"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert json.loads(router.stdout.readline()) == {"ready": True}

        def ask(cmd):
            router.stdin.write(json.dumps(cmd) + "\n")
            router.stdin.flush()
            return json.loads(router.stdout.readline())

        clients = {m: kvpool.Client(socks[m], pool="llm") for m in "ab"}
        hits = {"a": 0, "b": 0}
        for machine, tokens in trace(7, 120):
            assert ask({"wait": {m: latest_seq(clients[m]) for m in "ab"}})["ok"]
            predicted = ask({"predict": tokens, "block_size": BS})
            for m in "ab":
                with clients[m].open(tokens) as q:
                    assert q.lookup() == predicted[m], (m, tokens)
                    hits[m] += predicted[m] > 0
            with clients[machine].open(tokens) as q:
                hit = q.alloc(len(tokens) - predicted[machine], use_cache=True)
                assert hit == predicted[machine]
                q.commit(len(tokens))
        # The trace hit on both machines, and evicted there (40 blocks a machine).
        assert hits["a"] > 10 and hits["b"] > 10
        for m in "ab":
            ev = [p for p in clients[m].stats()["pools"] if p["name"] == "llm"][0]
            assert ev["evictions"]["reuse"] > 0 and ev["events"]["blocks_removed"] > 0
            clients[m].close()
    finally:
        if router:
            router.kill()
            router.wait()
        for p in daemons.values():
            p.terminate()
            p.wait(timeout=10)
