"""`sandgate run` limits by default (issue 21, item 10): without any flag a run has a pids,
memory and wall-clock limit and sized tmpfs mounts, from the built-in config or the config's
`sandbox:` section; `unlimited` unsets a limit; the limits in force are said on stderr before
the command starts and in --report, and the line is true (checked against the run's cgroup as
the host sees it, and a limit the machine cannot enforce says so).

Each attempt is made from inside a real sandbox: the workload forks until it cannot, allocates
past its memory, reads its own /tmp's size. Runs as root (the CI case) and, where the kernel
allows unprivileged user namespaces, rootless as a user the test creates and removes."""

import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
import unittest

import artifacts
from run_support import TemporaryUser, namespaces_refused, run_bounded
from sandgate_fixture import Sandgate, binary

GIB = 1 << 30
MIB = 1 << 20

# Run inside the sandbox: 1,100 forks, each child exec'ing `sleep 5` (so that they are alive
# together), counting the forks the kernel refuses; then kills and reaps what it started.
# Python rather than `sleep 5 &` in sh: a shell whose fork fails aborts (dash) or retries for
# many seconds (bash), which would say nothing about how many forks were refused.
FORK_1100 = r"""
import os, signal
started, failed = [], 0
for _ in range(1100):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        try:
            os.execvp("sleep", ["sleep", "5"])
        finally:
            os._exit(127)
    started.append(pid)
for pid in started:
    os.kill(pid, signal.SIGKILL)
for pid in started:
    os.waitpid(pid, 0)
print(len(started), failed)
"""

# Allocates and touches 200 MiB (bytes * n fills every page).
ALLOC_600M = "b = b'x' * (600 << 20); print('survived', len(b))"

LIMITS_LINE = re.compile(r"^sandgate run: limits: (.*)$", re.M)


def run_cgroups(launcher):
    """The cgroup directories of `launcher`'s runs (sandgate-<pid>-<n>) under /sys/fs/cgroup."""
    found = []
    top = "/sys/fs/cgroup"
    for root, dirs, _ in os.walk(top):
        if root.count("/") - top.count("/") >= 5:
            dirs[:] = []
        found += [os.path.join(root, d) for d in dirs if d.startswith(f"sandgate-{launcher}-")]
    return found


def read_first(dirs, names):
    """The content of the first of `names` that exists in one of `dirs`, or None."""
    for d in dirs:
        for name in names:
            try:
                with open(os.path.join(d, name)) as f:
                    return f.read().strip()
            except OSError:
                continue
    return None


def expected_line(limits):
    """The stderr line that the report's `limits` says must have been printed."""
    enforced = limits["enforced"]

    def size(n):
        for factor, unit in ((GIB, "G"), (MIB, "M"), (1024, "K")):
            if n % factor == 0:
                return f"{n // factor}{unit}"
        return f"{n}B"

    def one(name, value, key):
        if value is None:
            return f"{name} unlimited"
        return f"{name} {value}" + ("" if enforced[key] else " (NOT ENFORCED)")

    t = limits["timeout_seconds"]
    timeout = None
    if t is not None:
        h, rest = divmod(int(t), 3600)
        m, s = divmod(rest, 60)
        timeout = "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"
    mem = limits["memory_bytes"]
    cpus = limits["cpus"]
    return ", ".join([
        one("memory", None if mem is None else size(mem), "memory"),
        one("pids", limits["pids"], "pids"),
        one("cpus", None if cpus is None else f"{cpus:g}", "cpus"),
        one("timeout", timeout, "timeout"),
        f"tmpfs {size(limits['tmpfs_bytes'])} each (/tmp /run /dev/shm)",
    ])


class RunLimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sandgate-limits-")
        os.chmod(cls.dir, 0o755)
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)  # the command runs as an unprivileged uid
        probe = cls.sandgate(None, "--", "true")
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def config(cls, name, sandbox=None):
        """A config that allows nothing, with `sandbox` as its sandbox: section (none: absent)."""
        cfg = {"policies": {"nothing": {"allow": []}},
               "tasks": [{"name": "default", "policy": "nothing"}]}
        if sandbox is not None:
            cfg["sandbox"] = sandbox
        path = os.path.join(cls.dir, name + ".yaml")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    @classmethod
    def sandgate(cls, config, *args, timeout=120):
        """`sandgate run` with `config` (None: the built-in one) and no limit flag unless given."""
        cmd = [binary(), "run", "--workspace", cls.workspace, "--no-transparent"]
        if config:
            cmd += ["--config", config]
        r = run_bounded(cmd + list(args), timeout)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    def report_of(self, config, *args, timeout=120):
        report = os.path.join(self.dir, f"report-{self._testMethodName}.json")
        if os.path.exists(report):
            os.unlink(report)
        r = self.sandgate(config, "--report", report, *args, timeout=timeout)
        self.assertTrue(os.path.exists(report), r.stderr)
        with open(report) as f:
            return r, json.load(f)

    def limits_line(self, stderr):
        lines = LIMITS_LINE.findall(stderr)
        self.assertEqual(len(lines), 1, stderr)
        return lines[0]

    # (a) the built-in pids limit, from the workload's side.
    def test_builtin_pids_limit_stops_a_fork_bomb(self):
        r, rep = self.report_of(None, "--", "python3", "-c", FORK_1100)
        self.assertEqual(r.returncode, 0, r.stderr)
        started, failed = map(int, r.stdout.split())
        # Only a report that says the limit is not enforced excuses the forks (a launcher that
        # says nothing is held to the default).
        if rep.get("limits", {}).get("enforced", {}).get("pids") is False:
            self.skipTest("this machine cannot enforce a pids limit: " + r.stderr)
        # 1,024 counts the launcher's two helpers, python and each sleep.
        self.assertGreater(failed, 0, "every fork succeeded: no pids limit")
        self.assertLessEqual(started, 1024 - 3)
        self.assertGreater(started, 900)  # the limit is 1,024, not something smaller
        self.assertEqual(rep["limits"]["pids"], 1024)
        self.assertEqual(rep["limit_fired"], "pids")  # what the host's cgroup counted

    # (b) a memory limit from the config's sandbox: section, no flag.
    def test_configured_memory_limit_kills_an_allocation_past_it(self):
        # 256M, not less: the launcher's helpers are in the cgroup too, and in the sanitizer
        # build their copies of the launcher (ASan's quarantine) need well over 64M to set up.
        cfg = self.config("mem256", {"memory": "256M"})
        r, rep = self.report_of(cfg, "--", "python3", "-c", ALLOC_600M)
        if not rep["limits"]["enforced"]["memory"]:
            self.skipTest("this machine cannot enforce a memory limit: " + r.stderr)
        self.assertNotIn("survived", r.stdout)
        self.assertEqual(r.returncode, 137, r.stderr)
        self.assertEqual(rep["end"], "oom")
        self.assertEqual(rep["limit_fired"], "memory")
        self.assertEqual(rep["limits"]["memory_bytes"], 256 * MIB)
        self.assertLessEqual(rep["peak_memory_bytes"], 256 * MIB)  # the host's cgroup count
        self.assertIn("killed by the memory limit (256M)", r.stderr)
        self.assertIn("memory 256M,", self.limits_line(r.stderr))

    # (c) the default timeout is in force and said; a configured one fires without a flag.
    def test_default_limits_are_reported_and_said(self):
        r, rep = self.report_of(None, "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        lim = rep["limits"]
        self.assertEqual(lim["memory_bytes"], 4 * GIB)
        self.assertEqual(lim["pids"], 1024)
        self.assertIsNone(lim["cpus"])
        self.assertEqual(lim["timeout_seconds"], 7200)
        self.assertEqual(lim["tmpfs_bytes"], GIB)
        self.assertIs(lim["enforced"]["timeout"], True)
        self.assertIsNone(lim["enforced"]["cpus"])
        line = self.limits_line(r.stderr)
        self.assertIn("timeout 2h", line)
        self.assertEqual(line, expected_line(lim))

    def test_configured_timeout_fires_without_a_flag(self):
        cfg = self.config("t1s", {"timeout": "1s"})
        start = time.monotonic()
        r, rep = self.report_of(cfg, "--", "sleep", "30")
        self.assertEqual(r.returncode, 124, r.stderr)
        self.assertLess(time.monotonic() - start, 20)
        self.assertEqual(rep["limit_fired"], "timeout")
        self.assertEqual(rep["limits"]["timeout_seconds"], 1)
        self.assertIn("timed out after 1s", r.stderr)

    # (d) unlimited, in the config and as a flag over the config.
    def test_unlimited_in_the_config_unsets_the_limits(self):
        cfg = self.config("unlimited", {"memory": "unlimited", "pids": "unlimited",
                                        "timeout": "unlimited"})
        r, rep = self.report_of(cfg, "--", "python3", "-c", FORK_1100)
        self.assertEqual(r.returncode, 0, r.stderr)
        started, failed = map(int, r.stdout.split())
        self.assertEqual((started, failed), (1100, 0))
        lim = rep["limits"]
        self.assertEqual((lim["memory_bytes"], lim["pids"], lim["timeout_seconds"]),
                         (None, None, None))
        self.assertIsNone(rep["limit_fired"])
        self.assertEqual(self.limits_line(r.stderr),
                         "memory unlimited, pids unlimited, cpus unlimited, timeout unlimited, "
                         "tmpfs 1G each (/tmp /run /dev/shm)")

    def test_unlimited_flag_overrides_the_config(self):
        cfg = self.config("mem64flag", {"memory": "64M"})
        r, rep = self.report_of(cfg, "--memory", "unlimited", "--pids", "2000", "--",
                                "python3", "-c", ALLOC_600M)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("survived", r.stdout)
        self.assertIsNone(rep["limits"]["memory_bytes"])
        self.assertEqual(rep["limits"]["pids"], 2000)

    # (e) the line comes before the command starts and says what the host's cgroup holds.
    def test_the_line_is_said_first_and_matches_the_cgroup(self):
        cfg = self.config("truth", {"memory": "512M", "pids": "300", "cpus": 1.5})
        report = os.path.join(self.dir, "report-truth.json")
        cmd = [binary(), "run", "--workspace", self.workspace, "--no-transparent", "--config",
               cfg, "--report", report, "--", "sh", "-c",
               "echo COMMAND-STARTED >&2; echo started; read line"]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            ready, _, _ = select.select([p.stdout], [], [], 60)
            self.assertTrue(ready, "the command did not start within 60 s")
            self.assertEqual(p.stdout.readline(), "started\n")
            dirs = run_cgroups(p.pid)  # as the host sees them, while the command runs
            pids_max = read_first(dirs, ["pids.max"])
            mem_max = read_first(dirs, ["memory.max", "memory.limit_in_bytes"])
            quota = read_first(dirs, ["cpu.max", "cpu.cfs_quota_us"])
            _, stderr = p.communicate(input="go\n", timeout=60)  # `read line` returns
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=10)
        artifacts.record("log", "run-stderr", stderr)
        self.assertEqual(p.returncode, 0, stderr)
        with open(report) as f:
            lim = json.load(f)["limits"]
        line = self.limits_line(stderr)
        self.assertLess(stderr.index("sandgate run: limits:"), stderr.index("COMMAND-STARTED"))
        self.assertEqual(line, expected_line(lim))
        self.assertTrue(line.startswith("memory 512M"), line)
        # Enforced means the host's cgroup holds it; not enforced means the line says so.
        if lim["enforced"]["pids"]:
            self.assertEqual(pids_max, "300")
        else:
            self.assertIn("pids 300 (NOT ENFORCED)", line)
        if lim["enforced"]["memory"]:
            self.assertEqual(mem_max, str(512 * MIB))
        else:
            self.assertIn("memory 512M (NOT ENFORCED)", line)
        if lim["enforced"]["cpus"]:
            self.assertIn(quota.split()[0], ("150000",))
        else:
            self.assertIn("cpus 1.5 (NOT ENFORCED)", line)

    def test_rootless_default_limits_warn_but_a_requested_one_refuses(self):
        # A user without cgroup delegation cannot be given a cgroup: the defaults are said to be
        # NOT ENFORCED and the run goes on; the same limit as a flag refuses the run.
        if os.geteuid() != 0:
            self.skipTest("needs root to create the temporary user")
        with TemporaryUser() as user:
            ws = os.path.join(user.home, "ws")
            os.mkdir(ws)
            os.chown(ws, user.uid, user.gid)
            base = [binary(), "run", "--workspace", ws, "--no-transparent"]

            def run(*args):
                p = subprocess.run(base + list(args), capture_output=True, text=True,
                                   timeout=120, **user.popen_args())
                artifacts.record("log", "run-stderr", p.stderr)
                return p

            r = run("--", "true")
            if r.returncode == 125 and namespaces_refused(r.stderr):
                self.skipTest("this host refuses rootless namespaces: " + r.stderr.strip())
            self.assertEqual(r.returncode, 0, r.stderr)
            line = self.limits_line(r.stderr)
            unenforced = [u.split(":")[0] for u in re.findall(r"default limit not enforced on "
                                                               r"this machine, running without "
                                                               r"it: (\w+):", r.stderr)]
            if not unenforced:
                self.skipTest("this host delegates cgroups to unprivileged users: " + line)
            for name in unenforced:
                word = {"memory": "memory", "pids": "pids", "cpu": "cpus"}[name]
                self.assertRegex(line, rf"{word} \S+ \(NOT ENFORCED\)")
            flag = {"memory": ["--memory", "1G"], "pids": ["--pids", "500"]}[unenforced[0]]
            r = run(*flag, "--", "true")
            self.assertEqual(r.returncode, 125, r.stderr)
            self.assertIn("refusing to start: a requested limit cannot be enforced", r.stderr)
            self.assertNotIn("sandgate run: limits:", r.stderr)

    # (f) the private tmpfs mounts are sized, as the workload's df sees them.
    def test_private_tmpfs_mounts_have_the_configured_size(self):
        cfg = self.config("tmpfs", {"tmpfs_size": "64M"})
        r = self.sandgate(cfg, "--", "df", "-B1", "--output=target,size", "/tmp", "/run",
                          "/dev/shm")
        self.assertEqual(r.returncode, 0, r.stderr)
        sizes = dict(line.split() for line in r.stdout.splitlines()[1:])
        self.assertEqual(sizes, {"/tmp": str(64 * MIB), "/run": str(64 * MIB),
                                 "/dev/shm": str(64 * MIB)})
        self.assertIn("tmpfs 64M each", self.limits_line(r.stderr))


