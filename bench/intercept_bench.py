#!/usr/bin/env python3
"""Interception benchmark: HTTPS through sandgate's TLS interception with credential injection,
against the same requests sent directly to the upstream, and against mitmproxy, in one run.

  (a) keep-alive, small responses, 1 and 64 connections: requests/s, p50/p99 latency, added
      p50/p99 latency (through a proxy minus direct)       target: < 1 ms added p50 at 1 conn
  (b) new intercepted connections per second: CONNECT, TLS handshake with the proxy, one
      request, close; the upstream closes after every response, so the proxy's upstream leg
      needs a new verified TLS handshake as well
  (c) the same keep-alive runs through mitmproxy (`mitmdump`, header set with modify_headers)
                                                           target: >= 20x mitmproxy's req/s
  (d) the idle spin (`serve --idle-spin`, default 100 us): the keep-alive runs and a paced run
      (1 connection, a pause after every response, as from an agent that thinks between calls)
      through a second sandgate started with `--idle-spin 0`, to show what the spin buys and
      what CPU it costs when the load is sparse (native harness only)
  (e) the floor (native harness only): the 1-connection keep-alive run through `tls_load
      relay`, which decrypts, replaces the Authorization value, encrypts, and does nothing
      else (no HTTP parsing, policy, audit, pool or scrubbing): what the work every
      intercepting proxy must do (TLS on both legs, two more loopback hops) allows here

Within a phase, the direct runs and every proxy run in mirrored order (direct, sandgate,
sandgate --idle-spin 0, the floor, mitmproxy, then the same backwards), each run half as
long, and p50/p99 are the means of the two halves: this machine's speed drifts by a third from one minute to the
next, and a ratio of two runs made a minute apart measures the drift as much as the proxies.
The sandgate/mitmproxy ratio is printed for each half as well.

Everything runs on 127.0.0.1: a runtime test CA (tests/support/pki.py) signs the upstream's
certificate and is given to sandgate as `tls.upstream_ca` (and to mitmproxy as
`ssl_verify_upstream_trusted_ca`); clients trust sandgate's CA through `ca_cert_out` and
mitmproxy's from its temp confdir. The upstream answers 401 unless the request carries the
real secret, so every counted request proves the injection happened. Servers and load
generators are Python asyncio in child processes; the direct runs use the same client, so they
show its ceiling. Only PIDs started here are signalled; every phase is bounded in time. This is
not a CTest test; it exits non-zero only when it cannot run (no binary, sandgate or the
upstream does not start), never because of a figure.

Usage: bench/intercept_bench.py [--binary build-rel/cli/sandgate] [--quick]  (bench/README.md)
"""

import argparse
import array
import asyncio
import base64
import glob
import hashlib
import json
import multiprocessing
import os
import re
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from pki import test_pki  # noqa: E402  (runtime test CA and a leaf for api.test, other.test)
from proxy_bench import LoggedProcess, find_binary, listen_socket, stop_child  # noqa: E402

LOOPBACK = "127.0.0.1"
TASK = "bench"
TOKEN = "bench-token-not-a-secret"
KEEP_HOST, CLOSE_HOST = "api.test", "other.test"  # names in the test leaf certificate
SECRET = "sk-bench-secret-0123456789abcdef0123"
PLACEHOLDER = "SANDGATE_PLACEHOLDER_OPENAI"
BODY = b"hello, world\n"
OK = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
      % (len(BODY), BODY))
OK_CLOSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
DENIED = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"
NEEDLE = b"\r\nauthorization: bearer " + SECRET.encode().lower() + b"\r\n"
IO_TIMEOUT = 30.0


# ---------------------------------------------------------------------------------------------
# The upstream: HTTPS, small responses, checks that the real secret arrived.

class Upstream(asyncio.Protocol):
    close_after = False

    def connection_made(self, transport):
        self.transport = transport
        self.pending = b""

    def data_received(self, data):
        self.pending += data
        while b"\r\n\r\n" in self.pending:
            head, _, self.pending = self.pending.partition(b"\r\n\r\n")
            ok = NEEDLE in head.lower() + b"\r\n"
            if self.close_after:
                self.transport.write(OK_CLOSE if ok else DENIED)
                self.transport.close()
                return
            self.transport.write(OK if ok else DENIED)
        if len(self.pending) > 65536:
            self.transport.close()


