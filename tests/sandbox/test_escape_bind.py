"""Bind mode (`--workspace-mode bind`) from the attacker's side (issue 37, items 1, 6 and 7).

The workload writes the host's directory itself in bind mode, so what it leaves there is on the
host: these tests make the attempts from inside a real sandbox and assert what the host and a
second local user then see.
 - item 1: no setuid/setgid file or file capability is left in the host tree: chmod, the mode of
   open/mkdir/mknod, openat2 and the xattr setters are refused in the sandbox, and what the
   filter cannot see (here: planted on the host before the run) is swept after it; a second
   local user gets no euid 0 from anything left; a root-owned workspace is bound only with
   --allow-root-workspace.
 - item 6: system directories and their direct children are refused as the workspace.
 - item 7: one bind run at a time per workspace, nested workspaces included, whichever user
   launched it (a relay in it would give one task another's access); overlay runs still share.

Runs as root (CI is root; the root-owned workspace is the case that plants setuid root); the
rootless variants run as a user the test creates. The users have distinct uid and gid numbers
and are removed after."""

import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import unittest

import artifacts
from run_support import namespaces_refused, run_bounded
from sandgate_fixture import binary

# Attempts, each printed as NAME ok|errno: the workload's ways to give a file in the host tree
# setuid/setgid bits or a file capability.
ATTEMPTS = r"""
import ctypes, errno, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def raw(nr, *args):
    def call():
        if libc.syscall(nr, *args) < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    return call
open("plain", "w").close()
attempt("chmod", lambda: os.chmod("plain", 0o4755))
attempt("chmod_sgid", lambda: os.chmod("plain", 0o2755))
fd = os.open("plain", os.O_RDONLY)
attempt("fchmod", lambda: os.fchmod(fd, 0o4755))
attempt("fchmodat", lambda: os.chmod("plain", 0o6755, dir_fd=os.open(".", os.O_RDONLY)))
# fchmodat2 (452): what glibc 2.39+ uses for fchmodat(..., AT_SYMLINK_NOFOLLOW).
attempt("fchmodat2", raw(452, -100, b"plain", 0o4755, 0))
attempt("open_creat", lambda: os.close(os.open("py-suid", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("creat", raw(85, b"creat-suid", 0o4755))
attempt("mkdir", lambda: os.mkdir("sgid-dir", 0o2775))
attempt("mkdirat", lambda: os.mkdir("sgid-dir2", 0o2775, dir_fd=os.open(".", os.O_RDONLY)))
attempt("mknod", lambda: os.mknod("node-suid", stat.S_IFREG | 0o4755))
# openat2 (437) carries the mode in a struct the filter cannot read: refused as ENOSYS.
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
attempt("openat2", raw(437, -100, b"openat2-suid", ctypes.byref(how), ctypes.c_size_t(24)))
attempt("setxattr_user", lambda: os.setxattr("plain", "user.x", b"1"))
attempt("setxattr_cap", lambda: os.setxattr("plain", "security.capability",
        bytes.fromhex("0100000200200000000000000000000000000000")))
attempt("plain_chmod", lambda: os.chmod("plain", 0o755))
attempt("plain_open", lambda: os.close(os.open("plain2", os.O_CREAT | os.O_WRONLY, 0o644)))
"""


