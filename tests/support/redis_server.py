"""A real `redis-server` for tests of the shared budget counters (state.redis, issue #41):
started on 127.0.0.1 on a free port, in a temp dir of its own, with a config of its own (no
persistence, a password) or with the arguments a test gives (the chart's rendered ones: then
they, not the file, set the password and persistence), and stopped by its PID. restart()
starts it again on the same port: without persistence it has forgotten every key, like a
Redis that lost its data.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def use_redis(sg, redis, secret_name, prefix, fail=None):
    """Points the not yet started Sandgate `sg` at `redis` for its budgets (`state.redis`): the
    password from a secret file of `sg`'s (credential `redis`, named `secret_name` on disk),
    `key_prefix` `prefix`, and `fail` when given. Writes the config; returns `sg`."""
    pw_file = sg.secret_file(secret_name, redis.password)
    sg.config["credentials"] = {"redis": {"source": {"file": pw_file}}}
    sg.config["state"] = {"redis": {"url": "redis://127.0.0.1:%d/0" % redis.port,
                                    "password": "redis", "key_prefix": prefix}}
    if fail:
        sg.config["state"]["redis"]["fail"] = fail
    sg.write_config(sg.config)
    return sg


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, password, args=None):
        self.password = password
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="sandgate-redis-")
        self.port = None
        self.proc = None
        self._log = None

    def start(self, timeout=10):
        # A free port can be taken between the probe and redis-server's bind: a few tries.
        for _ in range(5):
            port = self.port or _free_port()
            conf = os.path.join(self.dir, "redis.conf")
            with open(conf, "w") as f:
                if self.args is None:
                    f.write("bind 127.0.0.1\nport %d\nsave \"\"\nappendonly no\n"
                            "protected-mode yes\ndir %s\nrequirepass %s\n" %
                            (port, self.dir, self.password))
                else:  # only where it listens and works; the rest is the arguments'
                    f.write("bind 127.0.0.1\nport %d\ndir %s\n" % (port, self.dir))
            os.chmod(conf, 0o600)
            self._log = open(os.path.join(self.dir, "redis.log"), "ab")
            self.proc = subprocess.Popen(["redis-server", conf, *(self.args or [])],
                                         stdout=self._log,
                                         stderr=subprocess.STDOUT, cwd=self.dir)
            self.port = port
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if self.ping():
                    return self
                time.sleep(0.02)
            self.stop()
            if self.proc.returncode not in (None, 0, -signal.SIGTERM):
                self.port = None  # its port was taken: another one
        raise AssertionError("redis-server did not start")

    def command(self, *args, timeout=2):
        """One command with AUTH first; the reply's first line (b"+PONG", b":5", ...)."""
        def bulk(a):
            a = a if isinstance(a, bytes) else str(a).encode()
            return b"$%d\r\n%s\r\n" % (len(a), a)
        def cmd(*parts):
            return b"*%d\r\n" % len(parts) + b"".join(bulk(p) for p in parts)
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(cmd("AUTH", self.password) + cmd(*args))
            data = b""
            while data.count(b"\r\n") < 2:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            lines = data.split(b"\r\n")
            if len(lines) < 2 or lines[0] != b"+OK":
                raise AssertionError("redis AUTH failed: %r" % lines[:1])
            if lines[1].startswith(b"$") and lines[1] != b"$-1":
                return lines[2] if len(lines) > 2 else b""
            return lines[1]

    def config_get(self, name, timeout=2):
        """CONFIG GET `name`: the value, as bytes."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" %
                      (len(self.password), self.password.encode()) +
                      b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" %
                      (len(name), name.encode()))
            data = b""
            # +OK, *2, $n, name, $m, value: six CRLFs in all.
            while data.count(b"\r\n") < 6:
                chunk = s.recv(4096)
                if not chunk:
                    raise AssertionError("redis CONFIG GET: short reply %r" % data[:40])
                data += chunk
            lines = data.split(b"\r\n")
            if lines[:2] != [b"+OK", b"*2"]:
                raise AssertionError("redis CONFIG GET %s: %r" % (name, lines[:3]))
            return lines[5]

    def info(self, section, timeout=2):
        """INFO `section`, whole (command() returns a bulk reply's first line only)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" %
                      (len(self.password), self.password.encode()) +
                      b"*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n" % (len(section), section.encode()))
            data = b""
            while True:
                head = data.find(b"\r\n", 5)  # after "+OK\r\n"
                if data.startswith(b"+OK\r\n$") and head > 0:
                    size = int(data[6:head])
                    if len(data) >= head + 2 + size:
                        return data[head + 2:head + 2 + size].decode()
                chunk = s.recv(65536)
                if not chunk:
                    raise AssertionError("redis INFO: short reply %r" % data[:40])
                data += chunk

    def ping(self):
        try:
            return self.command("PING", timeout=0.5) == b"+PONG"
        except (OSError, AssertionError):
            return False

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self._log:
            self._log.close()
            self._log = None

    def restart(self):
        self.stop()
        return self.start()

    def cleanup(self):
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
