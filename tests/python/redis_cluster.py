# SPDX-License-Identifier: MIT
"""A Redis Cluster of the tests' own: N masters (redis-server) on free loopback ports in a
temporary directory, joined by `redis-cli --cluster create`; and a small RESP client to look
at what kvpoold wrote (redis-cli's text output mangles binary values)."""

import os
import shutil
import socket
import subprocess
import time

import pytest


def free_ports(n):
    """n loopback TCP ports free now, each with port + 10000 free too (the cluster bus)."""
    ports = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 55000 or port in ports:
            continue
        with socket.socket() as b:
            try:
                b.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        ports.append(port)
    return ports


class Resp:
    """One connection to one node: commands in, replies out (errors as RespError)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError("bad reply %r" % line)

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._reply()


class RespError(Exception):
    pass


class Cluster:
    """`masters` redis-server processes in cluster mode, a cluster once started."""

    def __init__(self, tmp_path, masters=3):
        if not shutil.which("redis-server") or not shutil.which("redis-cli"):
            pytest.skip("no redis-server or redis-cli (apt-get install redis-server redis-tools)")
        self.dir = tmp_path / "redis"
        self.dir.mkdir()
        self.ports = free_ports(masters)
        self.procs = {}
        for port in self.ports:
            self.start_node(port)
        addrs = ["127.0.0.1:%d" % p for p in self.ports]
        subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                       timeout=60)
        self.wait_ok()

    def start_node(self, port):
        d = self.dir / str(port)
        d.mkdir(exist_ok=True)
        self.procs[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled",
             "yes", "--cluster-config-file", str(d / "nodes.conf"), "--dir", str(d),
             "--save", "", "--appendonly", "no", "--cluster-node-timeout", "2000",
             "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                Resp(port).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server on %d did not start" % port)

    def wait_ok(self):
        for _ in range(300):
            states = []
            for port in self.ports:
                c = Resp(port)
                info = c.call("CLUSTER", "INFO")
                c.close()
                states.append(b"cluster_state:ok" in info)
            if all(states):
                return
            time.sleep(0.05)
        raise RuntimeError("the cluster did not come up")

    @property
    def url(self):
        return "redis://" + ",".join("127.0.0.1:%d" % p for p in self.ports[:2])

    def keys(self):
        """Every key of every master."""
        out = []
        for port in self.ports:
            c = Resp(port)
            out += c.call("KEYS", "*")
            c.close()
        return out

    def get(self, key):
        """A key's value, following MOVED once."""
        c = Resp(self.ports[0])
        try:
            return c.call("GET", key)
        except RespError as e:
            if not str(e).startswith("MOVED"):
                raise
            c.close()
            c = Resp(int(str(e).split()[2].rsplit(":", 1)[1]))
            return c.call("GET", key)
        finally:
            c.close()

    def set(self, key, value):
        """SET key value, following MOVED once."""
        c = Resp(self.ports[0])
        try:
            return c.call("SET", key, value)
        except RespError as e:
            if not str(e).startswith("MOVED"):
                raise
            c.close()
            c = Resp(int(str(e).split()[2].rsplit(":", 1)[1]))
            return c.call("SET", key, value)
        finally:
            c.close()

    def restart(self):
        """Every node started again on its port, with its nodes.conf: the same cluster."""
        self.stop()
        for port in self.ports:
            self.start_node(port)
        self.wait_ok()

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        for p in self.procs.values():
            p.wait()
