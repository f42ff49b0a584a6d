#!/usr/bin/env python3
"""Instructions per intercepted request, counted by callgrind: a figure that does not move with
the machine's load, for comparing builds.

Each binary runs as `sandgate serve --threads 1 --idle-spin 0` under `valgrind --tool=callgrind`
with the configuration of intercept_bench.py (a file credential injected on every request to a
`tls_load serve` upstream that answers 401 without it). After a 1 s warm-up, twice: the
counters are zeroed (`callgrind_control -z`), one new kept-alive connection sends requests (a
quarter of --seconds, then --seconds), and the counters are dumped (`callgrind_control -d`).
The figure is the difference of the two counts over the difference of the two request counts,
so that what each connection costs once (its handshake with sandgate, about 3 million
instructions) drops out. Under valgrind sandgate runs some 50 times slower: a 4 s window sends
1,300-2,300 requests.

Usage: bench/intercept_instructions.py BINARY [BINARY...] [--seconds 4] [--annotate]
  --annotate  also prints callgrind_annotate's inclusive listing of the dump (the top lines)
Needs valgrind (apt-get install valgrind) and bench/tls_load next to each BINARY's build
(BUILD/bench/tls_load) or --tls-load PATH. Not a test; exits 2 when it cannot run.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import intercept_bench as ib  # noqa: E402  (its config, harness and helpers)


def dump_total(path):
    """The instruction count of a finished callgrind dump, or None while it is being written."""
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    return None


def measure(binary, pki, upstream_port, seconds, annotate):
    tmp = tempfile.mkdtemp(prefix="sandgate-instr-")
    try:
        out = os.path.join(tmp, "callgrind.out")
        wrapper = os.path.join(tmp, "under-callgrind.sh")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s %s \"$@\"\n"
                    % (out, os.path.abspath(binary)))
        os.chmod(wrapper, 0o755)
        sg = ib.Sandgate(wrapper, tmp, pki, upstream_port, upstream_port, 1,
                         ["--idle-spin", "0"])
        try:
            target = sg.target(ib.KEEP_HOST)
            ib.run_load(target, "keepalive", 1, 1)  # warm-up: leaf minted, upstream pooled
            counts = []
            for window in (seconds / 4, seconds):
                subprocess.run(["callgrind_control", "-z", str(sg.proc.pid)],
                               capture_output=True, check=True, timeout=60)
                r = ib.run_load(target, "keepalive", 1, window)
                before = set(glob.glob(out + ".*"))
                subprocess.run(["callgrind_control", "-d", str(sg.proc.pid)],
                               capture_output=True, check=True, timeout=60)
                dump = ib.wait_for(lambda: sorted(set(glob.glob(out + ".*")) - before), 30,
                                   "callgrind's dump")[-1]
                total = ib.wait_for(lambda: dump_total(dump), 30, "callgrind's dump to be written")
                if not r["n"] or r["errors"]:
                    raise RuntimeError("requests %d, errors %d: %s"
                                       % (r["n"], r["errors"], r["first_error"]))
                counts.append((r["n"], total))
            (n1, i1), (n2, i2) = counts
            print("%-40s %6d and %6d requests: %8.0f instructions per request (%.0f and %.0f "
                  "with the connection's own cost)" % (binary, n1, n2, (i2 - i1) / (n2 - n1),
                                                      i1 / n1, i2 / n2), flush=True)
            if annotate:
                text = subprocess.run(["callgrind_annotate", "--inclusive=yes", dump],
                                      capture_output=True, text=True).stdout
                print("\n".join(text.splitlines()[:80]))
        finally:
            sg.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--annotate", action="store_true")
    ap.add_argument("--tls-load")
    args = ap.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("intercept_instructions: valgrind is not installed (apt-get install valgrind)",
              file=sys.stderr)
        return 2
    ib.TLS_LOAD["path"] = ib.find_tls_load(args.binaries[0], args.tls_load)
    if not ib.TLS_LOAD["path"]:
        print("intercept_instructions: no tls_load (build the tls_load target, or pass "
              "--tls-load)", file=sys.stderr)
        return 2
    pki = ib.test_pki()
    upstream, port = ib.start_native_upstream(pki, False)
    try:
        for b in args.binaries:
            measure(b, pki, port, args.seconds, args.annotate)
    except Exception as e:  # a bench reports, it does not crash
        print("intercept_instructions: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    finally:
        ib.stop_child(upstream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
