# SPDX-License-Identifier: MIT
"""Batches, leaks over many cycles, and threads sharing a Client.

Pools (conftest.CONFIG): `small` has 7 usable blocks of 4 tokens (block 0 is the null block),
no KV; `kv` holds f32 KV for groups full + swa:8, 2 layers each, 2 kv heads of 8; `hybrid`
has groups full + swa:8, no KV; the
`shared-*` pools are restricted to namespace ns1; namespace `tight` may hold 2 blocks per pool.
"""
import errno
import threading
import time

import numpy as np
import pytest

import kvpool
from helpers import SMALL_USABLE, assert_clean, kv_rows, pool_stats


# ---------------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------------

def test_batch_with_a_failing_middle_operation(daemon):
    with daemon.client(pool="small") as c:
        s1, s2, s3 = c.open([1, 2, 3, 4]), c.open([5, 6, 7, 8]), c.open([9, 10, 11, 12])
        b = c.batch()
        with pytest.raises(kvpool.BatchError) as ei:
            with b:
                b.alloc(s1, 4)
                b.alloc(s2, 1000)  # 250 blocks: NoSpace
                b.alloc(s3, 4)
                b.commit(s1, 4)
                assert b.results is None  # nothing ran yet
        e = ei.value
        assert isinstance(e, kvpool.Error)
        assert e.errno == errno.ENOSPC
        assert len(e.results) == 4
        assert e.results[0] == 0
        assert isinstance(e.results[1], kvpool.NoSpace)
        assert e.results[1].errno == errno.ENOSPC
        assert e.results[2] == 0
        assert e.results[3] is None
        assert b.results == e.results
        # The operations after the failure did run.
        assert len(s1.table()[0]) == 1
        assert s2.table() == [[]]
        assert len(s3.table()[0]) == 1
        assert s3.table()[0][0] not in (0, s1.table()[0][0])
        p = pool_stats(c, "small")
        assert (p["blocks_used"], p["blocks_cached"], p["nospace"]) == (2, 1, 1)
        with c.open([1, 2, 3, 4, 5]) as s4:  # s1's commit published its block
            assert s4.lookup() == 4
        for s in (s1, s2, s3):
            s.close()
        assert_clean(c, "small")


def test_batch_alloc_blocks_are_the_tables_new_ends(daemon):
    """alloc(..., blocks=True): (hit, new blocks per group), exactly the ids that end each
    table after it: the pin's one block past a hit, a running sequence's next ones; a sliding
    window's dropped positions stay null and are not new."""
    with daemon.client(pool="hybrid") as c:
        tokens = list(range(1, 26))  # 6 blocks of 4 and one token
        s = c.open(tokens)
        with c.batch() as b:
            b.alloc(s, 1, use_cache=True, blocks=True)
            b.alloc(s, 8, blocks=True)
        (hit, first), (none, second) = b.results
        table = s.table()
        assert (hit, none) == (0, 0)
        assert [len(g) for g in first] == [1, 1] and [len(g) for g in second] == [1, 1]
        assert [f + n for f, n in zip(first, second)] == table
        s.commit(8)
        with c.batch() as b:
            b.alloc(s, 16, blocks=True)
        ((_, more),) = b.results
        table = s.table()
        assert [len(g) for g in table] == [6, 6] and more == [g[2:] for g in table]
        # Group 1 (swa:8) drops the blocks the window left behind (positions 0-3 once 24
        # are computed): nulls, which the next ALLOC's new blocks never include.
        s.commit(24)
        with c.batch() as b:
            b.alloc(s, 1, blocks=True)
        ((_, last),) = b.results
        table = s.table()
        assert table[1][:4] == [0, 0, 0, 0] and last == [g[6:] for g in table]
        assert [len(g) for g in last] == [1, 1]
        with c.open(tokens + [99]) as t, c.batch() as b:
            b.alloc(t, 1, use_cache=True, blocks=True)
        ((hit, pinned),) = b.results
        # The hit's blocks are s's (shared); the pin's new block is the table's 7th.
        assert hit == 24
        assert [len(g) for g in pinned] == [1, 1] and pinned[0][0] not in table[0]
        s.close()
        assert_clean(c, "hybrid")


