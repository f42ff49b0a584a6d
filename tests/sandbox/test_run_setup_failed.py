"""A run that cannot start (#39): a config problem found only when the proxy opens the config's
secret sources (a missing secret file) is a config error, exit 2 as documented, not 125; and
whenever the run's directory has been made, it gets its report.json with "end": "setup_failed"
and the reason, whatever stage failed (the embedded proxy, a `--proxy` serve that cannot be
reached, a `--resume` that cannot be honoured), so that `runs` and `show` say why instead of
listing a directory with nothing to read. A usage error found before the directory is needed
(an audit.path inside the workspace) makes no directory at all. Runs as root (the workspace
overlay)."""

import json
import os
import tempfile
import unittest

from run_support import WorkspaceRuns, run_bounded
from sandgate_fixture import binary


class RunSetupFailedTest(WorkspaceRuns):
    PREFIX = "sandgate-setup-failed-"
    NOT_ROOT = "needs root (as CI runs): the workspace overlay"

    @classmethod
    def new_run_dir(cls):
        return os.path.join(tempfile.mkdtemp(dir=cls.dir, prefix="runs-"), "run")

    @classmethod
    def probe(cls):
        return cls.sandgate(["true"], workspace=cls.new_workspace(), run_dir=cls.new_run_dir())

    def config(self, doc):
        fd, path = tempfile.mkstemp(dir=self.dir, prefix="config-", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        return path

    def report(self, run):
        path = os.path.join(run, "report.json")
        self.assertTrue(os.path.exists(path), "no report.json in %s: %s" % (run, os.listdir(run)))
        with open(path) as f:
            return json.load(f)

    def listed(self, run):
        return run_bounded([binary(), "runs"], 60,
                           env=dict(os.environ, SANDGATE_RUNS_DIR=os.path.dirname(run))).stdout

    def test_a_missing_secret_file_is_a_config_error_with_a_report(self):
        ws = self.new_workspace()
        secret = os.path.join(self.dir, "no-such-secret")
        config = self.config({
            "credentials": {"c": {"source": {"file": secret}, "hosts": ["api.test"],
                                  "inject": {"header": "Authorization"}}},
            "policies": {"p": {"allow": [{"host": "api.test", "credential": "c"}]}},
            "tasks": [{"name": "t", "policy": "p"}]})
        # What lint says of it, then what run does: lint without --check-sources says it did
        # not look, with it names the file.
        lint = run_bounded([binary(), "policy", "lint", config], 60)
        self.assertEqual(lint.returncode, 0, lint.stderr)
        self.assertIn("--check-sources", lint.stdout)
        checked = run_bounded([binary(), "policy", "lint", "--check-sources", config], 60)
        self.assertEqual(checked.returncode, 1, checked.stdout + checked.stderr)
        self.assertIn(secret, checked.stderr)
        run = self.new_run_dir()
        marker = os.path.join(ws, "ran")
        r = self.sandgate(["touch", marker], "--config", config, workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(secret, r.stderr)
        self.assertFalse(os.path.exists(marker))
        report = self.report(run)
        self.assertEqual(report["end"], "setup_failed")
        self.assertEqual(report["exit_status"], 2)
        self.assertIn(secret, report["error"])
        # The sandbox never ran: no changes to read, and no warning that they could not be.
        self.assertIsNone(report["changes"])
        self.assertEqual(report["warnings"], [])
        self.assertIn("setup failed", self.listed(run))

    def test_a_serve_that_cannot_be_reached_leaves_a_report(self):
        ws = self.new_workspace()
        run = self.new_run_dir()
        socket = os.path.join(self.dir, "no-serve.sock")
        r = self.sandgate(["true"], "--proxy", "unix:" + socket, "--task", "t", workspace=ws,
                          run_dir=run)
        self.assertEqual(r.returncode, 125, r.stderr)
        report = self.report(run)
        self.assertEqual(report["end"], "setup_failed")
        self.assertEqual(report["exit_status"], 125)
        self.assertEqual(report["task"], "t")
        self.assertIn(socket, report["error"])
        self.assertIn("setup failed", self.listed(run))

    def test_a_resume_that_cannot_be_honoured_leaves_a_report(self):
        ws = self.new_workspace()
        run = self.new_run_dir()
        r = self.sandgate(["true"], "--resume", os.path.join(self.dir, "no-such-run"),
                          workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 2, r.stderr)
        report = self.report(run)
        self.assertEqual(report["end"], "setup_failed")
        self.assertEqual(report["exit_status"], 2)
        self.assertIn("no-such-run", report["error"])
        shown = run_bounded([binary(), "show", run], 60)
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertIn("setup_failed", shown.stdout)

    def test_an_audit_path_in_the_workspace_makes_no_run_directory(self):
        ws = self.new_workspace()
        run = self.new_run_dir()
        config = self.config({"audit": {"path": os.path.join(ws, "audit.log")},
                              "policies": {"p": {}}, "tasks": [{"name": "t", "policy": "p"}]})
        r = self.sandgate(["true"], "--config", config, workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("inside the workspace", r.stderr)
        self.assertFalse(os.path.exists(run), os.listdir(run) if os.path.exists(run) else "")


if __name__ == "__main__":
    unittest.main()
