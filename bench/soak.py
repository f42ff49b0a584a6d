#!/usr/bin/env python3
"""Soak: an hour of steady mixed load on `sandgate serve`, on loopback, to see whether memory,
descriptors or threads grow.

The load, at a fixed rate (--rate requests/s in all, spread over worker threads):
  forward    plain http:// GET through the proxy on a keep-alive client connection
  intercept  HTTPS GET through an intercepted CONNECT on a keep-alive client connection, with
             the credential injected; the upstream records the Authorization it received, which
             must be the secret in force (current) and never the previous one once a rotation
             has settled (stale); the body the client gets must not contain a secret
  tunnel     CONNECT to a TCP echo upstream that is not intercepted: bytes there and back, close
  midbody    a POST that promises 4096 body bytes, sends 100 and disconnects (expected, counted
             apart from errors)
Client connections are reopened every 200 requests, and after any error. Every --reload-every
seconds the config file is rewritten with one more (or one fewer) allow rule, so serve loads a
new snapshot; every --rotate-every seconds the credential's file gets a new secret.

Every --sample-every seconds: the sandgate process's RSS (VmRSS, and its anonymous part
RssAnon), open descriptors (/proc/PID/fd) and threads. At the end: for each, start, end, min, max and the least-squares
slope per hour over the whole run and after the warm-up (the first 10% left out); requests by
kind, errors by reason (sandgate's X-Sandgate-Reason where it answered, else what the client
saw), reloads (serve's sandgate_config_reloads_total) and rotations, credential checks.

Everything is on 127.0.0.1 with port-0 upstreams (tests/support), only the PID started here is
signalled, and the temp directory is removed. Not a CTest test: it exits non-zero only when it
cannot run, or (--strict) when there were errors.

Usage: bench/soak.py [--binary build/cli/sandgate] [--duration 3600] [--rate 40]
                     [--reload-every 60] [--rotate-every 300] [--sample-every 10] [--csv F]
"""

import argparse
import collections
import http.client
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))

TOKEN = "soak-token-0123"
CREDENTIAL = "soak"
# A rotation is settled once this long has passed: a request that started before it may still
# carry the previous secret.
SETTLE = 2.0


