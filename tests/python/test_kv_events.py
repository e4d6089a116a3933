# SPDX-License-Identifier: MIT
"""KV events (kv_events): the exact events of scripted workloads, as a router's subscriber
receives them, in both of vLLM's forms; hybrid pools; the tier's blocks announced once and
withdrawn once; the stats rows; the refusals. They run the test build's daemon (ASan and UBSan,
make VARIANT=asan) where it is built, else KVPOOLD's."""
import json
import os
import socket
import stat
import subprocess
import time

import msgpack
import numpy as np
import pytest

from conftest import DAEMON, ROOT
from daemon_proc import Daemon
from kv_events_sub import CLEARED, Subscriber, chain, removed, replay, stored
from kv_helpers import rows

KVCTL = os.environ.get("KVCTL", os.path.join(ROOT, "build", "bin", "kvctl"))
HOOKS = os.path.join(ROOT, "build", "asan", "bin", "kvpoold")
DAEMON = HOOKS if os.access(HOOKS, os.X_OK) else DAEMON
HOST = socket.gethostname()
SLOT = 2 * 2 * 4 * 2 * 8 * 4  # a tiered pool's block: K and V, 2 layers, 4 tokens, 2x8 f32

CONFIG = """
[pool.ev]
blocks = 9
block_size = 4
groups = full
kv_events = on

[pool.arr]
blocks = 9
block_size = 4
groups = full
kv_events = ipc://{tmp}/arr.pub
kv_events_replay = off
kv_events_topic = kv@pod-7@llama
kv_events_format = array

[pool.hyb]
blocks = 33
block_size = 4
groups = full swa:8 rswa:8 chunked:8
kv_events = on

[pool.pa]
blocks = 9
block_size = 4
groups = full
publish = alloc
kv_events = on

[pool.tiered]
blocks = 9
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_host_bytes = {tier}
kv_events = on
"""


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path, CONFIG.format(tmp=tmp_path, tier=4 * SLOT), DAEMON)
    d.tmp = tmp_path
    yield d
    d.stop()


def sub(daemon, pool):
    return Subscriber("ipc://%s/%s.events" % (daemon.tmp, pool))


PROMPT = list(range(100, 117))  # 4 full blocks and a token
LONGER = PROMPT[:16] + list(range(300, 309))  # the same 4, then 2 more full blocks


def test_commit_announces_the_chain(daemon):
    s = sub(daemon, "ev")
    h = chain(LONGER, 4)
    with daemon.client(pool="ev") as c:
        with c.open(PROMPT) as q:
            assert q.alloc(len(PROMPT)) == 0
            assert s.batches() == []  # nothing before the KV is committed
            q.commit(len(PROMPT))
        got = s.batches()
        assert [(t, seq) for t, seq, _ in got] == [("kv@%s@ev" % HOST, 0)]
        assert got[0][2][1:] == [[stored(h[:4], None, PROMPT[:16], 4)], None]
        with c.open(LONGER) as q:
            assert q.alloc(len(LONGER) - 16, use_cache=True) == 16
            q.commit(len(LONGER))
    assert s.events() == [stored(h[4:6], h[3], LONGER[16:24], 4)]


def test_publish_alloc_announces_at_the_alloc(daemon):
    s = sub(daemon, "pa")
    h = chain(PROMPT, 4)
    with daemon.client(pool="pa") as c:
        with c.open(PROMPT) as q:
            q.alloc(len(PROMPT))
            assert s.events() == [stored(h, None, PROMPT[:16], 4)]
            q.commit(len(PROMPT))
            assert s.events() == []


