"""The smaller holes of issue 37 (item 9), each tried from inside a real `sandgate run` sandbox:

- the sandbox's PID 1 runs under the same seccomp filter as the command (it runs as the
  workload's uid in the workload's namespaces; unfiltered, a process that took it over would hold
  every call the command is refused);
- an `exec:` credential source's input file (an argument of its command) is out of the view like
  a `file:` source, and neither the secrets nor their directories are named in
  /proc/self/mountinfo (a mount over a secret names where it is: they are left out of the
  directory that holds them instead);
- a program run from a memfd (fexecve, /proc/self/fd/N) is logged in exec.jsonl with what ran
  (the descriptor's target) and flagged as a memfd, not only as an empty path;
- (item 10) a rootless run maps only the launcher's own uid and gid: in a workspace of its own
  group it works (test_run_lifecycle's rootless tests, with a user whose gid differs from its
  uid); in one of another group the run says why its edits fail (overlayfs cannot copy up a
  file whose group is unmapped: EOVERFLOW) instead of leaving "Value too large" unexplained.

Runs as root (the CI case); the rootless case as a user the test creates and removes."""

import json
import os
import shutil
import tempfile
import unittest

import artifacts
from run_support import TemporaryUser, namespaces_refused, run_bounded
from sandgate_fixture import binary

SECRET_FILE = "sk-smaller-file-5b0e7d1c93aa4f62"
SECRET_INPUT = "sk-smaller-exec-input-0c6f2e98d4b17a35"

# Runs /bin/true from a memfd twice: by fexecve (execveat of the descriptor, an empty path) and by
# execve of /proc/self/fd/N; each in a child, waited for.
MEMFD_EXEC = r"""
import os
with open("/bin/true", "rb") as f:
    code = f.read()
fd = os.memfd_create("payload", 0)
os.write(fd, code)
for how in ("fexecve", "procfd"):
    pid = os.fork()
    if pid == 0:
        try:
            if how == "fexecve":
                os.execve(fd, ["innocent-" + how], {})
            else:
                os.execve(f"/proc/self/fd/{fd}", ["innocent-" + how], {})
        finally:
            os._exit(127)
    _, status = os.waitpid(pid, 0)
    print(how, os.waitstatus_to_exitcode(status))
"""


class SmallerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (as CI runs)")
        cls.dir = tempfile.mkdtemp(prefix="sandgate-smaller-", dir="/var/tmp")
        os.chmod(cls.dir, 0o755)
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)
        probe = cls.sandgate(["true"])
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())
        assert probe.returncode == 0, probe.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def sandgate(cls, argv, *flags, run_dir=None, timeout=60, workspace=None, **kwargs):
        cmd = [binary(), "run", "--workspace", workspace or cls.workspace, "--no-transparent"]
        if run_dir:
            cmd += ["--run-dir", run_dir]
        r = run_bounded(cmd + list(flags) + ["--", *argv], timeout, **kwargs)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    # --- (a) PID 1 under the filter ----------------------------------------------------------

    def test_pid1_runs_under_the_seccomp_filter(self):
        self.check_pid1_filtered()

    def test_rootless_pid1_runs_under_the_seccomp_filter(self):
        with TemporaryUser() as user:
            ws = tempfile.mkdtemp(dir=self.dir, prefix="ws-")
            runs = tempfile.mkdtemp(dir=self.dir, prefix="runs-")
            for d in (ws, runs):
                os.chown(d, user.uid, user.gid)
            self.check_pid1_filtered(workspace=ws, run_dir=os.path.join(runs, "run"),
                                     **user.popen_args())

    def check_pid1_filtered(self, **kwargs):
        r = self.sandgate(["sh", "-c", "grep ^Seccomp: /proc/1/status /proc/self/status"],
                          **kwargs)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses unprivileged user namespaces: " + r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)
        modes = dict(line.split(":Seccomp:") for line in r.stdout.splitlines())
        self.assertEqual(modes["/proc/1/status"].strip(), "2", r.stdout)  # 2: a filter
        self.assertEqual(modes["/proc/self/status"].strip(), "2", r.stdout)

    def test_pid1_still_ends_the_run_and_passes_signals_under_the_filter(self):
        # PID 1's own work after the filter: reaping, kill(-1) on SIGTERM at the timeout.
        r = self.sandgate(["sh", "-c", "sleep 30 & sleep 30 & wait"], "--timeout", "1s")
        self.assertEqual(r.returncode, 124, r.stderr)
        self.assertNotIn("sending SIGKILL", r.stderr)  # the TERM was passed on and obeyed

    # --- (b) secrets out of the view and out of the mount table -----------------------------

    def test_exec_input_and_secret_directories_are_out_of_the_view_and_mountinfo(self):
        shared = tempfile.mkdtemp(dir=self.dir, prefix="shared-")
        for d in ("keys", "helper-input", "tools"):
            os.makedirs(os.path.join(shared, d))
        files = {"keys/token": SECRET_FILE, "helper-input/refresh.txt": SECRET_INPUT,
                 "tools/readme.txt": "VISIBLE-TOOL"}
        for rel, text in files.items():
            with open(os.path.join(shared, rel), "w") as f:
                f.write(text)
        for root, dirs, names in os.walk(shared):
            for n in dirs + names:
                os.chmod(os.path.join(root, n), 0o755)
        os.chmod(shared, 0o755)
        artifacts.register_secret("smaller-file", SECRET_FILE)
        artifacts.register_secret("smaller-input", SECRET_INPUT)
        config = os.path.join(self.dir, "secrets.yaml")
        with open(config, "w") as f:
            json.dump({
                "policies": {"p": {"allow": []}},
                "credentials": {
                    "file": {"source": {"file": os.path.join(shared, "keys", "token")},
                             "hosts": ["x.test"],
                             "inject": {"header": "X-Key", "value": "{secret}"}},
                    "helper": {"source": {"exec": ["/bin/cat", os.path.join(
                        shared, "helper-input", "refresh.txt")]},
                        "hosts": ["y.test"],
                        "inject": {"header": "X-Key", "value": "{secret}"}}},
                "tasks": [{"name": "t", "policy": "p"}]}, f)
        script = (f"cat {shared}/tools/readme.txt; echo; "
                  f"cat {shared}/helper-input/refresh.txt {shared}/keys/token 2>&1; echo ==; "
                  f"ls -A {shared}; echo ==; "
                  f"grep -c -e {shared}/helper-input -e {shared}/keys /proc/self/mountinfo; "
                  f"true")
        r = self.sandgate(["sh", "-c", script], "--config", config, "--ro", shared)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("VISIBLE-TOOL", r.stdout)  # the shown directory still shows the rest
        self.assertNotIn(SECRET_INPUT, r.stdout)  # unfixed: the exec input was readable
        self.assertNotIn(SECRET_FILE, r.stdout)
        reads, listing, mounts = r.stdout.split("==\n")
        self.assertEqual(listing.split(), ["tools"])
        # Unfixed: the hiding tmpfs's mount point named keys (and nothing hid helper-input).
        self.assertEqual(mounts.strip(), "0")
        self.assertIn("No such file or directory", reads)

    # --- (c) a memfd exec is logged as one ---------------------------------------------------

    def test_memfd_exec_is_logged_with_what_ran(self):
        run = os.path.join(tempfile.mkdtemp(dir=self.dir, prefix="runs-"), "run")
        r = self.sandgate(["python3", "-c", MEMFD_EXEC], run_dir=run)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "fexecve 0\nprocfd 0\n")
        with open(os.path.join(run, "exec.jsonl")) as f:
            execs = [json.loads(line) for line in f]
        by_argv0 = {e["argv"][0]: e for e in execs if e["argv"]}
        for how in ("fexecve", "procfd"):
            e = by_argv0["innocent-" + how]
            self.assertTrue(e["memfd"], e)
            self.assertTrue(e["target"].startswith("/memfd:payload"), e)
        self.assertEqual(by_argv0["innocent-fexecve"]["path"], "")  # as passed
        self.assertEqual(by_argv0["innocent-fexecve"]["call"], "execveat")
        # An ordinary exec says nothing more than its path.
        python = [e for e in execs if e["argv"][:1] == ["python3"]][0]
        self.assertFalse(python["memfd"])
        self.assertIsNone(python["target"])

    # --- item 10: a rootless run and the workspace's group ------------------------------------

    def test_rootless_workspace_of_another_group_is_explained(self):
        with TemporaryUser() as user:
            self.assertNotEqual(user.uid, user.gid)
            runs = tempfile.mkdtemp(dir=self.dir, prefix="runs-")
            os.chown(runs, user.uid, user.gid)
            mine = tempfile.mkdtemp(dir=self.dir, prefix="ws-mine-")
            other = tempfile.mkdtemp(dir=self.dir, prefix="ws-other-")
            for ws, group in ((mine, user.gid), (other, 0)):  # 0: a group the user is not in
                with open(os.path.join(ws, "f.txt"), "w") as f:
                    f.write("old\n")
                for p in (ws, os.path.join(ws, "f.txt")):
                    os.chown(p, user.uid, group)
                    os.chmod(p, 0o755 if p == ws else 0o644)
            edit = ["sh", "-c", "echo new >> f.txt && echo edited"]
            r = self.sandgate(edit, workspace=mine, run_dir=os.path.join(runs, "mine"),
                              **user.popen_args())
            if r.returncode == 125 and namespaces_refused(r.stderr):
                self.skipTest("this host refuses unprivileged user namespaces: " + r.stderr)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, "edited\n")
            self.assertNotIn("belongs to group", r.stderr)
            r = self.sandgate(edit, workspace=other, run_dir=os.path.join(runs, "other"),
                              **user.popen_args())
            self.assertIn(f"the workspace belongs to group 0, not to the launcher's group "
                          f"{user.gid}", r.stderr)
            self.assertIn("--workspace-mode bind", r.stderr)


if __name__ == "__main__":
    unittest.main()
