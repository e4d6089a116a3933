# SPDX-License-Identifier: MIT
"""kvctl exporter's tests: a kvpoold of the test's own (KVPOOLD), kvctl exporter (KVCTL) on a
port the kernel picks, and a real Prometheus (Debian's) scraping it every second."""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "lib", "python"))

from daemon_proc import Daemon  # noqa: E402

KVPOOLD = os.environ.get("KVPOOLD", os.path.join(ROOT, "build", "bin", "kvpoold"))
KVCTL = os.environ.get("KVCTL", os.path.join(ROOT, "build", "bin", "kvctl"))
# What a sanitizer build says when it finds something.
SANITIZER = re.compile(r"AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:")


def wait_for(what, probe, timeout=20.0, step=0.1):
    """probe()'s first truthy value within timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s (last: %r)" % (what, got))
        time.sleep(step)


def http_get(addr, path, method="GET", headers=None, timeout=5.0):
    """(status, headers as a dict, body as text) of one request on a connection of its own."""
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode()
    finally:
        conn.close()


def samples(text):
    """The exposition's samples, comments left out: [(name{labels}, value)]."""
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out.append((series, float(value)))
    return out


class Exporter:
    """kvctl exporter for the daemon at socket_path, on listen (default: a port of its own)."""

    def __init__(self, tmp_path, socket_path, listen="127.0.0.1:0"):
        self.log_path = tmp_path / "exporter.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([KVCTL, "-s", socket_path, "exporter", "--listen", listen],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        serving = wait_for("the exporter's serving line", self._serving, timeout=10)
        self.addr = serving.group(1)

    def _serving(self):
        if self.proc.poll() is not None:
            raise AssertionError("kvctl exporter exited %d: %s" % (self.proc.returncode,
                                                                   self.output()))
        return re.search(r"serving http://(\S+)/metrics and /healthz", self.output())

    def output(self):
        return self.log_path.read_text()

    def get(self, path, **kw):
        return http_get(self.addr, path, **kw)

    def stop(self):
        """SIGTERM: exit status 0, and nothing from a sanitizer."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=15)
        self.log.close()
        out = self.output()
        assert self.proc.returncode == 0, out
        assert not SANITIZER.search(out), out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """Debian's prometheus, scraping target (HOST:PORT) every second as job kvpool."""

    def __init__(self, tmp_path, target):
        self.addr = "127.0.0.1:%d" % free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          "scrape_configs:\n  - job_name: kvpool\n    static_configs:\n"
                          "      - targets: ['%s']\n" % target)
        self.log_path = tmp_path / "prometheus.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            ["prometheus", "--config.file=%s" % config,
             "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
             "--web.listen-address=%s" % self.addr, "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("prometheus to be ready", self._ready, timeout=30)

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("prometheus exited: " + self.log_path.read_text())
        try:
            return http_get(self.addr, "/-/ready", timeout=1)[0] == 200
        except OSError:
            return False

    def query(self, expr):
        """The instant vector (or scalar) of expr now: [(labels, value)]."""
        status, _, body = http_get(self.addr, "/api/v1/query?" +
                                   urllib.parse.urlencode({"query": expr}))
        reply = json.loads(body)
        assert status == 200 and reply["status"] == "success", (expr, body)
        data = reply["data"]
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def value(self, expr):
        got = self.query(expr)
        assert len(got) <= 1, (expr, got)
        return got[0][1] if got else None

    def wait_value(self, expr, expected, timeout=20.0):
        last = [None]

        def probe():
            last[0] = self.value(expr)
            return last[0] == expected
        try:
            wait_for(expr, probe, timeout=timeout)
        except AssertionError:
            raise AssertionError("%s stayed %r, not %r" % (expr, last[0], expected)) from None

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def stack(tmp_path):
    """stack(config): a kvpoold with config, kvctl exporter for it and a Prometheus scraping
    that, all stopped at the test's end."""
    made = []

    def make(config):
        made.append(Daemon(tmp_path, config, KVPOOLD))
        made.append(Exporter(tmp_path, made[0].socket))
        made.append(Prometheus(tmp_path, made[1].addr))
        return tuple(made)
    yield make
    for p in reversed(made):
        p.stop()
