"""`policy learn --merge` on the audit of real git traffic, and the merged config served.

A clone and a push to refs/heads/agent/one go through `sandgate serve` (intercepted TLS, the
credential injected) to the loopback forge (tests/support/git_server.py). The audit is learned
with --merge into a config that has the credential but no rule for the forge: the proposal
must lint, pass its own cases (a git_push case for the ref), and, served, let git clone and
push that ref again while refusing a ref never pushed.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import git_server
from clients import clean_env
from pki import test_pki
from sandgate_fixture import Sandgate, binary

TOKEN = "l3arn"
GIT_SECRET = "ghp-learnsecret-0123456789abcdef"
WIDGETS = "acme/widgets.git"


def sandgate(*args):
    return subprocess.run([binary(), *args], capture_output=True, text=True, timeout=60)


@unittest.skipUnless(git_server.available(), "git or git-http-backend is not installed")
class PolicyLearnGitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.forge = git_server.GitHttpsServer(cls.pki, auth=("git", GIT_SECRET),
                                              repos=(WIDGETS,))
        cls.sg = Sandgate({}, [])
        d = cls.sg.dir
        key = os.path.join(d, "git.key")
        with open(key, "w") as f:
            f.write(GIT_SECRET + "\n")
        cls.ca_out = os.path.join(d, "sandgate-ca.pem")
        rule = {"host": "git.test", "cidrs": ["127.0.0.0/8"], "credential": "git",
                "git": {"repositories": ["acme/*"], "push": {"refs": ["refs/heads/**"]}}}
        creds = {"git": {"source": {"file": key}, "hosts": ["git.test"],
                         "inject": {"basic": {"username": "git"}}}}
        cls.extra = {"credentials": creds, "ca_cert_out": cls.ca_out,
                     "tls": {"upstream_ca": cls.pki.ca_cert}}
        cls.resolve = {"git.test": "127.0.0.1:%d" % cls.forge.port}
        cls.sg.config = cls.sg.make_config({"agent": {"allow": [rule]}},
                                           [{"name": "demo", "policy": "agent", "token": TOKEN}],
                                           resolve=cls.resolve, extra=cls.extra)
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.home = tempfile.mkdtemp(prefix="sandgate-learn-git-")
        cls.env = clean_env(HTTPS_PROXY=cls.sg.proxy_url("demo", TOKEN),
                            GIT_SSL_CAINFO=cls.ca_out, GIT_TERMINAL_PROMPT="0", HOME=cls.home,
                            GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="a",
                            GIT_AUTHOR_EMAIL="a@a", GIT_COMMITTER_NAME="a",
                            GIT_COMMITTER_EMAIL="a@a")
        cls.work = os.path.join(cls.home, "clone")
        cls.git("clone", "-q", "https://git:standin@git.test/" + WIDGETS, cls.work)
        cls.commit("one")
        cls.git("push", "origin", "HEAD:refs/heads/agent/one", cwd=cls.work)
        cls.sg.stop()
        cls.audit = os.path.join(cls.home, "audit.jsonl")
        shutil.copy(cls.sg.audit_path, cls.audit)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.forge.close()
        shutil.rmtree(cls.home, ignore_errors=True)

    @classmethod
    def git(cls, *args, cwd=None, check=True):
        p = subprocess.run(["git", *args], cwd=cwd, env=cls.env, capture_output=True,
                           timeout=60)
        if check and p.returncode != 0:
            raise AssertionError("git %s: %s" % (args, p.stderr.decode()))
        return p

    @classmethod
    def commit(cls, name):
        with open(os.path.join(cls.work, name), "w") as f:
            f.write(name + "\n")
        cls.git("add", name, cwd=cls.work)
        cls.git("commit", "-q", "-m", name, cwd=cls.work)

    def test_the_merged_proposal_lints_passes_its_cases_and_serves_git(self):
        # The same config without the forge's rule: everything git did is a proposal.
        base = self.sg.make_config({"agent": {"allow": []}},
                                   [{"name": "demo", "policy": "agent", "token": TOKEN}],
                                   resolve=self.resolve, extra=self.extra)
        base_path = os.path.join(self.sg.dir, "base.yaml")
        with open(base_path, "w") as f:
            json.dump(base, f, indent=1)
        tests = os.path.join(self.sg.dir, "learned.tests.yaml")
        p = sandgate("policy", "learn", self.audit, "--merge", base_path, "--tests", tests)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("PLACEHOLDER", p.stdout, "the credential is the existing one")
        self.assertIn("refs/heads/agent/one", p.stdout)
        merged = os.path.join(self.sg.dir, "merged.yaml")
        with open(merged, "w") as f:
            f.write(p.stdout)
        lint = sandgate("policy", "lint", merged)
        self.assertEqual(lint.returncode, 0, lint.stderr + p.stdout)
        run = sandgate("policy", "test", "--config", merged, tests)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        with open(tests) as f:
            self.assertIn('git_push: "refs/heads/agent/one"', f.read())
        other = sandgate("policy", "check", "--config", merged, "--task", "demo", "--git-push",
                         "refs/heads/main", "https://git.test/" + WIDGETS)
        self.assertEqual(other.returncode, 1, other.stdout)
        self.assertIn("git_ref_not_allowed", other.stdout)

        # Served: git clones and pushes the learned ref again; another ref is refused.
        os.unlink(self.sg.ready_path)
        self.sg.write_config(None, text=p.stdout)
        self.sg.start()
        type(self).env["HTTPS_PROXY"] = self.sg.proxy_url("demo", TOKEN)  # a new port
        try:
            clone2 = os.path.join(self.home, "clone2")
            self.git("clone", "-q", "https://git:standin@git.test/" + WIDGETS, clone2)
            self.commit("two")
            self.git("push", "origin", "HEAD:refs/heads/agent/one", cwd=self.work)
            refused = self.git("push", "origin", "HEAD:refs/heads/main", cwd=self.work,
                               check=False)
            self.assertNotEqual(refused.returncode, 0)
            self.assertIn("git_ref_not_allowed", refused.stderr.decode())
        finally:
            self.sg.stop()


if __name__ == "__main__":
    unittest.main()
