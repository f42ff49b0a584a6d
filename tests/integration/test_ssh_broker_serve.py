"""The SSH broker (issue #42) through `sandgate serve`: a CONNECT to git.test:22 (mapped by
resolve: to the test's own sshd) whose rule's credential is an SSH key is served by the broker;
ssh reaches it with a ProxyCommand that opens the CONNECT (tests/support/ssh_connect_proxy.py).
The sshd, git user and repositories are test_ssh_broker.py's.
"""
import json
import os
import shlex
import signal
import subprocess
import time
import unittest

# Not `from … import SshBroker`: unittest would run its tests here too.
import test_ssh_broker as core
from test_ssh_broker import HARNESS, SSHD, run

PROXY_COMMAND = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support",
                             "ssh_connect_proxy.py")


@unittest.skipUnless(os.geteuid() == 0 and HARNESS and os.path.exists(SSHD),
                     "needs root, sshd (openssh-server) and the harness")
class SshBrokerServe(unittest.TestCase):
    """The same sshd and repositories, reached through serve: CONNECT git.test:22, which
    resolve: maps to the sshd; the rule's credential is the SSH key."""
    user = "sgssh43"  # not test_ssh_broker's: CTest may run both modules at once
    uid = 61043

    @classmethod
    def setUpClass(cls):
        try:
            cls._set_up_serve()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _set_up_serve(cls):
        from sandgate_fixture import Sandgate
        core.SshBroker._set_up_sshd.__func__(cls)
        d = cls.dir
        with open(os.path.join(d, "serve_pins"), "w") as f:
            f.write(f"git.test {cls.sshd_pub}\n")
        with open(os.path.join(d, "serve_wrong_pins"), "w") as f:
            f.write(f"git.test {cls.other_pub}\nwrong.test {cls.other_pub}\n")
        with open(os.path.join(d, "known-serve"), "w") as f:
            f.write(f"git.test {cls.broker_pub}\nwrong.test {cls.broker_pub}\n")
        cls.sg = cls._serve()
        cls.sg.start()

    @classmethod
    def _serve(cls, limits=None):
        from sandgate_fixture import Sandgate
        d = cls.dir
        git_rules = {"repositories": ["org/repo"], "push": {"refs": ["refs/heads/agent/*"]}}
        return Sandgate(
            {"agent": {"allow": [
                {"host": "git.test", "ports": [22], "cidrs": ["127.0.0.0/8"],
                 "credential": "deploy", "git": git_rules},
                {"host": "wrong.test", "ports": [22], "cidrs": ["127.0.0.0/8"],
                 "credential": "wrongpin", "git": git_rules}]}},
            [{"name": "t1", "policy": "agent", "token": "tok-ssh-1"}],
            resolve={"git.test": f"127.0.0.1:{cls.sshd_port}",
                     "wrong.test": f"127.0.0.1:{cls.sshd_port}"},
            extra={"ssh": {"host_key": os.path.join(d, "broker_host_key")},
                   "credentials": {
                       "deploy": {"source": {"file": os.path.join(d, "deploy_key")},
                                  "hosts": ["git.test"],
                                  "ssh": {"user": cls.user,
                                          "known_hosts": os.path.join(d, "serve_pins")}},
                       "wrongpin": {"source": {"file": os.path.join(d, "deploy_key")},
                                    "hosts": ["wrong.test"],
                                    "ssh": {"user": cls.user,
                                            "known_hosts": os.path.join(d, "serve_wrong_pins")}},
                   }},
            limits=limits)

    @classmethod
    def tearDownClass(cls):
        sg = getattr(cls, "sg", None)
        if sg is not None:
            if sg.proc is not None and sg.proc.poll() is None:
                sg.stop()
            sg.cleanup()
        core.SshBroker.tearDownClass.__func__(cls)

    # The sshd set-up is SshBroker's (its classmethods, run on this class).
    _create_user = core.SshBroker.__dict__["_create_user"]
    gid = core.SshBroker.__dict__["gid"]
    _start_sshd = core.SshBroker.__dict__["_start_sshd"]
    _start_harness = core.SshBroker.__dict__["_start_harness"]
    assert_no_secret = core.SshBroker.assert_no_secret
    commit = core.SshBroker.commit
    bare_rev = core.SshBroker.bare_rev

    def env(self):
        return dict(os.environ, SG_PROXY_PORT=str(self.sg.proxy_port), SG_PROXY_AUTH="t1:tok-ssh-1",
                    GIT_TERMINAL_PROMPT="0",
                    GIT_SSH_COMMAND=shlex.join(self.ssh_args()))

    def ssh_args(self):
        return ["ssh", "-F", "/dev/null", "-o", f"ProxyCommand=python3 {PROXY_COMMAND} %h %p",
                "-o", f"UserKnownHostsFile={self.dir}/known-serve",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10"]

    def git(self, args):
        r = run(["git"] + args, env=self.env())
        self.assert_no_secret(r.stdout + r.stderr)
        return r

    def test_clone_push_and_refusals_through_serve(self):
        dest = os.path.join(self.dir, "s1")
        r = self.git(["clone", "-q", "git@git.test:org/repo.git", dest])
        self.assertEqual(r.returncode, 0, r.stderr + self.sg.stderr())
        with open(os.path.join(dest, "README")) as f:
            self.assertEqual(f.read(), "hello over ssh\n")
        self.sg.wait_audit(host="git.test")
        self.commit(dest, "via serve")
        r = self.git(["-C", dest, "push", "origin", "HEAD:refs/heads/agent/serve"])
        self.assertEqual(r.returncode, 0, r.stderr)
        head = run(["git", "-C", dest, "rev-parse", "HEAD"]).stdout.strip()
        self.assertEqual(self.bare_rev("refs/heads/agent/serve"), head)
        before = self.bare_rev("refs/heads/main")
        r = self.git(["-C", dest, "push", "origin", "HEAD:main"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("git_ref_not_allowed", r.stderr)
        self.assertEqual(self.bare_rev("refs/heads/main"), before)
        self.sg.wait_audit(reason="git_ref_not_allowed")

    def test_not_git_is_refused_through_serve(self):
        r = run(self.ssh_args() + ["git@git.test", "id"], env=self.env(),
                stdin=subprocess.DEVNULL)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ssh_command_refused", r.stderr)
        self.sg.wait_audit(reason="ssh_command_refused")
        r = run(self.ssh_args() + ["-W", "127.0.0.1:22", "git@git.test"], env=self.env(),
                stdin=subprocess.DEVNULL)
        self.assertNotEqual(r.returncode, 0)
        self.sg.wait_audit(reason="ssh_forwarding_refused")

    def test_wrong_pin_through_serve(self):
        r = self.git(["clone", "-q", "git@wrong.test:org/repo.git", os.path.join(self.dir, "sw")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("upstream_host_key_mismatch", r.stderr)
        self.sg.wait_audit(reason="upstream_host_key_mismatch")
        self.assertNotIn(self.deploy_secret.splitlines()[1], open(self.sg.audit_path).read())

    def test_sigterm_ends_an_open_session_within_the_grace(self):
        # A serve of its own (this one is stopped), a short grace, a session held open.
        sg = self._serve(limits={"shutdown_grace": "2s"})
        self.addCleanup(sg.cleanup)
        sg.start()
        env = dict(self.env(), SG_PROXY_PORT=str(sg.proxy_port))
        p = subprocess.Popen(self.ssh_args() + ["git@git.test", "git-upload-pack 'org/repo.git'"],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            self.assertTrue(p.stdout.read(4), "no advertisement")
            start = time.monotonic()
            self.assertEqual(sg.stop(timeout=15), 0, sg.stderr())
            # The grace (2 s), then the session is ended (its thread within a poll), not left
            # to run on past the event loop.
            self.assertLess(time.monotonic() - start, 2 + 4, sg.stderr())
            p.wait(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            p.stdin.close()
            p.stdout.close()
            p.stderr.close()
        err = sg.stderr()
        self.assertNotIn("did not end", err)
        self.assertNotIn("Sanitizer", err)
        # The session's own audit line was written before serve exited: its coroutine ran
        # again after the thread ended (before the fix the loop stopped under it, no line).
        lines = [a for a in sg.audit() if a.get("host") == "git.test" and
                 (a.get("git") or {}).get("service") == "upload-pack"]
        self.assertEqual(len(lines), 1, sg.audit())
        # Not a reload's revocation: serve stopped (it said revoked_by_reload before).
        self.assertEqual(lines[0]["reason"], "server_stopping")

    def test_reload_that_drops_the_rule_ends_an_open_session(self):
        # A session is a tunnel under the reload rules of HTTP (README: a reload revokes what
        # it no longer allows, open tunnels too, after limits.revoke_grace): a session held
        # open when the rule for git.test goes is ended, and its line says so.
        sg = self._serve(limits={"revoke_grace": "0s"})
        self.addCleanup(sg.cleanup)
        sg.start()
        env = dict(self.env(), SG_PROXY_PORT=str(sg.proxy_port))
        p = subprocess.Popen(self.ssh_args() + ["git@git.test", "git-upload-pack 'org/repo.git'"],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            self.assertTrue(p.stdout.read(4), "no advertisement")
            cfg = json.loads(json.dumps(sg.config))
            cfg["policies"]["agent"]["allow"] = [
                r for r in cfg["policies"]["agent"]["allow"] if r["host"] != "git.test"]
            sg.write_config(cfg)
            start = time.monotonic()
            os.kill(sg.proc.pid, signal.SIGHUP)
            # The client sees its session end (EOF), well before any idle timeout.
            p.stdout.read()
            p.wait(timeout=15)
            self.assertLess(time.monotonic() - start, 10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            p.stdin.close()
            p.stdout.close()
            p.stderr.close()
        line = sg.wait_audit(host="git.test", reason="revoked_by_reload")
        self.assertEqual((line.get("git") or {}).get("service"), "upload-pack", line)
        # And a new session is refused by the policy now in force.
        r = run(self.ssh_args() + ["git@git.test", "git-upload-pack 'org/repo.git'"],
                env=env, stdin=subprocess.DEVNULL)
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn(self.deploy_secret.splitlines()[1], open(sg.audit_path).read())

    def ssh_metric(self, name, **labels):
        return self.sg.metric(name, task="t1", **labels) or 0.0

    def test_ssh_metrics_through_the_endpoint(self):
        from sandgate_fixture import wait_until
        started = self.ssh_metric("sandgate_ssh_sessions_total")
        down = self.ssh_metric("sandgate_ssh_bytes_total", direction="down")
        up = self.ssh_metric("sandgate_ssh_bytes_total", direction="up")
        refused = self.ssh_metric("sandgate_ssh_refusals_total", reason="ssh_command_refused")
        mismatches = self.ssh_metric("sandgate_ssh_upstream_host_key_mismatches_total")
        # A session held open (upload-pack waits for the client's wants): the gauge is 1.
        p = subprocess.Popen(self.ssh_args() + ["git@git.test", "git-upload-pack 'org/repo.git'"],
                             env=self.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            self.assertTrue(p.stdout.read(4), "no advertisement")
            self.assertEqual(self.ssh_metric("sandgate_ssh_sessions_active"), 1)
            self.assertEqual(self.ssh_metric("sandgate_ssh_sessions_total"), started + 1)
            p.stdin.write(b"0000")
            p.stdin.close()
            p.wait(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            p.stdout.close()
            p.stderr.close()
        wait_until(lambda: self.ssh_metric("sandgate_ssh_sessions_active") == 0,
                   what="the active gauge back at 0")
        wait_until(lambda: self.ssh_metric("sandgate_ssh_bytes_total", direction="down") > down,
                   what="bytes down counted")
        self.assertGreater(self.ssh_metric("sandgate_ssh_bytes_total", direction="up"), up)
        # A refused command, and a wrong pin: counted by their reason tokens.
        run(self.ssh_args() + ["git@git.test", "id"], env=self.env(), stdin=subprocess.DEVNULL)
        wait_until(lambda: self.ssh_metric("sandgate_ssh_refusals_total",
                                           reason="ssh_command_refused") == refused + 1,
                   what="ssh_command_refused counted")
        self.git(["clone", "-q", "git@wrong.test:org/repo.git", os.path.join(self.dir, "sm")])
        wait_until(lambda: self.ssh_metric("sandgate_ssh_upstream_host_key_mismatches_total") ==
                   mismatches + 1, what="the mismatch counted")
        self.assertGreaterEqual(self.ssh_metric("sandgate_ssh_refusals_total",
                                                reason="upstream_host_key_mismatch"), 1)
        # Label values are tokens: no host, repository or user in any sandgate_ssh_ series.
        for line in self.sg.metrics().splitlines():
            if line.startswith("sandgate_ssh_"):
                for word in ("git.test", "wrong.test", "org/repo", self.user, "127.0.0.1"):
                    self.assertNotIn(word, line)


if __name__ == "__main__":
    unittest.main()
