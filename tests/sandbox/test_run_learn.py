"""`sandgate run --learn`: a learning run, from the sandboxed workload's side.

The workload reaches a host its policy does not name (HTTPS, intercepted: the sandbox trusts the
run's CA; the hosts are the test PKI's leaf names) and the run's directory then holds policy.learned.yaml and its `policy test` cases,
which lint and pass, and allow what was seen and nothing more. The guardrails stay: a loopback
address literal, a deny rule and a deny rule with methods still refuse; the credential's
placeholder sent to a host no rule admits (or with a method its rule does not list) never
reaches an upstream as the secret. Upstreams are loopback stand-ins pinned by `resolve:`.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import artifacts
from pki import test_pki
from run_support import namespaces_refused, run_bounded
from sandgate_fixture import binary
from upstreams import HttpUpstream

SECRET = "sk-learnrunsecret-7a41c0d9e2b35f86"
CODE = "curl -sS -o /dev/null -w '%{http_code} %header{x-sandgate-reason}\\n' "


class RunLearnTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        artifacts.register_secret("learn-api", SECRET)
        cls.dir = tempfile.mkdtemp(prefix="sandgate-runlearn-")
        os.chmod(cls.dir, 0o755)
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)
        secret_file = os.path.join(cls.dir, "api.key")
        with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(SECRET + "\n")
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        pinned = "127.0.0.1:%d" % cls.https.port
        cfg = {
            "tls": {"upstream_ca": cls.pki.ca_cert},
            "credentials": {"api": {
                "source": {"file": secret_file}, "hosts": ["api.test"],
                "inject": {"header": "Authorization", "value": "Bearer {secret}"},
                "placeholder": "API_KEY"}},
            "policies": {"agent": {
                "allow": [{"host": "api.test", "cidrs": ["127.0.0.0/8"], "credential": "api",
                           "methods": ["GET"]}],
                "deny": [{"host": "git.test"},
                         {"host": "ws.test", "methods": ["DELETE"]}]}},
            "tasks": [{"name": "agent", "policy": "agent"}],
            "resolve": {n: pinned for n in
                        ["api.test", "other.test", "git.test", "ws.test"]},
            "audit": {"path": os.path.join(cls.dir, "audit.log")},
        }
        with open(cls.config, "w") as f:
            json.dump(cfg, f)
        probe = cls.sandgate("true", learn=False)
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            cls.https.close()
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())

    @classmethod
    def tearDownClass(cls):
        cls.https.close()
        artifacts.record_file("audit", "audit.log", os.path.join(cls.dir, "audit.log"))
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def sandgate(cls, script, learn=True, run_dir=None):
        cmd = [binary(), "run", "--config", cls.config, "--workspace", cls.workspace]
        if learn:
            cmd.append("--learn")
        if run_dir:
            cmd += ["--run-dir", run_dir]
        r = run_bounded(cmd + ["--", "sh", "-c", script], 90)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    def new_run_dir(self):
        d = tempfile.mkdtemp(prefix="learnrun-", dir=self.dir)
        os.rmdir(d)  # --run-dir must not exist yet
        return d

    def since(self, before):
        return self.https.requests[before:]

    def test_learn_run_admits_an_unnamed_host_and_drafts_a_policy_that_passes_its_tests(self):
        run_dir = self.new_run_dir()
        before = len(self.https.requests)
        r = self.sandgate(CODE + "https://other.test/echo/items/1; " +
                          CODE + "https://other.test/echo/items/2", run_dir=run_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split("\n")[:2], ["200 ", "200 "], r.stderr)
        self.assertEqual([q["path"] for q in self.since(before)],
                         ["/echo/items/1", "/echo/items/2"])
        with open(os.path.join(run_dir, "audit.jsonl")) as f:
            audit = [json.loads(l) for l in f if l.strip()]
        learned = [a for a in audit if a.get("path") == "/echo/items/1"]
        self.assertEqual([(a["verdict"], a["reason"]) for a in learned],
                         [("learn", "no_matching_rule")], audit)
        draft = os.path.join(run_dir, "policy.learned.yaml")
        tests = os.path.join(run_dir, "policy.learned.tests.yaml")
        self.assertTrue(os.path.exists(draft), r.stderr)
        with open(draft) as f:
            text = f.read()
        self.assertIn("other.test", text)
        self.assertNotIn("mode: learn", text)
        lint = subprocess.run([binary(), "policy", "lint", draft], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr + text)
        run = subprocess.run([binary(), "policy", "test", "--config", draft, tests, "-v"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        check = subprocess.run([binary(), "policy", "check", "--config", draft, "--task",
                                "agent", "never.test:443", "--json"],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(check.returncode, 1, check.stdout)
        # Without --learn the same request is refused.
        before = len(self.https.requests)
        r = self.sandgate(CODE + "https://other.test/echo/items/3", learn=False)
        self.assertEqual(r.stdout.split("\n")[0], "000 ", r.stderr)
        self.assertEqual(self.since(before), [])

    def test_guardrails_still_refuse_in_a_learn_run(self):
        before = len(self.https.requests)
        r = self.sandgate("; ".join([
            CODE + "https://git.test/echo/g-blocked",
            CODE + "-X DELETE https://ws.test/echo/g-delete",
            CODE + "--noproxy '' http://127.0.0.1:%d/echo/g-literal" % self.https.port,
            CODE + "https://ws.test/echo/g-get"]))
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.split("\n")[:4]
        # The blocked tunnel is refused at CONNECT (curl reports 000); the intercepted DELETE
        # and the literal get the proxy's own 403 with its reason.
        self.assertEqual(lines[0], "000 ", r.stderr)
        self.assertEqual(lines[1], "403 denied_by_rule", r.stderr)
        self.assertEqual(lines[2], "403 address_denied", r.stderr)
        self.assertEqual(lines[3], "200 ", r.stderr)
        self.assertEqual([q["path"] for q in self.since(before)], ["/echo/g-get"])

    def test_a_placeholder_never_becomes_the_secret_where_no_rule_admits(self):
        before = len(self.https.requests)
        r = self.sandgate("; ".join([
            CODE + 'https://other.test/echo/p-host -H "Authorization: Bearer $API_KEY"',
            CODE + '-X POST -d x=1 https://api.test/echo/p-post '
                   '-H "Authorization: Bearer $API_KEY"',
            CODE + 'https://api.test/echo/p-get -H "Authorization: Bearer $API_KEY"']))
        self.assertEqual(r.returncode, 0, r.stderr)
        # Learn mode names no credential: the placeholder is the tripwire it always is.
        self.assertEqual(r.stdout.split("\n")[:3],
                         ["403 credential_host_mismatch", "403 placeholder_misplaced", "200 "],
                         r.stderr)
        got = {q["path"]: [v for k, v in q["headers"] if k.lower() == "authorization"]
               for q in self.since(before)}
        # Control: the credential's own rule injects it, so a leak would be seen here.
        self.assertEqual(got.get("/echo/p-get"), ["Bearer " + SECRET], r.stdout + r.stderr)
        for path in ("/echo/p-host", "/echo/p-post"):
            self.assertNotIn(SECRET, json.dumps(got.get(path, [])), path)
        self.assertNotIn(SECRET, r.stdout)


if __name__ == "__main__":
    unittest.main()
