"""Escape attempts through system calls, made by the workload inside a real `sandgate run`
sandbox, as root and rootless (an unprivileged user the test creates and removes):

- socket families: only AF_UNIX, AF_INET and AF_INET6 open; vsock (not namespaced: on a VM host
  it reaches the hypervisor), netlink, packet, alg, tipc, rds, kcm, bluetooth, can, xdp get
  EAFNOSUPPORT; modify_ldt is refused;
- signals: the workload's kill(0, SIGSTOP) and kill(-1, SIGSTOP) stop neither the launcher (with
  its embedded proxy and --timeout) nor its outer child; the sandbox has a session of its own;
- the launcher passes SIGINT (a terminal's ^C among them) on to the command and ends with the
  command's status; an interactive shell still reads its stdin."""

import json
import os
import platform
import pty
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import artifacts
from run_support import (TemporaryUser, descendants, namespaces_refused, proc_stat,
                         run_bounded)
from sandgate_fixture import binary

EAFNOSUPPORT = 97

# name: (family, type, protocol); socket(2) of each must fail with EAFNOSUPPORT inside.
REFUSED_FAMILIES = {
    "vsock": (40, socket.SOCK_STREAM, 0),
    "netlink": (16, socket.SOCK_RAW, 0),  # NETLINK_ROUTE, what getaddrinfo and `ip` open
    "packet": (17, socket.SOCK_DGRAM, 0),
    "alg": (38, socket.SOCK_SEQPACKET, 0),
    "tipc": (30, socket.SOCK_RDM, 0),
    "rds": (21, socket.SOCK_SEQPACKET, 0),
    "kcm": (41, socket.SOCK_DGRAM, 0),
    "bluetooth": (31, socket.SOCK_STREAM, 3),  # RFCOMM
    "can": (29, socket.SOCK_RAW, 1),  # CAN_RAW
    "xdp": (44, socket.SOCK_RAW, 0),
}
ALLOWED_FAMILIES = {
    "unix": (1, socket.SOCK_STREAM, 0),
    "inet": (2, socket.SOCK_STREAM, 0),
    "inet6": (10, socket.SOCK_STREAM, 0),
}

# Runs inside the sandbox: prints {name: errno (0 = it worked)} as JSON.
FAMILY_PROBE = r"""
import ctypes, json, socket, sys
families = json.loads(sys.argv[1])
out = {}
for name, (family, kind, proto) in families.items():
    try:
        socket.socket(family, kind, proto).close()
        out[name] = 0
    except OSError as e:
        out[name] = e.errno
for name, family in (("pair-unix", 1), ("pair-netlink", 16), ("pair-vsock", 40)):
    try:
        kind = socket.SOCK_RAW if family == 16 else socket.SOCK_STREAM
        for s in socket.socketpair(family, kind):
            s.close()
        out[name] = 0
    except OSError as e:
        out[name] = e.errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
if sys.argv[2] == "x86_64":
    # socket(2) with AF_INET in the low 32 bits (all the kernel reads) and a high bit above:
    # still refused, or high bits would carry any family past the filter.
    fd = libc.syscall(ctypes.c_long(41), ctypes.c_long(0x100000002), ctypes.c_long(1),
                      ctypes.c_long(0))
    out["high-bits"] = 0 if fd >= 0 else ctypes.get_errno()
    # modify_ldt(0, NULL, 0): reading zero bytes of an empty LDT succeeds when allowed.
    rc = libc.syscall(ctypes.c_long(154), ctypes.c_long(0), None, ctypes.c_long(0))
    out["modify_ldt"] = 0 if rc == 0 else ctypes.get_errno()
print(json.dumps(out))
"""

# Runs inside the sandbox: stops every process it may signal, then its own group (itself).
STOP_EVERYTHING = r"""
import os, signal, time
try:
    os.kill(-1, signal.SIGSTOP)  # every process it may signal but itself
except ProcessLookupError:  # none (nothing else it may signal is visible)
    pass
os.kill(0, signal.SIGSTOP)
time.sleep(60)
"""


