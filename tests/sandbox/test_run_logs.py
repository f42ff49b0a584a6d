"""What `sandgate serve` and `sandgate run` print on stderr (issue 39): --log-level and
SANDGATE_LOG_LEVEL (the flag wins; a bad value is a usage error naming the accepted values),
--log-format json (one object per line), each warning of a rootless run said once, serve's
start-up saying each thing once, and a run's audit lines never cutting into the command's own
stderr lines (they go to the run's audit.jsonl; --audit-stderr streams whole lines).

The rootless case runs as a user the test creates and removes; everything else as root. Every
process is ours and bounded in time; the only upstream is the proxy's own refusal."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest

import artifacts
from run_support import TemporaryUser, namespaces_refused, run_bounded
from sandgate_fixture import Sandgate, binary, wait_until

LEVELS = "trace, debug, info, warn, error, off"


def serve_fixture(testcase, env=None, serve_args=(), threads=2, reload=False):
    """serve's stderr from start to a SIGTERM (after a SIGHUP reload when `reload`)."""
    sg = Sandgate({"p": {"allow": [{"host": "example.test"}]}},
                  [{"name": "t", "policy": "p", "token": "l0gs"}], serve_args=serve_args,
                  threads=threads)
    testcase.addCleanup(sg.cleanup)
    sg.start(env=env)
    if reload:
        sg.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "configuration reloaded" in sg.stderr(), 10, what="the reload")
    sg.stop()
    return sg.stderr()


