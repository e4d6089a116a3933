# SPDX-License-Identifier: MIT
"""tools/grafana/kvpool.json: the fields of Grafana's dashboard schema it uses, ready for file
provisioning; and every panel's every PromQL expression, evaluated by a real Prometheus
scraping kvctl exporter after a workload that exercises what the panel shows, returns data.
(Grafana itself is not in Debian.)"""
import json
import os
import re
import socket
import subprocess

import numpy as np
import pytest

import kvpool
from conftest import KVCTL, ROOT, wait_for

DASHBOARD = os.path.join(ROOT, "tools", "grafana", "kvpool.json")
# What Grafana puts in place of the dashboard's variables: $__rate_interval is at least four
# scrape intervals; "All" of a multi-value variable is its allValue.
RATE_INTERVAL = "30s"
PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "bargauge", "table"}
UNITS = {"percentunit", "short", "ops", "s", "Bps", "bytes", "none"}
UID = os.getuid()
SLOT = 2 * 2 * 4 * 2 * 8 * 4  # a block's K and V: 2 layers, 4 tokens, 2 heads x 8 f32
CONFIG = """
[pool.t]
blocks = 9
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_host_bytes = %d
kv_events = on

[uid.%d]
max_blocks = 100
""" % (4 * SLOT, UID)
# The cluster tier's panels: a pool writing through to a standalone Redis of the test's own.
REMOTE_POOL = """
[pool.r]
blocks = 9
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_remote = redis://127.0.0.1:%d
tier_remote_timeout_ms = 1000
"""


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def targets(d):
    for p in d["panels"]:
        for t in p.get("targets", []):
            yield p, t


def test_the_dashboard_is_ready_for_provisioning():
    d = dashboard()
    # File provisioning takes the model as it is: no id of another Grafana, no import inputs.
    assert d["id"] is None and "__inputs" not in d
    assert d["uid"] == "kvpool" and d["title"] == "kvpool"
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
    assert set(d["time"]) == {"from", "to"}
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "pool"):
        v = variables[name]
        assert v["type"] == "query" and v["includeAll"] and v["multi"] and v["allValue"] == ".*"
        assert v["definition"] == v["query"]["query"]
        assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    cells = set()
    for p in d["panels"]:
        assert p["type"] in PANEL_TYPES and p["title"]
        g = p["gridPos"]
        assert set(g) == {"h", "w", "x", "y"} and g["w"] > 0 and g["h"] > 0
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24
        # No two panels overlap on Grafana's 24-column grid.
        mine = {(g["x"] + i, g["y"] + j) for i in range(g["w"]) for j in range(g["h"])}
        assert not cells & mine, p["title"]
        cells |= mine
        if p["type"] == "row":
            assert p["panels"] == [] and g["w"] == 24
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["fieldConfig"]["defaults"]["unit"] in UNITS
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs))
    used = set()
    for _, t in targets(d):
        assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        used |= set(re.findall(r"\$(\w+)", t["expr"]))
    assert used == {"instance", "pool", "__rate_interval"}


def promql(expr):
    """expr as Grafana sends it with every instance and pool chosen."""
    return (expr.replace("$__rate_interval", RATE_INTERVAL).replace("$instance", ".*")
            .replace("$pool", ".*"))


def workload(d):
    """What every panel shows: prefix hits at admission and in lookups, evictions of every
    cause, a refused ALLOC, a tier's copies down and up, KV events, a quota, open sequences."""
    prompt = list(range(100, 117))
    kv = np.ones((len(prompt), 2, 8), dtype=np.float32)
    with d.client(pool="t") as c, d.client(admin=True) as admin:
        with c.open(prompt) as q:
            q.alloc(len(prompt))
            for layer in range(2):
                q.write_kv(0, layer, 0, kv, kv)  # a KV pool commits what was written
            q.commit(len(prompt))
        with c.open(prompt) as q:
            assert q.lookup() == 16
            assert q.alloc(1, use_cache=True) == 16
        # The cached blocks went down to the tier as they were freed: landed before they are
        # reused (a copy still in flight then is abandoned).
        admin.pool_sync("t")
        # Every usable block: the cached ones are reused.
        with c.open(list(range(1000, 1032))) as q:
            q.alloc(32)
            with c.open(list(range(2000, 2004))) as r, pytest.raises(kvpool.NoSpace):
                r.alloc(4)
        with c.open(prompt) as q:
            assert q.alloc(1, use_cache=True) == 16  # from the tier
    out = subprocess.run([KVCTL, "-s", d.socket, "pool", "reset", "t"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr


@pytest.fixture
def redis(tmp_path):
    """A standalone redis-server on a free loopback port: its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for("redis-server", lambda: subprocess.run(
        ["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True).stdout.strip()
        == "PONG")
    yield port
    proc.terminate()
    proc.wait(timeout=10)


def test_every_panel_returns_data(stack, redis):
    d, _, prom = stack(CONFIG + REMOTE_POOL % redis)
    wait_for("a first scrape", lambda: prom.value("kvpool_up") == 1)
    workload(d)
    with d.client(pool="t") as c, c.open(list(range(9))) as q:
        q.alloc(9)  # held: the clients, quota and fragmentation panels have something
        wait_for("the workload scraped",
                 lambda: prom.value('kvpool_tier_promoted_blocks_total{pool="t"}') == 4 and
                 prom.value('kvpool_cache_evictions_total{pool="t",cause="reset"}') and
                 prom.value('kvpool_quota_used{uid="%d",quota="blocks"}' % UID) == 3)
        # rate() needs two samples in its window: a few scrapes after the workload.
        wait_for("three scrapes since", lambda: prom.value(
            'count_over_time(kvpool_cache_evictions_total{pool="t",cause="reset"}[%s]) >= 3'
            % RATE_INTERVAL))
        empty = []
        for p, t in targets(dashboard()):
            if not prom.query(promql(t["expr"])):
                empty.append("%s / %s: %s" % (p["title"], t["refId"], promql(t["expr"])))
        assert empty == []
        # The variables' label_values() over what they select.
        for v in dashboard()["templating"]["list"]:
            if v["type"] == "query":
                m = re.fullmatch(r"label_values\((.*), (\w+)\)", v["query"]["query"])
                got = prom.query(promql(m.group(1)))
                assert {s[0][m.group(2)] for s in got}, v["name"]