def test_a_destroyed_pool_gives_its_endpoints_back(daemon):
    with daemon.client(admin=True) as admin:
        for _ in range(2):
            admin.create_pool("again", 9, 4, [("full", 0)], keys="kv_events = on")
            s = sub(daemon, "again")
            with daemon.client(pool="again") as c:
                with c.open(PROMPT) as q:
                    q.alloc(len(PROMPT))
                    q.commit(len(PROMPT))
            assert [e["type"] for e in s.events()] == ["BlockStored"]
            s.close()
            out = subprocess.run([KVCTL, "-s", daemon.socket, "pool", "destroy", "again"],
                                 capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            assert not os.path.exists(daemon.tmp / "again.events")


def committed(c, s, tokens):
    """@tokens allocated and committed, the events that said so read: its block table."""
    with c.open(tokens) as q:
        q.alloc(len(tokens))
        table = q.table()[0]
        q.commit(len(tokens))
    s.events()
    return table


def test_eviction_goes_in_the_free_queues_order(daemon):
    s = sub(daemon, "ev")
    h = chain(LONGER, 4)
    with daemon.client(pool="ev") as c, daemon.client(pool="ev", admin=True) as admin:
        table = committed(c, s, LONGER)
        by_block = {table[i]: h[i] for i in range(6)}
        queue = admin.free_queue()
        # 7 fresh blocks, the queue's first 7: each cached one among them goes, in that order.
        with c.open(list(range(1000, 1028))) as q:
            q.alloc(28)
            gone = [by_block[b] for b in queue[:7] if b in by_block]
            assert len(gone) == 5
            assert s.events() == [removed(gone)]


def test_evict_withdraws_the_blocks_named(daemon):
    s = sub(daemon, "ev")
    h = chain(LONGER, 4)
    with daemon.client(pool="ev") as c, daemon.client(pool="ev", admin=True) as admin:
        table = committed(c, s, LONGER)
        assert admin.evict([table[5], table[2], table[4]]) == 3
        assert s.events() == [removed([h[5], h[2], h[4]])]
        assert admin.evict([table[5]]) == 0  # no hash left: nothing said
        assert s.events() == []
        with c.open(LONGER) as q:
            assert q.lookup() == 8  # blocks 0 and 1 still cached


def test_reset_clears_all(daemon):
    s = sub(daemon, "ev")
    with daemon.client(pool="ev") as c:
        with c.open(PROMPT) as q:
            q.alloc(len(PROMPT))
            q.commit(len(PROMPT))
    s.events()
    out = subprocess.run([KVCTL, "-s", daemon.socket, "pool", "reset", "ev"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert s.events() == [CLEARED]


def test_the_array_form_and_a_topic_of_ones_own(daemon):
    s = Subscriber("ipc://%s/arr.pub" % daemon.tmp)
    h = chain(PROMPT, 4)
    with daemon.client(pool="arr") as c:
        with c.open(PROMPT) as q:
            q.alloc(len(PROMPT))
            q.commit(len(PROMPT))
    got = s.batches()
    assert [(t, seq) for t, seq, _ in got] == [("kv@pod-7@llama", 0)]
    assert got[0][2][1:] == [[["BlockStored", h[:4], None, PROMPT[:16], 4, None, "CPU", None,
                               None, 0, "full_attention", None]], None]
    assert not os.path.exists(daemon.tmp / "arr.replay")
    # The events carry tokens: the daemon's user and group connect, nobody else.
    assert stat.S_IMODE(os.stat(daemon.tmp / "arr.pub").st_mode) == 0o660


def test_a_hybrid_pool_says_each_group(daemon):
    s = sub(daemon, "hyb")
    tokens = list(range(500, 526))  # 6 full blocks and 2 tokens
    h = chain(tokens, 4)
    with daemon.client(pool="hyb") as c:
        with c.open(tokens) as q:
            q.alloc(len(tokens))
            q.commit(len(tokens))
    got = s.events()
    kinds = [("full_attention", None), ("sliding_window", 8), ("sliding_window", 8),
             ("chunked_local_attention", None)]
    assert [(e["group_idx"], e["kv_cache_spec_kind"], e["kv_cache_spec_sliding_window"])
            for e in got] == [(g, k, w) for g, (k, w) in enumerate(kinds)]
    for e in got:
        assert e["block_hashes"] == h and e["token_ids"] == tokens[:24]
        assert e["parent_block_hash"] is None and e["medium"] == "CPU"


def write_and_commit(q, tokens, rng):
    for layer in range(2):
        q.write_kv(0, layer, 0, rows(rng, len(tokens)), rows(rng, len(tokens)))
    q.commit(len(tokens))


def test_a_block_the_tier_keeps_is_withdrawn_once_neither_holds_it(daemon):
    s = sub(daemon, "tiered")
    rng = np.random.default_rng(3)
    h, y = chain(PROMPT, 4), chain(list(range(700, 716)), 4)
    with daemon.client(pool="tiered") as c, daemon.client(admin=True) as admin:
        with c.open(PROMPT) as q:
            q.alloc(len(PROMPT))
            write_and_commit(q, PROMPT, rng)
        assert s.events() == [stored(h, None, PROMPT[:16], 4)]
        admin.pool_sync("tiered")
        with c.open(list(range(5000, 5032))) as other:  # the pool's 8 blocks: PROMPT's go
            other.alloc(32)
        admin.pool_sync("tiered")
        assert s.events() == []  # out of the pool, in the tier: hittable here still
        with c.open(PROMPT) as q:
            # Promoted (moved up: the tier drops its copy): hittable here all along.
            assert q.alloc(1, use_cache=True) == 16
        assert s.events() == []
        admin.pool_sync("tiered")  # free again: copied down ahead of their eviction
        with c.open(list(range(5000, 5032))) as other:
            other.alloc(32)
        with c.open(list(range(700, 716))) as q:
            q.alloc(16)
            write_and_commit(q, list(range(700, 716)), rng)
        # Y's blocks go down as soon as they are free, into the tier's window: the pool still
        # has them, so they take none of the tier's 4 slots, which PROMPT's keep.
        admin.pool_sync("tiered")
        assert s.events() == [stored(y, None, list(range(700, 716)), 4)]
        # Out of the pool, Y's take the 4 slots: PROMPT's, whose blocks the pool no longer has,
        # leave the tier in its LRU order, and are gone here.
        with c.open(list(range(5000, 5032))) as other:
            other.alloc(32)
        admin.pool_sync("tiered")
        assert s.events() == [removed([h[3], h[2], h[1], h[0]])]
        stats = [p for p in admin.stats()["pools"] if p["name"] == "tiered"][0]
        assert (stats["tier"]["evicted"], stats["tier"]["held"]) == (4, 4)


def test_a_reset_says_again_what_the_tier_holds(daemon):
    s = sub(daemon, "tiered")
    rng = np.random.default_rng(4)
    h = chain(PROMPT, 4)
    with daemon.client(pool="tiered") as c, daemon.client(admin=True) as admin:
        with c.open(PROMPT) as q:
            q.alloc(len(PROMPT))
            write_and_commit(q, PROMPT, rng)
        admin.pool_sync("tiered")
        with c.open(list(range(5000, 5032))) as other:
            other.alloc(32)
        admin.pool_sync("tiered")
        s.events()
        out = subprocess.run([KVCTL, "-s", daemon.socket, "pool", "reset", "tiered"],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert s.events() == [CLEARED, stored(h, None, PROMPT[:16], 4)]
        with c.open(PROMPT) as q:
            assert q.lookup() == 16


DISK_CONFIG = """
[pool.disk]
blocks = 9
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_disk_bytes = {bytes}
tier_disk_path = {tmp}
kv_events = on
"""


def test_a_restart_announces_the_disk_tiers_blocks_first(tmp_path):
    config = DISK_CONFIG.format(bytes=1 << 20, tmp=tmp_path)
    rng = np.random.default_rng(6)
    h, y = chain(PROMPT, 4), chain(list(range(700, 716)), 4)
    d = Daemon(tmp_path, config, DAEMON)
    try:
        with d.client(pool="disk") as c, d.client(admin=True) as admin:
            for tokens in (PROMPT, list(range(700, 716))):
                with c.open(tokens) as q:
                    q.alloc(len(tokens))
                    write_and_commit(q, tokens, rng)
            admin.pool_sync("disk")
            with c.open(list(range(5000, 5032))) as other:  # out of the pool, on disk
                other.alloc(32)
            admin.pool_sync("disk")
    finally:
        d.stop()
    d = Daemon(tmp_path, config, DAEMON)
    d.tmp = tmp_path
    try:
        got = replay("ipc://%s/disk.replay" % tmp_path, 0)
        first = msgpack.unpackb(got[0][1])
        # Every block on disk, parents first, before anything else is said.
        assert got[0][0] == 0 and got[-1] == (-1, b"")
        assert sorted(first[1], key=lambda e: e["block_hashes"][0] != h[0]) == [
            stored(h, None, PROMPT[:16], 4, medium="DISK"),
            stored(y, None, list(range(700, 716)), 4, medium="DISK")]
        s = sub(d, "disk")
        with d.client(pool="disk") as c, d.client(admin=True) as admin:
            with c.open(PROMPT) as q:
                assert q.alloc(1, use_cache=True) == 16  # promoted: said already
            assert s.events() == []
            admin.pool_sync("disk")
            with c.open(list(range(5000, 5032))) as other:
                other.alloc(32)
            assert s.events() == []
    finally:
        d.stop()



def test_a_withdrawal_names_the_medium_its_announcement_named(tmp_path):
    """A router keys what it learns by hash and medium: a block announced from the pool
    ("CPU") and dropped last by the disk tier is withdrawn as "CPU"; one announced from the
    disk at a restart ("DISK") is withdrawn as "DISK"."""
    config = DISK_CONFIG.format(bytes=4 * 1024, tmp=tmp_path)  # 4 blocks of 1 KiB of KV
    rng = np.random.default_rng(7)
    y_tokens, z_tokens = list(range(700, 716)), list(range(800, 816))
    h, y, z = chain(PROMPT, 4), chain(y_tokens, 4), chain(z_tokens, 4)

    def commit_and_push_out(d, c, admin, tokens):
        """tokens committed, copied to disk, pushed out of the pool's 8 blocks."""
        with c.open(tokens) as q:
            q.alloc(len(tokens))
            write_and_commit(q, tokens, rng)
        admin.pool_sync("disk")
        with c.open(list(range(5000, 5032))) as other:
            other.alloc(32)
        admin.pool_sync("disk")

    d = Daemon(tmp_path, config, DAEMON)
    d.tmp = tmp_path
    try:
        s = sub(d, "disk")
        with d.client(pool="disk") as c, d.client(admin=True) as admin:
            commit_and_push_out(d, c, admin, PROMPT)
            assert s.events() == [stored(h, None, PROMPT[:16], 4)]
            commit_and_push_out(d, c, admin, y_tokens)
            assert s.events() == [stored(y, None, y_tokens, 4), removed(h[::-1])]
    finally:
        d.stop()
    d = Daemon(tmp_path, config, DAEMON)
    d.tmp = tmp_path
    try:
        got = replay("ipc://%s/disk.replay" % tmp_path, 0)
        assert msgpack.unpackb(got[0][1])[1] == [stored(y, None, y_tokens, 4, medium="DISK")]
        s = sub(d, "disk")
        with d.client(pool="disk") as c, d.client(admin=True) as admin:
            commit_and_push_out(d, c, admin, z_tokens)
            assert s.events() == [stored(z, None, z_tokens, 4),
                                  removed(y[::-1], medium="DISK")]
    finally:
        d.stop()

REPLAY_CONFIG = """
[pool.ev]
blocks = 129
block_size = 4
groups = full
kv_events = on
kv_events_buffer = {keep}
"""


def commit_n(c, n, base):
    for i in range(n):
        with c.open(list(range(base + 8 * i, base + 8 * i + 8))) as q:
            q.alloc(8)
            q.commit(8)


def test_replay_after_a_late_join_returns_exactly_the_missed_batches(tmp_path):
    d = Daemon(tmp_path, REPLAY_CONFIG.format(keep=100), DAEMON)
    d.tmp = tmp_path
    try:
        early = sub(d, "ev")
        with d.client(pool="ev") as c:
            commit_n(c, 5, 1000)
            # Sent before the late one joins: the publisher's thread sends behind the pushes.
            for _ in range(200):
                ev = [p for p in c.stats()["pools"] if p["name"] == "ev"][0]["events"]
                if ev["sent"] == 5:
                    break
                time.sleep(0.01)
            assert ev["sent"] == 5
            late = sub(d, "ev")
            commit_n(c, 3, 2000)
        seen = [(seq, b) for _, seq, b in early.batches()]
        assert [seq for seq, _ in seen] == list(range(8))
        live = [seq for _, seq, _ in late.batches()]
        assert live == [5, 6, 7]
        missed = replay("ipc://%s/ev.replay" % tmp_path, 0)
        assert [seq for seq, _ in missed] == list(range(8)) + [-1]
        assert [msgpack.unpackb(p) for _, p in missed[:5]] == [b for _, b in seen[:5]]
        assert [seq for seq, _ in replay("ipc://%s/ev.replay" % tmp_path, 6)] == [6, 7, -1]
        assert replay("ipc://%s/ev.replay" % tmp_path, 99) == [(-1, b"")]
    finally:
        d.stop()


def test_replay_keeps_kv_events_buffer_batches(tmp_path):
    d = Daemon(tmp_path, REPLAY_CONFIG.format(keep=3), DAEMON)
    try:
        with d.client(pool="ev") as c:
            commit_n(c, 6, 1000)
            got = replay("ipc://%s/ev.replay" % tmp_path, 0)
            assert [seq for seq, _ in got] == [3, 4, 5, -1]
            for _ in range(100):
                ev = [p for p in c.stats()["pools"] if p["name"] == "ev"][0]["events"]
                if ev["replays"] == 1:
                    break
                time.sleep(0.05)
            assert {k: ev[k] for k in ("format", "batches", "events", "blocks_stored",
                                       "blocks_removed", "cleared", "sent", "dropped",
                                       "replays", "replayed", "kept", "queued")} == {
                "format": "map", "batches": 6, "events": 6, "blocks_stored": 12,
                "blocks_removed": 0, "cleared": 0, "sent": 6, "dropped": 0, "replays": 1,
                "replayed": 3, "kept": 3, "queued": 0}
    finally:
        d.stop()



def nop_worst(c, stop, out):
    worst = 0.0
    while not stop.is_set():
        t = time.monotonic()
        c.nop()
        worst = max(worst, time.monotonic() - t)
        time.sleep(0.001)
    out.append(worst)


def test_a_slow_publisher_drops_batches_counted_and_replay_fills_the_gap(tmp_path):
    """The test build's publisher waits 30 ms a send and queues 4 batches at most: the loop
    never waits for it; what the queue drops is counted, a subscriber sees the gap in sequence
    numbers and a replay fills it. A subscriber that never reads stops nothing either."""
    import threading

    if not os.access(HOOKS, os.X_OK):
        pytest.skip("the test build (make VARIANT=asan) is not there")
    env = dict(os.environ, KVPOOL_EVENTS_DELAY_US="30000", KVPOOL_EVENTS_QUEUE="4")
    d = Daemon(tmp_path, REPLAY_CONFIG.format(keep=1000), HOOKS, env=env)
    d.tmp = tmp_path
    try:
        reader = sub(d, "ev")
        idle = Subscriber("ipc://%s/ev.events" % tmp_path)  # never reads
        stop, worst = threading.Event(), []
        with d.client(pool="ev") as c, d.client(pool="ev") as bystander:
            t = threading.Thread(target=nop_worst, args=(bystander, stop, worst))
            t.start()
            commit_n(c, 40, 1000)
            stop.set()
            t.join()
        assert worst[0] < 0.05, "a bystander's NOP took %.1f ms" % (worst[0] * 1000)
        seen = [seq for _, seq, _ in reader.batches(quiet=1.0)]
        ev = [p for p in d.client().stats()["pools"] if p["name"] == "ev"][0]["events"]
        for _ in range(100):
            if ev["queued"] == 0:
                break
            time.sleep(0.05)
            ev = [p for p in d.client().stats()["pools"] if p["name"] == "ev"][0]["events"]
        assert ev["batches"] == 40 and ev["dropped"] > 0
        assert ev["sent"] + ev["dropped"] == 40 and len(seen) == ev["sent"]
        assert seen == sorted(seen) and set(seen) < set(range(40))
        got = replay("ipc://%s/ev.replay" % tmp_path, 0)
        assert [seq for seq, _ in got] == list(range(40)) + [-1]
        idle.close()
    finally:
        d.stop()


@pytest.mark.parametrize("keys, why", [
    ("kv_events = udp://x", "kv_events = udp://x: not on, off, ipc://PATH or tcp://HOST:PORT"),
    ("kv_events = tcp://127.0.0.1", "kv_events = tcp://127.0.0.1: no :PORT after tcp://HOST"),
    ("kv_events_topic = t", "kv_events_topic: set without kv_events (the events' endpoint)"),
    ("kv_events_buffer = 5", "kv_events_buffer: set without kv_events (the events' endpoint)"),
    ("kv_events = on\ncaching = off",
     "kv_events: caching is off, so no block is ever announced"),
    ("kv_events = on\nkv_events_format = json", "kv_events_format = json: not one of map, array"),
    ("kv_events = on\nkv_events_replay = ipc://",
     "kv_events_replay = ipc://: no path after ipc://"),
])
def test_refusals_name_the_key(daemon, keys, why):
    with daemon.client(admin=True) as admin:
        with pytest.raises(Exception) as e:
            admin.create_pool("bad", 9, 4, [("full", 0)], keys=keys)
        assert why in str(e.value)


def test_an_endpoint_that_cannot_bind_is_refused_with_zmqs_error(daemon):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([KVCTL, "-s", daemon.socket, "pool", "create", "bad", "blocks=9",
                              "block_size=4", "groups=full",
                              "kv_events=tcp://127.0.0.1:%d" % port], capture_output=True,
                             text=True)
    assert out.returncode == 1
    assert out.stderr == ("kvctl: pool create bad: kv_events = tcp://127.0.0.1:%d: cannot bind: "
                          "Address already in use\n" % port)
    with daemon.client(admin=True) as admin:
        assert "bad" not in [p["name"] for p in admin.stats()["pools"]]


def test_kvctl_stats_shows_the_publisher(daemon):
    s = sub(daemon, "ev")
    with daemon.client(pool="ev") as c:
        with c.open(PROMPT) as q:
            q.alloc(len(PROMPT))
            q.commit(len(PROMPT))
    s.events()
    for _ in range(100):
        out = subprocess.run([KVCTL, "-s", daemon.socket, "stats", "--json"],
                             capture_output=True, text=True)
        pools = {p["name"]: p for p in json.loads(out.stdout)["pools"]}
        if pools["ev"]["events"]["sent"] == 1:
            break
        time.sleep(0.05)
    assert pools["small" if "small" in pools else "hyb"]["events"]["batches"] == 0
    assert pools["ev"]["events"]["blocks_stored"] == 4
    text = subprocess.run([KVCTL, "-s", daemon.socket, "stats"], capture_output=True,
                          text=True).stdout
    line = [ln for ln in text.splitlines() if ln.startswith("ev ")]
    assert any(ln.split()[:7] == ["ev", "map", "1", "1", "4", "0", "0"] for ln in line), text
    prom = subprocess.run([KVCTL, "-s", daemon.socket, "stats", "--prometheus"],
                          capture_output=True, text=True).stdout
    assert 'kvpool_events_stored_blocks_total{pool="ev"} 4' in prom.splitlines()
    assert 'kvpool_events_sent_batches_total{pool="ev"} 1' in prom.splitlines()