class ServeRunLimitsTest(unittest.TestCase):
    """`sandgate run --proxy unix:PATH` has no local config: the built-in defaults apply."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the admin socket is root-only: run as root")
        # Not under /tmp, which the sandbox replaces (as in test_run_serve).
        cls.work = tempfile.mkdtemp(prefix="sandgate-serve-limits-", dir="/var/tmp")
        os.chmod(cls.work, 0o755)
        cls.workspace = os.path.join(cls.work, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)
        # listen.admin lives under /run/sandgate, which no sandbox sees.
        cls.sock = f"/run/sandgate/test-limits-{os.getpid()}.sock"
        cls.serve = Sandgate(policies={"nothing": {"allow": []}},
                             tasks=[{"name": "t1", "policy": "nothing"}],
                             extra={"listen": {"proxy": "127.0.0.1:0", "admin": cls.sock}})
        cls.serve.start()

    @classmethod
    def tearDownClass(cls):
        cls.serve.cleanup()
        shutil.rmtree(cls.work, ignore_errors=True)
        if os.path.lexists(cls.sock):
            os.unlink(cls.sock)

    def run_via_serve(self, *args):
        report = os.path.join(self.work, f"report-{self._testMethodName}.json")
        cmd = [binary(), "run", "--workspace", self.workspace, "--no-transparent", "--proxy",
               "unix:" + self.sock, "--task", "t1", "--report", report, *args]
        r = run_bounded(cmd, 120)
        artifacts.record("log", "run-stderr", r.stderr)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses namespaces: " + r.stderr.strip())
        with open(report) as f:
            return r, json.load(f)

    def test_builtin_defaults_apply_and_stop_a_fork_bomb(self):
        r, rep = self.run_via_serve("--", "python3", "-c", FORK_1100)
        self.assertEqual(r.returncode, 0, r.stderr)
        lim = rep["limits"]
        self.assertEqual((lim["memory_bytes"], lim["pids"], lim["timeout_seconds"]),
                         (4 * GIB, 1024, 7200))
        self.assertEqual(LIMITS_LINE.findall(r.stderr), [expected_line(lim)])
        started, failed = map(int, r.stdout.split())
        if lim["enforced"]["pids"]:
            self.assertGreater(failed, 0, "every fork succeeded: no pids limit")
            self.assertEqual(rep["limit_fired"], "pids")

    def test_flags_override_the_defaults(self):
        r, rep = self.run_via_serve("--pids", "unlimited", "--timeout", "10m", "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(rep["limits"]["pids"])
        self.assertEqual(rep["limits"]["timeout_seconds"], 600)
        self.assertIn("pids unlimited, cpus unlimited, timeout 10m,", r.stderr)


if __name__ == "__main__":
    unittest.main()
