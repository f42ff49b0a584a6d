"""Git push policy inside `sandgate run`: a real git in the sandbox clones through sandgate (its
CA trusted through GIT_SSL_CAINFO, which the launcher sets), pushes to an allowed ref, and is
refused a push to main with the reason printed by `git push`; the forge's repository (a loopback
fake over TLS, tests/support/git_server.py) keeps its main. Runs as root (or where unprivileged
user namespaces are allowed)."""

import json
import os
import shutil
import tempfile
import unittest

import artifacts
import git_server
from pki import test_pki
from run_support import namespaces_refused, run_bounded
from sandgate_fixture import binary

SECRET = "ghp-rungitsecret-0123456789abcdef"
REPO = "acme/widgets.git"

SCRIPT = r"""
set -e
export HOME=/tmp/home GIT_TERMINAL_PROMPT=0 GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a \
  GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a
mkdir -p $HOME && cd $HOME
git clone -q https://git:standin@git.test/acme/widgets.git w
cd w
echo change > f && git add f && git commit -q -m change
git rev-parse HEAD > /tmp/home/head
git push -q origin HEAD:refs/heads/agent/run
if git push origin HEAD:main 2> /tmp/home/err; then echo "main push accepted"; exit 3; fi
cat /tmp/home/err
echo HEAD=$(cat /tmp/home/head)
"""


@unittest.skipUnless(git_server.available(), "git or git-http-backend is not installed")
class RunGitPushTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.forge = git_server.GitHttpsServer(cls.pki, auth=("git", SECRET), repos=(REPO,))
        artifacts.register_secret("run-git", SECRET)
        cls.dir = tempfile.mkdtemp(prefix="sandgate-rungit-")
        os.chmod(cls.dir, 0o755)
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)  # the command runs as an unprivileged uid
        key = os.path.join(cls.dir, "git.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(SECRET + "\n")
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        cls.audit = os.path.join(cls.dir, "audit.log")
        cfg = {
            "ca_cert_out": os.path.join(cls.dir, "sandgate-ca.pem"),
            "tls": {"upstream_ca": cls.pki.ca_cert},
            "credentials": {"git": {"source": {"file": key}, "hosts": ["git.test"],
                                    "inject": {"basic": {"username": "git"}}}},
            "policies": {"agent": {"allow": [{
                "host": "git.test", "cidrs": ["127.0.0.0/8"], "credential": "git",
                "git": {"repositories": ["acme/widgets"],
                        "push": {"refs": ["refs/heads/agent/*"]}}}]}},
            "tasks": [{"name": "agent", "policy": "agent"}],
            "resolve": {"git.test": "127.0.0.1:%d" % cls.forge.port},
            "audit": {"path": cls.audit},
        }
        with open(cls.config, "w") as f:
            json.dump(cfg, f)

    @classmethod
    def tearDownClass(cls):
        artifacts.record_file("audit", "run-git-audit.log", cls.audit)
        cls.forge.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_git_inside_the_sandbox_pushes_to_agent_refs_only(self):
        before = self.forge.state(REPO)[0]["refs/heads/main"]
        r = run_bounded([binary(), "run", "--config", self.config, "--workspace", self.workspace,
                         "--task", "agent", "--", "sh", "-c", SCRIPT], 120)
        artifacts.record("run", "git-stdout", r.stdout)
        artifacts.record("log", "git-run-stderr", r.stderr)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses namespaces: " + r.stderr.strip())
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("[remote rejected] HEAD -> main (sandgate: git_ref_not_allowed", r.stdout)
        head = r.stdout.split("HEAD=")[-1].strip()
        refs, objects = self.forge.state(REPO)
        self.assertEqual(refs.get("refs/heads/agent/run"), head)
        self.assertEqual(refs["refs/heads/main"], before, "main is where it was")
        with open(self.audit) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        refused = [rec for rec in lines if rec.get("reason") == "git_ref_not_allowed"]
        self.assertEqual(len(refused), 1)
        self.assertEqual(refused[0]["task"], "agent")
        self.assertEqual(refused[0]["git"]["refs"][0]["ref"], "refs/heads/main")


if __name__ == "__main__":
    unittest.main()
