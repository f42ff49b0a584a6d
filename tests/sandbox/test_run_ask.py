"""`sandgate run --ask`: the run's embedded proxy holds what the policy refuses for want of a
rule and the launcher asks on its own terminal (/dev/tty, here a pty the test drives), never on
the sandboxed command's stdin. "y" lets the request through (without any credential), "n"
refuses it (approval_denied); without a terminal, --ask is a usage error (exit 2) before anything
runs. Upstreams are loopback stand-ins pinned by `resolve:`.
"""

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import artifacts
from run_support import namespaces_refused, run_bounded
from sandgate_fixture import binary
from upstreams import HttpUpstream

CODE = "curl -sS -o /dev/null -w '%{http_code} %header{x-sandgate-reason}\\n' "


class RunAskTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        cls.dir = tempfile.mkdtemp(prefix="sandgate-runask-")
        os.chmod(cls.dir, 0o755)
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        cfg = {
            "policies": {"agent": {"allow": [{"host": "known.test", "ports": [cls.up.port],
                                              "cidrs": ["127.0.0.0/8"]}]}},
            "tasks": [{"name": "agent", "policy": "agent"}],
            "resolve": {n: "127.0.0.1" for n in ["known.test", "other.test"]},
            "audit": {"path": os.path.join(cls.dir, "audit.log")},
        }
        with open(cls.config, "w") as f:
            json.dump(cfg, f)
        probe = run_bounded([binary(), "run", "--config", cls.config, "--workspace",
                             cls.workspace, "--", "true"], 90)
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            cls.up.close()
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())

    @classmethod
    def tearDownClass(cls):
        cls.up.close()
        artifacts.record_file("audit", "audit.log", os.path.join(cls.dir, "audit.log"))
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_on_pty(self, script, answer, timeout=60):
        """Runs `sandgate run --ask` with a pty as its controlling terminal; answers the first
        prompt with `answer`. Returns (exit status, everything the terminal showed)."""
        args = [binary(), "run", "--ask", "--config", self.config, "--workspace", self.workspace,
                "--", "sh", "-c", script]
        pid, fd = pty.fork()
        if pid == 0:  # the child: exec at once (the test process has threads)
            try:
                os.execv(args[0], args)
            finally:
                os._exit(127)
        shown = b""
        answered = False
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([fd], [], [], 0.5)
                if ready:
                    try:
                        data = os.read(fd, 4096)
                    except OSError:  # EIO: the child closed the terminal
                        break
                    if not data:
                        break
                    shown += data
                if not answered and b"Allow?" in shown:
                    os.write(fd, answer.encode() + b"\n")
                    answered = True
            else:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError("sandgate run --ask still running; it showed:\n" +
                                     shown.decode(errors="replace"))
            _, status = os.waitpid(pid, 0)
        finally:
            os.close(fd)
        artifacts.record("run", "pty", shown)
        return os.waitstatus_to_exitcode(status), shown.decode(errors="replace")

    def test_y_lets_the_request_through(self):
        before = len(self.up.requests)
        code, shown = self.run_on_pty(
            CODE + "http://other.test:%d/echo/ask-yes" % self.up.port, "y")
        self.assertEqual(code, 0, shown)
        self.assertIn("other.test:%d/echo/ask-yes" % self.up.port, shown)
        self.assertIn("200 ", shown)
        self.assertEqual([q["path"] for q in self.up.requests[before:]], ["/echo/ask-yes"])

    def test_n_refuses_with_approval_denied(self):
        before = len(self.up.requests)
        code, shown = self.run_on_pty(
            CODE + "http://other.test:%d/echo/ask-no" % self.up.port, "n")
        self.assertEqual(code, 0, shown)
        self.assertIn("403 approval_denied", shown)
        self.assertEqual(self.up.requests[before:], [])

    def test_without_a_terminal_ask_is_a_usage_error(self):
        r = run_bounded([binary(), "run", "--ask", "--config", self.config, "--workspace",
                         self.workspace, "--", "true"], 60, stdin=subprocess.DEVNULL,
                        start_new_session=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("/dev/tty", r.stderr)


if __name__ == "__main__":
    unittest.main()