def test_batch_all_succeed(daemon):
    with daemon.client(pool="small") as c:
        prompt = [1, 2, 3, 4, 5, 6]
        with c.open(prompt) as warm:
            warm.alloc(6)
            warm.commit(6)
        seqs = [c.open(prompt) for _ in range(3)]
        with c.batch() as b:
            b.alloc(seqs[0], 2, use_cache=True)
            b.alloc(seqs[1], 6)
            b.alloc(seqs[2], 2, lookahead=2, use_cache=True)
            b.commit(seqs[0], 6)
            b.free(seqs[1])
        assert b.results == [4, 0, 4, None, None]
        assert len(seqs[0].table()[0]) == 2
        assert seqs[1].table() == [[]]
        assert len(seqs[2].table()[0]) == 2
        assert seqs[0].table()[0][0] == seqs[2].table()[0][0]  # both took the cached block
        for s in seqs:
            s.close()
        assert_clean(c, "small")
        with c.batch() as b:  # an empty batch
            pass
        assert b.results == []


def test_batch_keeps_one_sequences_operations_in_order(daemon):
    with daemon.client(pool="small") as c:
        with c.open(list(range(1, 10))) as s:
            with c.batch() as b:
                b.alloc(s, 9)
                b.commit(s, 9)   # would be EINVAL before the alloc
                b.free(s)        # commit would be EINVAL after the free
            assert b.results == [0, None, None]
            assert s.table() == [[]]
            p = pool_stats(c, "small")
            assert (p["blocks_used"], p["blocks_cached"]) == (0, 2)
        with c.open(list(range(1, 10))) as s2:
            assert s2.lookup() == 8
        # Reversed, the commit fails: allocated slots are needed first.
        with c.open([7, 7, 7, 7, 7]) as s:
            b = c.batch()
            with pytest.raises(kvpool.BatchError) as ei:
                with b:
                    b.commit(s, 5)
                    b.alloc(s, 5)
            assert isinstance(ei.value.results[0], kvpool.Error)
            assert ei.value.results[0].errno == errno.EINVAL
            assert ei.value.results[1] == 0


def test_batch_append_then_alloc_and_commit_as_a_decode_step(daemon):
    with daemon.client(pool="small") as c:
        s1, s2 = c.open([1, 2, 3, 4]), c.open([5, 6, 7, 8])
        with c.batch() as b:
            b.alloc([s1, s2], 4)
            b.commit([s1, s2], 4)
            # Tokens 5.. are unknown until appended: a commit past them is EINVAL.
            b.append([s1, s2], [9, [10, 11]])
            b.alloc([s1, s2], [1, 2])
            b.commit([s1, s2], [5, 6])
            b.append(s1, [12, 13, 14])
            b.alloc(s1, 3)
            b.commit(s1, 8)
        assert b.results == [0, 0, None, None, None, None, 0, 0, None, None, None, 0, None]
        p = pool_stats(c, "small")
        assert (p["blocks_used"], p["blocks_cached"]) == (4, 3)  # s1: 2 full, s2: 1 full
        with c.open([1, 2, 3, 4, 9, 12, 13, 14, 0]) as probe:
            assert probe.lookup() == 8  # the appended tokens were hashed into s1's 2nd block
        with c.open([5, 6, 7, 8, 10, 11, 0]) as probe:
            assert probe.lookup() == 4
        s1.close()
        s2.close()
        assert_clean(c, "small")


def test_batch_append_refuses_bad_arguments_and_sends_nothing(daemon):
    with daemon.client(pool="small") as c, c.open([1, 2, 3, 4]) as s:
        b = c.batch()
        with pytest.raises(ValueError, match="2 sequences need a list of as many"):
            b.append([s, s], [1, 2, 3])
        with pytest.raises(ValueError, match=r"tokens\[1\]: not an int"):
            b.append([s, s], [[1], [2, -1]])
        with pytest.raises(TypeError, match=r"append\(seq, tokens\)"):
            b.append(s)
        with b:
            b.append(s, 5)
        assert b.results == [None]  # only the call that passed its checks ran
        s.alloc(5)
        s.commit(5)
        with pytest.raises(kvpool.BatchError) as ei:
            with c.batch() as b2:
                b2.append(s, np.ones(5 << 20, np.uint32))  # 20 MiB: past the 16 MiB arena
        assert ei.value.results[0].errno == errno.E2BIG


def test_create_pool_max_step_tokens_bounds_an_alloc_in_a_cyclic_pool(daemon):
    with daemon.client(admin=True) as c:
        c.create_pool("ring", 16, 4, [("cyclic", 8)], max_step_tokens=6, owned=True)
        c.attach("ring")
        with c.open(list(range(1, 21))) as s:
            with pytest.raises(kvpool.Error) as ei:
                s.alloc(7)
            assert ei.value.errno == errno.EINVAL
            s.alloc(6)
            s.commit(6)
            s.alloc(6)
            s.commit(12)
            # The ring holds cdiv(W - 1 + S, bs) = cdiv(13, 4) = 4 blocks, and no more.
            s.alloc(6)
            assert len(s.table()[0]) == 4
        with pytest.raises(ValueError, match="max_step_tokens=0"):
            c.create_pool("ring2", 16, 4, [("cyclic", 8)], max_step_tokens=0)