class AuthLog(list):
    """Stands in for an upstream's `requests` list: keeps, per path, only the Authorization
    received, until the client side takes it (so memory stays flat over an hour)."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.by_path = {}

    def append(self, r):
        auth = [v for k, v in r["headers"] if k.lower() == "authorization"]
        with self.lock:
            self.by_path[r["path"]] = auth

    def take(self, path):
        with self.lock:
            return self.by_path.pop(path, None)


class Discard(list):
    """An upstream `requests` list that keeps nothing."""

    def append(self, r):
        pass


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = collections.Counter()
        self.errors = collections.Counter()
        self.checks = collections.Counter()
        self.midbody = 0
        self.behind = 0

    def ok(self, kind):
        with self.lock:
            self.requests[kind] += 1

    def error(self, kind, reason):
        with self.lock:
            self.requests[kind] += 1
            self.errors["%s: %s" % (kind, reason)] += 1

    def check(self, what):
        with self.lock:
            self.checks[what] += 1


class Secrets:
    """The secret in force, and when it was last changed."""

    def __init__(self, sg):
        self.sg = sg
        self.lock = threading.Lock()
        self.history = []
        self.rotations = 0
        self.rotate(first=True)

    def rotate(self, first=False):
        value = "sk-soak-%s" % secrets.token_hex(16)
        with self.lock:
            self.sg.secret_file(CREDENTIAL, value)
            self.history.append((time.monotonic(), value))
            if not first:
                self.rotations += 1

    def classify(self, auth, started):
        """'current' when `auth` is the secret in force when the request started (or one set
        within SETTLE before), 'stale' for an older one, else 'other'."""
        with self.lock:
            history = list(self.history)
        for i in range(len(history) - 1, -1, -1):
            since, value = history[i]
            if auth == ["Bearer " + value]:
                if i == len(history) - 1 or since <= started < history[i + 1][0] + SETTLE:
                    return "current"
                return "stale"
        return "other"

    def all_values(self):
        with self.lock:
            return [v for _, v in self.history]


def proc_sample(pid):
    """(RSS MiB, anonymous RSS MiB, descriptors, threads). The anonymous part is the heap and
    stacks; the rest of the RSS is the binary's and libraries' pages, which grow as code that
    had not run yet (a reload, a rotation) is paged in."""
    rss = anon = threads = None
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024.0
            elif line.startswith("RssAnon:"):
                anon = int(line.split()[1]) / 1024.0
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir("/proc/%d/fd" % pid))
    return rss, anon, fds, threads


def slope_per_hour(points):
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    if sxx == 0:
        return 0.0
    sxy = sum((t - mx) * (v - my) for t, v in points)
    return sxy / sxx * 3600.0


class Worker(threading.Thread):
    def __init__(self, soak, index):
        super().__init__(daemon=True)
        self.soak = soak
        self.index = index
        self.jobs = collections.deque()
        self.wake = threading.Event()
        self.conns = {"forward": None, "intercept": None}  # keep-alive client connections
        self.uses = {"forward": 0, "intercept": 0}
        self.n = 0

    def submit(self, kind):
        if len(self.jobs) >= 50:
            return False
        self.jobs.append(kind)
        self.wake.set()
        return True

    def run(self):
        while not self.soak.stopping.is_set() or self.jobs:
            if not self.jobs:
                self.wake.wait(0.2)
                self.wake.clear()
                continue
            kind = self.jobs.popleft()
            try:
                getattr(self, kind)()
            except Exception as e:  # noqa: BLE001 — every failure is counted by its kind
                self.soak.stats.error(kind, type(e).__name__ + (": %s" % e)[:80])
                self.drop(kind)
        self.drop("forward")
        self.drop("intercept")

    def drop(self, kind):
        conn = self.conns.get(kind)
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
            self.conns[kind] = None

    def path(self):
        self.n += 1
        return "/echo/soak-%d-%d" % (self.index, self.n)

    def refusal(self, kind, r):
        reason = r.getheader("X-Sandgate-Reason")
        self.soak.stats.error(kind, "%d %s" % (r.status, reason or "(from the upstream)"))

    def connection(self, kind, make):
        """The worker's keep-alive connection for `kind`, new every 200 requests."""
        if self.conns[kind] is None or self.uses[kind] >= 200:
            self.drop(kind)
            self.conns[kind] = make()
            self.uses[kind] = 0
        self.uses[kind] += 1
        return self.conns[kind]

    def forward(self):
        s = self.soak
        conn = self.connection("forward", lambda: http.client.HTTPConnection(
            "127.0.0.1", s.sg.proxy_port, timeout=15))
        conn.request("GET", "http://plain.test:%d%s" % (s.plain.port, self.path()),
                     headers={"Proxy-Authorization": s.proxy_auth})
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            self.refusal("forward", r)
            self.drop("forward")
            return
        s.stats.ok("forward")

    def intercept(self):
        s = self.soak

        def make():
            conn = http.client.HTTPSConnection("api.test", 443, timeout=15)
            conn.sock = s.sg.tls_tunnel("api.test", "soak", TOKEN, s.ca_out, timeout=15)
            return conn

        conn = self.connection("intercept", make)
        path = self.path()
        started = time.monotonic()
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            self.refusal("intercept", r)
            self.drop("intercept")
            return
        auth = s.https.requests.take(path)
        s.stats.check(s.secrets.classify(auth, started) if auth is not None else "not received")
        if any(v.encode() in body for v in s.secrets.all_values()):
            s.stats.check("secret in the response (a leak)")
        s.stats.ok("intercept")

    def tunnel(self):
        s = self.soak
        c = socket.create_connection(("127.0.0.1", s.sg.proxy_port), timeout=15)
        try:
            c.sendall(("CONNECT echo.test:%d HTTP/1.1\r\nHost: echo.test:%d\r\n%s\r\n" %
                       (s.echo.port, s.echo.port, s.sg.auth_header("soak", TOKEN))).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = c.recv(4096)
                if not chunk:
                    raise ConnectionError("closed before the CONNECT answer")
                head += chunk
            status = head.split(b"\r\n", 1)[0]
            if b" 200 " not in status:
                reason = b""
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"x-sandgate-reason:"):
                        reason = line.split(b":", 1)[1].strip()
                s.stats.error("tunnel", "%s %s" % (status.decode("latin-1"),
                                                   reason.decode("latin-1")))
                return
            data = b"soak-%d-%d" % (self.index, self.n) * 20
            self.n += 1
            c.sendall(data)
            got = head.split(b"\r\n\r\n", 1)[1]
            while len(got) < len(data):
                chunk = c.recv(65536)
                if not chunk:
                    break
                got += chunk
            if got != data:
                s.stats.error("tunnel", "echo differs")
                return
            s.stats.ok("tunnel")
        finally:
            c.close()

    def midbody(self):
        s = self.soak
        c = socket.create_connection(("127.0.0.1", s.sg.proxy_port), timeout=15)
        try:
            c.sendall(("POST http://plain.test:%d/echo/midbody HTTP/1.1\r\n"
                       "Host: plain.test:%d\r\nContent-Length: 4096\r\n%s\r\n" %
                       (s.plain.port, s.plain.port, s.sg.auth_header("soak", TOKEN))).encode() +
                      b"m" * 100)
            time.sleep(0.01)
        finally:
            c.close()
        with s.stats.lock:
            s.stats.midbody += 1


