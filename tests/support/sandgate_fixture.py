"""Runs the built `sandgate serve` (SANDGATE_BINARY) against a config written to a temp dir.

Readiness is the --ready-file appearing (polled with a deadline, never a fixed sleep). The
process is stopped by its PID only. Tokens are given in clear here and written to the config
as SHA-256, like an operator would.

For the suite-wide leak check (tests/leak/) the fixture records, when CTest asks for it, every
artifact it sees: sandgate's stderr and audit file when the process stops, each metrics page it
scrapes, and each response read by the helpers below. Secrets are registered automatically for
`file` and `env` credential sources in the config (and by `secret_file`/`secret_script`);
tests that make a secret any other way call `artifacts.register_secret` themselves.
"""

import atexit
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request

import artifacts


_reachable_copy = None


def _others_can_execute(path):
    """Whether a user other than the owner can reach and execute `path` (every directory on
    the way searchable by others, the file executable by others)."""
    path = os.path.realpath(path)
    if not os.stat(path).st_mode & 0o001:
        return False
    d = os.path.dirname(path)
    while True:
        if not os.stat(d).st_mode & 0o001:
            return False
        if d == "/":
            return True
        d = os.path.dirname(d)


def _private_runs_directory():
    """Every `sandgate run` of a test keeps its run directory (the evidence bundle) in one
    temporary directory of the test process, removed when it exits, instead of
    /var/lib/sandgate/runs: SANDGATE_RUNS_DIR, inherited by the runs. Sticky and writable by
    all, like /tmp, for the rootless runs of users the tests create."""
    if os.environ.get("SANDGATE_RUNS_DIR"):
        return
    d = tempfile.mkdtemp(prefix="sandgate-runs-")
    os.chmod(d, 0o1777)
    atexit.register(shutil.rmtree, d, True)
    os.environ["SANDGATE_RUNS_DIR"] = d


_private_runs_directory()


def binary():
    """The sandgate binary under test. Rootless tests run it as a user the test creates: where
    the build lies in a directory only root may enter (a clone in `mktemp -d`, 0700), that user
    gets a copy in a 0755 directory of its own, removed when the test process exits."""
    global _reachable_copy
    b = os.environ.get("SANDGATE_BINARY")
    if not b or not os.path.exists(b):
        raise RuntimeError("SANDGATE_BINARY must point at the built sandgate binary (set by CTest)")
    if os.geteuid() != 0 or _others_can_execute(b):
        return b
    if _reachable_copy is None:
        d = tempfile.mkdtemp(prefix="sandgate-bin-")
        os.chmod(d, 0o755)
        copy = os.path.join(d, "sandgate")
        shutil.copy2(b, copy)
        os.chmod(copy, 0o755)
        atexit.register(shutil.rmtree, d, True)
        _reachable_copy = copy
    return _reachable_copy


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


# The directory listen.admin must name a socket in (serve creates it when missing).
ADMIN_DIR = "/run/sandgate"


def sha256(token):
    return hashlib.sha256(token.encode()).hexdigest()


