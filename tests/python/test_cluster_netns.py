# SPDX-License-Identifier: MIT
"""Machines in network namespaces: a Redis Cluster (3 masters) in a namespace of its own, and two
kvpoold, machine A and machine B, each in its own, joined to it by veth on one bridge; each pool's
cluster tier is `redis://` the address the nodes announce (tier_remote_insecure: not loopback).
An engine on A computes prompts (KV written, committed, sent); an engine on B hits them through
the cluster, whole and byte for byte. Then B's link to the cluster is cut (`ip link set down`):
prompts A computes meanwhile miss on B, each call promptly and without an error, B's stats
count the outage, and B's local hits go on; the link restored, B hits them byte for byte within
the tier's back-off. Needs root, ip(8) (iproute2) and redis-server. docs/tiers.md, "The cluster
tier"."""
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from conftest import DAEMON
from daemon_proc import Daemon
from kv_helpers import LAYERS, written
from redis_cluster import Cluster

NET = "10.78.0."
CLUSTER_IP = NET + "9"                      # on the cluster namespace's bridge, announced
MACHINES = {"a": NET + "1", "b": NET + "2"}  # each machine's end of its veth
POOL = """
[pool.llm]
blocks = 65
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_remote = {url}
tier_remote_insecure = yes
tier_remote_timeout_ms = 1000
"""
CALL_S = 3.0     # the most a LOOKUP or ALLOC of B's may take while its link is down
RESTORE_S = 30.0  # the most B takes to hit again once its link is back (back-off: 2 s at most)


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def net():
    """Namespaces {"c": the cluster's, "a", "b": the machines'} and each machine's veth name
    ({"a": ..., "b": ...}, in the machine's namespace). All of it deleted after the test."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if not shutil.which("ip"):
        pytest.skip("no ip(8): apt-get install iproute2")
    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        pytest.skip("no redis-server or redis-cli (apt-get install redis-server redis-tools)")
    tag = "kvc%d" % os.getpid()
    names = {m: "%s-%s" % (tag, m) for m in "cab"}
    veths = {m: "%s%s0" % (tag[-8:], m) for m in "ab"}
    try:
        try:
            for n in names.values():
                ip("netns", "add", n)
        except subprocess.CalledProcessError as e:
            pytest.skip("ip netns add refused: %s" % e.stderr.decode().strip())
        try:
            c = names["c"]
            ip("-n", c, "link", "add", "br0", "type", "bridge")
            ip("-n", c, "addr", "add", CLUSTER_IP + "/24", "dev", "br0")
            ip("-n", c, "link", "set", "br0", "up")
            ip("-n", c, "link", "set", "lo", "up")
            for m in "ab":
                here, there = veths[m], "%s%s1" % (tag[-8:], m)
                ip("link", "add", here, "type", "veth", "peer", "name", there)
                ip("link", "set", here, "netns", names[m])
                ip("link", "set", there, "netns", c)
                ip("-n", c, "link", "set", there, "master", "br0")
                ip("-n", c, "link", "set", there, "up")
                ip("-n", names[m], "addr", "add", MACHINES[m] + "/24", "dev", here)
                ip("-n", names[m], "link", "set", here, "up")
                ip("-n", names[m], "link", "set", "lo", "up")
            ip("netns", "exec", c, "true")
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            why = e.stderr.decode().strip() if getattr(e, "stderr", None) else str(e)
            pytest.skip("%s refused: %s" % (" ".join(getattr(e, "cmd", [])), why))
        yield names, veths
    finally:
        for n in names.values():  # a veth goes with its namespace, and its peer with it
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        for m in "ab":  # one left in the root namespace by a failed move
            subprocess.run(["ip", "link", "del", veths[m]], capture_output=True)


@pytest.fixture
def cluster(tmp_path, net):
    names, _ = net
    c = Cluster(tmp_path, netns=names["c"], bind="0.0.0.0", announce_ip=CLUSTER_IP)
    yield c
    c.stop()


def machine(tmp_path, ns, name, url):
    """kvpoold in namespace ns (a script that runs it under `ip netns exec`, which execs it: the
    Daemon's process is kvpoold's), its Unix socket on the shared filesystem."""
    d = tmp_path / name
    d.mkdir()
    run = d / "kvpoold-in-netns"
    run.write_text('#!/bin/sh\nexec ip netns exec %s "%s" "$@"\n' % (ns, DAEMON))
    run.chmod(0o755)
    return Daemon(d, POOL.format(url=url), str(run))


def remote_of(admin):
    return next(p["tier_remote"] for p in admin.stats()["pools"] if p["name"] == "llm")


def prompts(n, base):
    """n prompts of 17 tokens (4 full blocks), no token shared."""
    return [list(range(base + 100 * i, base + 100 * i + 17)) for i in range(n)]


def compute(client, admin, ps, rng):
    """An engine's prefill of each prompt: its KV written, committed, its sends waited for."""
    datas = []
    for p in ps:
        seq, data = written(client, p, rng)
        seq.close()
        admin.pool_sync("llm")
        datas.append(data)
    return datas


def hits_whole(client, prompt, data):
    """LOOKUP and ALLOC with the cache hit the prompt's 16 tokens, their KV data's byte for
    byte (the bits of every float32)."""
    with client.open(prompt) as s:
        assert s.lookup() == 16
        assert s.alloc(1, use_cache=True) == 16
        for layer in range(LAYERS):
            k, v = s.read_kv(0, layer, 0, 16)
            assert k.tobytes() == data[0, layer][0][:16].tobytes()
            assert v.tobytes() == data[0, layer][1][:16].tobytes()


