"""`sandgate run --proxy unix:PATH` end to end: the sandbox's listeners are handed to a running
`sandgate serve` over its admin socket (listen.admin), which serves them for the named task,
audits the traffic, refuses peers that are not root, and closes the listeners when the run
ends. Transparent capture works the same way: the DNS stub's sockets and the capture
listeners go to serve, with the synthetic ranges of serve's config (10.77.0.0/16 here), and
are closed with the run, or when its launcher dies. Runs as root (the admin socket is
root-only). What `sandgate run` prints and reports is recorded for the leak check."""

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import unittest

import artifacts
from run_support import NO_PROXY_ENV, namespaces_refused, run_bounded
from sandgate_fixture import ADMIN_DIR, Sandgate, binary, wait_until
from upstreams import HttpUpstream

# serve's transparent ranges: the sandbox's synthetic addresses must come from these.
POOL_V4, POOL_V6 = "10.77.0.0/16", "fd00:77:1::/64"
SYNTHETIC = r"(10\.77\.\d+\.\d+|fd00:77:1::[0-9a-f]+)"


def _open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


# subprocess drops to nobody in C between fork and exec (a preexec_fn would run Python code
# in the child of this multithreaded process: the upstreams serve from threads).
AS_NOBODY = {"user": 65534, "group": 65534, "extra_groups": []}


class RunServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the admin socket is root-only: run as root")
        cls.upstream = HttpUpstream()
        # The workspace and reports: not under /tmp, which the sandbox has its own of.
        cls.work = tempfile.mkdtemp(prefix="sandgate-serve-run-", dir="/var/tmp")
        os.chmod(cls.work, 0o755)
        cls.workspace = os.path.join(cls.work, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)
        # serve accepts listen.admin under /run/sandgate only (no sandbox sees it); removed by
        # serve when it stops, and by tearDownClass if it did not.
        cls.sock = os.path.join(ADMIN_DIR, os.path.basename(cls.work) + ".sock")
        cls.serve = Sandgate(
            # odd.test: allowed on a port no run here captures (the capture hint's case).
            policies={"api": {"allow": [{"host": "api.test", "ports": [80],
                                         "cidrs": ["127.0.0.0/8"]},
                                        {"host": "odd.test", "ports": [17443],
                                         "cidrs": ["127.0.0.0/8"]}]}},
            tasks=[{"name": "t1", "policy": "api"}, {"name": "t2", "policy": "api"}],
            resolve={"api.test": "127.0.0.1:%d" % cls.upstream.port},
            extra={"listen": {"proxy": "127.0.0.1:0", "metrics": "127.0.0.1:0",
                              "admin": cls.sock},
                   "transparent": {"ipv4_range": POOL_V4, "ipv6_range": POOL_V6}})
        cls.serve.start()
        probe = cls.run_cmd("true")
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            cls.tearDownClass()
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())

    @classmethod
    def tearDownClass(cls):
        cls.serve.cleanup()
        cls.upstream.close()
        subprocess.run(["rm", "-rf", cls.work], check=False)
        if os.path.lexists(cls.sock):
            os.unlink(cls.sock)

    @classmethod
    def sandgate(cls, *args, timeout=60, exe=None, **popen):
        cmd = [exe or binary(), "run", "--workspace", cls.workspace, *args]
        r = run_bounded(cmd, timeout, **popen)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    @classmethod
    def run_cmd(cls, script, *flags, task="t1"):
        return cls.sandgate("--proxy", "unix:" + cls.sock, "--task", task, *flags,
                            "--", "sh", "-c", script)

    def test_admin_socket_is_root_only(self):
        st = os.lstat(self.sock)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        self.assertEqual(st.st_uid, 0)

    def test_request_goes_through_serve_for_the_task(self):
        before = len(self.upstream.requests)
        report = os.path.join(self.work, "report.json")
        r = self.run_cmd("curl -sS 'http://api.test/bytes?n=11'", "--report", report)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "x" * 11)
        self.assertEqual(len(self.upstream.requests), before + 1)
        line = self.serve.wait_audit(task="t1", host="api.test", verdict="allow", kind="forward",
                                     mode="proxy")
        self.assertEqual(line["listener"], "127.0.0.1:3128")  # the sandbox's own listener
        with open(report) as f:
            rep = json.load(f)
        self.assertEqual(rep["task"], "t1")
        self.assertEqual(rep["policy"], "api")
        self.assertEqual(rep["requests"]["allowed"], 1)
        self.assertEqual(rep["by_host"][0]["host"], "api.test")
        self.assertGreaterEqual(rep["by_host"][0]["bytes_down"], 11)
        # serve's line names the run, so that two sandboxes of one task can be told apart.
        self.assertEqual(line["run"], os.path.basename(rep["run"]["dir"]))
        self.assertRegex(line["connection_id"], "^[0-9a-f]{16}$")
        self.assertEqual(line["request_id"], line["connection_id"] + "-1")

    def test_denied_host_gets_403_from_serve(self):
        r = self.run_cmd("curl -sS -D - -o /dev/null http://denied.test/", task="t2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(" 403", r.stdout.splitlines()[0])
        self.assertIn("x-sandgate-reason: no_matching_rule", r.stdout.lower())
        # The refusal's X-Request-Id is the audit line's request_id, and the line names its run.
        (request_id,) = [l.split(":", 1)[1].strip() for l in r.stdout.splitlines()
                         if l.lower().startswith("x-request-id:")]
        line = self.serve.wait_audit(task="t2", host="denied.test", verdict="deny")
        self.assertEqual(line["request_id"], request_id)
        self.assertRegex(line["run"] or "", r"^[A-Za-z0-9._-]+$")

    def test_serve_releases_the_listeners_after_the_run(self):
        pid = self.serve.proc.pid
        before = _open_fds(pid)
        # A denied request: no upstream connection that serve's pool could keep open.
        r = self.run_cmd("curl -s -o /dev/null http://denied.test/")
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_until(lambda: _open_fds(pid) <= before, timeout=10,
                   what="serve's descriptor count back to %d" % before)

    def held_run(self, first=""):
        """Starts `sandgate run --proxy` with a command that runs `first`, creates `started` in
        the workspace and then waits (at most 30 s) for `release`; returns the process once
        `started` exists. End it with end_held_run. Bind mode: `started` must reach the host's
        workspace (an overlay would keep it in the run's upper layer)."""
        p = subprocess.Popen(
            [binary(), "run", "--workspace", self.workspace, "--workspace-mode", "bind",
             "--allow-root-workspace",
             "--proxy", "unix:" + self.sock,
             "--task", "t1", "--", "sh", "-c",
             first + "touch started; i=0; while [ ! -e release ] && [ $i -lt 300 ]; do "
             "sleep 0.1; i=$((i+1)); done"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: os.path.exists(os.path.join(self.workspace, "started")),
                       timeout=30, what="the command to start")
        except BaseException:
            self.end_held_run(p)
            raise
        return p

    def end_held_run(self, p):
        """Lets the command of held_run end (if it still runs) and returns the run's stderr."""
        release = os.path.join(self.workspace, "release")
        open(release, "w").close()
        _, err = p.communicate(timeout=60)
        artifacts.record("log", "held-run-stderr", err)
        for name in ("started", "release"):
            path = os.path.join(self.workspace, name)
            if os.path.exists(path):
                os.unlink(path)
        return err

    def test_listeners_are_held_during_the_run(self):
        pid = self.serve.proc.pid
        before = _open_fds(pid)
        p = self.held_run()
        try:
            # two listeners (or one without IPv6) x two worker threads, plus the connection
            self.assertGreaterEqual(_open_fds(pid), before + 3)
        finally:
            err = self.end_held_run(p)
        self.assertEqual(p.returncode, 0, err)
        wait_until(lambda: _open_fds(pid) <= before, timeout=10,
                   what="serve's descriptor count back to %d" % before)

    def test_admin_socket_is_hidden_in_the_sandbox(self):
        # The sandbox's /run is its own: its /run/sandgate holds its CA bundle, no socket.
        r = self.run_cmd(f"test -S {self.sock} && echo socket-visible; "
                         f"find {ADMIN_DIR} -type s; test -f {ADMIN_DIR}/ca-bundle.pem && echo ca")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(stat.S_ISSOCK(os.lstat(self.sock).st_mode))  # there on the host...
        self.assertNotIn("socket-visible", r.stdout)  # ...not in the sandbox
        self.assertEqual(r.stdout.split(), ["ca"])

    def test_non_root_client_is_refused(self):
        # A copy nobody can execute: the build tree may sit in a directory only root can enter
        # (a clone into `mktemp -d`), which would fail before the socket is ever tried.
        exe = os.path.join(self.work, "sandgate")
        shutil.copy(binary(), exe)
        os.chmod(exe, 0o755)
        r = self.sandgate("--proxy", "unix:" + self.sock, "--task", "t1", "--", "true",
                          exe=exe, **AS_NOBODY)
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn(self.sock, r.stderr)
        self.assertIn("Permission denied (errno 13)", r.stderr)

        # A client of its own as nobody: 0 when connecting is refused, 1 when it connects.
        connect = ("import socket, sys\n"
                   "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
                   "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    sys.exit(0)\n"
                   "sys.exit(1)\n")
        r = subprocess.run(["/usr/bin/python3", "-c", connect, self.sock], capture_output=True,
                           text=True, timeout=30, **AS_NOBODY)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_protocol_speaks_json_with_a_version(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(10)
        s.connect(self.sock)
        try:
            s.send(b'{"v":1,"op":"task_env","task":"t1"}')
            rep = json.loads(s.recv(1 << 20))
            self.assertTrue(rep["ok"], rep)
            self.assertEqual(rep["policy"], "api")
            self.assertIn("BEGIN CERTIFICATE", rep["ca_pem"])
            s.send(b'{"v":1,"op":"task_env","task":"nope"}')
            rep = json.loads(s.recv(1 << 20))
            self.assertEqual(rep["reason"], "unknown_task")
            s.send(b'{"v":9,"op":"task_env","task":"t1"}')
            rep = json.loads(s.recv(1 << 20))
            self.assertEqual(rep["reason"], "unsupported_version")
            a, b = socket.socketpair()
            socket.send_fds(s, [b'{"v":1,"op":"adopt","task":"t1"}'], [a.fileno()])
            rep = json.loads(s.recv(1 << 20))
            self.assertEqual(rep["reason"], "not_a_listener")
            # serve's config decides the capture ranges; the launcher hears them in task_env.
            s.send(b'{"v":1,"op":"task_env","task":"t1"}')
            rep = json.loads(s.recv(1 << 20))
            self.assertEqual(rep["capture"], {"ports": [80, 443], "ipv4_range": POOL_V4,
                                              "ipv6_range": POOL_V6})
            socket.send_fds(s, [b'{"v":1,"op":"adopt_capture","task":"t1","ports":[80]}'],
                            [a.fileno(), a.fileno(), b.fileno()])
            rep = json.loads(s.recv(1 << 20))
            self.assertEqual(rep["reason"], "not_a_listener")
            self.assertIn("the DNS UDP socket", rep["error"])
            s.send(b'{"v":1,"op":"adopt_capture","task":"t1","ports":[80,80]}')
            rep = json.loads(s.recv(1 << 20))
            self.assertEqual(rep["reason"], "bad_request")
            a.close()
            b.close()
        finally:
            s.close()

    def test_transparent_capture_goes_through_serve(self):
        before = len(self.upstream.requests)
        report = os.path.join(self.work, "capture-report.json")
        r = self.run_cmd("getent hosts api.test; echo rc=$?; getent hosts denied.test; "
                         "echo rc=$?; " + NO_PROXY_ENV + "curl -sS http://api.test/bytes?n=5",
                         "--report", report)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("not available with --proxy", r.stderr)
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], "^" + SYNTHETIC + r"\s+api\.test")
        self.assertEqual(lines[1:], ["rc=0", "rc=2", "x" * 5])  # 2: getent's "not found"
        self.assertEqual(len(self.upstream.requests), before + 1)
        # serve audited the captured request, and the stub's answers, as transparent.
        fwd = self.serve.wait_audit(task="t1", host="api.test", kind="forward",
                                    mode="transparent")
        self.assertEqual(fwd["verdict"], "allow")
        self.assertRegex(fwd["listener"], r"^(10\.77\.|\[fd00:77:1::)")
        self.serve.wait_audit(task="t1", kind="dns", host="denied.test", reason="nxdomain",
                              mode="transparent")
        artifacts.record_file("report", "capture-report.json", report)
        with open(report) as f:
            rep = json.load(f)
        dns = rep["dns"]
        self.assertGreaterEqual(dns["answered"], 1, dns)
        self.assertGreaterEqual(dns["nxdomain"], 1, dns)
        self.assertEqual(dns["names"], 1, dns)  # api.test only: a denied name gets none
        summary = re.search(r"^sandgate run: dns: (\d+) answered, .* (\d+) names$", r.stderr,
                            re.M)
        self.assertTrue(summary, r.stderr)
        self.assertEqual((int(summary[1]), int(summary[2])), (dns["answered"], dns["names"]))
        fwd = [e for e in rep["by_host"] if e["kind"] == "forward"]
        self.assertEqual([(e["host"], e["port"], e["verdict"]) for e in fwd],
                         [("api.test", 80, "allow")])
        self.assertTrue(any(e["kind"] == "dns" for e in rep["by_host"]), rep["by_host"])

    def test_capture_hint_comes_back_from_serve(self):
        # serve's stub answers NXDOMAIN for odd.test (allowed on 17443, which this run does not
        # capture); the hint serve made must reach the run's stderr and its report.
        hint = ("odd.test: the policy allows it on port 17443, which this sandbox does not "
                "capture: add `--capture-port 17443`")
        report = os.path.join(self.work, "hint-report.json")
        r = self.run_cmd("getent hosts odd.test; echo rc=$?", "--report", report)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "rc=2\n", r.stderr)
        self.assertIn("sandgate run: dns: nxdomain for " + hint, r.stderr)
        with open(report) as f:
            self.assertEqual(json.load(f)["hints"], [hint])
        r = self.run_cmd("getent hosts odd.test >/dev/null; echo rc=$?", "--report", report,
                         "--capture-port", "17443")
        self.assertEqual(r.stdout, "rc=0\n", r.stderr)
        with open(report) as f:
            self.assertEqual(json.load(f)["hints"], [])

    def test_serve_releases_the_capture_after_the_run(self):
        pid = self.serve.proc.pid
        before = _open_fds(pid)
        # A captured connection that policy refuses (api.test is allowed on port 80 only): no
        # upstream connection that serve's pool could keep open.
        r = self.run_cmd("getent hosts api.test >/dev/null; " + NO_PROXY_ENV +
                         "curl -s -o /dev/null --max-time 5 https://api.test/; true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("sandgate run: dns: ", r.stderr)
        self.serve.wait_audit(task="t1", host="api.test", port=443, mode="transparent")
        wait_until(lambda: _open_fds(pid) <= before, timeout=10,
                   what="serve's descriptor count back to %d" % before)

    def test_killed_launcher_makes_serve_close_the_capture(self):
        pid = self.serve.proc.pid
        before = _open_fds(pid)
        resolved = os.path.join(self.workspace, "resolved")
        p = self.held_run("getent hosts api.test > resolved; ")
        try:
            with open(resolved) as f:
                self.assertRegex(f.read(), "^" + SYNTHETIC)  # serve's stub answered
            # At least: a proxy and two capture listeners (80, 443) per worker thread, the
            # DNS stub's two sockets and the admin connection.
            self.assertGreaterEqual(_open_fds(pid), before + 2 * 3 + 2 + 1)
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
        finally:
            self.end_held_run(p)  # ends the command too if it outlived its launcher
            os.unlink(resolved)
        self.assertEqual(p.returncode, -signal.SIGKILL)
        wait_until(lambda: _open_fds(pid) <= before, timeout=10,
                   what="serve's descriptor count back to %d" % before)
        self.assertIn("releasing its listeners and its capture", self.serve.stderr())

    def test_no_transparent_turns_capture_off(self):
        report = os.path.join(self.work, "proxy-only-report.json")
        r = self.run_cmd("getent hosts api.test; echo rc=$?", "--no-transparent",
                         "--report", report)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["rc=2"])
        self.assertNotIn("sandgate run: dns:", r.stderr)
        with open(report) as f:
            self.assertIsNone(json.load(f)["dns"])

    def test_errors(self):
        r = self.sandgate("--proxy", "unix:" + self.sock, "--task", "nope", "--", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no task 'nope'", r.stderr)
        missing = os.path.join(self.work, "missing.sock")
        r = self.sandgate("--proxy", "unix:" + missing, "--task", "t1", "--", "true")
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn(missing + ": No such file or directory (errno 2)", r.stderr)
        r = self.sandgate("--proxy", "tcp:127.0.0.1:1", "--task", "t1", "--", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("expected unix:PATH", r.stderr)
        r = self.sandgate("--proxy", "unix:" + self.sock, "--", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--proxy needs --task", r.stderr)


if __name__ == "__main__":
    unittest.main()