class Sandgate:
    def __init__(self, policies, tasks, limits=None, resolve=None, extra=None, threads=2,
                 serve_args=()):
        """`tasks`: list of dicts with name, policy and optionally token (clear text), limits.
        `serve_args`: more `sandgate serve` options."""
        self.dir = tempfile.mkdtemp(prefix="sandgate-it-")
        self.config_path = os.path.join(self.dir, "sandgate.yaml")
        self.audit_path = os.path.join(self.dir, "audit.log")
        self.ready_path = os.path.join(self.dir, "ready.json")
        # If the config sets listen.admin: serve accepts it under /run/sandgate only (no sandbox
        # sees that directory). Unique per instance; cleanup() removes it.
        self.admin_path = os.path.join(ADMIN_DIR, os.path.basename(self.dir) + ".sock")
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.threads = threads
        self.serve_args = list(serve_args)
        # serve's default drain delay (5 s of accepting after SIGTERM, for endpoint
        # propagation) would add 5 s to every stop: tests that do not test it drain at once.
        if "--drain-delay" not in self.serve_args:
            self.serve_args += ["--drain-delay", "0"]
        self.proc = None
        self.env = None
        self._recorded = True
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
        if cfg is not None:
            self._register_config_secrets(cfg)

    # --- secrets -------------------------------------------------------------------------

    def secret_file(self, name, value):
        """Writes `value` to a file in the temp dir for a `source: {file: ...}` credential, and
        registers it for the leak check. Writing the same name again replaces it atomically
        (rotation)."""
        artifacts.register_secret(name, value)
        path = os.path.join(self.dir, "secret-" + name)
        with open(path + ".tmp", "w") as f:
            f.write(value + "\n")
        os.rename(path + ".tmp", path)
        return path

    def secret_script(self, name, value):
        """An executable printing `value`, for a `source: {exec: [path]}` credential; registered
        for the leak check."""
        artifacts.register_secret(name, value)
        path = os.path.join(self.dir, "exec-" + name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\nprintf '%%s\\n' '%s'\n" % value)
        os.chmod(path, 0o700)
        return path

    def _register_config_secrets(self, cfg):
        """Registers the values behind `file` and `env` sources that exist right now."""
        creds = cfg.get("credentials") if isinstance(cfg, dict) else None
        if not isinstance(creds, dict):
            return
        for name, c in creds.items():
            src = c.get("source") if isinstance(c, dict) else None
            if not isinstance(src, dict):
                continue  # a config that is invalid on purpose
            value = None
            if isinstance(src.get("file"), str) and os.path.isfile(src["file"]):
                with open(src["file"]) as f:
                    value = f.read()
            elif isinstance(src.get("env"), str):
                value = (self.env or os.environ).get(src["env"])
            if value and value.strip():
                artifacts.register_secret(name, value)

    def start(self, timeout=15, max_fds=None, env=None, wrapper=()):
        """`max_fds`: RLIMIT_NOFILE for the process (descriptor-exhaustion tests). `env`: extra
        environment variables (e.g. for `env` credential sources). `wrapper`: a command that
        ends by exec'ing its arguments (sandgate's command line), so the PID stays sandgate's."""
        if env:
            self.env = dict(os.environ, **env)
        if self.config is not None:
            self._register_config_secrets(self.config)
        self._stderr = open(self.stderr_path, "wb")
        self._recorded = False

        # The descriptor limit is set by prlimit(1), not by a preexec_fn: that would run Python
        # code in the child of this multithreaded process (the upstreams serve from threads).
        limit = ["prlimit", f"--nofile={max_fds}:{max_fds}", "--"] if max_fds else []
        self.proc = subprocess.Popen(
            limit + list(wrapper) +
            [binary(), "serve", "--config", self.config_path, "--threads", str(self.threads),
             "--ready-file", self.ready_path] + self.serve_args,
            stdout=subprocess.DEVNULL, stderr=self._stderr, env=self.env)

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
        self._record_files()
        return self.proc.returncode

    def _record_files(self):
        """Hands sandgate's log and audit file(s) to the leak check, once per start()."""
        if self._recorded:
            return
        self._recorded = True
        artifacts.record_file("log", "stderr", self.stderr_path)
        audit_dir = os.path.dirname(self.audit_path)
        base = os.path.basename(self.audit_path)
        for fn in sorted(os.listdir(audit_dir)) if os.path.isdir(audit_dir) else []:
            if fn == base or fn.startswith(base + "."):  # the file and any rotated copies
                artifacts.record_file("audit", fn, os.path.join(audit_dir, fn))

    def cleanup(self):
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            # serve removes its socket when it stops; not when it was killed.
            if os.path.exists(self.admin_path):
                os.unlink(self.admin_path)

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
            text = r.read().decode()
        artifacts.record("metrics", "metrics", text)
        return text

    def metric(self, name, **labels):
        """The value of one sample (all of `labels` must match), or None."""
        for line in self.metrics().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all('%s="%s"' % (k, v) in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return None

    def task_env(self, task):
        """What `sandgate run` is given for one run of `task`'s sandbox: the reply to the admin
        socket's task_env (the config must set listen.admin to self.admin_path). Its "env" maps
        each placeholder variable to a placeholder made for this run alone (honoured only on
        listeners the same admin connection adopts); nothing in it is secret."""
        return self._admin_env("task_env", task)

    def token_env(self, task):
        """The environment of `task`'s token clients on serve's own listener (token_env): its
        "env" holds the placeholders those clients' requests may carry."""
        return self._admin_env("token_env", task)

    def _admin_env(self, op, task):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(10)
        try:
            s.connect(self.admin_path)
            s.send(json.dumps({"v": 1, "op": op, "task": task}).encode())
            reply = json.loads(s.recv(1 << 20))
        finally:
            s.close()
        if not reply.get("ok"):
            raise AssertionError("%s for %s refused: %r" % (op, task, reply))
        return reply

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
    artifacts.record("response", "head", data)
    lines = head.decode("latin-1").split("\r\n")
    if not lines or not lines[0].startswith("HTTP/"):
        return None, {}, data
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, rest


def read_response(sock):
    """Reads one response with a Content-Length or chunked body (or none); returns (status,
    headers, body), a chunked body decoded. The connection stays usable for the next response:
    the whole body is read, however the segments split it."""
    status, headers, rest = read_response_head(sock)
    if headers.get("transfer-encoding", "").lower().endswith("chunked"):
        body, complete = dechunk(rest)
        while not complete:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:  # a response cut short ends abortively
                break
            if not data:
                break
            rest += data
            body, complete = dechunk(rest)
        return status, headers, body
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        data = sock.recv(65536)
        if not data:
            break
        rest += data
    return status, headers, rest[:n]


def dechunk(raw):
    """(body so far, complete) of a chunked body of which `raw` may be only a prefix."""
    body, pos = b"", 0
    while True:
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            return body, False
        size = int(raw[pos:eol].split(b";")[0], 16)
        if size == 0:
            return body, raw.find(b"\r\n\r\n", eol) >= 0
        start = eol + 2
        if len(raw) < start + size + 2:
            return body + raw[start:start + size], False
        body += raw[start:start + size]
        pos = start + size + 2


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


def read_until(sock, data, done, timeout=10):
    """Reads from `sock` onto `data` until done(data), the peer's end or `timeout` seconds;
    returns the bytes."""
    deadline = time.monotonic() + timeout
    while not done(data) and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    return data


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
        artifacts.record_response("raw", status, headers, body)
        return status, headers, body
    finally:
        s.close()
