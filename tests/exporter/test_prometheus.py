# SPDX-License-Identifier: MIT
"""A real Prometheus scraping kvctl exporter every second records the exact values of a
scripted workload; while the daemon is away it records kvpool_up 0 and nothing else of it,
and /healthz says 503; once the daemon is back, kvpool_up is 1 again."""
import os

from conftest import KVPOOLD, Daemon, samples

UID = os.getuid()
CONFIG = """
[pool.p]
blocks = 17
block_size = 4
groups = full

[uid.%d]
max_blocks = 12
""" % UID
PROMPT = list(range(100, 117))  # 4 full blocks and a token


def test_prometheus_records_the_workload_and_the_daemon_away(tmp_path, stack):
    d, x, prom = stack(CONFIG)
    with d.client(pool="p") as c:
        first = c.open(PROMPT)
        assert first.alloc(len(PROMPT)) == 0
        first.commit(len(PROMPT))
        second = c.open(PROMPT)
        assert second.alloc(1, use_cache=True) == 16  # the 4 full blocks hit
        # 5 blocks the first holds, the 4 it shares with the second and 1 of the second's.
        prom.wait_value('kvpool_blocks{pool="p",state="used"}', 6)
        assert prom.value('kvpool_blocks{pool="p",state="cached"}') == 4
        assert prom.value('kvpool_blocks{pool="p",state="free"}') == 10
        assert prom.value('kvpool_prefix_cache_hits_tokens_total{pool="p"}') == 16
        assert prom.value('kvpool_prefix_cache_queries_tokens_total{pool="p"}') == 17
        assert prom.value('kvpool_quota_used{uid="%d",quota="blocks"}' % UID) == 6
        assert prom.value('kvpool_quota_limit{uid="%d",quota="blocks"}' % UID) == 12
        assert prom.value('up{job="kvpool"}') == 1
        assert prom.value('kvpool_up') == 1
        scrape = prom.value('kvpool_exporter_scrape_seconds')
        assert scrape is not None and 0 < scrape < 1
        first.close()
        second.close()

    d.stop()
    prom.wait_value('kvpool_up', 0)
    # The exporter answered (up is 1) with kvpool_up 0 alone: the daemon's series went stale.
    assert prom.value('up{job="kvpool"}') == 1
    assert prom.query('{job="kvpool", __name__!~"kvpool_up|up|scrape_.*"}') == []
    status, _, body = x.get("/metrics")
    assert status == 200 and samples(body) == [("kvpool_up", 0.0)]
    status, _, body = x.get("/healthz")
    assert status == 503
    assert body == "no kvpoold at %s (is it running? kvpoold -s %s)\n" % (d.socket, d.socket)

    d = Daemon(tmp_path, CONFIG, KVPOOLD)
    try:
        prom.wait_value('kvpool_up', 1)
        assert prom.value('kvpool_blocks{pool="p",state="used"}') == 0
        assert x.get("/healthz")[:3:2] == (200, "ok\n")
    finally:
        d.stop()
