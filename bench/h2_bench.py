#!/usr/bin/env python3
"""HTTP/2 through interception with credential injection (issue #40), against h2 straight to the
same upstream, in one run. Not a test: it prints figures and ratios and never fails on timing.

  upstream  nghttpd (nghttp2-server) on 127.0.0.1, TLS with a leaf for api.test signed by the
            runtime test CA (tests/support/pki.py), serving a 13-byte file
  load      h2load (nghttp2-client), -D seconds after a 1 s warm-up, per-request times from
            its --log-file (p50/p99 computed here)
  shapes    1 connection x 1 stream, 1 connection x 64 streams, 16 connections x 1 stream

and these paths for each shape:

  direct     h2load -> nghttpd
  splice     h2load -> a plain TCP splice (bench/tcp_splice, a process of its own) -> nghttpd
  sandgate   h2load -> the same splice, which first sends `CONNECT api.test:443` with the task's
             Proxy-Authorization -> sandgate (intercepts: h2 on both legs, the credential
             injected into every stream, audit line per stream) -> nghttpd
  mitmproxy  h2load -> the same splice, `CONNECT 127.0.0.1:PORT` -> mitmdump (http2 on: h2 on
             both legs, the Authorization header set on every request) -> nghttpd; only when
             mitmdump is installed (apt-get install mitmproxy), and only if a probe through it
             succeeds in h2

h2load cannot speak to a proxy, so the splice carries its bytes through CONNECT; `splice`
shows what the splice itself costs, and `sandgate / splice` is the ratio to read. nghttpd
speaks only h2, so a request answered through either proxy went upstream in h2.

  bench/h2_bench.py [--binary build/cli/sandgate] [--seconds 5] [--threads N]
                    [--mitmdump PATH | --no-mitmproxy]
"""

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pki import test_pki  # noqa: E402
from intercept_bench import Mitmproxy  # noqa: E402
from proxy_bench import LoggedProcess, find_binary, free_port  # noqa: E402

LOOPBACK = "127.0.0.1"
HOST = "api.test"
TASK, TOKEN = "bench", "h2-bench-token"
SECRET = "sk-h2benchsecret-0123456789abcdef"
SHAPES = [(1, 1), (1, 64), (16, 1)]  # (connections, streams per connection)
MITM_HINT = "apt-get install mitmproxy (Debian 12: mitmproxy 8.1), or pass --mitmdump PATH"


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = predicate()
        if v:
            return v
        time.sleep(0.05)  # polling a child's file or port; bounded by the deadline
    raise RuntimeError("timed out after %ss waiting for %s" % (timeout, what))


class Splice:
    """bench/tcp_splice (C++, a thread per connection): h2load's bytes to `target`, after a
    CONNECT to `connect` with `proxy_auth` when given. The Python asyncio splice this replaced
    was the bottleneck of its own runs on a loaded machine."""

    def __init__(self, path, target, connect=None, proxy_auth=None):
        cmd = [path, "--to", "%s:%d" % target]
        if connect:
            cmd += ["--connect", connect, "--proxy-auth", proxy_auth]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True)
        port = self.proc.stdout.readline().strip()
        if not port.isdigit():
            self.proc.kill()
            raise RuntimeError("tcp_splice did not start")
        self.port = int(port)
        self.pid = self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # only the child started here, by its pid
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sched(pid):
    """(on-CPU seconds, seconds runnable but waiting for a CPU) of every thread of `pid` so far,
    from /proc/PID/task/*/schedstat: what separates "sandgate is slow" from "sandgate waited
    for the scheduler" on a shared machine."""
    run = wait = 0
    base = "/proc/%d/task" % pid
    for tid in os.listdir(base):
        try:
            with open(os.path.join(base, tid, "schedstat")) as f:
                a, b, _ = f.read().split()
            run += int(a)
            wait += int(b)
        except (OSError, ValueError):
            pass
    return run / 1e9, wait / 1e9


