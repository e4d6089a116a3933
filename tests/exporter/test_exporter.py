# SPDX-License-Identifier: MIT
"""kvctl exporter over HTTP: what /metrics and /healthz answer, the other paths and methods,
errors at start, and the bounds on HTTP clients (garbage, oversized headers, idle connections
up to the limit and past it); kvctl health."""
import http.client
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import KVCTL, KVPOOLD, Daemon, Exporter, samples, wait_for

CONFIG = """
[pool.p]
blocks = 17
block_size = 4
groups = full
"""
LIMIT = 64  # kvctl(8): HTTP connections at once
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path, CONFIG, KVPOOLD)
    yield d
    d.stop()


@pytest.fixture
def exporter(tmp_path, daemon):
    x = Exporter(tmp_path, daemon.socket)
    yield x
    x.stop()


def names(text):
    return {series.split("{")[0] for series, _ in samples(text)}


def test_metrics_are_kvctl_stats_and_pass_promtool(exporter, daemon):
    with daemon.client(pool="p") as c, c.open(list(range(9))) as q:
        q.alloc(9)
        status, headers, body = exporter.get("/metrics")
        assert status == 200
        assert headers["Content-Type"] == METRICS_TYPE
        check = subprocess.run(["promtool", "check", "metrics"], input=body, text=True,
                               capture_output=True)
        assert check.returncode == 0, check.stdout + check.stderr
        got = dict(samples(body))
        assert got["kvpool_up"] == 1
        assert 0 < got["kvpool_exporter_scrape_seconds"] < 1
        assert got['kvpool_blocks{pool="p",state="used"}'] == 3
        stats = subprocess.run([KVCTL, "-s", daemon.socket, "stats", "--prometheus"],
                               capture_output=True, text=True, check=True).stdout
        assert names(body) == names(stats) | {"kvpool_up", "kvpool_exporter_scrape_seconds"}
    # HEAD: the headers alone.
    status, headers, body = exporter.get("/metrics", method="HEAD")
    assert (status, headers["Content-Type"], body) == (200, METRICS_TYPE, "")
    assert exporter.get("/metrics?debug=1")[0] == 200  # a query string changes nothing


def test_healthz_and_the_other_paths(exporter):
    status, headers, body = exporter.get("/healthz")
    assert (status, headers["Content-Type"], body) == (200, "text/plain; charset=utf-8", "ok\n")
    status, _, body = exporter.get("/")
    assert (status, body) == (404, "/: not found (/metrics or /healthz)\n")
    assert exporter.get("/metrics/")[0] == 404
    for method in ("POST", "PUT", "DELETE"):
        status, headers, body = exporter.get("/metrics", method=method)
        assert (status, headers["Allow"], body) == (405, "GET, HEAD", "%s: GET or HEAD only\n"
                                                    % method)
    assert exporter.get("/healthz", method="POST")[0] == 405


def test_one_connection_serves_scrape_after_scrape(exporter):
    host, port = exporter.addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    for path in ("/metrics", "/healthz", "/metrics"):
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        assert r.status == 200 and r.getheader("Connection") != "close"
    conn.close()


def test_it_starts_without_a_daemon_and_finds_it_later(tmp_path):
    sock = str(tmp_path / "kvpool.sock")
    x = Exporter(tmp_path, sock)
    try:
        assert "no kvpoold at %s" % sock in x.output()
        status, headers, body = x.get("/metrics")
        assert (status, headers["Content-Type"]) == (200, METRICS_TYPE)
        assert samples(body) == [("kvpool_up", 0.0)]
        assert x.get("/healthz")[:3:2] == (503, "no kvpoold at %s (is it running? kvpoold -s "
                                           "%s)\n" % (sock, sock))
        d = Daemon(tmp_path, CONFIG, KVPOOLD)
        try:
            assert dict(samples(x.get("/metrics")[2]))["kvpool_up"] == 1
            assert x.get("/healthz")[:3:2] == (200, "ok\n")
            assert "kvpoold at %s is back" % sock in x.output()
        finally:
            d.stop()
    finally:
        x.stop()