class Soak:
    # The mix, one entry per 10% of the requests.
    MIX = ["forward", "intercept", "tunnel", "forward", "intercept", "midbody", "intercept",
           "forward", "tunnel", "intercept"]

    def __init__(self, args):
        from pki import test_pki
        from sandgate_fixture import Sandgate
        from upstreams import HttpUpstream, TcpEcho

        self.args = args
        self.stats = Stats()
        self.stopping = threading.Event()
        self.samples = []  # under load: (seconds since start,) + proc_sample()
        self.after = None  # proc_sample() 2 s after the load stopped
        self.pki = test_pki()
        self.plain = HttpUpstream()
        self.plain.requests = Discard()
        self.https = HttpUpstream(self.pki)
        self.https.requests = AuthLog()
        self.echo = TcpEcho()
        self.sg = Sandgate({}, [], threads=args.threads)
        self.ca_out = os.path.join(self.sg.dir, "sandgate-ca.pem")
        self.secrets = Secrets(self.sg)
        self.generation = 0
        self.write_config()
        self.proxy_auth = self.sg.auth_header("soak", TOKEN).split(": ", 1)[1].strip()

    def write_config(self):
        rule = {"cidrs": ["127.0.0.0/8"]}
        allow = [dict(rule, host="plain.test", ports=[self.plain.port]),
                 dict(rule, host="api.test", credential=CREDENTIAL),
                 dict(rule, host="echo.test", ports=[self.echo.port])]
        # Every other generation has one more rule: each reload is a real change.
        if self.generation % 2:
            allow.append(dict(rule, host="extra-%d.test" % self.generation))
        creds = {CREDENTIAL: {"source": {"file": os.path.join(self.sg.dir,
                                                               "secret-" + CREDENTIAL)},
                              "hosts": ["api.test"],
                              "inject": {"header": "Authorization", "value": "Bearer {secret}"}}}
        self.sg.config = self.sg.make_config(
            {"soak": {"allow": allow}}, [{"name": "soak", "policy": "soak", "token": TOKEN}],
            resolve={"plain.test": "127.0.0.1:%d" % self.plain.port,
                     "api.test": "127.0.0.1:%d" % self.https.port,
                     "echo.test": "127.0.0.1:%d" % self.echo.port},
            extra={"credentials": creds, "ca_cert_out": self.ca_out,
                   "tls": {"upstream_ca": self.pki.ca_cert}})
        self.sg.write_config(self.sg.config)

    def reloads(self):
        """serve's reload counter, by result."""
        out = {}
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.sg.metrics_port,
                                    timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("sandgate_config_reloads_total"):
                    labels = line.split("{", 1)[1].split("}", 1)[0] if "{" in line else ""
                    result = labels.split('result="', 1)[-1].split('"', 1)[0] or "all"
                    out[result] = int(float(line.rsplit(" ", 1)[1]))
        return out

    def run(self):
        a = self.args
        self.sg.start()
        pid = self.sg.proc.pid
        workers = [Worker(self, i) for i in range(a.workers)]
        for w in workers:
            w.start()
        start = time.monotonic()
        end = start + a.duration
        next_reload = start + a.reload_every
        next_rotate = start + a.rotate_every
        next_sample = start
        next_report = start + 60
        interval = 1.0 / a.rate
        due = start
        i = 0
        try:
            while True:
                now = time.monotonic()
                if now >= end:
                    break
                if self.sg.proc.poll() is not None:
                    raise RuntimeError("sandgate exited with %s" % self.sg.proc.returncode)
                if now >= next_sample:
                    self.samples.append((now - start,) + proc_sample(pid))
                    next_sample += a.sample_every
                if now >= next_reload:
                    self.generation += 1
                    self.write_config()
                    next_reload += a.reload_every
                if now >= next_rotate:
                    self.secrets.rotate()
                    next_rotate += a.rotate_every
                if now >= next_report:
                    s = self.samples[-1]
                    print("soak: %4.0f s  rss %.1f MiB (anonymous %.1f)  fds %d  threads %d  "
                          "requests %d  errors %d" %
                          (s + (sum(self.stats.requests.values()),
                                sum(self.stats.errors.values()))), flush=True)
                    next_report += 60
                while due <= now:
                    kind = self.MIX[i % len(self.MIX)]
                    if not workers[i % len(workers)].submit(kind):
                        with self.stats.lock:
                            self.stats.behind += 1
                    i += 1
                    due += interval
                time.sleep(max(0.0, min(due, next_sample) - time.monotonic()))
        finally:
            self.stopping.set()
            for w in workers:
                w.wake.set()
                w.join(30)
        # One more sample once the load has stopped and the clients are gone (serve still holds
        # its idle pooled upstream connections): printed apart, not part of the slopes.
        time.sleep(2)
        self.after = proc_sample(pid)
        reloads = self.reloads()
        status = self.sg.stop()
        return reloads, status

    def close(self):
        self.sg.cleanup()
        self.plain.close()
        self.https.close()
        self.echo.close()

    def report(self, reloads, status):
        a = self.args
        print("\nsoak: %d s at %g requests/s, %d workers, a reload every %d s, a rotation every "
              "%d s, samples every %d s" % (a.duration, a.rate, a.workers, a.reload_every,
                                            a.rotate_every, a.sample_every))
        warm = a.duration * 0.1
        for col, name, unit in ((1, "RSS", "MiB"), (2, "anonymous", "MiB"), (3, "descriptors", ""),
                                (4, "threads", "")):
            pts = [(s[0], s[col]) for s in self.samples]
            after = [p for p in pts if p[0] >= warm]
            vals = [v for _, v in pts]
            fmt = "%.1f" if unit else "%d"
            print(("  %-11s start " + fmt + ", end " + fmt + ", min " + fmt + ", max " + fmt +
                   "%s; slope %+.2f%s/h, after the warm-up (%d s) %+.2f%s/h") %
                  (name, vals[0], vals[-1], min(vals), max(vals), unit and " " + unit,
                   slope_per_hour(pts), unit and " " + unit, warm, slope_per_hour(after),
                   unit and " " + unit))
        print("  after the load: RSS %.1f MiB (anonymous %.1f), %d descriptors, %d threads" %
              self.after)
        st = self.stats
        print("  requests    %d: %s; mid-body disconnects %d (expected); not sent, workers "
              "behind: %d" % (sum(st.requests.values()),
                              ", ".join("%s %d" % kv for kv in sorted(st.requests.items())),
                              st.midbody, st.behind))
        print("  errors      %d%s" % (sum(st.errors.values()),
                                      "".join("\n    %6d  %s" % (n, r)
                                              for r, n in st.errors.most_common())))
        print("  reloads     %d written; serve counted %s" %
              (self.generation, json.dumps(reloads, sort_keys=True)))
        print("  rotations   %d; credential checks %s" %
              (self.secrets.rotations, json.dumps(dict(st.checks), sort_keys=True)))
        print("  serve exited with %s" % status)
        if a.csv:
            with open(a.csv, "w") as f:
                f.write("seconds,rss_mib,anon_mib,fds,threads\n")
                for s in self.samples:
                    f.write("%.1f,%.2f,%.2f,%d,%d\n" % s)
            print("  samples in %s" % a.csv)
        bad = sum(st.errors.values()) + st.checks["stale"] + st.checks["other"] + \
            st.checks["not received"] + st.checks["secret in the response (a leak)"]
        return bad


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=os.environ.get("SANDGATE_BINARY",
                                                      os.path.join(HERE, "..", "build", "cli",
                                                                   "sandgate")))
    p.add_argument("--duration", type=float, default=3600)
    p.add_argument("--rate", type=float, default=40)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="serve's worker threads")
    p.add_argument("--reload-every", type=float, default=60)
    p.add_argument("--rotate-every", type=float, default=300)
    p.add_argument("--sample-every", type=float, default=10)
    p.add_argument("--csv")
    p.add_argument("--strict", action="store_true", help="exit 1 when there were errors")
    a = p.parse_args()
    if not os.path.exists(a.binary):
        sys.exit("soak: no sandgate binary at %s (--binary)" % a.binary)
    os.environ["SANDGATE_BINARY"] = os.path.abspath(a.binary)
    os.environ.pop("SANDGATE_TEST_ARTIFACTS", None)  # nothing recorded for the leak check
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    soak = Soak(a)
    try:
        reloads, status = soak.run()
        bad = soak.report(reloads, status)
    finally:
        soak.close()
    sys.exit(1 if a.strict and bad else 0)


if __name__ == "__main__":
    main()