class Sandgate(LoggedProcess):
    def __init__(self, binary, tmp, pki, upstream_port, threads):
        secret_file = os.path.join(tmp, "secret")
        with open(secret_file, "w") as f:
            f.write(SECRET + "\n")
        self.audit = os.path.join(tmp, "audit.log")
        ready = os.path.join(tmp, "ready.json")
        cfg = {
            "listen": {"proxy": LOOPBACK + ":0", "metrics": LOOPBACK + ":0"},
            "audit": {"path": self.audit},
            "resolve": {HOST: "%s:%d" % (LOOPBACK, upstream_port)},
            "tls": {"upstream_ca": pki.ca_cert},
            "ca_cert_out": os.path.join(tmp, "sandgate-ca.pem"),
            "limits": {"max_connections": 10000, "max_tunnels": 10000,
                       "new_connections_per_second": 1000000, "idle_timeout": "10m"},
            "credentials": {"api": {
                "source": {"file": secret_file}, "hosts": [HOST],
                "inject": {"header": "Authorization", "value": "Bearer {secret}"}}},
            "policies": {"bench": {"allow": [
                {"host": HOST, "credential": "api", "cidrs": ["127.0.0.0/8"]}]}},
            "tasks": [{"name": TASK, "policy": "bench",
                       "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}],
        }
        config = os.path.join(tmp, "sandgate.yaml")
        with open(config, "w") as f:
            json.dump(cfg, f, indent=1)  # JSON is YAML
        cmd = [binary, "serve", "--config", config, "--ready-file", ready, "--drain-delay", "0"]
        if threads:
            cmd += ["--threads", str(threads)]
        super().__init__(cmd, os.path.join(tmp, "sandgate.log"))

        def is_ready():
            if self.proc.poll() is not None:
                raise RuntimeError("sandgate exited:\n" + self.log_tail())
            try:
                with open(ready) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None
        host, port = wait_for(is_ready, 20, "sandgate's ready file")["proxy"].rsplit(":", 1)
        self.proxy = (host.strip("[]"), int(port))
        self.proxy_auth = "Basic " + base64.b64encode(("%s:%s" % (TASK, TOKEN)).encode()).decode()

    def audited(self):
        """(intercepted stream lines, how many of them were answered 200)."""
        n = ok = 0
        with open(self.audit) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("kind") == "intercept":
                    n += 1
                    ok += rec.get("status") == 200
        return n, ok


def h2load(tmp, port, conns, streams, seconds, label):
    log = os.path.join(tmp, "h2load-%s-%d-%d.log" % (label, conns, streams))
    cmd = ["h2load", "-D", str(seconds), "--warm-up-time", "1", "-c", str(conns),
           "-m", str(streams), "-t", "1", "--log-file", log,
           "--connect-to", "%s:%d" % (LOOPBACK, port), "https://%s/r" % HOST]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    out = p.stdout
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded", out)
    done, ok = (int(m.group(2)), int(m.group(3))) if m else (0, 0)
    times = []
    try:
        with open(log) as f:
            for line in f:
                parts = line.split("\t")
                if len(parts) >= 3 and parts[1] == "200":
                    times.append(int(parts[2]))
    except OSError:
        pass
    times.sort()

    def pct(q):
        return times[min(len(times) - 1, int(q * len(times)))] if times else float("nan")
    if not m or "h2" not in out:
        sys.stderr.write("h2load (%s) said:\n%s\n%s\n" % (label, out[-2000:], p.stderr[-2000:]))
    return {"rps": ok / seconds, "done": done, "ok": ok, "p50": pct(0.5), "p99": pct(0.99),
            "h2": "Application protocol: h2" in out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="sandgate worker threads")
    ap.add_argument("--splice", help="bench/tcp_splice (default: beside the binary's build)")
    ap.add_argument("--mitmdump", default=shutil.which("mitmdump"), help="mitmdump executable")
    ap.add_argument("--no-mitmproxy", action="store_true")
    args = ap.parse_args()
    binary = find_binary(args.binary)
    if not binary:
        print("no sandgate binary (build it, or pass --binary)")
        return 2
    splice_bin = args.splice or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(binary))), "bench", "tcp_splice")
    if not os.access(splice_bin, os.X_OK):
        print("no %s (ninja -C build tcp_splice, or pass --splice)" % splice_bin)
        return 2
    for tool in ("h2load", "nghttpd"):
        if not shutil.which(tool):
            print("%s is not installed (apt-get install nghttp2-client nghttp2-server)" % tool)
            return 2
    tmp = tempfile.mkdtemp(prefix="h2-bench-")
    pki = test_pki()
    docroot = os.path.join(tmp, "www")
    os.makedirs(docroot)
    with open(os.path.join(docroot, "r"), "w") as f:
        f.write("hello, bench\n")  # 13 bytes
    up_port = free_port()
    nghttpd = LoggedProcess(["nghttpd", "-d", docroot, "--address=" + LOOPBACK, str(up_port),
                             os.path.join(pki.dir, "leaf.key"),
                             os.path.join(pki.dir, "leaf.pem")], os.path.join(tmp, "nghttpd.log"))
    children = []
    sg = None
    try:
        def listening():
            if nghttpd.proc.poll() is not None:
                raise RuntimeError("nghttpd exited:\n" + nghttpd.log_tail())
            with socket.socket() as s:
                return s.connect_ex((LOOPBACK, up_port)) == 0
        wait_for(listening, 10, "nghttpd")
        sg = Sandgate(binary, tmp, pki, up_port, args.threads)
        plain = Splice(splice_bin, (LOOPBACK, up_port))
        via = Splice(splice_bin, sg.proxy, "%s:443" % HOST, sg.proxy_auth)
        children += [plain, via]
        plain_port, via_port = plain.port, via.port
        mitm_port, mitm_note = None, "not compared (--no-mitmproxy)"
        if not args.no_mitmproxy and not args.mitmdump:
            mitm_note = "not installed, not compared (%s)" % MITM_HINT
        elif not args.no_mitmproxy:
            try:
                mitm = Mitmproxy(args.mitmdump, tmp, pki, http2=True)
                children.append(mitm)
                # mitmproxy cannot be given `resolve:`: the CONNECT names the upstream's loopback
                # address, and mitmproxy verifies its certificate against the client's SNI.
                to_mitm = Splice(splice_bin, (LOOPBACK, mitm.port),
                                 "%s:%d" % (LOOPBACK, up_port), "")
                children.append(to_mitm)
                probe = h2load(tmp, to_mitm.port, 1, 1, 1, "mitmproxy-probe")
                if probe["ok"] and probe["h2"]:
                    mitm_port = to_mitm.port
                else:
                    mitm_note = "requests through mitmdump failed; not compared:\n" + \
                        mitm.log_tail()
            except RuntimeError as e:
                mitm_note = "did not start (%s); not compared" % e
        print("sandgate %s; %d s per run after 1 s warm-up; machine: %d cores, load %s" %
              (binary, args.seconds, os.cpu_count(), " ".join(
                  "%.1f" % x for x in os.getloadavg())))
        print("%-22s %-9s %10s %10s %10s %5s" % ("shape", "path", "req/s", "p50 us", "p99 us",
                                                 "h2"))
        for conns, streams in SHAPES:
            shape = "%d conn x %d stream%s" % (conns, streams, "s" if streams > 1 else "")
            res = {}
            paths = [("direct", up_port), ("splice", plain_port), ("sandgate", via_port)]
            if mitm_port:
                paths.append(("mitmproxy", mitm_port))
            for label, port in paths:
                before = sched(sg.pid)
                res[label] = r = h2load(tmp, port, conns, streams, args.seconds, label)
                after = sched(sg.pid)
                r["cpu"], r["queued"] = after[0] - before[0], after[1] - before[1]
                print("%-22s %-9s %10.0f %10.0f %10.0f %5s" % (shape, label, r["rps"], r["p50"],
                                                               r["p99"], "yes" if r["h2"] else
                                                               "NO"))
            s, d, p = res["sandgate"], res["direct"], res["splice"]
            per = 1e6 / s["done"] if s["done"] else 0
            print("%-22s ratios: sandgate/direct %.2fx req/s, p99 %.2fx; sandgate/splice %.2fx "
                  "req/s, p99 %.2fx; sandgate per request: %.0f us on a CPU, %.0f us runnable "
                  "but waiting for one" % (
                      "", s["rps"] / d["rps"] if d["rps"] else 0,
                      s["p99"] / d["p99"] if d["p99"] else 0,
                      s["rps"] / p["rps"] if p["rps"] else 0,
                      s["p99"] / p["p99"] if p["p99"] else 0,
                      s["cpu"] * per, s["queued"] * per))
            if mitm_port:
                m = res["mitmproxy"]
                print("%-22s sandgate/mitmproxy %.1fx req/s, p99 %.2fx" % (
                    "", s["rps"] / m["rps"] if m["rps"] else float("inf"),
                    s["p99"] / m["p99"] if m["p99"] else 0))
        n, ok = sg.audited()
        print("sandgate audited %d intercepted streams, %d answered 200 (the credential injected "
              "into each)" % (n, ok))
        if not mitm_port:
            print("mitmproxy: %s" % mitm_note)
    finally:
        for c in children:
            c.stop()
        if sg:
            sg.stop()
        nghttpd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