def test_a_port_in_use_is_named(tmp_path, exporter, daemon):
    out = subprocess.run([KVCTL, "-s", daemon.socket, "exporter", "--listen", exporter.addr],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 1
    assert out.stderr == ("kvctl: exporter: cannot listen on %s: Address already in use "
                          "(another program, or another exporter, holds the port)\n"
                          % exporter.addr)


@pytest.mark.parametrize("listen", ["9464", "127.0.0.1", "127.0.0.1:", ":9464",
                                    "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1: 9464",
                                    "[::1:9464", "::1:9464", "[]:9464"])
def test_a_bad_listen_is_a_usage_error(tmp_path, listen):
    out = subprocess.run([KVCTL, "-s", str(tmp_path / "s"), "exporter", "--listen", listen],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 2
    assert out.stderr.startswith("kvctl: exporter: bad value for --listen: '%s'" % listen)


def test_ipv6_in_brackets(tmp_path, daemon):
    if not socket.has_ipv6 or not os.path.exists("/proc/net/if_inet6"):
        pytest.skip("no IPv6 here")
    x = Exporter(tmp_path, daemon.socket, listen="[::1]:0")
    try:
        assert x.addr.startswith("[::1]:")
        assert x.get("/healthz")[:3:2] == (200, "ok\n")
    finally:
        x.stop()


def test_a_request_body_is_refused(exporter):
    status, _, body = exporter.get("/metrics", method="GET", headers={"Content-Length": "5"})
    assert (status, body) == (413, "/metrics: a GET carries no body\n")
    s = connect(exporter)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n")
    assert s.recv(64).startswith(b"HTTP/1.1 413 ")
    s.close()
    assert exporter.get("/metrics")[0] == 200


def scrape_within_a_second(x):
    t0 = time.monotonic()
    status, _, body = x.get("/metrics", timeout=1.0)
    assert status == 200 and dict(samples(body))["kvpool_up"] == 1
    return time.monotonic() - t0


def connect(x):
    host, port = x.addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def test_garbage_and_oversized_headers_do_not_stop_metrics(exporter):
    garbage = connect(exporter)
    garbage.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n")
    big = connect(exporter)
    big.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
    assert garbage.recv(64).startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert big.recv(64).startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    scrape_within_a_second(exporter)
    garbage.close()
    big.close()


def live(sockets):
    """Those of sockets the exporter has not closed."""
    alive = []
    for s in sockets:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                continue
        except BlockingIOError:
            alive.append(s)
        except ConnectionResetError:
            continue
    return alive


def test_idle_and_slow_clients_below_the_limit_do_not_delay_a_scrape(exporter):
    held = [connect(exporter) for _ in range(LIMIT - 4)]
    # Slow ones: a request line, then headers a byte at a time, never finished.
    slow = [connect(exporter) for _ in range(3)]
    for s in slow:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHo")
    time.sleep(0.5)
    for s in slow:
        s.sendall(b"s")
    assert len(live(held + slow)) == LIMIT - 1
    # Scrape after scrape, each on a connection of its own, the last one's gone a moment ago.
    for _ in range(3):
        assert scrape_within_a_second(exporter) < 1.0
        assert exporter.get("/healthz", timeout=1.0)[0] == 200
    for s in held + slow:
        s.close()


def test_past_the_limit_new_connections_are_refused(exporter):
    held = [connect(exporter) for _ in range(LIMIT + 6)]
    time.sleep(0.5)
    assert len(live(held)) == LIMIT
    late = connect(exporter)
    late.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        assert late.recv(64) == b""
    except ConnectionResetError:
        pass
    late.close()
    for s in held:
        s.close()
    # Their slots come back.
    wait_for("a scrape once the idle connections are gone",
             lambda: _answers(exporter), timeout=5)


def _answers(x):
    try:
        return x.get("/metrics", timeout=1.0)[0] == 200
    except OSError:
        return False


def health(sock, *args):
    t0 = time.monotonic()
    out = subprocess.run([KVCTL, "-s", sock, "health"] + list(args), capture_output=True,
                         text=True, timeout=30)
    return out.returncode, out.stdout, out.stderr, time.monotonic() - t0


def test_kvctl_health(tmp_path, daemon):
    rc, out, err, _ = health(daemon.socket)
    assert (rc, err) == (0, "")
    assert out.startswith("kvpoold at %s answered in " % daemon.socket) and out.endswith(" us\n")
    gone = str(tmp_path / "none.sock")
    rc, out, err, _ = health(gone)
    assert (rc, out) == (1, "")
    assert err == "kvctl: health: no kvpoold at %s (is it running? kvpoold -s %s)\n" % (gone, gone)
    for bad in (["--timeout", "0"], ["--timeout", "x"], ["now"], ["--json"]):
        rc, out, err, _ = health(daemon.socket, *bad)
        assert rc == 2 and err.startswith("kvctl: health: "), (bad, err)


def test_a_stopped_daemon_fails_the_checks_in_time(tmp_path, daemon, exporter):
    assert exporter.get("/healthz")[0] == 200
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        rc, out, err, took = health(daemon.socket, "--timeout", "300")
        assert rc == 1 and took < 3
        assert err == ("kvctl: health: no answer from kvpoold at %s within 300 ms (stopped, or "
                       "swamped?)\n" % daemon.socket)
        t0 = time.monotonic()
        status, _, body = exporter.get("/healthz")
        assert time.monotonic() - t0 < 2.5
        assert (status, body) == (503, "kvpoold at %s did not answer a NOP within 1000 ms "
                                  "(stopped, or swamped?)\n" % daemon.socket)
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    wait_for("/healthz 200 again", lambda: exporter.get("/healthz")[0] == 200, timeout=10)
    assert dict(samples(exporter.get("/metrics")[2]))["kvpool_up"] == 1