def stat_fields(pid):
    """(state, session id) of a host pid, or None when it is gone."""
    fields = proc_stat(pid)
    return None if fields is None else (fields[0], int(fields[3]))


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class EscapeSyscallsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (root runs, and a temporary user for rootless)")
        cls.dir = tempfile.mkdtemp(prefix="sandgate-escape-sys-")
        os.chmod(cls.dir, 0o755)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    # --- running `sandgate run` as root or as a temporary user ---

    def workspace(self, user=None):
        ws = tempfile.mkdtemp(dir=self.dir, prefix="ws-")
        if user is None:
            os.chmod(ws, 0o777)  # root runs: the command runs as an unprivileged uid
        else:
            os.chown(ws, user.uid, user.gid)
            os.chmod(ws, 0o700)
        return ws

    def command(self, ws, *args):
        return [binary(), "run", "--workspace", ws, *args]

    def popen_args(self, user):
        # Its own session: a workload that reached the launcher's group must not reach ours.
        args = {"start_new_session": True}
        if user is not None:
            args.update(user.popen_args())
        return args

    def run_sandbox(self, user, ws, *args, timeout=60, **kwargs):
        r = run_bounded(self.command(ws, *args), timeout, **self.popen_args(user), **kwargs)
        artifacts.record("log", "escape-syscalls-stderr", r.stderr)
        return r

    def require_runs(self, user, ws):
        r = self.run_sandbox(user, ws, "--", "true")
        if r.returncode == 125 and namespaces_refused(r.stderr):
            who = "rootless" if user else "as root"
            self.skipTest(f"this host refuses a sandbox {who}: {r.stderr.strip()}")
        self.assertEqual(r.returncode, 0, r.stderr)

    def each_identity(self, check):
        """check(user, workspace) as root (user None), then as a temporary unprivileged user."""
        with self.subTest(identity="root"):
            ws = self.workspace()
            self.require_runs(None, ws)
            check(None, ws)
        with self.subTest(identity="rootless"), TemporaryUser() as user:
            ws = self.workspace(user)
            self.require_runs(user, ws)
            check(user, ws)

    # --- (a) socket families and modify_ldt ---

    def check_families(self, user, ws):
        families = dict(REFUSED_FAMILIES)
        have_ipv6 = socket.has_ipv6 and os.path.exists("/proc/net/if_inet6")
        families.update({k: v for k, v in ALLOWED_FAMILIES.items() if k != "inet6" or have_ipv6})
        r = self.run_sandbox(user, ws, "--", "python3", "-c", FAMILY_PROBE, json.dumps(families),
                             platform.machine())
        self.assertEqual(r.returncode, 0, r.stderr)
        seen = json.loads(r.stdout)
        for name in REFUSED_FAMILIES:
            self.assertEqual(seen[name], EAFNOSUPPORT, f"socket(AF_{name.upper()}): {seen}")
        self.assertEqual(seen["pair-netlink"], EAFNOSUPPORT, seen)
        self.assertEqual(seen["pair-vsock"], EAFNOSUPPORT, seen)
        for name in ALLOWED_FAMILIES:
            if name in families:
                self.assertEqual(seen[name], 0, f"socket(AF_{name.upper()}) must work: {seen}")
        self.assertEqual(seen["pair-unix"], 0, seen)
        if platform.machine() == "x86_64":
            self.assertEqual(seen["high-bits"], EAFNOSUPPORT, seen)
            self.assertIn(seen["modify_ldt"], (1, 38), f"modify_ldt must be refused: {seen}")

    def test_only_unix_inet_inet6_sockets_and_no_modify_ldt(self):
        self.each_identity(self.check_families)

    def test_name_resolution_still_works_without_netlink(self):
        # getaddrinfo with AI_ADDRCONFIG asks netlink which families the host has; refused, it
        # assumes both. The sandbox has no DNS: a name from /etc/hosts must still resolve.
        def check(user, ws):
            r = self.run_sandbox(user, ws, "--", "python3", "-c",
                                 "import socket; print(socket.getaddrinfo('localhost', 80, "
                                 "flags=socket.AI_ADDRCONFIG)[0][4][0])")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(r.stdout.strip(), ("127.0.0.1", "::1"))
        self.each_identity(check)

    # --- (b) the workload cannot stop its launcher ---

    def check_stop_everything(self, user, ws):
        grace = 5  # Options::killGrace
        start = time.monotonic()
        p = subprocess.Popen(self.command(ws, "--timeout", "5s", "--", "python3", "-c",
                                          STOP_EVERYTHING),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             **self.popen_args(user))
        states = {"launcher": set(), "outer child": set(), "command": set()}
        sids = {}
        try:
            deadline = start + 60
            while p.poll() is None and time.monotonic() < deadline:
                tree = descendants(p.pid)
                roles = {"launcher": p.pid}
                for pid in tree[2:]:
                    if cmdline(pid).startswith("python3 "):  # exec'd (PID 1's name differs)
                        roles["command"] = pid
                        # The outer child is the parent of PID 1, the command's parent: the
                        # launcher's other children (a short-lived helper, a sanitizer's tracer
                        # at exit) share its session and must not be taken for it.
                        command = proc_stat(pid)
                        init = proc_stat(int(command[1])) if command else None
                        outer = proc_stat(int(init[1])) if init else None
                        if outer and int(outer[1]) == p.pid:
                            roles["outer child"] = int(init[1])
                for role, pid in roles.items():
                    f = stat_fields(pid)
                    if f:
                        states[role].add(f[0])
                        sids[role] = f[1]  # the last one seen: the outer child's setsid is early
                time.sleep(0.02)
            if p.poll() is None:
                stopped = {k: v for k, v in states.items() if "T" in v}
                p.kill()  # SIGKILL ends even a stopped launcher; its sandbox dies with it
                p.wait(timeout=10)
                self.fail(f"the run did not end in 60 s (stopped: {stopped}, states {states})")
            stderr = p.stderr.read().decode(errors="replace")
            artifacts.record("log", "escape-syscalls-stderr", stderr)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            p.stdout.close()
            p.stderr.close()
        took = time.monotonic() - start
        self.assertEqual(p.returncode, 124, stderr)
        self.assertLess(took, 5 + grace + 10, stderr)
        # The attempt was made: the command stopped itself (its own group); nothing else did.
        self.assertIn("T", states["command"], f"the command never stopped: {states}")
        self.assertNotIn("T", states["launcher"], states)
        self.assertNotIn("T", states["outer child"], states)
        self.assertEqual(len(sids), 3, f"not every process was seen: {sids} {states}")
        self.assertNotEqual(sids["command"], sids["launcher"], sids)
        self.assertNotEqual(sids["outer child"], sids["launcher"], sids)
        self.assertNotEqual(sids["outer child"], sids["command"], sids)

    def test_workload_cannot_stop_the_launcher_or_its_timeout(self):
        self.each_identity(self.check_stop_everything)

    # --- (c) signals reach the command; stdin still works ---

    def check_sigint_forwarded(self, user, ws):
        marker = os.path.join(ws, "got-int")
        script = ('trap "echo int > got-int; exit 7" INT; echo ready; '
                  'while :; do sleep 1; done')
        # Bind mode: the trap's marker must reach the host's workspace.
        p = subprocess.Popen(self.command(ws, "--workspace-mode", "bind",
                                          "--allow-root-workspace", "--", "sh", "-c",
                                          script),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             **self.popen_args(user))
        try:
            ready, _, _ = select.select([p.stdout], [], [], 30)
            self.assertTrue(ready, "the command did not start within 30 s")
            self.assertEqual(p.stdout.readline(), b"ready\n")
            p.send_signal(signal.SIGINT)
            p.wait(timeout=30)
            stderr = p.stderr.read().decode(errors="replace")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            p.stdout.close()
            p.stderr.close()
        self.assertEqual(p.returncode, 7, stderr)
        with open(marker) as f:
            self.assertEqual(f.read(), "int\n")

    def test_sigint_to_the_launcher_reaches_the_command(self):
        self.each_identity(self.check_sigint_forwarded)

    def test_interactive_shell_reads_piped_stdin(self):
        def check(user, ws):
            r = subprocess.run(self.command(ws, "--", "sh", "-i"),
                               input="echo hi-$((6*7))\nexit 3\n", capture_output=True,
                               text=True, timeout=60, **self.popen_args(user))
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("hi-42", r.stdout)
        self.each_identity(check)

    def test_ctrl_c_at_a_terminal_reaches_the_command(self):
        # A real terminal: the launcher leads the session that owns the pty (setsid --ctty);
        # ^C typed there signals the terminal's foreground group, which holds the launcher only.
        if not shutil.which("setsid"):
            self.skipTest("util-linux setsid is not installed")
        ws = self.workspace()
        self.require_runs(None, ws)
        master, slave = pty.openpty()
        script = ('trap "echo trapped-int; exit 7" INT; read line; echo "got-$line"; '
                  'echo ready; while :; do sleep 1; done')
        p = subprocess.Popen(["setsid", "--ctty", *self.command(ws, "--", "sh", "-c", script)],
                             stdin=slave, stdout=slave, stderr=slave)
        os.close(slave)
        out = b""

        def read_until(needle, seconds):
            nonlocal out
            deadline = time.monotonic() + seconds
            while needle not in out and time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(master, 4096)
                    except OSError:  # EIO: every slave end is closed
                        return
                    if not chunk:
                        return
                    out += chunk

        try:
            os.write(master, b"typed\n")
            read_until(b"ready", 30)
            self.assertIn(b"got-typed", out, "the command did not read the terminal")
            os.write(master, b"\x03")  # ^C: the terminal's SIGINT
            read_until(b"trapped-int", 30)
            p.wait(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            os.close(master)
        self.assertIn(b"trapped-int", out, out.decode(errors="replace"))
        self.assertEqual(p.returncode, 7, out.decode(errors="replace"))


if __name__ == "__main__":
    unittest.main()