def test_batch_write_kv_then_commit(daemon):
    with daemon.client(pool="kv") as c, c.open([1, 2, 3, 4]) as s:
        data = {(g, layer): kv_rows(200 + 10 * g + layer) for g in range(2) for layer in range(2)}
        with c.batch() as b:
            b.alloc(s, 4)
            for (g, layer), (k, v) in data.items():
                b.write_kv(s, g, layer, 0, k, v)
            b.commit(s, 4)  # NoData unless every write_kv completed first
        assert b.results == [0, None, None, None, None, None]
        for (g, layer), (k, v) in data.items():
            rk, rv = s.read_kv(g, layer, 0, 4)
            np.testing.assert_array_equal(rk, k)
            np.testing.assert_array_equal(rv, v)


def test_batch_body_that_raises_sends_nothing(daemon):
    with daemon.client(pool="small") as c, c.open([1, 2, 3]) as s:
        b = c.batch()
        with pytest.raises(KeyError):
            with b:
                b.alloc(s, 3)
                raise KeyError("boom")
        assert b.results is None
        assert s.table() == [[]]
        assert "ALLOC" not in c.stats()["operations"]


def test_batch_argument_errors(daemon):
    with daemon.client(pool="small") as c, daemon.client(pool="small") as other:
        s = c.open([1, 2, 3])
        foreign = other.open([1, 2, 3])
        b = c.batch()
        with pytest.raises(ValueError):
            b.alloc(5, 1)
        with pytest.raises(ValueError):
            b.alloc(foreign, 1)
        with pytest.raises(ValueError):
            b.alloc(s, 2**32)
        with pytest.raises(TypeError):
            b.alloc(s)
        with pytest.raises(TypeError):
            b.alloc(s, 1, bogus=1)
        closed = c.open([4])
        closed.close()
        with pytest.raises(kvpool.Error) as ei:
            b.free(closed)
        assert ei.value.errno == errno.EBADF
        with b:
            b.alloc(s, 3)
        assert b.results == [0]
        with pytest.raises(ValueError):  # run already
            b.alloc(s, 1)
        assert len(s.table()[0]) == 1


# ---------------------------------------------------------------------------------------------
# Leaks and threads
# ---------------------------------------------------------------------------------------------

def test_no_leak_over_10000_cycles(daemon):
    with daemon.client(pool="small") as c:
        t0 = time.monotonic()
        for _ in range(10000):
            with c.open([1, 2, 3, 4, 5]) as s:
                s.alloc(5)
                s.commit(5)
        assert time.monotonic() - t0 < 10
        p = pool_stats(c, "small")
        assert p["sequences"] == 0
        assert p["blocks_used"] == 0
        assert p["blocks_free"] == SMALL_USABLE
        (row,) = c.stats()["clients"]
        assert (row["sequences"], row["blocks_held"]) == (0, 0)
        ops = c.stats()["operations"]
        assert ops["SEQ_OPEN"]["count"] == 10000
        assert ops["SEQ_CLOSE"]["count"] == 10000
        assert ops["ALLOC"]["count"] == 10000 and ops["ALLOC"]["errors"] == 0
        assert ops["COMMIT"]["count"] == 10000 and ops["COMMIT"]["errors"] == 0
        # The pool still serves its whole capacity.
        with c.open(list(range(28))) as s:
            assert s.alloc(28) == 0


def test_two_threads_share_a_client(daemon):
    errors = []
    done = []

    def work(tag):
        try:
            for i in range(500):
                with c.open([tag, i, 1, 2, 3]) as s:
                    assert s.alloc(5) == 0
                    assert len(s.table()[0]) == 2
            done.append(tag)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with daemon.client(pool="small") as c:
        threads = [threading.Thread(target=work, args=(tag,)) for tag in (1000, 2000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert sorted(done) == [1000, 2000]
        assert_clean(c, "small")
        ops = c.stats()["operations"]
        assert ops["SEQ_OPEN"]["count"] == 1000 and ops["SEQ_OPEN"]["errors"] == 0
        assert ops["SEQ_CLOSE"]["count"] == 1000
        assert ops["ALLOC"]["count"] == 1000 and ops["ALLOC"]["errors"] == 0
