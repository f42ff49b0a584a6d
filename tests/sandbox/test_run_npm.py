"""`cd repo && sandgate run -- npm install` as root in a root-owned repository: the case that
failed with EACCES on the workspace before the overlay. npm (Debian's, installed by
scripts/deps.sh) fetches from a registry stand-in on loopback (tests/support/npm_registry.py)
through the embedded proxy, the install lands in the run's upper layer, the host's repository
is untouched, and `git apply` of changes.patch on a pristine copy reproduces the tree the run
left, node_modules and the binary file in it included; `sandgate apply` makes the same tree."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import artifacts
from npm_registry import NpmRegistry
from run_support import namespaces_refused, run_bounded
from sandgate_fixture import binary
from test_run_lifecycle import tree_state

BLOB = bytes(range(256)) * 4


class RunNpmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the case under test is a root launcher in a root-owned repo")
        if shutil.which("npm") is None:
            raise unittest.SkipTest("npm is not installed (scripts/deps.sh installs nodejs/npm)")
        cls.dir = tempfile.mkdtemp(prefix="sandgate-npm-")
        os.chmod(cls.dir, 0o755)
        cls.registry = NpmRegistry("registry.test")
        cls.registry.publish("sg-right", "2.0.1", {"index.js": b"module.exports = 'right';\n"})
        cls.registry.publish("sg-left", "1.0.0",
                             {"index.js": b"module.exports = require('sg-right');\n",
                              "data.bin": BLOB}, {"sg-right": "^2.0.0"})
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        with open(cls.config, "w") as f:
            json.dump({"policies": {"npm": {"allow": [
                {"host": "registry.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}]}},
                "tasks": [{"name": "default", "policy": "npm"}],
                "resolve": {"registry.test": "127.0.0.1:%d" % cls.registry.port}}, f)

    @classmethod
    def tearDownClass(cls):
        cls.registry.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_npm_install_in_a_root_owned_repo_then_git_apply(self):
        ws = tempfile.mkdtemp(dir=self.dir, prefix="repo-")
        os.chmod(ws, 0o755)  # root's, as a checkout made by root is
        with open(os.path.join(ws, "package.json"), "w") as f:
            json.dump({"name": "app", "version": "1.0.0", "private": True,
                       "dependencies": {"sg-left": "1.0.0"}}, f, indent=2)
        before = tree_state(ws)
        run = os.path.join(tempfile.mkdtemp(dir=self.dir, prefix="runs-"), "run")
        r = run_bounded([binary(), "run", "--config", self.config, "--workspace", ws,
                         "--run-dir", run, "--", "npm", "install", "--registry",
                         "http://registry.test/", "--no-audit", "--no-fund", "--ignore-scripts",
                         "--no-update-notifier"], 120)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses namespaces: " + r.stderr.strip())
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("added 2 packages", r.stdout)
        self.assertNotIn("EACCES", r.stdout + r.stderr)
        self.assertEqual(tree_state(ws), before, "npm install wrote the host's repository")
        # Every fetch went to the stand-in, through sandgate.
        for path in ("/sg-left", "/sg-right", "/sg-left/-/sg-left-1.0.0.tgz",
                     "/sg-right/-/sg-right-2.0.1.tgz"):
            self.assertIn(path, self.registry.requests)
        with open(os.path.join(run, "changes.json")) as f:
            changes = {c["path"]: c for c in json.load(f)["changes"]}
        for p in ("package-lock.json", "node_modules/.package-lock.json",
                  "node_modules/sg-left/index.js", "node_modules/sg-left/data.bin",
                  "node_modules/sg-right/package.json"):
            self.assertEqual(changes[p]["kind"], "added", p)
        # The tree the run left: the repository with the upper layer on it (nothing deleted).
        left = dict(before)
        left.update(tree_state(os.path.join(run, "overlay", "upper")))
        with open(os.path.join(run, "changes.patch")) as f:
            patch = f.read()
        self.assertIn("GIT binary patch", patch)  # data.bin
        copy = os.path.join(tempfile.mkdtemp(dir=self.dir, prefix="pristine-"), "repo")
        shutil.copytree(ws, copy, symlinks=True)
        g = subprocess.run(["git", "apply", "--whitespace=nowarn",
                            os.path.join(run, "changes.patch")],
                           cwd=copy, capture_output=True, text=True, timeout=60)
        self.assertEqual(g.returncode, 0, g.stderr)
        # git keeps only the executable bit: compare types and contents.
        strip = lambda t: {k: (v[0], v[2]) for k, v in t.items() if v[0] != "dir"}
        self.assertEqual(strip(tree_state(copy)), strip(left))
        with open(os.path.join(copy, "node_modules", "sg-left", "data.bin"), "rb") as f:
            self.assertEqual(f.read(), BLOB)
        a = run_bounded([binary(), "apply", run], 60)
        self.assertEqual(a.returncode, 0, a.stdout + a.stderr)
        self.assertEqual(strip(tree_state(ws)), strip(left))
        node = subprocess.run(["node", "-e", "console.log(require('sg-left'))"], cwd=ws,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(node.stdout, "right\n", node.stderr)


if __name__ == "__main__":
    unittest.main()