class LogSettingsTest(unittest.TestCase):
    def test_a_bad_level_or_format_is_a_usage_error_naming_the_accepted_values(self):
        cases = [
            (["serve", "--config", "/nonexistent.yaml", "--log-level", "loud"], {}, LEVELS),
            (["run", "--log-level", "verbose", "--", "true"], {}, LEVELS),
            (["policy", "lint", "/nonexistent.yaml"], {"SANDGATE_LOG_LEVEL": "chatty"},
             LEVELS),
            (["runs", "--log-format", "xml"], {}, "text, json"),
        ]
        for args, env, accepted in cases:
            with self.subTest(args=args, env=env):
                r = run_bounded([binary()] + args, 30, env=dict(os.environ, **env))
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("expected one of " + accepted, r.stderr)
                where = "SANDGATE_LOG_LEVEL" if env else ("--log-format" if "xml" in args
                                                          else "--log-level")
                self.assertIn(where, r.stderr)

    def test_the_flag_wins_over_the_variable(self):
        quiet = serve_fixture(self, env={"SANDGATE_LOG_LEVEL": "off"})
        self.assertEqual(quiet, "", quiet)
        warn_only = serve_fixture(self, env={"SANDGATE_LOG_LEVEL": "warn"})
        self.assertNotIn("sandgate serving", warn_only)
        loud = serve_fixture(self, env={"SANDGATE_LOG_LEVEL": "off"},
                             serve_args=["--log-level", "info"])
        self.assertIn("sandgate serving", loud)

    def test_json_format_is_one_object_per_line_with_fields(self):
        out = serve_fixture(self, serve_args=["--log-format", "json"], reload=True)
        lines = out.splitlines()
        self.assertTrue(lines, out)
        records = [json.loads(line) for line in lines]  # every line is one JSON object
        for rec in records:
            self.assertEqual(list(rec)[:3], ["time", "level", "message"], rec)
            self.assertRegex(rec["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertIn(rec["level"], LEVELS.split(", "))
        serving = [r for r in records if r["message"].startswith("sandgate serving")]
        self.assertEqual(len(serving), 1, records)
        self.assertRegex(serving[0]["proxy"], r"^127\.0\.0\.1:\d+$")  # a field of its own
        self.assertEqual(serving[0]["workers"], "2")
        reloaded = [r for r in records if r["message"].startswith("configuration reloaded")]
        self.assertEqual([r["generation"] for r in reloaded], ["2"], records)

    def test_serve_start_up_says_each_thing_once(self):
        out = serve_fixture(self, threads=0)  # the default count
        self.assertEqual(len(re.findall(r"worker threads", out)), 1, out)
        self.assertNotIn(" admin -", out)  # a listener that is not configured says so


class RootlessWarningsTest(unittest.TestCase):
    def test_each_warning_of_a_rootless_run_is_said_once(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to create the temporary user")
        with TemporaryUser() as user:
            ws = os.path.join(user.home, "ws")
            os.mkdir(ws)
            os.chown(ws, user.uid, user.gid)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": user.home,
                   "XDG_STATE_HOME": os.path.join(user.home, "state")}
            for fmt in ("text", "json"):
                r = run_bounded([binary(), "run", "--workspace", ws, "--log-format", fmt, "--",
                                 "sh", "-c", "echo out; echo err >&2"], 120, env=env,
                                **user.popen_args())
                artifacts.record("log", "run-stderr", r.stderr)
                if r.returncode == 125 and namespaces_refused(r.stderr):
                    self.skipTest("this host refuses rootless namespaces: " + r.stderr.strip())
                self.assertEqual(r.returncode, 0, r.stderr)
                messages = []
                for line in r.stderr.splitlines():
                    if fmt == "json" and line.startswith("{"):
                        rec = json.loads(line)
                        self.assertIn(rec["level"], ("warn", "error"), rec)  # run's default
                        messages.append(rec["message"])
                    elif fmt == "text" and line.startswith("["):
                        messages.append(re.sub(r"^\[[^]]*\] \[[a-z]+\] ", "", line))
                    elif line.startswith("sandgate run: warning: "):
                        messages.append(line[len("sandgate run: warning: "):])
                bodies = [re.sub(r"^sandbox: ", "", m) for m in messages]
                self.assertEqual(len(bodies), len(set(bodies)), r.stderr)  # each said once
                for m in messages:
                    self.assertLessEqual(m.count("sandbox: "), 1, m)  # no prefix said twice
                if not messages:
                    self.skipTest("this host gave a rootless run nothing to warn about")


# The command writes its stderr lines while it makes requests the proxy refuses (each an audit
# line). With "halves" each line takes two write(2)s a moment apart: an audit line written to
# the same stderr between them would cut the command's line. With "whole", one write(2) each.
CHATTER = r"""
import os, sys, threading, time, urllib.request
stop = threading.Event()
def chatter():
    n = 0
    deadline = time.monotonic() + 20
    while not stop.is_set() and n < 4000 and time.monotonic() < deadline:
        if sys.argv[1] == "halves":
            os.write(2, b"cmd-%d-" % n)
            time.sleep(0.0005)
            os.write(2, b"tail\n")
        else:
            os.write(2, b"cmd-%d-tail\n" % n)
        n += 1
t = threading.Thread(target=chatter)
t.start()
refused = 0
for i in range(60):
    try:
        urllib.request.urlopen("http://denied.test/r%d" % i, timeout=5)
    except urllib.error.HTTPError as e:
        refused += e.code == 403
stop.set()
t.join()
print(refused)
"""


class RunAuditStreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sandgate-logs-")
        os.chmod(cls.dir, 0o755)
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        with open(cls.config, "w") as f:  # no audit.path
            json.dump({"policies": {"none": {"allow": []}},
                       "tasks": [{"name": "t", "policy": "none"}]}, f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_chatter(self, name, mode, *flags):
        run_dir = os.path.join(self.dir, name)
        r = run_bounded([binary(), "run", "--config", self.config, "--workspace", self.workspace,
                         "--run-dir", run_dir, *flags, "--", "python3", "-c", CHATTER, mode], 120)
        artifacts.record("log", "run-stderr", r.stderr)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses namespaces: " + r.stderr.strip())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "60", r.stderr[-2000:])
        with open(os.path.join(run_dir, "audit.jsonl")) as f:
            kept = [json.loads(line) for line in f]
        self.assertEqual(len([a for a in kept if a["host"] == "denied.test"]), 60)
        return r

    def test_audit_lines_never_cut_the_commands_stderr_lines(self):
        r = self.run_chatter("default", "halves")
        self.assert_whole_lines(r.stderr)
        self.assertNotIn('"kind"', r.stderr)  # the audit is in the run's directory
        # The end of the run says where the audit lines are and what they counted.
        self.assertRegex(r.stderr, r"sandgate run: network: 60 requests: 0 allowed, 60 denied; "
                                   r"audit lines in \S+/audit\.jsonl")

    def test_audit_stderr_streams_whole_lines(self):
        r = self.run_chatter("streamed", "whole", "--audit-stderr")
        audit = self.assert_whole_lines(r.stderr)
        self.assertEqual(len([a for a in audit if a["host"] == "denied.test"]), 60)

    def assert_whole_lines(self, stderr):
        """Every line is a whole command line, a whole audit line or sandgate run's own."""
        commands, audit = 0, []
        for line in stderr.splitlines():
            if re.fullmatch(r"cmd-\d+-tail", line):
                commands += 1
            elif line.startswith("{"):
                audit.append(json.loads(line))  # a whole audit line
            else:
                self.assertTrue(line.startswith("sandgate run: "), repr(line))
        self.assertGreater(commands, 0)
        return audit


if __name__ == "__main__":
    unittest.main()
