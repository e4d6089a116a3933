# SPDX-License-Identifier: MIT
"""A kvpoold of a test's own (tests/python's and tests/vllm's)."""
import socket
import subprocess
import time

import kvpool


class Daemon:
    """kvpoold (the program at daemon_path) with config_text, on a socket in tmp_path.
    env: its environment (default: the test's)."""

    def __init__(self, tmp_path, config_text, daemon_path, env=None):
        self.socket = str(tmp_path / "kvpool.sock")
        config = tmp_path / "kvpool.ini"
        config.write_text(config_text)
        self.log = open(tmp_path / "kvpoold.log", "w+")
        self.proc = subprocess.Popen([daemon_path, "--socket", self.socket, "--config",
                                      str(config)], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env)
        # Ready once it accepts: the socket's path appears at bind(), before listen().
        deadline = time.monotonic() + 10
        while not self._accepts():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                raise RuntimeError("kvpoold did not start: " + self.log.read())
            time.sleep(0.01)

    def _accepts(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            try:
                s.connect(self.socket)
                return True
            except OSError:
                return False

    def client(self, **kw):
        return kvpool.Client(self.socket, **kw)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.log.close()
