#!/usr/bin/env python3
"""sandgate → squid against squid alone (issue #44): what sandgate adds per request when the
upstream leg goes through a parent proxy. Not a test: it prints figures and ratios measured in
this run and never fails on timing.

It starts, on 127.0.0.1 port 0, the canned HTTP server of proxy_bench.py, Debian's squid (the
test support's Squid: its own config, no cache, a hosts file that names web.bench) and
`sandgate serve` with `upstream_proxies: [squid]`, then loads each path in turn with keep-alive
GETs (wrk when installed, else the Python load generator):

  squid alone        client → squid (absolute form) → server
  sandgate → squid   client → sandgate → squid → server: the request goes on to squid in absolute
                     form (`resolve: parent`), policy and audit on the way
  sandgate → squid (tunnel)
                     the same with `resolve: local`: sandgate resolves, vets, and sends the request
                     through a CONNECT to the vetted address (one tunnel per pooled connection)

Reported: requests/s, p50/p99 latency, the ratio to squid alone, the added p50, and sandgate's
own CPU time per request (from /proc; the figure least disturbed by sharing the cores).

    bench/parent_bench.py [--seconds 5] [--conns 1,16] [--binary build/cli/sandgate] [--no-wrk]
"""

import argparse
import base64
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))

import proxy_bench as pb  # noqa: E402  (the servers, the load generators, process helpers)
from parents import Squid  # noqa: E402

WEB_HOST = pb.WEB_HOST


def write_config(path, tmp, web_port, squid_port, resolve):
    token_hash = hashlib.sha256(pb.TOKEN.encode()).hexdigest()
    # resolve: local: sandgate resolves web.bench (no DNS here: a resolve: pin) and asks squid
    # for a tunnel to the vetted address. resolve: parent: no pin, squid resolves the name from
    # its hosts file and gets the request itself in absolute form.
    pin = f"resolve:\n  {WEB_HOST}: {pb.LOOPBACK}\n" if resolve == "local" else ""
    config = f"""# Written by bench/parent_bench.py: loopback only.
listen:
  proxy: {pb.LOOPBACK}:0
audit:
  path: {tmp}/audit.log
{pin}limits:
  max_connections: 10000
  new_connections_per_second: 1000000
  idle_timeout: 10m
upstream_proxies:
  - name: squid
    url: "http://{pb.LOOPBACK}:{squid_port}"
    resolve: {resolve}
upstream_proxy_default: [squid]
policies:
  bench:
    allow:
      - host: {WEB_HOST}
        cidrs: [127.0.0.0/8]
        ports: [{web_port}]
tasks:
  - name: {pb.TASK}
    policy: bench
    token_sha256: "{token_hash}"
"""
    with open(path, "w") as f:
        f.write(config)


def start_sandgate(binary, tmp, web_port, squid_port, resolve):
    d = os.path.join(tmp, f"sg-{resolve}")
    os.makedirs(d)
    cfg, ready = os.path.join(d, "sandgate.yaml"), os.path.join(d, "ready.json")
    write_config(cfg, d, web_port, squid_port, resolve)
    sg = pb.LoggedProcess([binary, "serve", "--config", cfg, "--ready-file", ready,
                           "--drain-delay", "0"], os.path.join(d, "sandgate.log"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if sg.proc.poll() is not None:
            raise RuntimeError(f"sandgate exited with {sg.proc.returncode}:\n{sg.log_tail()}")
        try:
            with open(ready) as f:
                info = json.load(f)
            host, port = info["proxy"].rsplit(":", 1)
            sg.proxy = (host.strip("[]"), int(port))
            return sg
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)  # polling a file the server writes; bounded by the deadline
    sg.stop()
    raise RuntimeError(f"sandgate wrote no ready file within 20 s:\n{sg.log_tail()}")


def load(addr, headers, authority, conns, seconds, use_wrk, tmp):
    if use_wrk:
        return pb.run_wrk(tmp, f"http://{addr[0]}:{addr[1]}", f"http://{authority}/", headers,
                          conns, seconds)
    head = f"GET http://{authority}/ HTTP/1.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return pb.run_python_load(addr, head.encode(), conns, seconds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", help="sandgate binary (default: the newest build*/cli/sandgate)")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--conns", default="1,16", help="comma-separated connection counts")
    ap.add_argument("--no-wrk", action="store_true", help="use the Python load generator")
    args = ap.parse_args()
    binary = pb.find_binary(args.binary)
    if not binary:
        sys.exit("no sandgate binary: build it first (ninja -C build sandgate)")
    use_wrk = bool(shutil.which("wrk")) and not args.no_wrk
    conn_counts = [int(c) for c in args.conns.split(",")]

    tmp = tempfile.mkdtemp(prefix="sandgate-parent-bench-")
    web_sock = pb.listen_socket()
    web_port = web_sock.getsockname()[1]
    web = multiprocessing.Process(target=pb.web_server, args=(web_sock,), daemon=True)
    web.start()
    squid = Squid(hosts={WEB_HOST: pb.LOOPBACK})
    sgs = []
    try:
        sgs = [start_sandgate(binary, tmp, web_port, squid.port, r) for r in ("parent", "local")]
        authority = f"{WEB_HOST}:{web_port}"
        cred = base64.b64encode(f"{pb.TASK}:{pb.TOKEN}".encode()).decode()
        plain = {"Host": authority}
        authed = {"Host": authority, "Proxy-Authorization": f"Basic {cred}"}
        print(f"sandgate → squid against squid alone: GET http://{authority}/ (13-byte body), "
              f"keep-alive, {args.seconds:g} s each, load by "
              f"{'wrk' if use_wrk else 'the Python load generator (2 processes)'}; "
              f"{os.cpu_count()} cores shared by everything")
        for conns in conn_counts:
            base = load(("127.0.0.1", squid.port), plain, authority, conns, args.seconds,
                        use_wrk, tmp)
            print(f"\n{conns} connection(s)")
            print(f"  {'path':34} {'req/s':>9} {'p50 µs':>8} {'p99 µs':>8} {'ratio':>6} "
                  f"{'+p50 µs':>8} {'sandgate CPU µs/req':>20}")
            print(f"  {'squid alone':34} {base['rps']:9.0f} {base['p50_us']:8.0f} "
                  f"{base['p99_us']:8.0f} {1:6.2f}")
            for sg, name in zip(sgs, ("sandgate → squid (absolute form)",
                                      "sandgate → squid (CONNECT, local)")):
                before = sum(sg.cpu_times())
                r = load(sg.proxy, authed, authority, conns, args.seconds, use_wrk, tmp)
                cpu = sum(sg.cpu_times()) - before
                print(f"  {name:34} {r['rps']:9.0f} {r['p50_us']:8.0f} {r['p99_us']:8.0f} "
                      f"{r['rps'] / base['rps']:6.2f} {r['p50_us'] - base['p50_us']:8.0f} "
                      f"{cpu / max(r['requests'], 1) * 1e6:20.1f}")
                if r["errors"] or base["errors"]:
                    print(f"    errors: squid alone {base['errors']}, through sandgate "
                          f"{r['errors']}")
    finally:
        for sg in sgs:
            sg.stop()
        squid.close()
        pb.stop_child(web)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
