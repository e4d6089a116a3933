# SPDX-License-Identifier: MIT
"""KV calls and every exception, produced for real against a live kvpoold.

Pools (conftest.CONFIG): `small` has 7 usable blocks of 4 tokens (block 0 is the null block),
no KV; `kv` holds f32 KV for groups full + swa:8, 2 layers each, 2 kv heads of 8; the
`shared-*` pools are restricted to namespace ns1; namespace `tight` may hold 2 blocks per pool.
"""
import errno
import os
import signal
import time

import numpy as np
import pytest

import kvpool
from helpers import BS, SMALL_USABLE, assert_clean, kv_rows, pool_stats, wait_for


# ---------------------------------------------------------------------------------------------
# KV data: NoData, write_kv, read_kv, attend
# ---------------------------------------------------------------------------------------------

def test_commit_without_kv_is_nodata_then_write_read(daemon):
    with daemon.client(pool="kv") as c, c.open([1, 2, 3, 4]) as s:
        s.alloc(4)
        with pytest.raises(kvpool.NoData) as ei:
            s.commit(4)
        assert ei.value.errno == errno.ENODATA
        assert isinstance(ei.value, kvpool.Error)
        data = {}
        for g in range(2):
            for layer in range(2):
                data[g, layer] = kv_rows(10 * g + layer)
                s.write_kv(g, layer, 0, *data[g, layer])
        s.commit(4)
        for (g, layer), (k, v) in data.items():
            rk, rv = s.read_kv(g, layer, 0, 4)
            assert rk.dtype == np.float32 and rk.shape == (4, 2, 8)
            np.testing.assert_array_equal(rk, k)
            np.testing.assert_array_equal(rv, v)
        with pytest.raises(ValueError):  # wrong shape, before sending
            s.write_kv(0, 0, 0, np.zeros((4, 3, 8), np.float32), np.zeros((4, 3, 8), np.float32))


def test_sequence_without_kv_pool_rejects_write_kv(daemon):
    with daemon.client(pool="small") as c, c.open([1, 2]) as s:
        s.alloc(2)
        with pytest.raises(ValueError):
            s.write_kv(0, 0, 0, np.zeros((2, 2, 8), np.float32), np.zeros((2, 2, 8), np.float32))


def reference_attend(q, k, v, scale):
    out = np.empty_like(q)
    for h in range(q.shape[1]):
        logits = scale * (k[:, h, :] @ q[0, h, :])
        w = np.exp(logits - logits.max())
        out[0, h] = (w / w.sum()) @ v[:, h, :]
    return out