def privileged_files(top):
    """Every file under `top` (links not followed) with a setuid or setgid bit, or a file
    capability, except setgid directories (group inheritance, which a host may set)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                continue
            bits = st.st_mode & (stat.S_ISUID | stat.S_ISGID)
            if stat.S_ISDIR(st.st_mode):
                bits &= stat.S_ISUID
            if bits:
                found.append(f"{p} {oct(st.st_mode)}")
            try:
                os.getxattr(p, "security.capability", follow_symlinks=False)
                found.append(f"{p} security.capability")
            except OSError:
                pass
    return found


class DistinctUser:
    """A local user whose uid and gid differ (as on most real machines), created with
    groupadd/useradd and removed with userdel/groupdel."""

    def __init__(self, prefix):
        self.name = f"{prefix}{os.getpid() % 10000}"
        self.uid = self.gid = None

    @staticmethod
    def free(start, taken):
        for n in range(start, start + 5000):
            try:
                taken(n)
            except KeyError:
                return n
        raise AssertionError(f"no free id from {start}")

    def __enter__(self):
        self.gid = self.free(47000 + os.getpid() % 1000, grp.getgrgid)
        self.uid = self.free(self.gid + 1, pwd.getpwuid)
        subprocess.run(["groupadd", "-g", str(self.gid), self.name], check=True,
                       capture_output=True, timeout=30)
        subprocess.run(["useradd", "-M", "-u", str(self.uid), "-g", str(self.gid), "-s",
                        "/bin/sh", "-d", "/nonexistent", self.name], check=True,
                       capture_output=True, timeout=30)
        assert self.uid != self.gid
        return self

    def __exit__(self, *exc):
        subprocess.run(["userdel", self.name], capture_output=True, timeout=30)
        subprocess.run(["groupdel", self.name], capture_output=True, timeout=30)
        return False

    def popen_args(self, cwd):
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "cwd": cwd}


class EscapeBindTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (as CI runs): the attack is setuid root; the "
                                    "rootless variant creates a user")
        cls.dir = tempfile.mkdtemp(prefix="sandgate-escape-bind-")
        os.chmod(cls.dir, 0o755)
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        with open(cls.config, "w") as f:
            json.dump({"policies": {"nothing": {"allow": []}},
                       "tasks": [{"name": "t", "policy": "nothing"}]}, f)
        os.chmod(cls.config, 0o644)
        cls.owner = DistinctUser("sgbo").__enter__()
        probe = cls.sandgate(["true"], workspace=cls.new_workspace())
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            cls.tearDownClass()
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())

    @classmethod
    def tearDownClass(cls):
        cls.owner.__exit__(None, None, None)
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def new_workspace(cls, owner=None, mode=0o755):
        """A workspace owned by the test's user (by default) or by `owner` (0: root, the CI
        case)."""
        ws = tempfile.mkdtemp(dir=cls.dir, prefix="ws-")
        os.chmod(ws, mode)
        if owner is None:
            os.chown(ws, cls.owner.uid, cls.owner.gid)
        return ws

    @classmethod
    def sandgate(cls, argv, *flags, workspace, mode="bind", timeout=60, popen=False, **kwargs):
        cmd = [binary(), "run", "--config", cls.config, "--workspace", workspace]
        if mode:
            cmd += ["--workspace-mode", mode]
        cmd += [*flags, "--", *argv]
        if popen:
            return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, **kwargs)
        r = run_bounded(cmd, timeout, **kwargs)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    def attempts(self, ws, *flags, **kwargs):
        report = os.path.join(self.dir, f"report-{os.path.basename(ws)}.json")
        r = self.sandgate(["python3", "-c", ATTEMPTS], "--report", report, *flags,
                          workspace=ws, **kwargs)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        seen = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
        with open(report) as f:
            return seen, json.load(f)

    def assertRefused(self, seen):
        for name in ("chmod", "chmod_sgid", "fchmod", "fchmodat", "fchmodat2", "open_creat",
                     "creat", "mkdir", "mkdirat", "mknod"):
            self.assertEqual(seen.get(name), "EPERM", f"{name}: {seen}")
        self.assertEqual(seen.get("openat2"), "ENOSYS", seen)
        self.assertEqual(seen.get("setxattr_user"), "ENOTSUP", seen)
        self.assertIn(seen.get("setxattr_cap"), ("ENOTSUP", "EPERM"), seen)
        # What builds do stays allowed.
        self.assertEqual(seen.get("plain_chmod"), "ok", seen)
        self.assertEqual(seen.get("plain_open"), "ok", seen)

    # --- item 1: setuid, setgid, file capabilities ---------------------------------------------

    def test_root_owned_workspace_gets_no_setuid_root_binary(self):
        # The CI and container case: files the run creates are root's on the host.
        ws = self.new_workspace(owner=0)
        r = self.sandgate(["sh", "-c", "cp /bin/dash ./rootsh; chmod 4755 rootsh; echo chmod=$?;"
                           " chmod u+s,g+s rootsh; echo chmod2=$?"],
                          "--allow-root-workspace", workspace=ws)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("chmod=1", r.stdout)
        self.assertIn("chmod2=1", r.stdout)
        st = os.lstat(os.path.join(ws, "rootsh"))
        self.assertEqual(st.st_uid, 0, "the file the run created is root's on the host")
        self.assertEqual(st.st_mode & 0o7777, 0o755)
        seen, _ = self.attempts(ws, "--allow-root-workspace")
        self.assertRefused(seen)
        self.assertEqual(privileged_files(ws), [])
        self.assertNoEuid0ForAnotherUser(ws)

    def test_user_owned_workspace_gets_no_setuid_binary_of_its_owner(self):
        ws = self.new_workspace()
        seen, report = self.attempts(ws)
        self.assertRefused(seen)
        self.assertEqual(os.lstat(os.path.join(ws, "plain")).st_uid, self.owner.uid)
        self.assertEqual(privileged_files(ws), [])
        self.assertEqual(report["workspace_sweep"]["cleared"], 0, report["workspace_sweep"])

    def test_rootless_bind_run_gets_no_setuid_binary(self):
        ws = self.new_workspace()
        runs = tempfile.mkdtemp(dir=self.dir, prefix="runs-")
        os.chown(runs, self.owner.uid, self.owner.gid)
        r = self.sandgate(["python3", "-c", ATTEMPTS], "--run-dir", os.path.join(runs, "r"),
                          workspace=ws, **self.owner.popen_args(ws))
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses unprivileged user namespaces: " + r.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRefused(dict(line.split(" ", 1) for line in r.stdout.splitlines()))
        self.assertEqual(privileged_files(ws), [])

    def test_what_the_filter_cannot_see_is_swept_after_the_run(self):
        # Stands for a way past the filter (a future system call, a kernel path): the bits are
        # already there when the run ends. The sweep clears them on the files themselves and
        # follows no link: a setuid file outside the workspace that a link points to keeps its
        # bits.
        ws = self.new_workspace(owner=0)
        outside = os.path.join(self.dir, "outside-suid")
        shutil.copy("/bin/dash", outside)
        os.chmod(outside, 0o4755)
        os.makedirs(os.path.join(ws, "a", "b"))
        planted = {"a/b/suid": 0o4755, "sgid": 0o2755, "a/both": 0o6711}
        for rel, mode in planted.items():
            shutil.copy("/bin/dash", os.path.join(ws, rel))
            os.chmod(os.path.join(ws, rel), mode)
        os.symlink(outside, os.path.join(ws, "link-to-outside"))
        os.mkdir(os.path.join(ws, "shared"))
        os.chmod(os.path.join(ws, "shared"), 0o2775)  # a group-shared directory stays so
        shutil.copy("/bin/dash", os.path.join(ws, "capped"))
        subprocess.run(["setcap", "cap_net_raw+ep", os.path.join(ws, "capped")], check=True,
                       capture_output=True, timeout=30)
        self.assertEqual(len(privileged_files(ws)), 4)
        report = os.path.join(self.dir, "report-sweep.json")
        r = self.sandgate(["true"], "--allow-root-workspace", "--report", report, workspace=ws)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(privileged_files(ws), [])
        for rel, mode in planted.items():
            self.assertEqual(os.lstat(os.path.join(ws, rel)).st_mode & 0o7777, mode & 0o777, rel)
        self.assertEqual(os.lstat(outside).st_mode & 0o7777, 0o4755, "the sweep followed a link")
        self.assertEqual(os.lstat(os.path.join(ws, "shared")).st_mode & 0o7777, 0o2775)
        with open(report) as f:
            sweep = json.load(f)["workspace_sweep"]
        self.assertEqual(sweep["cleared"], 4, sweep)
        self.assertEqual(sorted(sweep["paths"]), ["a/b/suid", "a/both", "capped", "sgid"])
        self.assertEqual(sweep["errors"], [])
        self.assertIn("cleared", r.stderr)  # said at the end of the run, not only in the report

    def assertNoEuid0ForAnotherUser(self, ws):
        """A second local user runs every regular file left in `ws` as a shell (`-p` keeps a
        setuid euid) and never gets euid 0."""
        with DistinctUser("sgbx") as other:
            ran = 0
            for dirpath, _, filenames in os.walk(ws):
                for n in filenames:
                    p = os.path.join(dirpath, n)
                    st = os.lstat(p)
                    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o001:
                        continue
                    with open(p, "rb") as f:
                        if f.read(4) != b"\x7fELF":
                            continue
                    r = run_bounded([p, "-p", "-c", "id -u; id -g"], 30,
                                    **other.popen_args(self.dir))
                    ran += 1
                    self.assertEqual(r.stdout.split(), [str(other.uid), str(other.gid)],
                                     f"{p}: {r.stdout} {r.stderr}")
            self.assertGreater(ran, 0)

    def test_root_owned_workspace_is_bound_only_on_request(self):
        ws = self.new_workspace(owner=0)
        r = self.sandgate(["sh", "-c", "touch ran"], workspace=ws)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--allow-root-workspace", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(ws, "ran")))
        # Overlay mode (the default) needs no flag: the host's directory is not written.
        r = self.sandgate(["sh", "-c", "touch ran"], mode=None, workspace=ws)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(ws, "ran")))

    # --- item 6: system directories -------------------------------------------------------------

    def test_system_directories_and_their_children_are_refused(self):
        refused = ["/", "/usr", "/usr/lib", "/usr/share", "/usr/local", "/usr/bin", "/var",
                   "/var/lib", "/var/log", "/var/spool", "/var/cache", "/etc", "/etc/ssl",
                   "/boot", "/lib", "/lib64", "/bin", "/sbin", "/proc", "/sys", "/dev", "/run",
                   "/opt", "/usr/lib/x86_64-linux-gnu", "/usr/share/doc"]
        # A link (/bin -> usr/bin on merged-/usr hosts) is refused as a link; where it points,
        # as a system directory.
        tried = sorted({p for d in refused if os.path.isdir(d) for p in (d, os.path.realpath(d))})
        for d in tried:
            for mode in ("bind", None):
                with self.subTest(workspace=d, mode=mode or "overlay"):
                    r = self.sandgate(["sh", "-c", "echo RAN"], mode=mode, workspace=d)
                    self.assertEqual(r.returncode, 125, r.stdout + r.stderr)
                    self.assertIn("symbolic link" if os.path.islink(d) else
                                  "refusing the workspace", r.stderr)
                    self.assertNotIn("RAN", r.stdout)
        self.assertGreater(len(tried), 15)

    def test_a_work_directory_below_a_system_directory_is_allowed(self):
        base = tempfile.mkdtemp(dir="/var/lib", prefix="sandgate-test-ci-")
        try:
            checkout = os.path.join(base, "checkout")
            os.mkdir(checkout)
            os.chown(checkout, self.owner.uid, self.owner.gid)
            r = self.sandgate(["sh", "-c", "echo ok > made"], workspace=checkout)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(checkout, "made")) as f:
                self.assertEqual(f.read(), "ok\n")
            # The direct child of /var/lib itself is not a work directory.
            r = self.sandgate(["true"], mode=None, workspace=base)
            self.assertEqual(r.returncode, 125, r.stderr)
            self.assertIn("refusing the workspace", r.stderr)
        finally:
            shutil.rmtree(base, ignore_errors=True)

    # --- item 7: one bind run at a time per workspace -------------------------------------------

    def started(self, a):
        """Waits for run A's command to print `up` (it then waits on its stdin)."""
        line = a.stdout.readline()  # EOF if A ends: never blocks past A
        self.assertEqual(line, "up\n", a.stderr.read() if a.poll() is not None else "")

    def test_a_second_run_in_a_bound_workspace_is_refused(self):
        ws = self.new_workspace()
        # Run A serves a relay socket in the workspace (a task's way to lend its proxy to
        # another) and waits for its stdin to close.
        server = ("import socket,sys\n"
                  "s=socket.socket(socket.AF_UNIX); s.bind('relay.sock'); s.listen(1)\n"
                  "print('up', flush=True); sys.stdin.read()\n")
        a = self.sandgate(["python3", "-c", server], "--timeout", "60s", workspace=ws,
                          popen=True)
        try:
            self.started(a)
            for mode in ("bind", None):
                with self.subTest(second=mode or "overlay"):
                    b = self.sandgate(["python3", "-c", "import socket\n"
                                       "s=socket.socket(socket.AF_UNIX)\n"
                                       "s.connect('relay.sock'); print('RELAYED')"],
                                      mode=mode, workspace=ws)
                    self.assertEqual(b.returncode, 125, b.stdout + b.stderr)
                    self.assertIn("in use by another run", b.stderr)
                    self.assertNotIn("RELAYED", b.stdout)
            out, err = a.communicate(input="", timeout=60)
            self.assertEqual(a.returncode, 0, err)
        finally:
            if a.poll() is None:
                a.kill()
                a.communicate(timeout=30)
        # Free again once A is over.
        r = self.sandgate(["true"], workspace=ws)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_rootless_bind_run_and_a_root_run_exclude_each_other(self):
        # The lock is on the directory's inode: launchers of different users see it.
        ws = self.new_workspace()
        runs = tempfile.mkdtemp(dir=self.dir, prefix="runs-")
        os.chown(runs, self.owner.uid, self.owner.gid)
        a = self.sandgate(["sh", "-c", "echo up; cat >/dev/null"], "--timeout", "60s",
                          "--run-dir", os.path.join(runs, "a"), workspace=ws, popen=True,
                          **self.owner.popen_args(ws))
        try:
            self.started(a)
            b = self.sandgate(["sh", "-c", "echo RAN"], workspace=ws)
            self.assertEqual(b.returncode, 125, b.stdout + b.stderr)
            self.assertIn("in use by another run", b.stderr)
            self.assertNotIn("RAN", b.stdout)
            a.communicate(input="", timeout=60)
            self.assertEqual(a.returncode, 0)
        finally:
            if a.poll() is None:
                a.kill()
                a.communicate(timeout=30)

    def test_bind_runs_of_nested_workspaces_exclude_each_other(self):
        # The outer workspace holds the inner one: a bind run of it would reach the inner run's
        # relay socket by path. Either order is refused; siblings run side by side.
        outer = self.new_workspace()
        inner, sibling = os.path.join(outer, "inner"), os.path.join(outer, "sibling")
        for d in (inner, sibling):
            os.mkdir(d, 0o755)
            os.chown(d, self.owner.uid, self.owner.gid)
        server = ("import socket,sys\n"
                  "s=socket.socket(socket.AF_UNIX); s.bind('relay.sock'); s.listen(1)\n"
                  "print('up', flush=True); sys.stdin.read()\n")
        connect = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                   "try:\n  s.connect(sys.argv[1]); print('RELAYED')\n"
                   "except OSError as e: print('errno', e.errno)\n")
        for held, second, path in ((inner, outer, "inner/relay.sock"),
                                   (outer, inner, "../relay.sock")):
            with self.subTest(held=os.path.basename(held), second=os.path.basename(second)):
                for p in (os.path.join(inner, "relay.sock"), os.path.join(outer, "relay.sock")):
                    if os.path.exists(p):
                        os.unlink(p)
                a = self.sandgate(["python3", "-c", server], "--timeout", "60s", workspace=held,
                                  popen=True)
                try:
                    self.started(a)
                    b = self.sandgate(["python3", "-c", connect, path], workspace=second)
                    self.assertEqual(b.returncode, 125, b.stdout + b.stderr)
                    self.assertIn("in use by another run", b.stderr)
                    self.assertNotIn("RELAYED", b.stdout)
                    if held == inner:
                        c = self.sandgate(["true"], workspace=sibling)
                        self.assertEqual(c.returncode, 0, c.stderr)
                    a.communicate(input="", timeout=60)
                    self.assertEqual(a.returncode, 0)
                finally:
                    if a.poll() is None:
                        a.kill()
                        a.communicate(timeout=30)

    def test_overlay_runs_share_a_workspace(self):
        ws = self.new_workspace()
        a = self.sandgate(["sh", "-c", "echo up; cat >/dev/null"], "--timeout", "60s",
                          mode=None, workspace=ws, popen=True)
        try:
            self.started(a)
            b = self.sandgate(["true"], mode=None, workspace=ws)
            self.assertEqual(b.returncode, 0, b.stderr)
            a.communicate(input="", timeout=60)
            self.assertEqual(a.returncode, 0)
        finally:
            if a.poll() is None:
                a.kill()
                a.communicate(timeout=30)


if __name__ == "__main__":
    unittest.main()
