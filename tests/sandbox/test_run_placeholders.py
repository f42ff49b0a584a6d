"""Placeholders belong to one run. `sandgate run --proxy unix:PATH` asks serve for its task's
environment once per run (task_env): the placeholders in it are made for that run, honoured only
on the listeners that run hands over, and gone with it. So a placeholder a run leaves behind (in
a persistent workspace, a log, a file another run reads) is only a string in the next run, and a
token client of the same task (token_env) has placeholders of its own that no run honours.

Attacker's side: the second run holds the first run's placeholder and sends it where the first
run's own would have been recognised; the upstream gets the bytes as they are, never the secret.
Runs as root (the admin socket is root-only)."""

import json
import os
import subprocess
import unittest

import artifacts
from clients import curl
from run_support import namespaces_refused, run_bounded, serve_run_work_dir
from sandgate_fixture import Sandgate, binary
from upstreams import HttpUpstream

SECRET = "sk-runplaceholdersecret-0123456789abcd"
TOKEN = "tok-run-placeholders"


class RunPlaceholdersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = serve_run_work_dir("sandgate-run-ph-")
        cls.upstream = HttpUpstream()
        cls.workspace = os.path.join(cls.work, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)
        cls.serve = Sandgate({}, [])
        cls.sock = cls.serve.admin_path  # under /run/sandgate; removed by cleanup()
        rule = {"ports": [80], "cidrs": ["127.0.0.0/8"]}
        creds = {"key": {"source": {"file": cls.serve.secret_file("run-ph", SECRET)},
                         "hosts": ["api.test"], "allow_plaintext": True, "placeholder": "PH_KEY",
                         "inject": {"header": "X-Api-Key", "value": "{secret}"}}}
        cls.serve.config = cls.serve.make_config(
            {"api": {"allow": [dict(rule, host="api.test", credential="key")]}},
            [{"name": "t1", "policy": "api", "token": TOKEN}],
            resolve={"api.test": "127.0.0.1:%d" % cls.upstream.port},
            extra={"credentials": creds,
                   "listen": {"proxy": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                              "admin": cls.sock}})
        cls.serve.write_config(cls.serve.config)
        cls.serve.start()
        probe = cls.run_cmd("true")
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            cls.tearDownClass()
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())

    @classmethod
    def tearDownClass(cls):
        cls.serve.cleanup()
        cls.upstream.close()
        subprocess.run(["rm", "-rf", cls.work], check=False)

    @classmethod
    def run_cmd(cls, script):
        r = run_bounded([binary(), "run", "--workspace", cls.workspace, "--proxy",
                         "unix:" + cls.sock, "--task", "t1", "--", "sh", "-c", script], 60)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    def placeholder_of_a_run(self):
        r = self.run_cmd('printf %s "$PH_KEY"')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("sk-") and len(r.stdout) == len(SECRET), r.stdout)
        return r.stdout

    def received(self, path):
        seen = self.upstream.requests_to(path)
        self.assertEqual(len(seen), 1, path)
        return dict((k.lower(), v) for k, v in seen[0]["headers"])

    def test_every_run_gets_its_own_placeholders(self):
        first, second = self.placeholder_of_a_run(), self.placeholder_of_a_run()
        self.assertNotEqual(first, second)
        self.assertNotIn(self.serve.token_env("t1")["env"]["PH_KEY"], (first, second))

    def test_a_placeholder_left_by_an_earlier_run_is_only_a_string(self):
        old = self.placeholder_of_a_run()
        # The next run finds the old placeholder (as in a file the first run left) and puts it
        # in a field the upstream may store. Its own placeholder there is refused as a possible
        # exfiltration; the old one is not a placeholder any more and goes out as it is.
        r = self.run_cmd(
            "curl -sS -o /dev/null -w '%%{http_code} ' -A 'agent/%s' http://api.test/echo/old-ph;"
            "curl -sS -o /dev/null -w '%%{http_code} ' -A \"agent/$PH_KEY\" "
            "http://api.test/echo/own-ph;"
            "curl -sS -H \"X-Api-Key: $PH_KEY\" http://api.test/echo/own-key; printf ' %%s' "
            "\"$PH_KEY\"" % old)
        self.assertEqual(r.returncode, 0, r.stderr)
        codes, rest = r.stdout[:8], r.stdout[8:]
        self.assertEqual(codes, "200 403 ", r.stdout)
        got = self.received("/echo/old-ph")
        self.assertEqual(got["user-agent"], "agent/" + old)
        self.assertEqual(got["x-api-key"], SECRET)  # the rule's credential, injected as ever
        self.assertEqual(self.upstream.requests_to("/echo/own-ph"), [])
        self.serve.wait_audit(task="t1", path="/echo/own-ph", reason="placeholder_misplaced")
        # Its own placeholder where the key goes is replaced, and the echo of the secret comes
        # back as that same placeholder: the run's, not the earlier one's.
        body, own = rest.rsplit(" ", 1)
        self.assertNotEqual(own, old)
        self.assertEqual(self.received("/echo/own-key")["x-api-key"], SECRET)
        echoed = dict((k.lower(), v) for k, v in json.loads(body)["headers"])
        self.assertEqual(echoed["x-api-key"], own)

    def test_a_runs_placeholder_is_nothing_to_a_token_client(self):
        run_ph = self.placeholder_of_a_run()
        proxy = self.serve.proxy_url("t1", TOKEN)
        r = curl("http://api.test/echo/token-run-ph", "-A", "agent/" + run_ph, proxy=proxy)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.received("/echo/token-run-ph")["user-agent"], "agent/" + run_ph)
        own = self.serve.token_env("t1")["env"]["PH_KEY"]
        r = curl("http://api.test/echo/token-own-ph", "-A", "agent/" + own, proxy=proxy)
        self.assertEqual(r.status, 403, r)
        self.assertEqual(r.header("x-sandgate-reason"), "placeholder_misplaced")


if __name__ == "__main__":
    unittest.main()