class UpstreamClose(Upstream):
    close_after = True


def upstream_server(sock, pki_dir, close_after):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(pki_dir, "leaf.pem"), os.path.join(pki_dir, "leaf.key"))
    loop = asyncio.new_event_loop()
    proto = UpstreamClose if close_after else Upstream
    loop.run_until_complete(loop.create_server(proto, sock=sock, ssl=ctx, backlog=4096))
    loop.run_forever()


# ---------------------------------------------------------------------------------------------
# The load generator: asyncio, keep-alive TLS connections, directly or through CONNECT.

class Target:
    """Where a client connects: directly (proxy None) or through a CONNECT proxy."""

    def __init__(self, name, host, port, cafile, auth_value, proxy=None, connect_to=None,
                 proxy_auth=None):
        self.name = name
        self.host = host              # TLS server name and Host header
        self.port = port              # direct: the upstream port
        self.cafile = cafile          # what the client trusts (upstream CA or the proxy's CA)
        self.auth_value = auth_value  # Authorization the client sends (placeholder via a proxy)
        self.proxy = proxy            # (host, port) or None
        self.connect_to = connect_to  # CONNECT authority
        self.proxy_auth = proxy_auth  # Proxy-Authorization value or None

    def request(self, close=False):
        return ("GET /v1/models HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n%s\r\n"
                % (self.host, self.auth_value, "Connection: close\r\n" if close else "")).encode()


async def open_tls(t, ctx):
    if t.proxy is None:
        return await asyncio.open_connection(LOOPBACK, t.port, ssl=ctx, server_hostname=t.host)
    reader, writer = await asyncio.open_connection(*t.proxy)
    auth = "Proxy-Authorization: %s\r\n" % t.proxy_auth if t.proxy_auth else ""
    writer.write(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n"
                  % (t.connect_to, t.connect_to, auth)).encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 200" not in head.split(b"\r\n", 1)[0]:
        writer.close()
        raise RuntimeError("CONNECT refused: %r" % head[:200])
    await writer.start_tls(ctx, server_hostname=t.host)
    return reader, writer


async def read_response(reader):
    """Reads one response; True if it is a 200. sandgate re-frames scrubbed bodies as chunked."""
    head = await reader.readuntil(b"\r\n\r\n")
    length, chunked = 0, False
    for line in head.split(b"\r\n")[1:]:
        name = line[:18].lower()
        if name.startswith(b"content-length:"):
            length = int(line[15:])
        elif name.startswith(b"transfer-encoding:") and b"chunked" in line.lower():
            chunked = True
    if chunked:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                break
            await reader.readexactly(size + 2)
    elif length:
        await reader.readexactly(length)
    return head.startswith(b"HTTP/1.1 200")


async def keepalive_conn(t, conn, deadline, lat, stats):
    reader, writer = conn
    req = t.request()
    try:
        while time.monotonic() < deadline:
            t0 = time.perf_counter_ns()
            writer.write(req)
            ok = await read_response(reader)
            lat.append(time.perf_counter_ns() - t0)
            if not ok:
                stats["errors"] += 1
    finally:
        writer.close()


async def newconn_worker(t, ctx, deadline, lat, stats):
    req = t.request(close=True)
    while time.monotonic() < deadline:
        t0 = time.perf_counter_ns()
        try:
            reader, writer = await open_tls(t, ctx)
            writer.write(req)
            ok = await read_response(reader)
            writer.close()
        except (OSError, RuntimeError, asyncio.IncompleteReadError, ssl.SSLError):
            stats["errors"] += 1
            continue
        lat.append(time.perf_counter_ns() - t0)
        if not ok:
            stats["errors"] += 1