def timed(fn):
    t = time.monotonic()
    out = fn()
    return out, time.monotonic() - t


def misses(client, prompt):
    """LOOKUP and ALLOC with the cache: both succeed with no hit, each under CALL_S."""
    with client.open(prompt) as s:
        hit, took = timed(s.lookup)
        assert (hit, took < CALL_S) == (0, True), took
        hit, took = timed(lambda: s.alloc(1, use_cache=True))
        assert (hit, took < CALL_S) == (0, True), took


def hits_alloc(client, prompt, data):
    """ALLOC with the cache of a prompt the pool holds: its hit, the KV checked byte for byte."""
    with client.open(prompt) as s:
        hit = s.alloc(1, use_cache=True)
        if hit == 16:
            k, _ = s.read_kv(0, 0, 0, 16)
            assert k.tobytes() == data[0, 0][0][:16].tobytes()
        return hit


def outage_lines(daemon, cluster):
    """How often the daemon's log says each node went unreachable, and came back."""
    with open(daemon.log.name) as f:
        log = f.read()
    head = "pool llm: remote tier: %s:%%d " % CLUSTER_IP
    return ({p: log.count(head % p + "unreachable (") for p in cluster.ports},
            {p: log.count(head % p + "is back\n") for p in cluster.ports})


def test_machine_b_hits_what_machine_a_computed_and_rides_out_a_cut_link(tmp_path, net,
                                                                        cluster):
    names, veths = net
    rng = np.random.default_rng(80)
    first, later = prompts(3, 1000), prompts(3, 5000)
    # The nodes announce the cluster's address: each machine is told to reach them there.
    assert all("master" in cluster.nodes()[p][0] for p in cluster.ports)
    with cluster.resp(cluster.ports[0]) as c:
        text = c.call("CLUSTER", "NODES").decode()
    assert sorted(line.split()[1].split("@")[0] for line in text.splitlines()) == \
        sorted("%s:%d" % (CLUSTER_IP, p) for p in cluster.ports)
    a = machine(tmp_path, names["a"], "a", cluster.url)
    b = None
    try:
        b = machine(tmp_path, names["b"], "b", cluster.url)
        with a.client(pool="llm") as ca, a.client(admin=True) as admin_a, \
                b.client(pool="llm") as cb, b.client(admin=True) as admin_b:
            # Machine A computes; its blocks go over its veth to the cluster.
            datas = compute(ca, admin_a, first, rng)
            r = remote_of(admin_a)
            assert (r["sent"], r["skipped"], r["nodes_known"]) == (12, 0, 3), str(r)
            assert len(cluster.keys()) == 12
            # Machine B hits them, whole, byte for byte.
            for p, data in zip(first, datas):
                hits_whole(cb, p, data)
            r = remote_of(admin_b)
            assert (r["promoted"], r["hit_tokens"], r["outages"], r["nodes_down"]) == \
                (12, 48, 0, 0), str(r)
            assert sum(r["refused"].values()) == 0, str(r)

            # B's link to the cluster cut. A computes more (its own link is up): it sends them.
            ip("-n", names["b"], "link", "set", veths["b"], "down")
            later_datas = compute(ca, admin_a, later, rng)
            r = remote_of(admin_a)
            assert (r["sent"], r["skipped"]) == (24, 0), str(r)
            assert len(cluster.keys()) == 24
            # On B they miss: each call succeeds, promptly, with no hit.
            for p in later:
                misses(cb, p)
            # B's stats show the outage: each of its 3 nodes down, an outage each, logged once.
            deadline = time.monotonic() + RESTORE_S
            while True:
                r = remote_of(admin_b)
                if r["nodes_down"] == 3 or time.monotonic() > deadline:
                    break
                misses(cb, later[0])
                time.sleep(0.1)
            assert (r["outages"], r["nodes_down"], r["promoted"]) == (3, 3, 12), str(r)
            assert outage_lines(b, cluster) == ({p: 1 for p in cluster.ports},
                                                {p: 0 for p in cluster.ports})
            # What B holds itself still hits, asking the cluster nothing.
            rounds = r["rounds"]
            for p, data in zip(first, datas):
                hit, took = timed(lambda: hits_alloc(cb, p, data))
                assert (hit, took < CALL_S) == (16, True), took
            assert remote_of(admin_b)["rounds"] == rounds
            # Nothing on A noticed.
            r = remote_of(admin_a)
            assert (r["outages"], r["nodes_down"]) == (0, 0), str(r)

            # The link restored: within the back-off, B hits A's later prompts, byte for byte.
            ip("-n", names["b"], "link", "set", veths["b"], "up")
            deadline = time.monotonic() + RESTORE_S
            while True:
                got = []
                for p in later:
                    with cb.open(p) as s:
                        got.append(s.lookup())
                if got == [16] * 3 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert got == [16] * 3, "B's hits %d s after the link came back" % RESTORE_S
            for p, data in zip(later, later_datas):
                hits_whole(cb, p, data)
            deadline = time.monotonic() + RESTORE_S
            while remote_of(admin_b)["nodes_down"] and time.monotonic() < deadline:
                time.sleep(0.1)
            r = remote_of(admin_b)
            assert (r["promoted"], r["hit_tokens"], r["outages"], r["nodes_down"]) == \
                (24, 96, 3, 0), str(r)
            assert sum(r["refused"].values()) == 0, str(r)
            assert outage_lines(b, cluster) == ({p: 1 for p in cluster.ports},
                                                {p: 1 for p in cluster.ports})
    finally:
        for d in (a, b):
            if d is not None:
                d.stop()

