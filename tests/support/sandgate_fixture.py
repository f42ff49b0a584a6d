"""Runs the built `sandgate serve` (SANDGATE_BINARY) against a config written to a temp dir.

Readiness is the --ready-file appearing (polled with a deadline, never a fixed sleep). The
process is stopped by its PID only. Tokens are given in clear here and written to the config
as SHA-256, like an operator would.
"""

import base64
import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request


def binary():
    b = os.environ.get("SANDGATE_BINARY")
    if not b or not os.path.exists(b):
        raise RuntimeError("SANDGATE_BINARY must point at the built sandgate binary (set by CTest)")
    return b


def wait_until(predicate, timeout=10.0, interval=0.02, what="condition"):
    """Polls `predicate` until it returns a truthy value or `timeout` passes (then raises)."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(interval)


def sha256(token):
    return hashlib.sha256(token.encode()).hexdigest()


class Sandgate:
    def __init__(self, policies, tasks, limits=None, resolve=None, extra=None, threads=2):
        """`tasks`: list of dicts with name, policy and optionally token (clear text), limits."""
        self.dir = tempfile.mkdtemp(prefix="sandgate-it-")
        self.config_path = os.path.join(self.dir, "sandgate.yaml")
        self.audit_path = os.path.join(self.dir, "audit.log")
        self.ready_path = os.path.join(self.dir, "ready.json")
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.threads = threads
        self.proc = None
        self.config = None
        self.config = self.make_config(policies, tasks, limits, resolve, extra)
        self.write_config(self.config)

    def make_config(self, policies, tasks, limits=None, resolve=None, extra=None):
        cfg = {
            # Port 0: the ready file says which ports sandgate got.
            "listen": {"proxy": "127.0.0.1:0", "metrics": "127.0.0.1:0"},
            "policies": policies,
            "tasks": [],
            "audit": {"path": self.audit_path},
        }
        for t in tasks:
            t = dict(t)
            token = t.pop("token", None)
            if token is not None:
                t["token_sha256"] = sha256(token)
            cfg["tasks"].append(t)
        if limits:
            cfg["limits"] = limits
        if resolve:
            cfg["resolve"] = resolve
        if extra:
            cfg.update(extra)
        return cfg

    def write_config(self, cfg, text=None):
        """Replaces the config file atomically (JSON is YAML)."""
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text if text is not None else json.dumps(cfg, indent=1))
        os.rename(tmp, self.config_path)

    def start(self, timeout=15, max_fds=None):
        """`max_fds`: RLIMIT_NOFILE for the process (descriptor-exhaustion tests)."""
        self._stderr = open(self.stderr_path, "wb")

        def limit():
            if max_fds:
                resource.setrlimit(resource.RLIMIT_NOFILE, (max_fds, max_fds))

        self.proc = subprocess.Popen(
            [binary(), "serve", "--config", self.config_path, "--threads", str(self.threads),
             "--ready-file", self.ready_path],
            stdout=subprocess.DEVNULL, stderr=self._stderr, preexec_fn=limit)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("sandgate exited with %s:\n%s" % (self.proc.returncode,
                                                                       self.stderr()))
            if os.path.exists(self.ready_path):
                with open(self.ready_path) as f:
                    return json.load(f)
            return None

        info = wait_until(ready, timeout, what="sandgate ready file")
        self.proxy_port = int(info["proxy"].rsplit(":", 1)[1])
        self.metrics_port = int(info["metrics"].rsplit(":", 1)[1]) if "metrics" in info else None
        return self

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Signals our own process and waits for it; returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
                raise AssertionError("sandgate did not stop within %ss" % timeout)
        self._stderr.close()
        return self.proc.returncode

    def cleanup(self):
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()

    # --- observing -----------------------------------------------------------------------

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def audit(self):
        if not os.path.exists(self.audit_path):
            return []
        with open(self.audit_path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def wait_audit(self, timeout=10, **fields):
        """The first audit line whose fields equal `fields` (waits for it to be written)."""
        def find():
            for rec in self.audit():
                if all(rec.get(k) == v for k, v in fields.items()):
                    return rec
            return None
        return wait_until(find, timeout, what="audit line %r" % (fields,))

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=5) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        """The value of one sample (all of `labels` must match), or None."""
        for line in self.metrics().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all('%s="%s"' % (k, v) in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return None

    # --- clients -------------------------------------------------------------------------

    def proxy_url(self, task=None, token=None):
        if task is None:
            return "http://127.0.0.1:%d" % self.proxy_port
        return "http://%s:%s@127.0.0.1:%d" % (task, token, self.proxy_port)

    @staticmethod
    def auth_header(task, token):
        cred = base64.b64encode(("%s:%s" % (task, token)).encode()).decode()
        return "Proxy-Authorization: Basic %s\r\n" % cred

    def connect(self, timeout=10):
        s = socket.create_connection(("127.0.0.1", self.proxy_port), timeout=timeout)
        return s

    def tls_tunnel(self, host, task, token, cafile, sni=None, timeout=10):
        """A TLS connection to `host` through a CONNECT tunnel, trusting `cafile` (sandgate's
        CA for intercepted hosts). `sni`: another server name (its check is then off)."""
        s = self.connect(timeout=timeout)
        s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n%s\r\n" %
                   (host, host, self.auth_header(task, token))).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(1)
            if not chunk or len(head) > 4096:
                s.close()
                raise AssertionError("no CONNECT answer: %r" % head)
            head += chunk
        if b" 200 " not in head.split(b"\r\n")[0]:
            s.close()
            raise AssertionError("CONNECT refused: %r" % head)
        ctx = ssl.create_default_context(cafile=cafile)
        if sni is not None:
            ctx.check_hostname = False
        return ctx.wrap_socket(s, server_hostname=sni or host)


def read_response_head(sock, limit=65536):
    """Reads from `sock` up to the end of a response head; returns (status, headers, rest)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            break
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines or not lines[0].startswith("HTTP/"):
        return None, {}, data
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, rest


def read_all(sock, timeout=10):
    """Everything until EOF (or the timeout)."""
    sock.settimeout(timeout)
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            out += chunk
    except socket.timeout:
        return out
    except ConnectionResetError:
        return out


def read_to_eof(sock, timeout=10):
    """(bytes, closed): everything until the peer closes (EOF or reset) or `timeout`."""
    sock.settimeout(timeout)
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return out, True
            out += chunk
    except socket.timeout:
        return out, False
    except ConnectionResetError:
        return out, True


def raw_exchange(port, data, timeout=10):
    """Sends raw bytes to 127.0.0.1:port; returns (status, headers, body, closed_by_peer)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        status, headers, rest = read_response_head(s)
        body = rest + read_all(s, timeout)
        return status, headers, body
    finally:
        s.close()
