"""Floods from the workload inside a real `sandgate run` sandbox (issue 37, items 2 and 4):

- starvation: a hundred processes exec'ing in a loop (each exec a notification the launcher
  answers) must not keep the timeout from firing: the run ends at its timeout plus the kill
  grace, SIGTERM then SIGKILL (the flood ignores SIGTERM), with the timeout's exit status;
- growth: exec'ing in a loop with big argvs of control bytes (each one six bytes once escaped)
  and flooding the proxy with refused requests must not grow exec.jsonl and audit.jsonl without
  bound: each line is bounded after escaping, each file stops at its cap with one `truncated`
  line, and the report counts what was left out.

Runs as root (the CI case); the flood also rootless, as a user the test creates. Every loop in the workload is bounded in count, and every run in
time (run_bounded)."""

import json
import os
import shutil
import tempfile
import time
import unittest

import artifacts
from run_support import TemporaryUser, namespaces_refused, run_bounded
from sandgate_fixture import binary

MIB = 1 << 20
CAP = 16 * MIB  # run/capped_log.h: kDefaultEvidenceLogBytes
LINE = 16 << 10  # kMaxEvidenceLineBytes
GRACE = 5.0  # sandbox::Options::killGrace

# 100 processes, each calling execve on a missing program up to 3,000 times (each call a
# notification the launcher answers; a failing exec needs no fork, so the queue is never
# empty), all ignoring SIGTERM: only the SIGKILL after the grace ends them. Unfixed, the
# launcher answered one exec per wake-up and looked at its deadline only when nothing was
# pending, which under this flood was never: the run lasted as long as the flood (100 s here).
EXEC_FLOOD = r"""
import os, signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
kids = []
for _ in range(100):
    pid = os.fork()
    if pid == 0:
        for _ in range(3000):
            try:
                os.execv("/nonexistent/x", ["x"])
            except OSError:
                pass
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print("flood over")
"""

# One exec with 64 arguments of 16 KiB (1 MiB of argv), then 1,200 execs of 64 arguments of 50
# control bytes each (19 KB per line once escaped: over the line bound, and 23 MB in all: over
# the file's cap).
BIG_ARGVS = r"""
import os
big = ["true"] + ["\x01" * 16384] * 64
pid = os.posix_spawn("/bin/true", big, {})
os.waitpid(pid, 0)
args = ["true"] + ["\x01" * 50] * 64
for i in range(1200):
    pid = os.posix_spawn("/bin/true", args, {})
    os.waitpid(pid, 0)
print("done")
"""

# 2,400 requests, each on a connection of its own, for a host no policy allows, with an 8,000
# byte path (the audit line keeps 8 KiB of it): about 20 MB of audit lines, past the cap.
AUDIT_FLOOD = r"""
import os, socket
hostport = os.environ["HTTP_PROXY"].split("//", 1)[1].rstrip("/")
host, port = hostport.rsplit(":", 1)
path = "/" + "a" * 8000
head = f"GET http://denied.test{path} HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n"
for i in range(2400):
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(head.encode())
    while s.recv(65536):
        pass
    s.close()
print("done")
"""


class FloodTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (as CI runs)")
        cls.dir = tempfile.mkdtemp(prefix="sandgate-floods-", dir="/var/tmp")
        os.chmod(cls.dir, 0o755)
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        probe = cls.sandgate(["true"])
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())
        assert probe.returncode == 0, probe.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def sandgate(cls, argv, *flags, run_dir=None, timeout=90, workspace=None, **kwargs):
        cmd = [binary(), "run", "--workspace", workspace or cls.workspace, "--no-transparent"]
        if run_dir:
            cmd += ["--run-dir", run_dir]
        r = run_bounded(cmd + list(flags) + ["--", *argv], timeout, **kwargs)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    def run_dir(self):
        return os.path.join(tempfile.mkdtemp(dir=self.dir, prefix="runs-"), "run")

    @staticmethod
    def read_json(run, name):
        with open(os.path.join(run, name)) as f:
            return json.load(f)

    # --- item 2: the timeout under an exec flood ----------------------------------------------

    def test_exec_flood_does_not_switch_the_timeout_off(self):
        self.check_exec_flood(self.workspace, self.run_dir())

    def test_rootless_exec_flood_does_not_switch_the_timeout_off(self):
        with TemporaryUser() as user:
            ws = tempfile.mkdtemp(dir=self.dir, prefix="ws-")
            runs = tempfile.mkdtemp(dir=self.dir, prefix="runs-")
            for d in (ws, runs):
                os.chown(d, user.uid, user.gid)
            self.check_exec_flood(ws, os.path.join(runs, "run"), **user.popen_args())

    def check_exec_flood(self, ws, run, **kwargs):
        start = time.monotonic()
        # Unfixed, this ran until the flood was done (minutes): run_bounded fails it at 60 s.
        r = self.sandgate(["python3", "-c", EXEC_FLOOD], "--timeout", "2s", run_dir=run,
                          timeout=60, workspace=ws, **kwargs)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses unprivileged user namespaces: " + r.stderr)
        took = time.monotonic() - start
        self.assertEqual(r.returncode, 124, r.stderr[-3000:])
        self.assertNotIn("flood over", r.stdout)  # ended by the timeout, not by the flood's end
        # SIGTERM at 2 s is ignored: the SIGKILL comes GRACE later, and the run ends then.
        self.assertGreater(took, 2 + GRACE - 0.5, r.stderr[-3000:])
        self.assertLess(took, 2 + GRACE + 8, r.stderr[-3000:])
        self.assertIn("timeout reached, sending SIGTERM", r.stderr)
        self.assertIn("sending SIGKILL", r.stderr)
        self.assertIn("sandgate run: timed out after 2s (ended ", r.stderr)
        report = self.read_json(run, "report.json")
        self.assertEqual(report["end"], "timeout")
        self.assertEqual(report["limit_fired"], "timeout")
        self.assertGreater(report["run"]["execs"], 1000)  # it was a flood

    # --- item 4: exec.jsonl bounded ---------------------------------------------------------

    def test_exec_log_is_capped_and_each_line_bounded(self):
        run = self.run_dir()
        r = self.sandgate(["python3", "-c", BIG_ARGVS], run_dir=run, timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(r.stdout, "done\n")
        path = os.path.join(run, "exec.jsonl")
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read().split(b"\n")
        self.assertEqual(raw[-1], b"")
        lines = raw[:-1]
        self.assertLessEqual(size, CAP + 1024, "exec.jsonl past its cap")
        self.assertTrue(all(len(line) <= LINE for line in lines),
                        max(len(line) for line in lines))
        records = [json.loads(line) for line in lines]
        self.assertEqual(records[-1].get("truncated"), True, records[-1])
        self.assertFalse(any(rec.get("truncated") for rec in records[:-1]))
        # The 1 MiB argv: cut, and said so twice (each argument, then the line).
        big = [rec for rec in records[:-1] if rec.get("argv") and rec["argv"][0] == "true"][0]
        self.assertTrue(big["argv_cut"])
        self.assertTrue(big["line_cut"])
        self.assertGreater(big["line_bytes"], LINE)
        report = self.read_json(run, "report.json")["run"]
        self.assertTrue(report["exec_log_cut"])
        logged = len(records) - 1
        self.assertGreaterEqual(report["execs"], 1202)  # python, the big one, 1,200
        self.assertEqual(report["execs_not_logged"], report["execs"] - logged)
        self.assertGreater(report["execs_not_logged"], 0)
        self.assertFalse(report["audit_log_cut"])

    # --- item 4: audit.jsonl bounded --------------------------------------------------------

    def test_audit_log_is_capped(self):
        # The accept rate raised so that every request gets its full refusal line (rate-limited
        # ones are short: the flood would need 40,000 of them).
        config = os.path.join(self.dir, "fast.yaml")
        with open(config, "w") as f:
            json.dump({"policies": {"nothing": {"allow": []}},
                       "tasks": [{"name": "default", "policy": "nothing"}],
                       "limits": {"new_connections_per_second": 100000},
                       # The operator's own log (not capped), kept off the test's stderr.
                       "audit": {"path": os.path.join(self.dir, "operator-audit.jsonl")}}, f)
        run = self.run_dir()
        r = self.sandgate(["python3", "-c", AUDIT_FLOOD], "--config", config, run_dir=run,
                          timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(r.stdout, "done\n")
        path = os.path.join(run, "audit.jsonl")
        self.assertLessEqual(os.path.getsize(path), CAP + 1024, "audit.jsonl past its cap")
        with open(path) as f:
            records = [json.loads(line) for line in f]
        self.assertEqual(records[-1].get("truncated"), True, records[-1])
        self.assertTrue(all(rec.get("verdict") == "deny" for rec in records[:-1]))
        report = self.read_json(run, "report.json")
        self.assertTrue(report["run"]["audit_log_cut"])
        # Each line left out of the file is counted.
        self.assertEqual(report["run"]["audit_lines_not_logged"], 2400 - (len(records) - 1))
        self.assertFalse(report["run"]["exec_log_cut"])


if __name__ == "__main__":
    unittest.main()
