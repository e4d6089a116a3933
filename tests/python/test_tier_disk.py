# SPDX-License-Identifier: MIT
"""A pool's disk tier (tier_disk_bytes, tier_disk_path): blocks the pool evicts go to a file,
NAME.kvtier, that a restarted daemon hits at once; a damaged file never yields a hit.

The pool has 8 usable blocks of 4 tokens (1 KiB of f32 KV each) and a tier of 64 blocks
(tier_disk_bytes 65536) with a window's room of 16: a file of a 4 KiB header, 80 records of
64 bytes, 80 origins of 64 bytes (a block's position, parent and 4 tokens, for KV events),
then the slots, 4 to a 4 KiB page (packed: 102400 bytes). Each test that restarts runs
twice: with io_uring, and with io_uring refused by a seccomp filter (tests/no_io_uring: the
epoll loop's machines, where the tier reads and writes with pread/pwrite)."""

import os
import signal
import struct
import subprocess
import time

import numpy as np
import pytest

import kvpool
from conftest import DAEMON, ROOT
from daemon_proc import Daemon
from kv_helpers import D, KVH, LAYERS, bits32, rows

SLOT = 2 * LAYERS * 4 * KVH * D * 4  # K and V of every layer of one block, f32
SLOTS = 64  # the tier's capacity
SIZE = SLOTS * SLOT  # tier_disk_bytes: its blocks times a block's KV
NSLOTS = SLOTS + 16  # and its window's room: a record and an origin each
PACK = 4096 // SLOT  # blocks a page
RECORDS_OFF = 4096
DATA_OFF = 4096 + 8192 + 8192
FILE = DATA_OFF + NSLOTS // PACK * 4096


def slot_off(i):
    """Where slot i's KV lies in the file: its page, then its place in the page."""
    return DATA_OFF + i // PACK * 4096 + i % PACK * SLOT
KVCTL = os.environ.get("KVCTL", os.path.join(ROOT, "build", "bin", "kvctl"))
NO_IO_URING = os.path.join(ROOT, "build", "tests", "no_io_uring")
# The test build (ASan), whose tier copies KVPOOL_TIER_DELAY_US slows.
HOOKS = os.path.join(ROOT, "build", "asan", "bin", "kvpoold")
POOL = """
[pool.{name}]
blocks = {blocks}
block_size = 4
groups = full
kv_heads = 2
head_dim = {head_dim}
dtype = f32
layers_per_group = 2
tier_disk_bytes = {size}
tier_disk_path = {path}
"""


def config(path, head_dim=8, size=SIZE, name="full", blocks=9):
    return POOL.format(name=name, head_dim=head_dim, size=size, path=path, blocks=blocks)


@pytest.fixture
def disk(tmp_path):
    d = tmp_path / "disk"
    d.mkdir()
    return d


@pytest.fixture(params=["io_uring", "pread"])
def io(request, tmp_path):
    """The daemon to run: as it is, or under the filter that refuses io_uring."""
    return daemon_for(request.param, DAEMON, tmp_path)


