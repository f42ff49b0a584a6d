"""git over SSH inside `sandgate run` with no key in the sandbox (issue 42, "done when"): plain
`git clone git@git.test:org/repo.git`, a commit, `git push` to an allowed branch lands, a push
to a protected branch prints sandgate's reason through git and changes nothing, and the deploy
key is in no file the workload can read nor in anything the run printed or left.

The sshd, its git user (uid/gid 61044, shell git-shell) and the bare repositories are
test_ssh_broker.py's set-up (tests/integration), on loopback; git.test reaches it only through
the run's proxy (`resolve:`), whose SSH broker logs in with the deploy key.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

import artifacts  # noqa: E402
import test_ssh_broker as core  # noqa: E402
from run_support import namespaces_refused, run_bounded  # noqa: E402
from sandgate_fixture import binary  # noqa: E402

SCRIPT = r"""
set -u
git config --global user.name agent; git config --global user.email agent@example.com
git clone -q git@git.test:org/repo.git repo 2>&1; echo "clone rc=$?"
cat repo/README
echo ==
cd repo && echo change > change.txt && git add change.txt && git commit -qm change
git push origin HEAD:refs/heads/agent/one 2>&1; echo "push-agent rc=$?"
echo ==
git push origin HEAD:main 2>&1; echo "push-main rc=$?"
echo ==
git rev-parse HEAD
echo ==
grep -rl "OPENSSH PRIV.TE KEY" /run /tmp /etc /dev/shm /proc/self/environ "$HOME" 2>/dev/null; echo end
"""


@unittest.skipUnless(os.geteuid() == 0 and os.path.exists(core.SSHD),
                     "needs root (a git user for the sshd) and sshd (openssh-server)")
class RunSshGitTest(unittest.TestCase):
    user = "sgssh44"  # not the integration modules' users: CTest may run them at once
    uid = 61044

    @classmethod
    def setUpClass(cls):
        try:
            core.SshBroker._set_up_sshd.__func__(cls)
            d = cls.dir
            with open(os.path.join(d, "run_pins"), "w") as f:
                f.write(f"git.test {cls.sshd_pub}\n")
            cls.config = os.path.join(d, "sandgate.yaml")
            cfg = {
                "credentials": {"deploy": {
                    "source": {"file": os.path.join(d, "deploy_key")}, "hosts": ["git.test"],
                    "ssh": {"user": cls.user, "known_hosts": os.path.join(d, "run_pins")}}},
                "policies": {"agent": {"allow": [
                    {"host": "git.test", "ports": [22], "cidrs": ["127.0.0.0/8"],
                     "credential": "deploy",
                     "git": {"repositories": ["org/repo"],
                             "push": {"refs": ["refs/heads/agent/*"]}}}]}},
                "tasks": [{"name": "agent", "policy": "agent"}],
                "resolve": {"git.test": f"127.0.0.1:{cls.sshd_port}"},
            }
            with open(cls.config, "w") as f:
                json.dump(cfg, f)
            os.chmod(cls.config, 0o644)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        core.SshBroker.tearDownClass.__func__(cls)

    _create_user = core.SshBroker.__dict__["_create_user"]
    gid = core.SshBroker.__dict__["gid"]
    _start_sshd = core.SshBroker.__dict__["_start_sshd"]
    bare_rev = core.SshBroker.bare_rev

    def test_clone_commit_push_and_a_protected_branch(self):
        ws = os.path.join(self.dir, "ws")
        os.makedirs(ws)
        run_dir = os.path.join(self.dir, "run")
        main_before = self.bare_rev("refs/heads/main")
        r = run_bounded([binary(), "run", "--config", self.config, "--workspace", ws,
                         "--run-dir", run_dir, "--", "sh", "-c", SCRIPT], 180)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses namespaces: " + r.stderr.strip())
        self.assertEqual(r.returncode, 0, r.stderr)
        parts = r.stdout.split("==\n")
        self.assertEqual(len(parts), 5, r.stdout)
        clone, agent, main, head, leak = parts
        self.assertIn("clone rc=0", clone)
        self.assertIn("hello over ssh", clone)
        self.assertIn("push-agent rc=0", agent)
        self.assertEqual(self.bare_rev("refs/heads/agent/one"), head.strip())
        # git prints sandgate's reason, and main is what it was.
        self.assertIn("git_ref_not_allowed", main)
        self.assertNotIn("push-main rc=0", main)
        self.assertEqual(self.bare_rev("refs/heads/main"), main_before)
        self.assertEqual(leak.strip(), "end", leak)
        # The key is nowhere the run printed or left.
        body = self.deploy_secret.splitlines()[1]
        self.assertNotIn(body, r.stdout + r.stderr)
        for root, _, files in os.walk(run_dir):
            for name in files:
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        self.assertNotIn(body.encode(), f.read(), path)


if __name__ == "__main__":
    unittest.main()
