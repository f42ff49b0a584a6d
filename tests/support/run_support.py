"""Shared by the `sandgate run` tests (tests/sandbox/): telling a host that refuses
namespaces from a real failure, running a client in the sandbox that ignores the proxy variables
(so that only transparent capture can carry it), and running `sandgate run` with a bound that
reports where a hung run waits."""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import artifacts

# A shell prefix: the command runs without HTTP(S)_PROXY in either case.
NO_PROXY_ENV = "env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy "


def serve_run_work_dir(prefix):
    """The start of a `sandgate run --proxy` test class: skips unless root (serve's admin socket
    is root-only), then returns a new directory for workspaces and reports, 0755, under
    /var/tmp (not /tmp, which the sandbox has its own of); the caller removes it."""
    if os.geteuid() != 0:
        raise unittest.SkipTest("the admin socket is root-only: run as root")
    work = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
    os.chmod(work, 0o755)
    return work


def namespaces_refused(stderr):
    """Whether `sandgate run` failed (status 125) because the kernel refused the namespaces, id
    maps or capture routes it needs: the caller skips with this stderr as the reason."""
    s = stderr.lower()
    return ("operation not permitted" in s or "permission denied" in s) and any(
        w in s for w in ("unshare", "clone", "namespace", "uid_map", "setgroups", "rtnetlink"))


def descendants(root):
    """`root` and every process below it, parents first (read from /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    order, queue = [], [root]
    while queue and len(order) < 64:
        pid = queue.pop(0)
        order.append(pid)
        queue.extend(sorted(children.get(pid, [])))
    return order


def proc_stat(pid):
    """The fields of /proc/<pid>/stat after the command name (state first, then ppid, pgrp,
    session, ...), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def alive(pid):
    """Whether `pid` still runs (a zombie has ended: only its exit status is left)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        return f"({e.strerror})"


def hang_report(root):
    """Where each process and thread under `root` is waiting: command line, state, wait channel,
    kernel stack and, when gdb is installed, the user-space stacks. For a test that timed out."""
    out = []
    gdb_until = time.monotonic() + 60  # within CTest's timeout for the whole file
    for pid in descendants(root):
        cmdline = _read(f"/proc/{pid}/cmdline").replace("\0", " ")
        out.append(f"== pid {pid}: {cmdline}")
        try:
            tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
        except OSError:
            continue
        for tid in tids:
            base = f"/proc/{pid}/task/{tid}"
            state = _read(f"{base}/stat")
            state = state[state.rfind(")") + 2:].split()[0] if ")" in state else state
            out.append(f"  tid {tid} {_read(f'{base}/comm')} state {state} "
                       f"wchan {_read(f'{base}/wchan')} syscall {_read(f'{base}/syscall')}")
            out.extend("    " + line for line in _read(f"{base}/stack").splitlines())
        left = gdb_until - time.monotonic()
        if shutil.which("gdb") and left > 1:
            try:
                gdb = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx",
                                      "-ex", "set print frame-arguments none",
                                      "-ex", "thread apply all bt 30"],
                                     capture_output=True, text=True, timeout=left)
                out.extend("    " + line for line in gdb.stdout.splitlines()
                           if line.startswith(("#", "Thread")))
            except subprocess.TimeoutExpired:
                out.append("    (gdb timed out)")
    return "\n".join(out)


def run_bounded(cmd, timeout, **kwargs):
    """subprocess.run(cmd, capture_output=True, text=True) that, when `cmd` outlives `timeout`,
    records where every process under it waits (hang_report), kills it (by its PID; its sandbox
    dies with it) and fails with that report and the output so far."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         **kwargs)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pids = descendants(p.pid)
        report = hang_report(p.pid)
        artifacts.record("log", "hang-report", report)
        p.kill()  # the sandbox dies with its launcher (parent-death signal)
        try:
            stdout, stderr = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            left = [pid for pid in pids[1:] if alive(pid)]
            report += f"\n--- the sandbox outlived its launcher; killing {left}"
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            stdout, stderr = p.communicate(timeout=10)
        raise AssertionError(f"{' '.join(cmd)} still running after {timeout} s\n"
                             f"--- where it waits:\n{report}\n"
                             f"--- stderr so far:\n{stderr[-4000:]}\n"
                             f"--- stdout so far:\n{stdout[-2000:]}") from None
    return subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr)


def run_sandgate(argv, *flags, workspace, run_dir=None, timeout=60, **kwargs):
    """`sandgate run --workspace WORKSPACE [--run-dir RUN_DIR] FLAGS -- ARGV`, bounded
    (run_bounded), its output recorded with the test's artifacts."""
    from sandgate_fixture import binary  # here: sandgate_fixture is heavier than this module
    cmd = [binary(), "run", "--workspace", workspace]
    if run_dir:
        cmd += ["--run-dir", run_dir]
    r = run_bounded(cmd + [*flags, "--", *argv], timeout, **kwargs)
    artifacts.record("run", "stdout", r.stdout)
    artifacts.record("log", "run-stderr", r.stderr)
    return r