def test_attend_sequence_and_batch(daemon):
    with daemon.client(pool="kv") as c, c.open([1, 2, 3, 4]) as s:
        s.alloc(4)
        data = {(g, layer): kv_rows(100 + 10 * g + layer) for g in range(2) for layer in range(2)}
        for (g, layer), (k, v) in data.items():
            s.write_kv(g, layer, 0, k, v)
        q = np.random.default_rng(7).standard_normal((1, 2, 8), dtype=np.float32)
        scale = 1 / np.sqrt(8)
        out = s.attend(0, 1, q, 3, scale)
        assert out.shape == (1, 2, 8) and out.dtype == np.float32
        np.testing.assert_allclose(out, reference_attend(q, *data[0, 1], scale), rtol=1e-4,
                                   atol=1e-5)
        with c.batch() as b:
            b.attend(s, 0, 1, q, 3, scale)
            b.commit(s, 4)
        assert len(b.results) == 2 and b.results[1] is None
        np.testing.assert_allclose(b.results[0], out, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Exceptions
# ---------------------------------------------------------------------------------------------

def test_exception_hierarchy():
    assert issubclass(kvpool.Error, OSError)
    for cls in (kvpool.NoSpace, kvpool.NoData, kvpool.PermissionDenied, kvpool.NotFound,
                kvpool.Timeout, kvpool.Disconnected, kvpool.BatchError):
        assert issubclass(cls, kvpool.Error)
    assert issubclass(kvpool.QuotaExceeded, kvpool.NoSpace)
    assert issubclass(kvpool.PermissionDenied, PermissionError)
    assert issubclass(kvpool.Timeout, TimeoutError)


def test_not_found_unknown_pool(daemon):
    with pytest.raises(kvpool.NotFound) as ei:
        daemon.client(pool="nope")
    assert ei.value.errno == errno.ENODEV
    assert ei.value.reason == "no pool 'nope'"
    assert isinstance(ei.value, OSError)
    with daemon.client(pool="small") as c:
        with pytest.raises(kvpool.NotFound) as ei:
            c.attach("nope")
        assert ei.value.errno == errno.ENODEV
        assert c.pool.name == "small"  # still attached where it was
        with c.open([1]) as s:
            s.alloc(1)


def test_no_daemon_is_not_an_unknown_pool(daemon, tmp_path):
    """A socket nobody listens on: kvpool.Error (ENOENT, 'is kvpoold running?'), and not
    NotFound, which means an unknown pool (client.c says so: 'not an unknown pool, whatever
    the errno')."""
    with pytest.raises(kvpool.Error) as ei:
        kvpool.Client(str(tmp_path / "no-such.sock"), pool="small")
    assert ei.value.errno == errno.ENOENT
    assert ei.value.reason == "is kvpoold running?"
    assert not isinstance(ei.value, kvpool.NotFound)


def test_permission_denied_restricted_pool(daemon):
    for pool in ("shared-block", "shared-layer"):
        with pytest.raises(kvpool.PermissionDenied) as ei:
            daemon.client(pool=pool)
        assert ei.value.errno == errno.EPERM
        assert isinstance(ei.value, PermissionError)
        assert ei.value.reason == f"pool '{pool}' is restricted to namespace 'ns1'"
    with daemon.client(pool="small", namespace="tight") as c:
        with pytest.raises(kvpool.PermissionDenied) as ei:
            c.attach("shared-block")
        assert ei.value.errno == errno.EPERM
        assert c.pool.name == "small"
    with daemon.client(pool="shared-block", namespace="ns1") as c:
        assert c.pool.name == "shared-block"


def test_permission_denied_create_pool_without_admin(daemon):
    with daemon.client() as c:
        with pytest.raises(kvpool.PermissionDenied) as ei:
            c.create_pool("p1", 16, 4, [("full", 0)])
        assert ei.value.errno == errno.EPERM
        names = [p["name"] for p in c.stats()["pools"]]
        assert "p1" not in names


def test_no_space(daemon):
    with daemon.client(pool="small") as c, c.open(list(range(40))) as s:
        with pytest.raises(kvpool.NoSpace) as ei:
            s.alloc(SMALL_USABLE * BS + 1)  # 29 tokens: 8 blocks of the 7
        e = ei.value
        assert isinstance(e, OSError) and isinstance(e, kvpool.Error)
        assert not isinstance(e, kvpool.QuotaExceeded)
        assert e.errno == errno.ENOSPC == 28
        assert e.reason is None
        assert s.table() == [[]]  # nothing allocated
        p = pool_stats(c, "small")
        assert (p["blocks_used"], p["nospace"]) == (0, 1)
        assert s.alloc(SMALL_USABLE * BS) == 0  # 28 tokens: exactly all 7
        assert len(s.table()[0]) == 7
        with c.open([1]) as s2:
            with pytest.raises(kvpool.NoSpace):
                s2.alloc(1)


def test_quota_exceeded(daemon):
    with daemon.client(pool="small", namespace="tight") as c, c.open(list(range(20))) as s:
        with pytest.raises(kvpool.QuotaExceeded) as ei:
            s.alloc(2 * BS + 1)  # 3 blocks, the quota is 2
        e = ei.value
        assert isinstance(e, kvpool.NoSpace)
        assert isinstance(e, OSError)
        assert e.errno == errno.EDQUOT
        assert s.table() == [[]]
        assert s.alloc(2 * BS) == 0
        assert len(s.table()[0]) == 2
        with c.open([1]) as s2:
            with pytest.raises(kvpool.QuotaExceeded):
                s2.alloc(1)
        # The pool itself has room: another namespace still allocates.
        with daemon.client(pool="small") as free, free.open([1, 2]) as s3:
            assert s3.alloc(2) == 0


@pytest.mark.parametrize("call", [
    pytest.param(lambda c: c.open(["a", "b"]), id="tokens-str"),
    pytest.param(lambda c: c.open([1.5]), id="tokens-float"),
    pytest.param(lambda c: c.open([-1]), id="tokens-negative"),
    pytest.param(lambda c: c.open([2**32]), id="tokens-too-big"),
    pytest.param(lambda c: c.open(5), id="tokens-not-iterable"),
    pytest.param(lambda c: c.open([1, 2], prefix=-1), id="prefix-negative"),
    pytest.param(lambda c: c.open([1, 2], prefix=2**32), id="prefix-too-big"),
    pytest.param(lambda c: c.open([1, 2], salt=5), id="salt-int"),
    pytest.param(lambda c: c.create_pool("p", 16, 4, 5), id="groups-int"),
    pytest.param(lambda c: c.create_pool("p", 16, 4, [("full",)]), id="groups-short-tuple"),
    pytest.param(lambda c: c.create_pool("p", 16, 4, ["full"]), id="groups-str-item"),
    pytest.param(lambda c: c.create_pool("p", 16, 4, [("full", -1)]), id="groups-negative"),
    pytest.param(lambda c: c.create_pool("p", 16, 4, [("bogus", 0)]), id="groups-unknown-kind"),
    pytest.param(lambda c: c.create_pool("x" * 32, 16, 4, [("full", 0)]), id="name-too-long"),
    pytest.param(lambda c: c.create_pool("", 16, 4, [("full", 0)]), id="name-empty"),
    pytest.param(lambda c: c.create_pool("p", 16, 0, [("full", 0)]), id="block-size-0"),
    pytest.param(lambda c: c.create_pool("p", 1, 4, [("full", 0)]), id="blocks-1"),
    pytest.param(lambda c: c.create_pool("p", 16, 4, [("full", 0)], dtype="f64", kv_heads=2,
                                         head_dim=8), id="dtype-unknown"),
    pytest.param(lambda c: c.create_pool("p", True, 4, [("full", 0)]), id="blocks-bool"),
])
def test_value_errors_before_sending(daemon, call):
    with daemon.client(pool="small", admin=True) as c:
        ops_before = c.stats()["operations"]
        with pytest.raises(ValueError):
            call(c)
        # Nothing reached the daemon.
        assert c.stats()["operations"] == ops_before
        assert "p" not in [p["name"] for p in c.stats()["pools"]]


@pytest.mark.parametrize("kwargs", [
    pytest.param(dict(new_tokens=2**32 + 4), id="new_tokens-2**32+4"),
    pytest.param(dict(new_tokens=-1), id="new_tokens-negative"),
    pytest.param(dict(new_tokens=1, lookahead=2**32 + 3), id="lookahead-2**32+3"),
    pytest.param(dict(new_tokens=1, lookahead=-1), id="lookahead-negative"),
])
def test_alloc_out_of_range_is_refused_before_sending(daemon, kwargs):
    """Counts past 0..2**32-1 must not wrap silently (2**32 + 4 would allocate 4 tokens)."""
    with daemon.client(pool="small") as c, c.open(list(range(8))) as s:
        ops_before = c.stats()["operations"].get("ALLOC", {}).get("count", 0)
        with pytest.raises((ValueError, OverflowError)):
            s.alloc(**kwargs)
        assert s.table() == [[]]
        assert c.stats()["operations"].get("ALLOC", {}).get("count", 0) == ops_before


def test_commit_out_of_range_is_refused_before_sending(daemon):
    with daemon.client(pool="small") as c, c.open([1, 2, 3]) as s:
        s.alloc(3)
        with pytest.raises(ValueError):
            s.commit(2**32)
        with pytest.raises((ValueError, OverflowError)):
            s.commit(-1)
        assert "COMMIT" not in c.stats()["operations"]
        s.commit(3)
        assert c.stats()["operations"]["COMMIT"]["count"] == 1


def test_daemon_errors_carry_errno_without_reason(daemon):
    with daemon.client(pool="small") as c, c.open([1, 2, 3]) as s:
        with pytest.raises(kvpool.Error) as ei:  # ALLOC of 0 tokens
            s.alloc(0)
        assert type(ei.value) is kvpool.Error
        assert ei.value.errno == errno.EINVAL
        assert ei.value.reason is None
        s.alloc(3)
        with pytest.raises(kvpool.Error) as ei:  # COMMIT past the allocated slots and tokens
            s.commit(4)
        assert ei.value.errno == errno.EINVAL


def test_create_pool_refusals_carry_the_daemons_reason(daemon):
    with daemon.client(admin=True) as c:
        with pytest.raises(kvpool.Error) as ei:
            c.create_pool("small", 16, 4, [("full", 0)])
        assert type(ei.value) is kvpool.Error
        assert ei.value.errno == errno.EEXIST
        assert ei.value.reason == "a pool named small exists"
        assert "a pool named small exists" in str(ei.value)
        with pytest.raises(kvpool.Error) as ei:
            c.create_pool("a b", 16, 4, [("full", 0)])
        assert ei.value.errno == errno.EINVAL
        assert isinstance(ei.value.reason, str) and "name" in ei.value.reason
        with pytest.raises(kvpool.Error) as ei:
            c.create_pool("nohead", 16, 4, [("full", 0)], kv_heads=2)
        assert ei.value.errno == errno.EINVAL
        assert ei.value.reason == "head_dim 0: must be 1..1024"
        names = [p["name"] for p in c.stats()["pools"]]
        assert "a b" not in names and "nohead" not in names


def test_disconnected_after_daemon_killed(daemon):
    c = daemon.client(pool="small")
    s = c.open([1, 2, 3])
    s.alloc(3)
    daemon.kill()
    with pytest.raises(kvpool.Disconnected) as ei:
        s.alloc(1)
    assert ei.value.errno in (errno.ECONNRESET, errno.ENOTCONN)
    assert isinstance(ei.value, kvpool.Error) and isinstance(ei.value, OSError)
    for call in (lambda: c.open([1]), lambda: s.table(), lambda: s.commit(3), c.nop):
        with pytest.raises(kvpool.Disconnected) as ei:
            call()
        assert ei.value.errno in (errno.ECONNRESET, errno.ENOTCONN)
    c.close()


def test_disconnected_after_client_closed(daemon):
    c = daemon.client(pool="small")
    s = c.open([1, 2, 3])
    c.close()
    for call in (lambda: c.open([1]), c.stats, c.nop, lambda: c.attach("kv"),
                 lambda: s.alloc(1), lambda: s.lookup(),
                 lambda: c.create_pool("z", 16, 4, [("full", 0)])):
        with pytest.raises(kvpool.Disconnected) as ei:
            call()
        assert ei.value.errno == errno.ENOTCONN
        assert ei.value.reason == "closed"
    assert c.pool is None


def test_every_call_of_a_closed_clients_sequence_is_disconnected(daemon):
    """The calls that read the pool's geometry before the daemon too (they crashed once)."""
    c = daemon.client(pool="kv")
    s = c.open([1, 2, 3])
    s.alloc(3)
    k = np.zeros((1, 2, 8), np.float32)
    q = np.zeros((1, 2, 8), np.float32)
    c.close()
    for call in (s.table, lambda: s.write_kv(0, 0, 0, k, k), lambda: s.read_kv(0, 0, 0, 1),
                 lambda: s.attend(0, 0, q, 0, 1.0), lambda: c.attend(0, 0, [(s, q, 0)], 1.0),
                 c.map):
        with pytest.raises(kvpool.Disconnected) as ei:
            call()
        assert ei.value.errno == errno.ENOTCONN


def test_timeout_when_daemon_stopped(daemon):
    c = daemon.client(pool="small", timeout_ms=200)
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(kvpool.Timeout) as ei:
            c.open([1, 2, 3])
        elapsed = time.monotonic() - t0
        assert isinstance(ei.value, TimeoutError)
        assert isinstance(ei.value, kvpool.Error)
        assert ei.value.errno == errno.ETIMEDOUT
        assert 0.15 < elapsed < 5
        # The connection is poisoned: every later call is refused.
        with pytest.raises(kvpool.Disconnected) as ei:
            c.nop()
        assert ei.value.errno == errno.ENOTCONN
        # Connecting to a stopped daemon times out as well.
        with pytest.raises(kvpool.Timeout):
            daemon.client(pool="small", timeout_ms=200)
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    c.close()
    with daemon.client(pool="small") as c2:
        assert wait_for(lambda: pool_stats(c2, "small")["clients"] == 1)
        assert_clean(c2, "small")