def _client_proc(t, kind, conns, seconds, q):
    async def main():
        ctx = ssl.create_default_context(cafile=t.cafile)
        lat = array.array("q")
        stats = {"errors": 0}
        if kind == "keepalive":
            # Connections (and their handshakes) are made before the measured window opens.
            opened = await asyncio.wait_for(
                asyncio.gather(*[open_tls(t, ctx) for _ in range(conns)]), IO_TIMEOUT)
            jobs = [(keepalive_conn, c) for c in opened]
        else:
            jobs = [(newconn_worker, ctx)] * conns
        t0 = time.monotonic()
        deadline = t0 + seconds
        res = await asyncio.wait_for(
            asyncio.gather(*[fn(t, arg, deadline, lat, stats) for fn, arg in jobs],
                           return_exceptions=True), seconds + IO_TIMEOUT)
        failed = [r for r in res if isinstance(r, BaseException)]
        return lat, stats["errors"] + len(failed), time.monotonic() - t0, \
            repr(failed[0]) if failed else ""
    try:
        lat, errors, elapsed, first = asyncio.run(main())
        q.put((lat.tobytes(), errors, elapsed, first))
    except BaseException as e:  # report, do not hang the parent
        q.put((b"", 1, float(seconds), repr(e)))


# The native harness (bench/tls_load.cc): set by main() when the tool is used.
TLS_LOAD = {"path": None}


def run_load_native(t, kind, conns, seconds, pause_us=0):
    """The same load through `tls_load client` (a thread per connection, OpenSSL)."""
    cmd = [TLS_LOAD["path"], "client", "--host", t.host, "--cafile", t.cafile,
           "--auth", t.auth_value, "--mode", kind, "--conns", str(conns),
           "--seconds", str(seconds), "--pause-us", str(pause_us)]
    if t.proxy is None:
        cmd += ["--connect", "%s:%d" % (LOOPBACK, t.port)]
    else:
        cmd += ["--connect", "%s:%d" % t.proxy, "--proxy-connect", t.connect_to]
        if t.proxy_auth:
            cmd += ["--proxy-auth", t.proxy_auth]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 2 * IO_TIMEOUT)
    if out.returncode != 0:
        return {"rps": 0.0, "p50_us": float("nan"), "p99_us": float("nan"), "errors": 1, "n": 0,
                "first_error": out.stderr.strip()[-300:]}
    r = json.loads(out.stdout)
    r["rps"] = r["n"] / r["elapsed"] if r["elapsed"] else 0.0
    if not r["n"]:
        r["p50_us"] = r["p99_us"] = float("nan")
    return r


def start_native_upstream(pki, close_after):
    """`tls_load serve`: returns (process, port)."""
    cmd = [TLS_LOAD["path"], "serve", "--cert", os.path.join(pki.dir, "leaf.pem"),
           "--key", os.path.join(pki.dir, "leaf.key"), "--secret", SECRET]
    if close_after:
        cmd.append("--close")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    port = proc.stdout.readline().strip()
    if not port.isdigit():
        proc.kill()
        raise RuntimeError("tls_load serve did not start")
    return proc, int(port)


def find_tls_load(binary, given):
    """bench/tls_load of the build that `binary` (build*/cli/sandgate) comes from, or `given`."""
    path = given or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(binary))),
                                 "bench", "tls_load")
    return path if os.access(path, os.X_OK) else None


