# SPDX-License-Identifier: MIT
"""The connector's link to kvpoold (kvpool.vllm.link, no vLLM needed): a connection the
scheduler side drops is closed only once nothing it allocated is in use, and one outage
costs one back-off step however many calls fail during it."""
import errno
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "lib", "python"))

import kvpool  # noqa: E402
from kvpool.vllm import link  # noqa: E402


class FakeClient:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def down_link(defer_close):
    counts = {}
    ln = link.Link({"pool": "p"}, None, link.Failures(counts), defer_close=defer_close)
    ln.client, ln.connects = FakeClient(), 3
    return ln, counts


def test_a_dropped_connection_waits_for_its_copies():
    ln, counts = down_link(defer_close=True)
    client = ln.client
    assert ln.failed(kvpool.Timeout(errno.ETIMEDOUT, "stalled"), "a call") == "timeout"
    assert ln.client is None and ln.retired == {3: client} and not client.closed
    ln.close_retired(keep={3})  # a request on connection 3 still has a copy in flight
    assert not client.closed
    ln.close_retired(keep=set())
    assert client.closed and ln.retired == {}
    assert counts == {"timeout": 1}


def test_a_dropped_connection_closes_at_once_by_default():
    ln, _ = down_link(defer_close=False)
    client = ln.client
    ln.failed(kvpool.Disconnected(errno.ECONNRESET, "gone"), "a call")
    assert client.closed and ln.retired == {}


def test_one_outage_one_back_off():
    ln, counts = down_link(defer_close=False)
    for _ in range(5):
        ln.failed(kvpool.Disconnected(errno.ECONNRESET, "gone"), "a call")
    assert ln.backoff == 2 * link.BACKOFF_FIRST
    assert counts == {"daemon_away": 5}
