"""Resume and branch inherit files, nothing else. `sandgate run --resume RUN` (and `--from RUN`)
joined to a running `sandgate serve` starts from the earlier run's upper layer, but asks serve
for the task's environment afresh: new placeholders, and the policy and credentials serve holds
now, after a reload, never the ones in force when the earlier run ended.

Attacker's side: the earlier run left its placeholder in a file of the workspace; the resumed
run finds it and sends it where a placeholder would be replaced, and the upstream sees only the
string. A host the reload removed is refused to the resumed run, one it added is reached.
Runs as root (the admin socket is root-only)."""

import json
import os
import signal
import subprocess
import tempfile
import unittest

import artifacts
from run_support import run_bounded, serve_run_work_dir, skip_unless_runs
from sandgate_fixture import Sandgate, binary, wait_until
from upstreams import HttpUpstream

SECRET = "sk-runresumesecret-first-0123456789ab"
ROTATED = "sk-runresumesecret-later-0123456789ab"
TOKEN = "tok-run-resume"
# Each curl prints its status and a space; the run prints its placeholder and the file's last.
SCRIPT = ("for h in old.test new.test; do curl -sS -o /dev/null -w '%{http_code} ' "
          "http://$h/echo/$TAG-$h; done; "
          "curl -sS -o /dev/null -H \"X-Api-Key: $PH_KEY\" http://api.test/echo/$TAG-own; "
          "curl -sS -o /dev/null -H \"X-Api-Key: $(cat ph.txt 2>/dev/null)\" "
          "http://plain.test/echo/$TAG-left; "
          "printf '%s %s' \"$PH_KEY\" \"$(cat ph.txt 2>/dev/null || echo none)\"; "
          "printf %s \"$PH_KEY\" > ph.txt")


class RunResumeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = serve_run_work_dir("sandgate-run-resume-")
        cls.upstream = HttpUpstream()
        cls.serve = Sandgate({}, [])
        cls.sock = cls.serve.admin_path  # under /run/sandgate; removed by cleanup()
        cls.secret_path = cls.serve.secret_file("run-resume", SECRET)
        cls.serve.config = cls.config(["old.test"])
        cls.serve.write_config(cls.serve.config)
        cls.serve.start()
        probe = cls.run_cmd(cls.new_workspace(), "true", "--run-dir", cls.run_dir("probe"))
        skip_unless_runs(probe, cleanup=cls.tearDownClass)

    @classmethod
    def tearDownClass(cls):
        cls.serve.cleanup()
        cls.upstream.close()
        subprocess.run(["rm", "-rf", cls.work], check=False)

    @classmethod
    def config(cls, hosts):
        """Policy `api`: the credential's host, a host without one, and `hosts`."""
        rule = {"ports": [80], "cidrs": ["127.0.0.0/8"]}
        allow = [dict(rule, host="api.test", credential="key"), dict(rule, host="plain.test")]
        allow += [dict(rule, host=h) for h in hosts]
        creds = {"key": {"source": {"file": cls.secret_path}, "hosts": ["api.test"],
                         "allow_plaintext": True, "placeholder": "PH_KEY",
                         "inject": {"header": "X-Api-Key", "value": "{secret}"}}}
        port = cls.upstream.port
        return cls.serve.make_config(
            {"api": {"allow": allow}}, [{"name": "t1", "policy": "api", "token": TOKEN}],
            resolve={h: "127.0.0.1:%d" % port
                     for h in ("api.test", "plain.test", "old.test", "new.test")},
            extra={"credentials": creds,
                   "listen": {"proxy": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                              "admin": cls.sock}})

    @classmethod
    def new_workspace(cls):
        ws = tempfile.mkdtemp(dir=cls.work, prefix="ws-")
        os.chmod(ws, 0o755)
        return ws

    @classmethod
    def run_dir(cls, name):
        return os.path.join(tempfile.mkdtemp(dir=cls.work, prefix="runs-"), name)

    @classmethod
    def run_cmd(cls, ws, script, *flags, tag="probe"):
        r = run_bounded([binary(), "run", "--workspace", ws, "--proxy", "unix:" + cls.sock,
                         "--task", "t1", "--env", "TAG=" + tag, *flags, "--",
                         "sh", "-c", script], 60)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    def reload(self, hosts, secret):
        reloads = self.serve.metric("sandgate_config_reloads_total", result="ok") or 0
        self.serve.secret_file("run-resume", secret)
        self.serve.config = self.config(hosts)
        self.serve.write_config(self.serve.config)
        os.kill(self.serve.proc.pid, signal.SIGHUP)
        wait_until(lambda: (self.serve.metric("sandgate_config_reloads_total", result="ok")
                            or 0) > reloads, 10, interval=0.05, what="serve reloaded")

    def header(self, path, name):
        seen = self.upstream.requests_to(path)
        self.assertEqual(len(seen), 1, path)
        return dict((k.lower(), v) for k, v in seen[0]["headers"])[name]

    def outcome(self, r):
        """(status of old.test, status of new.test, the run's placeholder, the file's)."""
        self.assertEqual(r.returncode, 0, r.stderr)
        old, new, own, left = r.stdout.split(" ")
        return old, new, own, left

    def check_later_run(self, flag):
        ws = self.new_workspace()
        first = self.run_dir("first")
        r = self.run_cmd(ws, SCRIPT, "--run-dir", first, tag=flag + "-1")
        old, new, own1, left = self.outcome(r)
        self.assertEqual((old, new, left), ("200", "403", "none"))
        self.assertEqual(self.header("/echo/%s-1-own" % flag, "x-api-key"), SECRET)
        self.assertEqual(os.listdir(ws), [])  # the placeholder went to the run's upper layer

        self.reload(["new.test"], ROTATED)
        later = self.run_dir("later")
        r = self.run_cmd(ws, SCRIPT, flag, first, "--run-dir", later, tag=flag + "-2")
        old, new, own2, left = self.outcome(r)
        # The files are the earlier run's: its placeholder is there, as it left it.
        self.assertEqual(left, own1)
        # Nothing else is: a placeholder of its own, the reloaded policy and credential.
        self.assertNotEqual(own2, own1)
        self.assertEqual((old, new), ("403", "200"))
        self.serve.wait_audit(task="t1", path="/echo/%s-2-old.test" % flag,
                              reason="no_matching_rule")
        self.assertEqual(self.upstream.requests_to("/echo/%s-2-old.test" % flag), [])
        self.assertEqual(self.header("/echo/%s-2-own" % flag, "x-api-key"), ROTATED)
        # The earlier placeholder is only a string now, on a host that injects nothing.
        self.assertEqual(self.header("/echo/%s-2-left" % flag, "x-api-key"), own1)
        with open(os.path.join(later, "report.json")) as f:
            run = json.load(f)["run"]
        key = "resumed_from" if flag == "--resume" else "branched_from"
        self.assertEqual(run[key], "first")
        with open(os.path.join(later, "overlay", "upper", "ph.txt")) as f:
            self.assertEqual(f.read(), own2)
        self.assertEqual(os.listdir(ws), [])

    def tearDown(self):
        self.reload(["old.test"], SECRET)  # each test starts from the first policy

    def test_resume_gets_new_placeholders_and_the_reloaded_policy(self):
        self.check_later_run("--resume")

    def test_from_gets_new_placeholders_and_the_reloaded_policy(self):
        self.check_later_run("--from")


if __name__ == "__main__":
    unittest.main()
