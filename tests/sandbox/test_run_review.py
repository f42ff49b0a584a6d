"""Reviewing a run (#39): what `sandgate run` prints at its end works when copied as printed,
`apply --paths` creates the directories what it applies needs (never through a link) and
`--check` runs the very plan apply carries out, `runs` lists one line per run. Runs as root (the
workspace overlay)."""

import json
import os
import shlex
import tempfile
import unittest

from run_support import WorkspaceRuns, run_bounded
from sandgate_fixture import binary


class RunReviewTest(WorkspaceRuns):
    PREFIX = "sandgate-review-"
    NOT_ROOT = "needs root (as CI runs): the workspace overlay"

    def run_dir(self):
        return os.path.join(tempfile.mkdtemp(dir=self.dir, prefix="runs-"), "run")

    def cli(self, *args, **kwargs):
        return run_bounded([binary(), *args], 60, **kwargs)

    def printed_commands(self, stderr):
        """The `sandgate ...` commands the run's last lines name, split as a shell would."""
        line = [l for l in stderr.splitlines() if "review with" in l]
        self.assertEqual(len(line), 1, stderr)
        cmds = [part.split("`")[0] for part in line[0].split("`sandgate ")[1:]]
        return [shlex.split(c) for c in cmds]

    def test_apply_paths_creates_the_parents_it_needs_and_check_agrees(self):
        ws = self.new_workspace()
        os.mkdir(os.path.join(ws, "docs"))
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", "mkdir -p src/lib && echo new > src/lib/a.c && "
                           "echo doc > docs/d.txt"], workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        # 'src/**' matches src/lib and src/lib/a.c, never src itself: src is made as their
        # directory. docs/d.txt is not asked for.
        check = self.cli("apply", "--check", "--paths", "src/**", run)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertFalse(os.path.exists(os.path.join(ws, "src")))
        a = self.cli("apply", "--paths", "src/**", run)
        self.assertEqual(a.returncode, 0, a.stdout + a.stderr)
        with open(os.path.join(ws, "src/lib/a.c")) as f:
            self.assertEqual(f.read(), "new\n")
        self.assertFalse(os.path.exists(os.path.join(ws, "docs/d.txt")))
        # --check said exactly what apply did, line for line.
        would = [l[len("would: "):] for l in check.stdout.splitlines() if l.startswith("would: ")]
        did = [l for l in a.stdout.splitlines() if not l.startswith(("applied ", "skipped "))]
        self.assertEqual(would, did)
        self.assertIn("created src (the directory of what is applied)", did)

    def test_apply_never_creates_a_parent_through_a_link(self):
        ws = self.new_workspace()
        outside = tempfile.mkdtemp(dir=self.dir, prefix="outside-")
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", "mkdir -p src/lib && echo new > src/lib/a.c"],
                          workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        # Meanwhile, on the host, src became a link out of the workspace.
        os.symlink(outside, os.path.join(ws, "src"))
        check = self.cli("apply", "--check", "--paths", "src/**", run)
        a = self.cli("apply", "--paths", "src/**", run)
        self.assertEqual(check.returncode, 1, check.stdout + check.stderr)
        self.assertEqual(a.returncode, 1, a.stdout + a.stderr)
        self.assertEqual(os.listdir(outside), [])

    def test_printed_review_commands_work_with_a_run_dir(self):
        ws = self.new_workspace()
        base = tempfile.mkdtemp(dir=self.dir, prefix="cwd-")
        # A relative --run-dir, the run started in another directory than the review.
        r = self.sandgate(["sh", "-c", "echo x > f.txt"], workspace=ws, run_dir="my run",
                          cwd=base)
        self.assertEqual(r.returncode, 0, r.stderr)
        cmds = self.printed_commands(r.stderr)
        self.assertEqual([c[0] for c in cmds], ["show", "diff", "apply", "discard"], cmds)
        elsewhere = tempfile.mkdtemp(dir=self.dir, prefix="elsewhere-")
        for c in cmds[:3]:
            p = self.cli(*c, cwd=elsewhere)
            self.assertEqual(p.returncode, 0, (c, p.stdout, p.stderr))
        with open(os.path.join(ws, "f.txt")) as f:
            self.assertEqual(f.read(), "x\n")
        d = self.cli(*cmds[3], cwd=elsewhere)
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertFalse(os.path.exists(os.path.join(base, "my run")))

    def test_printed_review_commands_work_in_the_default_directory(self):
        ws = self.new_workspace()
        r = self.sandgate(["sh", "-c", "echo x > f.txt"], workspace=ws)
        self.assertEqual(r.returncode, 0, r.stderr)
        cmds = self.printed_commands(r.stderr)
        for c in cmds[:2]:
            p = self.cli(*c)
            self.assertEqual(p.returncode, 0, (c, p.stdout, p.stderr))
        self.assertEqual(self.cli(*cmds[3]).returncode, 0)

    def runs_row(self, run_id):
        listing = self.cli("runs")
        self.assertEqual(listing.returncode, 0, listing.stderr)
        rows = [l for l in listing.stdout.splitlines() if l.startswith(run_id + " ")]
        self.assertEqual(len(rows), 1, listing.stdout)
        return rows[0]

    def test_runs_prints_a_command_on_one_escaped_line(self):
        ws = self.new_workspace()
        run = self.run_dir()
        # A newline and an ESC in the command, and more than a line of it.
        r = self.sandgate(["sh", "-c", "true\n: \x1b[2Jforged line " + "x" * 200], workspace=ws,
                          run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        listing = self.cli("runs", env=dict(os.environ, SANDGATE_RUNS_DIR=os.path.dirname(run)))
        self.assertEqual(listing.returncode, 0, listing.stderr)
        lines = listing.stdout.splitlines()
        self.assertEqual(len(lines), 2, listing.stdout)  # the header and the run: one line
        self.assertNotIn("\x1b", listing.stdout)
        self.assertIn("\\n: \\033[2J", lines[1])
        self.assertTrue(lines[1].endswith("..."), lines[1])
        self.assertLess(len(lines[1]), 200)

    def test_runs_says_applied_and_discarded(self):
        base = os.environ["SANDGATE_RUNS_DIR"]
        ids = []
        for _ in range(3):
            ws = self.new_workspace()
            r = self.sandgate(["sh", "-c", "mkdir -p d && echo x > d/f && echo y > g"],
                              workspace=ws)
            self.assertEqual(r.returncode, 0, r.stderr)
            line = [l for l in r.stderr.splitlines() if "sandgate run: run " in l][-1]
            ids.append(line.split("sandgate run: run ")[1].split()[0])
        applied, part, discarded = ids
        self.assertEqual(self.cli("apply", applied).returncode, 0)
        self.assertEqual(self.cli("apply", "--paths", "g", part).returncode, 0)
        self.assertEqual(self.cli("apply", "--check", discarded).returncode, 0)  # not applied
        self.assertIn(" -  ", self.runs_row(discarded))
        self.assertEqual(self.cli("discard", discarded).returncode, 0)
        self.assertFalse(os.path.exists(os.path.join(base, discarded)))
        self.assertIn(" applied ", self.runs_row(applied))
        self.assertIn(" applied (paths) ", self.runs_row(part))
        gone = self.runs_row(discarded)
        self.assertIn(" discarded ", gone)
        self.assertIn("mkdir -p d", gone)

    def test_show_lists_each_denied_request_once(self):
        ws = self.new_workspace()
        run = self.run_dir()
        # The built-in policy denies both: a plain request and a CONNECT (nothing leaves).
        r = self.sandgate(["sh", "-c", "curl -s -o /dev/null -X POST 'http://denied.test/a/b?q=1'; "
                           "curl -s -o /dev/null https://denied.test/x; true"],
                          workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        shown = self.cli("show", run)
        self.assertEqual(shown.returncode, 0, shown.stderr)
        denied = [l for l in shown.stdout.splitlines() if l.startswith("denied ")]
        self.assertEqual(denied, [
            "denied     POST http://denied.test:80/a/b (forward) no_matching_rule",
            "denied     CONNECT denied.test:443 (tunnel) no_matching_rule"], shown.stdout)
        self.assertIn("network    2 requests: 0 allowed, 2 denied, 0 other", shown.stdout)

    def test_show_counts_an_intercepted_request_once(self):
        # A rule with `paths` intercepts: the CONNECT is the connection of the request inside
        # it, not a second (allowed) request next to the denied one.
        ws = self.new_workspace()
        config = os.path.join(self.dir, "intercept.yaml")
        with open(config, "w") as f:
            json.dump({"policies": {"p": {"allow": [{"host": "api.test", "paths": ["/ok"],
                                                     "cidrs": ["127.0.0.0/8"]}]}},
                       "tasks": [{"name": "t", "policy": "p"}],
                       "resolve": {"api.test": "127.0.0.1:9"}}, f)
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", "curl -s -o /dev/null -w '%{http_code}' "
                           "https://api.test/nope"], "--config", config,
                          workspace=ws, run_dir=run)
        self.assertEqual(r.stdout, "403", r.stderr)
        shown = self.cli("show", run)
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertIn("network    1 requests: 0 allowed, 1 denied, 0 other", shown.stdout)
        denied = [l for l in shown.stdout.splitlines() if l.startswith("denied ")]
        self.assertEqual(denied, [
            "denied     GET https://api.test:443/nope (intercept) path_not_allowed"])

    def test_a_run_whose_setup_failed_says_so(self):
        ws = self.new_workspace()
        config = os.path.join(self.dir, "missing-secret.yaml")
        with open(config, "w") as f:
            json.dump({"policies": {"p": {"allow": [{"host": "api.test",
                                                     "credential": "c"}]}},
                       "credentials": {"c": {"source": {"file": os.path.join(self.dir, "nope")},
                                             "hosts": ["api.test"],
                                             "inject": {"header": "Authorization"}}},
                       "tasks": [{"name": "t", "policy": "p"}]}, f)
        run = self.run_dir()
        r = self.sandgate(["true"], "--config", config, workspace=ws, run_dir=run)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(run, "report.json")) as f:
            report = json.load(f)
        self.assertEqual(report["end"], "setup_failed")
        self.assertIn("nope", report["error"])
        listing = self.cli("runs", env=dict(os.environ, SANDGATE_RUNS_DIR=os.path.dirname(run)))
        self.assertIn("setup failed", listing.stdout)
        shown = self.cli("show", run)
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertIn("setup_failed", shown.stdout)


if __name__ == "__main__":
    unittest.main()
