"""`policy learn` and `policy diff` on the audit of a real `sandgate serve`.

curl sends plain-HTTP requests (allowed, refused by path, refused by host) and a CONNECT tunnel
through serve to loopback upstreams pinned by `resolve:`; the audit file it writes is learned
with --tests. The draft must pass `policy lint`, pass its own `policy test` cases, refuse a host
never contacted and a path never seen, and `policy diff` must show a changed decision for an
edited config (exit 1) and none for an identical one (exit 0).
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

from clients import curl
from sandgate_fixture import Sandgate, binary
from upstreams import HttpUpstream

TOKEN = "tok-learn"


def sandgate(*args, stdin=None):
    return subprocess.run([binary(), *args], capture_output=True, text=True, timeout=60,
                          input=stdin)


class PolicyLearnTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        cls.policies = {"agent": {"allow": [
            {"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]},
            {"host": "ro.test", "ports": [80], "methods": ["GET"], "paths": ["/echo/docs/**"],
             "cidrs": ["127.0.0.0/8"]},
            {"host": "tun.test", "ports": [443], "cidrs": ["127.0.0.0/8"]},
        ]}}
        pinned = "127.0.0.1:%d" % cls.up.port
        cls.resolve = {"api.test": pinned, "ro.test": pinned, "tun.test": pinned}
        cls.sg = Sandgate(cls.policies, [{"name": "demo", "policy": "agent", "token": TOKEN}],
                          resolve=cls.resolve).start()
        cls.dir = tempfile.mkdtemp(prefix="sandgate-learn-")
        proxy = cls.sg.proxy_url("demo", TOKEN)
        try:
            for user in ("1", "2", "3"):
                r = curl("http://api.test/echo/users/%s" % user, proxy=proxy)
                assert r.status == 200, r.stderr
            r = curl("http://api.test/echo/items", "-X", "POST", "--data", "x=1", proxy=proxy)
            assert r.status == 200, r.stderr
            assert curl("http://ro.test/echo/docs/a", proxy=proxy).status == 200
            assert curl("http://ro.test/admin", proxy=proxy).status == 403  # path_not_allowed
            assert curl("http://evil.test/x", proxy=proxy).status == 403    # no_matching_rule
            cls.tunnel(cls.sg, "tun.test")
            cls.sg.wait_audit(kind="tunnel", host="tun.test")
        finally:
            cls.sg.stop()
        cls.audit = os.path.join(cls.dir, "audit.jsonl")
        shutil.copy(cls.sg.audit_path, cls.audit)
        cls.original = cls.sg.config_path

    @staticmethod
    def tunnel(sg, host):
        """A CONNECT that is answered 200, then closed: the tunnel's line is written."""
        s = sg.connect()
        try:
            s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n%s\r\n" %
                       (host, host, sg.auth_header("demo", TOKEN))).encode())
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 4096:
                chunk = s.recv(1024)
                if not chunk:
                    break
                head += chunk
            assert b" 200 " in head.split(b"\r\n")[0], head
        finally:
            s.close()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def learn(self, *args):
        tests = os.path.join(self.dir, "learned.tests.yaml")
        p = sandgate("policy", "learn", self.audit, "--tests", tests, *args)
        self.assertEqual(p.returncode, 0, p.stderr)
        learned = os.path.join(self.dir, "learned.yaml")
        with open(learned, "w") as f:
            f.write(p.stdout)
        return learned, tests, p

    def test_the_draft_lints_passes_its_tests_and_allows_nothing_more(self):
        learned, tests, p = self.learn("--explain")
        self.assertIn('"/echo/users/*"', p.stdout)
        self.assertNotIn("**", p.stdout)
        self.assertIn("# covers 3 requests", p.stdout)
        lint = sandgate("policy", "lint", learned)
        self.assertEqual(lint.returncode, 0, lint.stderr + p.stdout)
        run = sandgate("policy", "test", "--config", learned, tests, "-v")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("8 passed, 0 failed", run.stdout)

        def check(target, *more):
            return sandgate("policy", "check", "--config", learned, "--task", "demo", target,
                            "--json", *more)

        never = check("never.test:443")
        self.assertEqual(never.returncode, 1, never.stdout)
        self.assertEqual(json.loads(never.stdout)["reason"], "no_matching_rule")
        unseen_path = check("http://api.test/echo/admin")
        self.assertEqual(json.loads(unseen_path.stdout)["reason"], "path_not_allowed")
        unseen_method = check("http://api.test/echo/users/1", "--method", "DELETE")
        self.assertEqual(json.loads(unseen_method.stdout)["reason"], "method_not_allowed")
        # A new user id is the pattern's; the pinned loopback address passes its cidrs.
        new_id = check("http://api.test/echo/users/99")
        self.assertEqual(new_id.returncode, 0, new_id.stdout)
        self.assertEqual(json.loads(new_id.stdout)["resolved"], "127.0.0.1")

    def test_learning_from_stdin_and_the_task_filter(self):
        with open(self.audit) as f:
            text = f.read()
        p = sandgate("policy", "learn", "-", "--task", "nobody", stdin=text)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("tasks: []", p.stdout)
        p = sandgate("policy", "learn", "-", "--task", "demo", stdin=text + "{oops\n")
        self.assertEqual(p.returncode, 0, p.stderr)
        n = len(text.splitlines()) + 1
        self.assertIn("-:%d: skipped" % n, p.stderr)
        strict = sandgate("policy", "learn", "-", "--strict", stdin=text + "{oops\n")
        self.assertEqual(strict.returncode, 2, strict.stderr)
        self.assertEqual(strict.stdout, "")

    def test_diff_shows_a_changed_decision_and_none_for_the_same_config(self):
        same = sandgate("policy", "diff", self.original, self.original, "--audit", self.audit)
        self.assertEqual(same.returncode, 0, same.stdout + same.stderr)
        self.assertIn("0 of ", same.stdout)
        with open(self.original) as f:
            cfg = json.load(f)
        cfg["policies"]["agent"]["allow"] = [r for r in cfg["policies"]["agent"]["allow"]
                                             if r["host"] != "tun.test"]
        cfg["policies"]["agent"]["allow"].append({"host": "evil.test", "ports": [80]})
        edited = os.path.join(self.dir, "edited.yaml")
        with open(edited, "w") as f:
            json.dump(cfg, f, indent=1)
        diff = sandgate("policy", "diff", self.original, edited, "--audit", self.audit)
        self.assertEqual(diff.returncode, 1, diff.stdout + diff.stderr)
        self.assertIn("tun.test:443", diff.stdout)
        self.assertIn("before: allow (allowed; rule %s:" % self.original, diff.stdout)
        self.assertIn("after:  deny (no_matching_rule; rule none: default deny)", diff.stdout)
        self.assertIn("GET http://evil.test:80/x", diff.stdout)
        self.assertIn("2 of ", diff.stdout)
        broken = os.path.join(self.dir, "broken.yaml")
        with open(broken, "w") as f:
            f.write("policies: {a: {allow: [{host: 'x', ports: [0]}]}}\n")
        bad = sandgate("policy", "diff", self.original, broken, "--audit", self.audit)
        self.assertEqual(bad.returncode, 2, bad.stdout + bad.stderr)


if __name__ == "__main__":
    unittest.main()