def skip_unless_runs(probe, cleanup=None):
    """After a probe `sandgate run ... -- true`: skips the test class (calling `cleanup` first)
    with the kernel's reason when the host refuses namespaces or the workspace overlay, and fails
    on any other failure."""
    for refused, what in ((namespaces_refused(probe.stderr), "this host refuses namespaces: "),
                          ("overlay" in probe.stderr, "this kernel refuses the workspace overlay: ")):
        if probe.returncode == 125 and refused:
            if cleanup:
                cleanup()
            raise unittest.SkipTest(what + probe.stderr.strip())
    assert probe.returncode == 0, probe.stderr


class WorkspaceRuns(unittest.TestCase):
    """A test class of `sandgate run` with overlay workspaces: as root (as CI runs) it gets a
    0755 directory of its own (`cls.dir`, removed after) and skips with the kernel's reason when
    a probe run shows that namespaces or the overlay are refused. `cls.sandgate(...)` runs as
    run_sandgate() does; `cls.new_workspace(...)` makes a workspace under `cls.dir`."""

    PREFIX = "sandgate-runs-"
    NOT_ROOT = "needs root (as CI runs): the workspace overlay"
    TIMEOUT = 60

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest(cls.NOT_ROOT)
        cls.dir = tempfile.mkdtemp(prefix=cls.PREFIX)
        os.chmod(cls.dir, 0o755)
        skip_unless_runs(cls.probe(), cleanup=cls.tearDownClass)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def probe(cls):
        """The run that tells whether this host can run sandboxes at all."""
        return cls.sandgate(["true"], workspace=cls.new_workspace())

    @classmethod
    def new_workspace(cls, owner=None):
        """A new workspace, root's or `owner`'s (a TemporaryUser: its uid and its own gid)."""
        ws = tempfile.mkdtemp(dir=cls.dir, prefix="ws-")
        os.chmod(ws, 0o755)
        if owner is not None:
            os.chown(ws, owner.uid, owner.gid)
        return ws

    @classmethod
    def sandgate(cls, argv, *flags, workspace, run_dir=None, timeout=None, **kwargs):
        return run_sandgate(argv, *flags, workspace=workspace, run_dir=run_dir,
                            timeout=timeout or cls.TIMEOUT, **kwargs)


class TemporaryUser:
    """An unprivileged host user that a test creates and removes (for rootless runs of
    `sandgate run`): `with TemporaryUser() as user:` gives user.name, user.uid, user.gid and
    user.home (a 0700 directory the user owns, removed with it). Needs root; a test that is not
    root skips instead.

    The user's group number always differs from its user number (as on most real machines, where
    groups outnumber users or were made apart), so that a test or a product path that uses one
    for the other fails here instead of passing by luck (issue 37, item 10)."""

    # uids from 42000, gids from 47000: two ranges apart, so a uid is never its own gid.
    UID_BASE, GID_BASE, SPAN = 42000, 47000, 4000

    def __init__(self, prefix="sgt"):
        self.name = f"{prefix}{os.getpid() % 100000}{int(time.monotonic() * 1000) % 1000}"
        self.uid = self.gid = None
        self.home = None
        self._group_made = False

    @classmethod
    def _free_ids(cls):
        """A (uid, gid) pair that neither database holds, uid != gid, each unused as the other
        kind too; tried from a per-process start so that parallel tests rarely collide."""
        import grp
        import pwd
        start = (os.getpid() * 7919 + int(time.monotonic() * 1000)) % cls.SPAN
        for i in range(cls.SPAN):
            off = (start + i) % cls.SPAN
            uid, gid = cls.UID_BASE + off, cls.GID_BASE + off
            taken = False
            for lookup, n in ((pwd.getpwuid, uid), (grp.getgrgid, uid), (pwd.getpwuid, gid),
                              (grp.getgrgid, gid)):
                try:
                    lookup(n)
                    taken = True
                except KeyError:
                    pass
            if not taken:
                yield uid, gid

    def __enter__(self):
        self.home = f"/tmp/{self.name}-home"
        tries = 0
        for uid, gid in self._free_ids():
            tries += 1
            g = subprocess.run(["groupadd", "--gid", str(gid), self.name], capture_output=True,
                               timeout=30)
            if g.returncode != 0:  # taken meanwhile by a parallel test: the next pair
                if tries >= 20:
                    raise RuntimeError(f"groupadd: {g.stderr}")
                continue
            self._group_made = True
            u = subprocess.run(["useradd", "--no-create-home", "--uid", str(uid), "--gid",
                                str(gid), "--home-dir", self.home, "--shell", "/bin/sh",
                                self.name], capture_output=True, timeout=30)
            if u.returncode == 0:
                break
            subprocess.run(["groupdel", self.name], capture_output=True, timeout=30)
            self._group_made = False
            if tries >= 20:
                raise RuntimeError(f"useradd: {u.stderr}")
        import pwd
        entry = pwd.getpwnam(self.name)
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        assert self.uid != self.gid, (self.uid, self.gid)
        os.mkdir(self.home, 0o700)
        os.chown(self.home, self.uid, self.gid)
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.home, ignore_errors=True)
        subprocess.run(["userdel", self.name], capture_output=True, timeout=30)
        if self._group_made:  # userdel removes a user's own group only when it made it
            subprocess.run(["groupdel", self.name], capture_output=True, timeout=30)
        return False

    def popen_args(self):
        """Keyword arguments for subprocess that run the child as this user, done in C by
        subprocess (no Python between fork and exec: the test process has threads)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "cwd": self.home}