def daemon_for(how, binary, tmp_path):
    if how == "io_uring":
        return binary
    if not os.access(NO_IO_URING, os.X_OK):
        pytest.skip("tests/no_io_uring is not built (make)")
    wrapper = tmp_path / f"no-io-uring-{os.path.basename(os.path.dirname(binary))}"
    wrapper.write_text(f'#!/bin/sh\nexec "{NO_IO_URING}" "{binary}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


class Run:
    """A daemon on tmp_path/runN (its socket and log), started again as often as wanted;
    any still running when the test ends is stopped (stop_the_runs)."""

    live = []

    def __init__(self, tmp_path, text, daemon=DAEMON, env=None):
        self.tmp_path, self.text, self.daemon, self.env = tmp_path, text, daemon, env
        self.n, self.d = 0, None

    def start(self, text=None):
        self.n += 1
        where = self.tmp_path / f"run{self.n}"
        where.mkdir()
        self.d = Daemon(where, text or self.text, self.daemon, env=self.env)
        Run.live.append(self.d)
        return self.d

    def log(self):
        return (self.tmp_path / f"run{self.n}" / "kvpoold.log").read_text()


@pytest.fixture(autouse=True)
def stop_the_runs():
    yield
    while Run.live:
        d = Run.live.pop()
        if d.proc.poll() is None:
            d.stop()


def tier_of(client, pool="full"):
    return next(p["tier"] for p in client.stats()["pools"] if p["name"] == pool)


def store(client, tokens, seed):
    """A closed sequence whose KV is in the pool's cache; {layer: (k, v)} of every token."""
    rng = np.random.default_rng(seed)
    data = {}
    with client.open(tokens) as s:
        assert s.alloc(len(tokens)) == 0
        for layer in range(LAYERS):
            k, v = rows(rng, len(tokens)), rows(rng, len(tokens))
            s.write_kv(0, layer, 0, k, v)
            data[layer] = (k, v)
        s.commit(len(tokens))
    return data


def flush(client, admin, pool="full", base=5000):
    """Another prompt takes all 8 blocks: the pool's cached blocks go to the tier."""
    admin.pool_sync(pool)
    with client.open(list(range(base, base + 32))) as other:
        assert other.alloc(32) == 0
    admin.pool_sync(pool)


def hit_of(client, tokens, data, held=None):
    """ALLOC with the cache; the hit's KV must be what was stored, bit for bit. held(): called
    while the sequence holds the hit (once it is let go, the window may copy it down again)."""
    with client.open(tokens) as b:
        hit = b.alloc(1, use_cache=True)
        if held:
            held()
        for layer in range(LAYERS):
            if not hit:
                break
            k, v = b.read_kv(0, layer, 0, hit)
            assert np.array_equal(bits32(k), bits32(data[layer][0][:hit]))
            assert np.array_equal(bits32(v), bits32(data[layer][1][:hit]))
    return hit


def records(path):
    """The file's records: {slot: stamp} of those in use."""
    raw = path.read_bytes()[RECORDS_OFF:RECORDS_OFF + NSLOTS * 64]
    out = {}
    for i in range(NSLOTS):
        valid, _, _, _, _, _, stamp = struct.unpack_from("<IIQQQQQ", raw, i * 64)
        if valid:
            out[i] = stamp
    return out


PROMPT = list(range(100, 117))  # 17 tokens: 4 full blocks


def stored_and_stopped(run):
    """PROMPT stored, flushed to the disk, the daemon stopped; returns its KV."""
    d = run.start()
    with d.client(pool="full") as c, d.client(admin=True) as admin:
        data = store(c, PROMPT, 1)
        flush(c, admin)
        t = tier_of(admin)
        assert (t["kind"], t["bytes"], t["slots"], t["slot_bytes"]) == ("disk", FILE, SLOTS, SLOT)
        assert (t["held"], t["stored"], t["write_failures"]) == (4, 4, 0)
    d.stop()
    return data


def test_a_restarted_daemon_hits_the_disk_bit_for_bit(tmp_path, disk, io):
    run = Run(tmp_path, config(disk), io)
    data = stored_and_stopped(run)
    assert os.path.getsize(disk / "full.kvtier") == FILE
    assert len(records(disk / "full.kvtier")) == 4
    d = run.start()
    try:
        how = "io_uring, registered buffers" if io == DAEMON else "pread/pwrite (io_uring refused)"
        assert (f"kvpoold: pool full: disk tier {disk}/full.kvtier: 64 blocks, 4 found and "
                f"hittable, 0 refused; {how}") in run.log()
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            t = tier_of(admin)
            assert (t["restored"], t["held"], t["refused"]) == (4, 4, 0)
            def moved_up():
                t = tier_of(admin)
                assert (t["promoted"], t["hit_tokens"], t["held"], t["read_failures"]) == \
                    (4, 16, 0, 0)
            assert hit_of(c, PROMPT, data, held=moved_up) == 16
    finally:
        d.stop()


@pytest.mark.parametrize("how", ["io_uring", "pread"])
def test_sigkill_during_writes_loses_no_synced_block_and_serves_no_bad_one(tmp_path, disk, how):
    # 6 prompts of 2 blocks, synced to the disk; then 20 more, each flushing the last,
    # and SIGKILL while their copies are on their way (the test build's copies take
    # 2 ms a block). After the restart each synced prompt hits whole, and every hit,
    # synced or not, is the KV stored: nothing refused, no read failing its checksum.
    if not os.access(HOOKS, os.X_OK):
        pytest.skip("the test build (make VARIANT=asan) is not there")
    env = dict(os.environ, KVPOOL_TIER_DELAY_US="2000")
    run = Run(tmp_path, config(disk), daemon_for(how, HOOKS, tmp_path), env)
    d = run.start()
    synced, later = {}, {}
    with d.client(pool="full") as c, d.client(admin=True) as admin:
        for i in range(6):
            synced[i] = store(c, list(range(1000 * (i + 1), 1000 * (i + 1) + 9)), i)
            admin.pool_sync("full")  # a walk: no block is handed out before it is seen
        flush(c, admin)
        assert tier_of(admin)["held"] == 12
        for i in range(6, 26):  # 40 blocks more: the 64 slots drop none of the first 12
            later[i] = store(c, list(range(1000 * (i + 1), 1000 * (i + 1) + 9)), i)
        assert tier_of(admin)["queued"] > 0
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.stop()
    d = run.start()
    try:
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            t = tier_of(admin)
            assert t["refused"] == 0 and t["restored"] >= 12
            for i, data in synced.items():
                assert hit_of(c, list(range(1000 * (i + 1), 1000 * (i + 1) + 9)), data) == 8
            for i, data in later.items():
                hit_of(c, list(range(1000 * (i + 1), 1000 * (i + 1) + 9)), data)
            t = tier_of(admin)
            assert (t["read_failures"], t["refused"]) == (0, 0)
    finally:
        d.stop()


def test_flipped_bytes_in_a_block_never_reach_the_pool(tmp_path, disk, io):
    run = Run(tmp_path, config(disk), io)
    data = stored_and_stopped(run)
    path = disk / "full.kvtier"
    first = min(records(path).items(), key=lambda kv: kv[1])[0]  # the first block stored
    with open(path, "r+b") as f:
        f.seek(slot_off(first) + 100)
        byte = f.read(1)
        f.seek(slot_off(first) + 100)
        f.write(bytes([byte[0] ^ 0x40]))
    d = run.start()
    try:
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            assert tier_of(admin)["restored"] == 4
            with c.open(PROMPT) as b:
                with pytest.raises(kvpool.Error) as e:
                    b.alloc(1, use_cache=True)
                assert e.value.errno == 5  # EIO: nothing of the promotion is kept
            t = tier_of(admin)
            assert (t["refused"], t["read_failures"], t["promoted"], t["held"]) == (1, 4, 0, 3)
            # ALLOC again: the prefix before the damaged block, and its KV is the one stored.
            hit = hit_of(c, PROMPT, data)
            assert hit < 16 and hit % 4 == 0
            assert tier_of(admin)["refused"] == 1
    finally:
        d.stop()


def test_a_damaged_record_is_refused_at_start(tmp_path, disk, io):
    run = Run(tmp_path, config(disk), io)
    data = stored_and_stopped(run)
    path = disk / "full.kvtier"
    slot = max(records(path).items(), key=lambda kv: kv[1])[0]
    with open(path, "r+b") as f:
        f.seek(RECORDS_OFF + slot * 64 + 8)  # its key
        f.write(b"\xff")
    d = run.start()
    try:
        assert "4 found" not in run.log() and "3 found and hittable, 1 refused" in run.log()
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            t = tier_of(admin)
            assert (t["restored"], t["held"], t["refused"]) == (3, 3, 1)
            hit_of(c, PROMPT, data)
            assert tier_of(admin)["read_failures"] == 0
    finally:
        d.stop()


def test_a_truncated_file_hits_only_what_it_still_holds(tmp_path, disk, io):
    run = Run(tmp_path, config(disk), io)
    d = run.start()
    with d.client(pool="full") as c, d.client(admin=True) as admin:
        data = store(c, PROMPT, 1)
        flush(c, admin)
        second = list(range(700, 717))
        store(c, second, 2)
        flush(c, admin, base=6000)
        assert tier_of(admin)["held"] == 8
    d.stop()
    path = disk / "full.kvtier"
    used = sorted(records(path).items(), key=lambda kv: kv[1])  # in the order stored
    first_pages = {slot // PACK for slot, _ in used[:4]}
    cut = max(slot // PACK for slot, _ in used)
    assert cut not in first_pages  # PROMPT's blocks went down together, a page of their own
    os.truncate(path, DATA_OFF + cut * 4096 + 4095)  # the last page written cut short
    d = run.start()
    try:
        assert os.path.getsize(path) == FILE  # taken back
        lost = sum(1 for slot, _ in used if slot // PACK == cut)
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            t = tier_of(admin)
            assert (t["restored"], t["refused"]) == (8 - lost, lost)
            assert hit_of(c, PROMPT, data) == 16
            assert tier_of(admin)["read_failures"] == 0
    finally:
        d.stop()


def test_files_that_are_not_this_pools_tier_are_refused_and_untouched(tmp_path, disk):
    run = Run(tmp_path, config(disk))
    stored_and_stopped(run)
    path = disk / "full.kvtier"
    before = path.read_bytes()
    with pytest.raises(RuntimeError) as e:
        run.start(config(disk, head_dim=16))
    assert ("pool full: tier_disk_path: full.kvtier is of another geometry: head_dim 8, the "
            "pool's 16\n") in str(e.value)
    with pytest.raises(RuntimeError) as e:
        run.start(config(disk, size=SIZE * 2))
    assert (f"pool full: tier_disk_bytes {SIZE * 2}: full.kvtier holds 64 blocks, not 128: "
            f"set {SIZE} or remove it\n") in str(e.value)
    assert path.read_bytes() == before
    other = disk / "other.kvtier"
    other.write_bytes(b"not a tier" * 1000)
    with pytest.raises(RuntimeError) as e:
        run.start(config(disk, name="other"))
    assert ("pool other: tier_disk_path: other.kvtier is not a kvpool tier file: not touched "
            "(remove it or name another path)\n") in str(e.value)
    assert other.read_bytes() == b"not a tier" * 1000


def test_a_second_daemon_on_the_same_file_is_refused(tmp_path, disk):
    first = Run(tmp_path / "a", config(disk))
    second = Run(tmp_path / "b", config(disk))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    d = first.start()
    try:
        with pytest.raises(RuntimeError) as e:
            second.start()
        assert "pool full: tier_disk_path: full.kvtier is held by another kvpoold (its lock)\n" \
            in str(e.value)
    finally:
        d.stop()


@pytest.fixture
def bare(tmp_path):
    d = Daemon(tmp_path, "", DAEMON)
    yield d
    d.stop()


def create(daemon, name, keys, **kw):
    args = dict(blocks=9, block_size=4, groups=[("full", 0)], kv_heads=2, head_dim=8,
                layers_per_group=2, dtype="f32")
    args.update(kw)
    with daemon.client(admin=True) as admin:
        admin.create_pool(name, keys=keys, **args)


def refusal(daemon, name, keys, **kw):
    with pytest.raises(kvpool.Error) as e:
        create(daemon, name, keys, **kw)
    return e.value.reason


def direct_io(directory):
    path = os.path.join(directory, f"kvpool-test-{os.getpid()}")
    try:
        os.close(os.open(path, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600))
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_refusals_name_the_key_and_the_cause(bare, tmp_path):
    missing = tmp_path / "nowhere"
    assert refusal(bare, "a", f"tier_disk_bytes = {SIZE}\ntier_disk_path = {missing}") == \
        f"tier_disk_path {missing}: No such file or directory"
    afile = tmp_path / "afile"
    afile.write_text("")
    assert refusal(bare, "a", f"tier_disk_bytes = {SIZE}\ntier_disk_path = {afile}") == \
        f"tier_disk_path {afile}: not a directory"
    # tmpfs takes O_DIRECT from Linux 6.6 on: checked only where it does not.
    if os.path.isdir("/dev/shm") and not direct_io("/dev/shm"):
        assert refusal(bare, "a", f"tier_disk_bytes = {SIZE}\ntier_disk_path = /dev/shm") == \
            "tier_disk_path /dev/shm: its filesystem refuses O_DIRECT (Invalid argument)"
    # More than the filesystem has free: 256 KiB slots, so that it is not past 2^24 blocks.
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    big = free + (1 << 30)
    reason = refusal(bare, "big", f"tier_disk_bytes = {big}\ntier_disk_path = {tmp_path}",
                     block_size=16, kv_heads=8, head_dim=128)
    assert reason.startswith(f"tier_disk_bytes {big}: {tmp_path} has ") and \
        reason.endswith(" bytes free")
    assert not (tmp_path / "big.kvtier").exists()  # made for the pool, gone with it
    assert refusal(bare, "a", f"tier_disk_bytes = {SIZE}\ntier_host_bytes = 65536\n"
                   f"tier_disk_path = {tmp_path}") == \
        "tier_host_bytes and tier_disk_bytes: a pool has one tier, in host memory or on disk"
    assert refusal(bare, "a", f"tier_disk_path = {tmp_path}") == \
        "tier_disk_path: set without tier_disk_bytes (the disk tier's size)"
    assert refusal(bare, "a", f"tier_disk_bytes = 1000\ntier_disk_path = {tmp_path}") == \
        "tier_disk_bytes 1000: holds 0 blocks of 1024 bytes, must be 1..16777216"
    assert refusal(bare, "a/b", f"tier_disk_bytes = {SIZE}\ntier_disk_path = {tmp_path}") == \
        ("tier_disk_bytes: the tier's file is named after the pool (NAME.kvtier), and 'a/b' "
         "holds a '/' or starts with '.'")
    assert refusal(bare, "a", f"tier_disk_bytes = {SIZE}\ntier_disk_path = {tmp_path}",
                   kv_heads=0, head_dim=0) == \
        ("tier_disk_bytes: the pool holds no KV (kv_heads, head_dim, layers_per_group) for a "
         "tier to keep")


def test_destroy_keeps_the_file_and_drop_tier_removes_it(bare, tmp_path, disk):
    keys = f"tier_disk_bytes = {SIZE}\ntier_disk_path = {disk}"
    path = disk / "rt.kvtier"
    create(bare, "rt", keys)
    with bare.client(pool="rt") as c, bare.client(admin=True) as admin:
        data = store(c, PROMPT, 7)
        flush(c, admin, "rt")
        assert tier_of(admin, "rt")["held"] == 4

    def kvctl(*args):
        # The clients just closed: the daemon may not have seen them go yet (busy).
        for _ in range(100):
            out = subprocess.run([KVCTL, "-s", bare.socket, "pool", *args],
                                 capture_output=True, text=True)
            if out.returncode == 0 or "in use" not in out.stderr:
                return out
            time.sleep(0.02)
        return out

    out = kvctl("destroy", "rt")
    assert (out.returncode, out.stdout) == (0, "pool rt destroyed\n")
    assert path.exists()
    create(bare, "rt", keys)
    with bare.client(pool="rt") as c, bare.client(admin=True) as admin:
        assert tier_of(admin, "rt")["restored"] == 4
        assert hit_of(c, PROMPT, data) == 16
    out = kvctl("destroy", "rt", "--drop-tier")
    assert (out.returncode, out.stdout) == (0, "pool rt destroyed\n")
    assert not path.exists()
    create(bare, "rt", keys)
    with bare.client(admin=True) as admin:
        assert tier_of(admin, "rt")["restored"] == 0


def test_second_sight_stores_a_block_the_second_time_it_leaves(tmp_path, disk):
    run = Run(tmp_path, config(disk) + "tier_policy = second_sight\n")
    d = run.start()
    try:
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            store(c, PROMPT, 1)
            flush(c, admin)
            t = tier_of(admin)
            assert (t["declined"], t["stored"], t["held"]) == (4, 0, 0)
            with c.open(PROMPT) as b:
                assert b.alloc(1, use_cache=True) == 0  # gone: recomputed
            data = store(c, PROMPT, 2)
            flush(c, admin, base=6000)
            t = tier_of(admin)
            assert (t["declined"], t["stored"], t["held"]) == (4, 4, 4)
            assert hit_of(c, PROMPT, data) == 16
    finally:
        d.stop()


@pytest.fixture
def small_fs(tmp_path):
    """A filesystem of 16 MiB of the test's own, root only, unmounted and removed after:
    ext4 in a file on a loop device (no blocks reserved for root, which the daemon is),
    else a tmpfs where this kernel's tmpfs takes O_DIRECT (Linux 6.6 on)."""
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a filesystem needs root")
    image = tmp_path / "small.ext4"
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    mounted = (subprocess.run(["mkfs.ext4", "-q", "-m", "0", str(image)],
                              capture_output=True).returncode == 0 and
               subprocess.run(["mount", "-o", "loop", str(image), str(where)],
                              capture_output=True).returncode == 0)
    if not mounted:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs",
                                  str(where)], capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("neither a loop-mounted ext4 nor a tmpfs could be mounted here")
    try:
        if not direct_io(str(where)):
            pytest.skip("the small filesystem refuses O_DIRECT (a tmpfs before Linux 6.6)")
        yield where
    finally:
        subprocess.run(["umount", str(where)])


def test_a_full_disk_stops_the_tiers_writes_not_the_pool(tmp_path, small_fs):
    # The file is preallocated, so a disk that fills afterwards cannot take its slots
    # back, except where the filesystem does not keep a preallocation (thin
    # provisioning, copy on write): here its slots are punched out, the disk filled,
    # and the first copy down meets ENOSPC.
    run = Run(tmp_path, config(small_fs))
    d = run.start()
    try:
        path = small_fs / "full.kvtier"
        subprocess.run(["fallocate", "--punch-hole", "--offset", str(DATA_OFF), "--length",
                        str(FILE - DATA_OFF), str(path)], check=True)
        with open(small_fs / "filler", "wb", buffering=0) as f:
            for chunk in (65536, 4096, 1):
                try:
                    while f.write(b"\1" * chunk):
                        pass
                except OSError:
                    pass
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            data = store(c, PROMPT, 1)
            flush(c, admin)
            t = tier_of(admin)
            assert (t["write_failures"], t["stored"], t["held"]) == (4, 0, 0)
            # Stopped for good: nothing more goes down, and the pool serves on.
            store(c, list(range(300, 317)), 2)
            flush(c, admin, base=7000)
            t = tier_of(admin)
            assert (t["write_failures"], t["stored"], t["queued"]) == (4, 0, 0)
            assert hit_of(c, PROMPT, data) == 0
            data = store(c, PROMPT, 3)
            assert hit_of(c, PROMPT, data) == 16
        log = run.log()
        assert log.count("a write failed") == 1
        assert (f"kvpoold: pool full: disk tier {path}: a write failed (No space left on "
                "device): the tier stores no more blocks and serves those it holds") in log
    finally:
        d.stop()


def as_format_2(path):
    """The file rewritten as a kvpoold of format 2 made it for this pool (each block in a
    4 KiB page of its own, no window's room, 64 slots: 274432 bytes), its blocks in slots
    0, 1, ... in the order they were stored, records and origins to match."""
    import xxhash
    raw = path.read_bytes()
    geo = raw[80:184]  # format 3's header: 80 bytes, then the geometry both formats share
    origins_off = RECORDS_OFF + 8192
    v2 = bytearray(12288 + 64 * 4096)
    used = sorted(records(path).items(), key=lambda kv: kv[1])
    for j, (slot, _) in enumerate(used):
        rec = bytearray(raw[RECORDS_OFF + slot * 64:RECORDS_OFF + slot * 64 + 64])
        origin = raw[origins_off + slot * 64:origins_off + slot * 64 + 64]
        if struct.unpack_from("<Q", rec, 48)[0]:
            struct.pack_into("<Q", rec, 48, xxhash.xxh3_64_intdigest(origin, seed=j) or 1)
        struct.pack_into("<Q", rec, 56, xxhash.xxh3_64_intdigest(bytes(rec[:56]), seed=j))
        v2[4096 + j * 64:4096 + j * 64 + 64] = rec
        v2[8192 + j * 64:8192 + j * 64 + 64] = origin
        v2[12288 + j * 4096:12288 + j * 4096 + SLOT] = raw[slot_off(slot):slot_off(slot) + SLOT]
    header = struct.pack("<8sIIQQQQQQQQ", b"KVPTIER\0", 2, 0, SLOT, 4096, 64, 4096, 12288,
                         len(v2), 8192, 64) + geo
    v2[:len(header) + 8] = header + struct.pack("<Q", xxhash.xxh3_64_intdigest(header))
    path.write_bytes(bytes(v2))
    return len(used)


def test_a_format_2_file_is_converted_once_and_hits_bit_for_bit(tmp_path, disk, io):
    run = Run(tmp_path, config(disk), io)
    data = stored_and_stopped(run)
    path = disk / "full.kvtier"
    assert as_format_2(path) == 4
    # A damaged record among them: refused, the other three carried over. Slot 0 holds the
    # first block stored: the walk copies the free queue's head first, where the pool put
    # PROMPT's last block (it frees a sequence's blocks last first).
    damaged = bytearray(path.read_bytes())
    damaged[4096 + 0 * 64 + 8] ^= 0xff
    path.write_bytes(bytes(damaged))
    d = run.start()
    try:
        log = run.log()
        assert (f"pool full: disk tier {path}: format 2 converted to 3 in ") in log
        assert "ms: 3 blocks kept, 0 past its 64 blocks, 1 refused" in log
        assert os.path.getsize(path) == FILE
        assert struct.unpack_from("<I", path.read_bytes(), 8)[0] == 3
        assert not (disk / "full.kvtier.new").exists()
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            assert tier_of(admin)["restored"] == 3
            assert hit_of(c, PROMPT, data) == 12  # up to the last block, the KV stored
    finally:
        d.stop()
    d = run.start()  # once: now a file of this format
    try:
        assert "converted" not in run.log()
    finally:
        d.stop()