def run_load(t, kind, conns, seconds, procs=2, pause_us=0):
    """Runs `conns` connections (or workers) split over `procs` processes for `seconds`.
    `pause_us`: a pause after every response (native harness only)."""
    if TLS_LOAD["path"]:
        return run_load_native(t, kind, conns, seconds, pause_us)
    if pause_us:
        raise RuntimeError("paced load needs the native harness (bench/tls_load)")
    procs = max(1, min(conns, procs))
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    ps = []
    for i in range(procs):
        n = conns // procs + (1 if i < conns % procs else 0)
        p = ctx.Process(target=_client_proc, args=(t, kind, n, seconds, q), daemon=True)
        p.start()
        ps.append(p)
    lat = array.array("q")
    errors, elapsed, first = 0, 0.0, ""
    for _ in ps:
        raw, e, el, f = q.get(timeout=seconds + 2 * IO_TIMEOUT)
        lat.frombytes(raw)
        errors += e
        elapsed = max(elapsed, el)
        first = first or f
    for p in ps:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    s = sorted(lat)
    if not s:
        return {"rps": 0.0, "p50_us": float("nan"), "p99_us": float("nan"), "errors": errors,
                "n": 0, "first_error": first}
    return {"rps": len(s) / elapsed, "p50_us": s[len(s) // 2] / 1000,
            "p99_us": s[min(len(s) - 1, int(len(s) * 0.99))] / 1000, "errors": errors,
            "n": len(s), "first_error": first}


# ---------------------------------------------------------------------------------------------
# sandgate

def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = predicate()
        if v:
            return v
        time.sleep(0.05)  # polling a file a child writes; bounded by the deadline
    raise RuntimeError("timed out after %ss waiting for %s" % (timeout, what))


class Sandgate(LoggedProcess):
    def __init__(self, binary, tmp, pki, keep_port, close_port, threads, extra_args=(),
                 configure=None):
        """`configure`: a function that edits the config dict before it is written (other
        benches: budgets, state.redis)."""
        os.makedirs(tmp, exist_ok=True)
        self.tmp = tmp
        self.ca_out = os.path.join(tmp, "sandgate-ca.pem")
        secret_file = os.path.join(tmp, "secret")
        with open(secret_file, "w") as f:
            f.write(SECRET + "\n")
        config = os.path.join(tmp, "sandgate.yaml")
        ready = os.path.join(tmp, "ready.json")
        rule = {"credential": "bench", "cidrs": ["127.0.0.0/8"]}
        cfg = {
            "listen": {"proxy": LOOPBACK + ":0", "metrics": LOOPBACK + ":0"},
            "audit": {"path": os.path.join(tmp, "audit.log")},
            "resolve": {KEEP_HOST: "%s:%d" % (LOOPBACK, keep_port),
                        CLOSE_HOST: "%s:%d" % (LOOPBACK, close_port)},
            "tls": {"upstream_ca": pki.ca_cert},
            "ca_cert_out": self.ca_out,
            "limits": {"max_connections": 10000, "max_tunnels": 10000,
                       "new_connections_per_second": 1000000, "idle_timeout": "10m"},
            "credentials": {"bench": {
                "source": {"file": secret_file}, "hosts": [KEEP_HOST, CLOSE_HOST],
                "inject": {"header": "Authorization", "value": "Bearer {secret}"},
                "placeholder": "OPENAI_API_KEY"}},
            "policies": {"bench": {"allow": [dict(rule, host=KEEP_HOST),
                                             dict(rule, host=CLOSE_HOST)]}},
            "tasks": [{"name": TASK, "policy": "bench",
                       "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}],
        }
        if configure:
            configure(cfg)
        with open(config, "w") as f:
            json.dump(cfg, f, indent=1)  # JSON is YAML
        cmd = [binary, "serve", "--config", config, "--ready-file", ready, "--drain-delay", "0"]
        if threads:
            cmd += ["--threads", str(threads)]
        cmd += list(extra_args)
        super().__init__(cmd, os.path.join(tmp, "sandgate.log"))

        def is_ready():
            if self.proc.poll() is not None:
                raise RuntimeError("sandgate exited with %s:\n%s" % (self.proc.returncode,
                                                                     self.log_tail()))
            try:
                with open(ready) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None
        info = wait_for(is_ready, 20, "sandgate's ready file")
        host, port = info["proxy"].rsplit(":", 1)
        self.proxy = (host.strip("[]"), int(port))
        self.auth = "Basic " + base64.b64encode(("%s:%s" % (TASK, TOKEN)).encode()).decode()

    def target(self, host):
        return Target("sandgate", host, 443, self.ca_out, "Bearer " + PLACEHOLDER,
                      proxy=self.proxy, connect_to="%s:443" % host, proxy_auth=self.auth)


# ---------------------------------------------------------------------------------------------
# The floor: `tls_load relay`, TLS on both legs and the header replaced, nothing else

class Relay(LoggedProcess):
    """`tls_load relay` in front of the keep-alive upstream (see bench/tls_load.cc): what an
    intercepting proxy that did no HTTP work at all would reach on this machine."""

    def __init__(self, tmp, pki, upstream_port):
        cmd = [TLS_LOAD["path"], "relay", "--cert", os.path.join(pki.dir, "leaf.pem"),
               "--key", os.path.join(pki.dir, "leaf.key"), "--upstream", str(upstream_port),
               "--cafile", pki.ca_cert, "--host", KEEP_HOST,
               "--inject", "Authorization: Bearer " + SECRET]
        super().__init__(cmd, os.path.join(tmp, "relay.log"))
        self.ca = pki.ca_cert  # it presents the upstream's own certificate

        def port():
            if self.proc.poll() is not None:
                raise RuntimeError("tls_load relay exited with %s:\n%s" % (self.proc.returncode,
                                                                          self.log_tail()))
            with open(self.log, "rb") as f:
                first = f.readline().strip()
            return int(first) if first.isdigit() else None
        self.port = wait_for(port, 10, "tls_load relay to listen")

    def target(self):
        return Target("relay", KEEP_HOST, 443, self.ca, "Bearer " + PLACEHOLDER,
                      proxy=(LOOPBACK, self.port), connect_to="%s:443" % KEEP_HOST)


# ---------------------------------------------------------------------------------------------
# mitmproxy

MITM_HINT = ("apt-get install mitmproxy (Debian 12: mitmproxy 8.1), or pip install mitmproxy; "
             "or pass --mitmdump PATH")


class Mitmproxy(LoggedProcess):
    """`mitmdump` on 127.0.0.1 port 0, setting the Authorization header on every request,
    verifying the upstream with the test CA; HTTP/2 (both legs where both ends offer it) only
    when `http2` (h2_bench.py)."""

    def __init__(self, exe, tmp, pki, http2=False):
        self.confdir = os.path.join(tmp, "mitmproxy")
        os.makedirs(self.confdir)
        cmd = [exe, "--mode", "regular", "--listen-host", LOOPBACK, "--listen-port", "0",
               "--set", "confdir=" + self.confdir,
               "--set", "ssl_verify_upstream_trusted_ca=" + pki.ca_cert,
               "--set", "modify_headers=/~q/Authorization/Bearer " + SECRET,
               "--set", "flow_detail=0", "--set", "termlog_verbosity=info",
               "--set", "http2=" + ("true" if http2 else "false")]
        super().__init__(cmd, os.path.join(tmp, "mitmdump.log"))

        def listening():
            if self.proc.poll() is not None:
                raise RuntimeError("mitmdump exited with %s:\n%s" % (self.proc.returncode,
                                                                     self.log_tail()))
            with open(self.log, "rb") as f:
                m = re.search(rb"listening at \S*?:(\d+)", f.read())
            return int(m.group(1)) if m else None
        self.port = wait_for(listening, 60, "mitmdump to listen")
        self.ca = os.path.join(self.confdir, "mitmproxy-ca-cert.pem")
        wait_for(lambda: os.path.exists(self.ca), 10, "mitmproxy's CA certificate")

    def target(self, host, upstream_port):
        # mitmproxy cannot be given `resolve:`; it dials the CONNECT authority (loopback) and
        # verifies the upstream certificate against the client's SNI (the upstream's name).
        return Target("mitmproxy", host, 443, self.ca, "Bearer " + PLACEHOLDER,
                      proxy=(LOOPBACK, self.port), connect_to="%s:%d" % (LOOPBACK, upstream_port))


# ---------------------------------------------------------------------------------------------

def line(label, r, base=None, cpu=None):
    s = "    %-22s %8.0f req/s  p50 %7.0f us  p99 %7.0f us" % (label, r["rps"], r["p50_us"],
                                                              r["p99_us"])
    if base:
        s += "  | added p50 %+6.0f us p99 %+7.0f us" % (r["p50_us"] - base["p50_us"],
                                                        r["p99_us"] - base["p99_us"])
    if cpu is not None and r["n"]:
        user, kernel = cpu
        s += "  | proxy CPU %.0f us/req (user %.0f, kernel %.0f)" % (
            (user + kernel) * 1e6 / r["n"], user * 1e6 / r["n"], kernel * 1e6 / r["n"])
    if r["errors"]:
        s += "  [%d errors%s]" % (r["errors"], ": " + r["first_error"] if r["first_error"] else "")
    return s


def measured(proxy, t, kind, conns, seconds, pause_us=0):
    """The load's result and the proxy's (user, kernel) CPU seconds spent on it."""
    c0 = proxy.cpu_times() if proxy else None
    r = run_load(t, kind, conns, seconds, pause_us=pause_us)
    if not proxy:
        return r, None
    c1 = proxy.cpu_times()
    return r, (c1[0] - c0[0], c1[1] - c0[1])


def merged(parts):
    """One result from runs of the same load: counts and CPU add up, rates are recomputed,
    p50/p99 are the means of the parts' (an approximation, said where printed)."""
    rs = [r for r, _ in parts]
    r = {"n": sum(x["n"] for x in rs), "errors": sum(x["errors"] for x in rs),
         "elapsed": sum(x.get("elapsed", 0) for x in rs),
         "first_error": next((x["first_error"] for x in rs if x.get("first_error")), "")}
    r["rps"] = r["n"] / r["elapsed"] if r["elapsed"] else 0.0
    for k in ("p50_us", "p99_us"):
        r[k] = sum(x[k] for x in rs) / len(rs)
    cpus = [c for _, c in parts]
    cpu = None if any(c is None for c in cpus) else (sum(c[0] for c in cpus),
                                                      sum(c[1] for c in cpus))
    return r, cpu


def measured_mirrored(entries, kind, conns, seconds, pause_us=0):
    """Each (proxy, target) of `entries` under the same load, in the order given and then in
    reverse (a b c c b a), each run half as long: whatever drifts during the phase (this
    machine's speed moves by a third from one minute to the next, and the second of two
    back-to-back runs tends to do better) weighs on all alike. Returns, per entry, the merged
    result and its two halves."""
    runs = [[] for _ in entries]
    order = list(range(len(entries)))
    for i in order + order[::-1]:
        proxy, target = entries[i]
        runs[i].append(measured(proxy, target, kind, conns, seconds / 2, pause_us))
    return [(merged(parts), parts) for parts in runs]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="sandgate binary (default: newest build*/cli/sandgate)")
    ap.add_argument("--threads", type=int, default=0, help="sandgate --threads (default: its own)")
    ap.add_argument("--seconds", type=float, default=5, help="duration of each run")
    ap.add_argument("--new-conn-workers", type=int, default=8,
                    help="concurrent connect-request-close loops in phase (b)")
    ap.add_argument("--mitmdump", default=shutil.which("mitmdump"), help="mitmdump executable")
    ap.add_argument("--no-mitmproxy", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1 s runs: a smoke run")
    ap.add_argument("--harness", choices=("native", "python"), default="native",
                    help="client and upstream: bench/tls_load (default, when built) or Python")
    ap.add_argument("--tls-load", help="the tls_load binary (default: BUILD/bench/tls_load)")
    args = ap.parse_args()
    if args.quick:
        args.seconds = 1

    binary = find_binary(args.binary)
    if not binary or not os.access(binary, os.X_OK):
        print("intercept_bench: no sandgate binary (build it, or pass --binary)", file=sys.stderr)
        return 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE,
                       (hard if hard != resource.RLIM_INFINITY else 65536, hard))

    pki = test_pki()
    servers = []
    if args.harness == "native":
        TLS_LOAD["path"] = find_tls_load(binary, args.tls_load)
        if not TLS_LOAD["path"]:
            print("note: no bench/tls_load next to %s (build the tls_load target); using the "
                  "Python client and upstream, which cost more CPU than sandgate itself"
                  % binary)
    if TLS_LOAD["path"]:
        keep, keep_port = start_native_upstream(pki, False)
        servers.append(keep)
        close, close_port = start_native_upstream(pki, True)
        servers.append(close)
        harness = "the upstream and the client (tls_load: C++, OpenSSL, a thread per connection)"
    else:
        ctx = multiprocessing.get_context("fork")
        keep_sock, close_sock = listen_socket(), listen_socket()
        keep_port, close_port = keep_sock.getsockname()[1], close_sock.getsockname()[1]
        for _ in range(2):  # two processes share the accept queue
            servers.append(ctx.Process(target=upstream_server, args=(keep_sock, pki.dir, False),
                                       daemon=True))
        servers.append(ctx.Process(target=upstream_server, args=(close_sock, pki.dir, True),
                                   daemon=True))
        for p in servers:
            p.start()
        keep_sock.close()
        close_sock.close()
        harness = ("the upstream (3 Python processes) and the client (2 Python asyncio "
                   "processes)")

    tmp = tempfile.mkdtemp(prefix="sandgate-ibench-")
    sg = sg_nospin = relay = mitm = None
    try:
        direct_keep = Target("direct", KEEP_HOST, keep_port, pki.ca_cert, "Bearer " + SECRET)
        direct_close = Target("direct", CLOSE_HOST, close_port, pki.ca_cert, "Bearer " + SECRET)
        # The upstream must answer before anything is measured.
        probe = run_load(direct_keep, "keepalive", 1, 0.2, procs=1)
        if not probe["n"] or probe["errors"]:
            raise RuntimeError("the upstream does not answer: %s" % probe["first_error"])
        sg = Sandgate(binary, tmp, pki, keep_port, close_port, args.threads)
        probe = run_load(sg.target(KEEP_HOST), "keepalive", 1, 0.2, procs=1)
        if not probe["n"] or probe["errors"]:
            raise RuntimeError("no request through sandgate succeeded (%d errors: %s)\n%s"
                               % (probe["errors"], probe["first_error"], sg.log_tail()))
        print("sandgate %s (pid %d); %d cores shared by sandgate, %s; load: %s"
              % (binary, sg.proc.pid, os.cpu_count(), harness, os.getloadavg()))
        if TLS_LOAD["path"]:
            sg_nospin = Sandgate(binary, os.path.join(tmp, "nospin"), pki, keep_port, close_port,
                                 args.threads, ["--idle-spin", "0"])
            relay = Relay(tmp, pki, keep_port)
            probe = run_load(relay.target(), "keepalive", 1, 0.2, procs=1)
            if not probe["n"] or probe["errors"]:
                raise RuntimeError("no request through tls_load relay succeeded (%s)\n%s"
                                   % (probe["first_error"], relay.log_tail()))

        if not args.no_mitmproxy and args.mitmdump:
            try:
                mitm = Mitmproxy(args.mitmdump, tmp, pki)
                probe = run_load(mitm.target(KEEP_HOST, keep_port), "keepalive", 1, 0.5, procs=1)
                if not probe["n"] or probe["errors"]:
                    print("note: requests through mitmproxy fail (%s); comparison skipped\n%s"
                          % (probe["first_error"], mitm.log_tail()))
                    mitm.stop()
                    mitm = None
            except RuntimeError as e:
                print("note: mitmproxy did not start (%s); comparison skipped" % e)
                mitm = None
        elif not args.no_mitmproxy:
            print("note: mitmdump not found; the mitmproxy comparison is skipped (%s)" % MITM_HINT)

        print("\n(a) keep-alive GET, %d-byte responses, credential injected, %.0f s per run "
              "(the upstream answers 401 without the real secret: those count as errors)"
              % (len(BODY), args.seconds))
        summary = {}
        for conns in (1, 64):
            print("  %d connection%s:" % (conns, "s" if conns > 1 else ""))
            entries = [(None, direct_keep), (sg, sg.target(KEEP_HOST))]
            if sg_nospin:
                entries.append((sg_nospin, sg_nospin.target(KEEP_HOST)))
            # The floor only at 1 connection: 64 relay threads spinning on 2 cores would
            # measure their contention, not a floor.
            with_relay = relay is not None and conns == 1
            if with_relay:
                entries.append((relay, relay.target()))
            if mitm:
                entries.append((mitm, mitm.target(KEEP_HOST, keep_port)))
            results = measured_mirrored(entries, "keepalive", conns, args.seconds)
            (d, _), _ = results[0]
            (s, cpu), s_halves = results[1]
            print(line("direct", d))
            print(line("sandgate", s, d, cpu))
            if sg_nospin:
                (n, ncpu), _ = results[2]
                print(line("sandgate --idle-spin 0", n, d, ncpu))
            summary[conns] = (d, s)
            floor = None
            if with_relay:
                (floor, fcpu), _ = results[3 if sg_nospin else 2]
                print(line("bare TLS relay (floor)", floor, d, fcpu))
                if floor["rps"]:
                    print("    sandgate / floor: %.2f of the rate of a relay that only decrypts, "
                          "replaces the header and encrypts" % (s["rps"] / floor["rps"]))
            if conns == 1:
                added = s["p50_us"] - d["p50_us"]
                print("    sandgate added p50 %.0f us (target < 1000 us: %s)"
                      % (added, "met" if added < 1000 else "MISSED"))
            if mitm:
                (m, mcpu), m_halves = results[-1]
                print(line("mitmproxy", m, d, mcpu))
                ratio = s["rps"] / m["rps"] if m["rps"] else float("inf")
                halves = ", ".join("%.1fx" % (x[0]["rps"] / y[0]["rps"]) if y[0]["rps"] else "-"
                                   for x, y in zip(s_halves, m_halves))
                print("    sandgate / mitmproxy: %.1fx req/s (target >= 20x: %s; by half: %s)"
                      % (ratio, "met" if ratio >= 20 else "MISSED", halves))
                if floor and m["rps"]:
                    print("    floor / mitmproxy: %.1fx req/s (what a proxy doing no HTTP work "
                          "would reach here)" % (floor["rps"] / m["rps"]))
            if s["rps"] > 0.8 * d["rps"]:
                print("    note: sandgate reaches >80% of the direct rate: the client or "
                      "upstream is the limit here, not sandgate")

        print("\n(b) new connections: CONNECT + TLS to the proxy + one request + close; the "
              "upstream closes each connection (a new upstream TLS handshake each time); "
              "%d workers, %.0f s" % (args.new_conn_workers, args.seconds))
        entries = [(None, direct_close), (sg, sg.target(CLOSE_HOST))]
        if mitm:
            entries.append((mitm, mitm.target(CLOSE_HOST, close_port)))
        results = measured_mirrored(entries, "newconn", args.new_conn_workers, args.seconds)
        (d, _), _ = results[0]
        (s, cpu), _ = results[1]
        print(line("direct (1 handshake)", d).replace("req/s", "conn/s"))
        print(line("sandgate (2 handshakes)", s, d, cpu).replace("req/s", "conn/s")
              .replace("us/req", "us/conn"))
        if mitm:
            (m, mcpu), _ = results[2]
            print(line("mitmproxy", m, d, mcpu).replace("req/s", "conn/s")
                  .replace("us/req", "us/conn"))
            if m["rps"]:
                print("    sandgate / mitmproxy: %.1fx new connections/s" % (s["rps"] / m["rps"]))
        if sg_nospin:
            pause_us = 1000
            print("\n(d) paced: 1 connection, %d us pause after every response, %.0f s: what the "
                  "idle spin costs when the proxy is mostly idle" % (pause_us, args.seconds))
            ((d, _), _), ((r, cpu), _), ((n, ncpu), _) = measured_mirrored(
                [(None, direct_keep), (sg, sg.target(KEEP_HOST)),
                 (sg_nospin, sg_nospin.target(KEEP_HOST))], "keepalive", 1, args.seconds, pause_us)
            print(line("direct", d))
            print(line("sandgate", r, d, cpu))
            print(line("sandgate --idle-spin 0", n, d, ncpu))
        print("\nsandgate log: %d lines; load after the run: %s"
              % (len(sg.log_tail(10 ** 6).splitlines()), os.getloadavg()))
    except Exception as e:  # a bench reports, it does not crash
        print("\nintercept_bench: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    finally:
        for proc in (mitm, sg, sg_nospin, relay):
            if proc:
                proc.stop()
        for p in servers:
            stop_child(p)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
