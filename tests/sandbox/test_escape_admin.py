"""The admin socket of `sandgate serve` from the attacker's side (issue 21, item 4): a sandbox
must never reach any serve's admin socket, a client must hold the admin group itself (not only
its user in /etc/group), a task's admin_groups narrow who may use it, and serve must refuse a
listener that a sandbox would not hand over (one in serve's own network namespace would open
the task's proxy on the host's network; one not on loopback would serve it to a network).

Runs as root: it creates a user and groups (removed after), network namespaces and sandboxes.
Every connection goes to loopback, inside a namespace the test created, or to a Unix socket."""

import ctypes
import errno
import grp
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import unittest

import artifacts
from run_support import TemporaryUser, namespaces_refused, run_bounded
from sandgate_fixture import ADMIN_DIR, Sandgate, binary

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

# A client of the admin protocol, run as another user: prints the reply to task_env, or the
# errno of connect().
CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(json.dumps({"connect_errno": e.errno}))
    sys.exit(0)
s.send(json.dumps({"v": 1, "op": "task_env", "task": sys.argv[2]}).encode())
print(s.recv(1 << 20).decode())
"""

# Run inside a sandbox: tries every path given, then lists /run/sandgate (name, is a socket).
PROBE = r"""
import errno, json, os, socket, stat, sys
out = {}
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(p)
        out[p] = "connected"
    except OSError as e:
        out[p] = errno.errorcode.get(e.errno, str(e.errno))
    s.close()
d = "/run/sandgate"
out["listing"] = sorted([n, stat.S_ISSOCK(os.lstat(d + "/" + n).st_mode)]
                        for n in os.listdir(d)) if os.path.isdir(d) else None
print(json.dumps(out))
"""


def _groupadd(name):
    subprocess.run(["groupadd", name], check=True, capture_output=True, timeout=30)
    return grp.getgrnam(name).gr_gid


def _groupdel(name):
    subprocess.run(["groupdel", name], capture_output=True, timeout=30)


def _request(sock, message, fds=()):
    """One admin request (with `fds` attached) on the connected socket `sock`; its reply."""
    data = json.dumps(dict(message, v=1)).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)
    return json.loads(sock.recv(1 << 20))


def _admin(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(path)
    return s


def _listener(ip, port=0, kind=socket.SOCK_STREAM):
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    s = socket.socket(family, kind)
    s.bind((ip, port))
    if kind == socket.SOCK_STREAM:
        s.listen(4)
    return s


class Netns:
    """A network namespace of the test's own (lo up), held by a `sleep` it kills after; run()
    calls a function on a thread that joined it (setns moves only the calling thread)."""

    def __init__(self):
        self.proc = subprocess.Popen(
            ["unshare", "--net", "sh", "-c", "ip link set lo up && echo up && exec sleep 120"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if line.strip() != "up":
            err = self.proc.stderr.read()
            self.close()
            raise unittest.SkipTest("cannot create a network namespace: " + err.strip())

    def run(self, fn):
        result = {}

        def body():
            fd = os.open(f"/proc/{self.proc.pid}/ns/net", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    result["error"] = OSError(ctypes.get_errno(), "setns")
                else:
                    result["value"] = fn()
            except BaseException as e:  # re-raised on the test's thread
                result["error"] = e
            finally:
                os.close(fd)

        t = threading.Thread(target=body)
        t.start()
        t.join(30)
        if "error" in result:
            raise result["error"]
        return result["value"]

    def close(self):
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()


class EscapeAdminTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("creates users, groups and namespaces: run as root")
        cls.work = tempfile.mkdtemp(prefix="sandgate-escape-admin-", dir="/var/tmp")
        os.chmod(cls.work, 0o755)
        cls.workspace = os.path.join(cls.work, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)
        suffix = str(os.getpid() % 100000)
        cls.group = "sgadm" + suffix  # listen.admin_group
        cls.task_group = "sgtsk" + suffix  # a task's admin_groups
        cls.groups = []
        cls.user = None
        cls.serve = None
        try:
            cls.gid = _groupadd(cls.group)
            cls.groups.append(cls.group)
            cls.task_gid = _groupadd(cls.task_group)
            cls.groups.append(cls.task_group)
            cls.user = TemporaryUser().__enter__()
            # The user database lists the user in both groups; whether a process of the user
            # holds them is up to the process (subprocess's extra_groups).
            for g in (cls.group, cls.task_group):
                subprocess.run(["gpasswd", "-a", cls.user.name, g], check=True,
                               capture_output=True, timeout=30)
            cls.serve = cls.start_serve(cls.group)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.serve:
            cls.serve.cleanup()
        if cls.user:
            cls.user.__exit__(None, None, None)
        for g in cls.groups:
            _groupdel(g)
        shutil.rmtree(cls.work, ignore_errors=True)

    @classmethod
    def start_serve(cls, group, tasks=None):
        serve = Sandgate(policies={"p": {"allow": []}},
                         tasks=tasks or [{"name": "t1", "policy": "p"},
                                         {"name": "t2", "policy": "p"}])
        serve.config["listen"]["admin"] = serve.admin_path
        serve.config["listen"]["admin_group"] = group
        serve.write_config(serve.config)
        try:
            serve.start()
        except BaseException:
            serve.cleanup()
            raise
        return serve

    def as_user(self, path, task, groups):
        """CLIENT as the temporary user holding exactly `groups` (besides its own gid)."""
        r = subprocess.run(["/usr/bin/python3", "-c", CLIENT, path, task], capture_output=True,
                           text=True, timeout=30, user=self.user.uid, group=self.user.gid,
                           extra_groups=groups, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    # --- (a) ---------------------------------------------------------------------------------

    def test_admin_socket_outside_run_sandgate_is_refused_at_load(self):
        # /var/tmp and /srv are in a sandbox's view of the host; /run/sandgate.sock sits in
        # /run itself; the last one climbs out of /run/sandgate with "..".
        for path in (os.path.join(self.work, "admin.sock"), "/run/sandgate.sock",
                     "/run/sandgate/../sandgate-escape.sock"):
            with self.subTest(path=path):
                cfg = os.path.join(self.work, "outside.yaml")
                with open(cfg, "w") as f:
                    f.write("listen:\n  proxy: 127.0.0.1:0\n  admin: %s\n"
                            "policies: {p: {allow: []}}\ntasks: [{name: t1, policy: p}]\n" % path)
                p = subprocess.Popen([binary(), "serve", "--config", cfg],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                try:
                    _, err = p.communicate(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate(timeout=10)
                    self.fail("serve started with listen.admin at " + path)
                finally:
                    created = os.path.lexists(os.path.normpath(path))
                    if created and stat.S_ISSOCK(os.lstat(os.path.normpath(path)).st_mode):
                        os.unlink(os.path.normpath(path))
                self.assertNotEqual(p.returncode, 0, err)
                self.assertIn(cfg + ":3:10: listen.admin: ", err)  # file:line:col of the value
                self.assertIn("use a path under /run/sandgate/", err)
                self.assertFalse(created, "serve created " + path)

    # --- (b) ---------------------------------------------------------------------------------

    def probe(self, *run_args, paths):
        r = run_bounded([binary(), "run", "--workspace", self.workspace, *run_args, "--",
                         "/usr/bin/python3", "-c", PROBE, *paths], 60)
        artifacts.record("log", "escape-admin-run-stderr", r.stderr)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses namespaces: " + r.stderr.strip())
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_no_admin_socket_of_any_serve_is_reachable_from_a_sandbox(self):
        paths = [self.serve.admin_path]
        self.assertTrue(stat.S_ISSOCK(os.lstat(self.serve.admin_path).st_mode))  # on the host
        # A second serve whose admin socket is where a sandbox could see it: refused at load
        # (test (a)); should it start anyway, the probe below tries its socket too.
        other = Sandgate(policies={"p": {"allow": []}}, tasks=[{"name": "t1", "policy": "p"}])
        other.config["listen"]["admin"] = os.path.join(self.work, "elsewhere.sock")
        other.write_config(other.config)
        try:
            try:
                other.start(timeout=10)
                paths.append(other.config["listen"]["admin"])
            except AssertionError as e:
                self.assertIn("must be under /run/sandgate/", str(e))
            before = self.serve.stderr()
            for args in ((), ("--proxy", "unix:" + self.serve.admin_path, "--task", "t1")):
                with self.subTest(run=args or "embedded proxy"):
                    seen = self.probe(*args, paths=paths)
                    for p in paths:
                        self.assertEqual(seen[p], "ENOENT", seen)
                    # The sandbox's own /run/sandgate holds its CA bundle and no socket.
                    self.assertTrue(all(not is_sock for _, is_sock in seen["listing"] or []),
                                    seen["listing"])
            # The host's serve saw no connection from a sandbox: only the launcher of the
            # --proxy run spoke to it, and nobody was refused.
            log = self.serve.stderr()[len(before):]
            self.assertNotIn("refus", log)
            self.assertIn("for task t1", log)
        finally:
            other.cleanup()

    # --- (c) ---------------------------------------------------------------------------------

    def test_the_admin_group_must_be_held_by_the_process_itself(self):
        path = self.serve.admin_path
        st = os.lstat(path)
        self.assertEqual((stat.S_IMODE(st.st_mode), st.st_gid), (0o660, self.gid))
        # /etc/group lists the user in the group, but this process dropped it: the socket's
        # mode refuses it first...
        self.assertEqual(self.as_user(path, "t1", []), {"connect_errno": errno.EACCES})
        # ...and with the mode loosened (by hand, or a descriptor passed on), serve's own check
        # must refuse it by the process's credentials, not by the user database.
        os.chmod(path, 0o666)
        try:
            before = self.serve.stderr()
            reply = self.as_user(path, "t1", [])
            self.assertFalse(reply["ok"], reply)
            self.assertEqual(reply["reason"], "permission_denied")
            self.assertIn("uid %d" % self.user.uid, reply["error"])
            self.assertIn("refused: uid %d" % self.user.uid, self.serve.stderr()[len(before):])
        finally:
            os.chmod(path, 0o660)
        # A process that does hold the group is served.
        reply = self.as_user(path, "t1", [self.gid])
        self.assertTrue(reply["ok"], reply)
        self.assertEqual(reply["policy"], "p")

    # --- (d) ---------------------------------------------------------------------------------

    def test_listener_in_serves_own_namespace_is_refused_and_closed(self):
        own = _listener("127.0.0.1")  # the test's network namespace is serve's
        port = own.getsockname()[1]
        with _admin(self.serve.admin_path) as s:
            reply = _request(s, {"op": "adopt", "task": "t1"}, [own.fileno()])
            self.assertFalse(reply["ok"], reply)
            self.assertEqual(reply["reason"], "serve_netns")
            # The capture path has the same check: the DNS stub's sockets and a listener on
            # a capture port (the launcher names its own in "ports"), all in serve's namespace.
            env = _request(s, {"op": "task_env", "task": "t1"})
            self.assertTrue(env["ok"], env)
            udp = _listener("127.0.0.1", kind=socket.SOCK_DGRAM)
            tcp = _listener("127.0.0.1")
            reply = _request(s, {"op": "adopt_capture", "task": "t1", "ports": [port]},
                             [udp.fileno(), tcp.fileno(), own.fileno()])
            self.assertFalse(reply["ok"], reply)
            self.assertEqual(reply["reason"], "serve_netns")
            udp.close()
            tcp.close()
        own.close()
        # serve kept no copy: nobody listens on the port any more.
        probe = socket.socket()
        probe.settimeout(5)
        with self.assertRaises(ConnectionRefusedError):
            probe.connect(("127.0.0.1", port))
        probe.close()
        self.assertIn("refusing a listener", self.serve.stderr())

    def test_listener_not_on_loopback_is_refused(self):
        ns = Netns()
        try:
            # Bound to the wildcard address inside a namespace of the test's own: never
            # connected to. A sandbox's proxy listeners are on 127.0.0.1 and ::1 only.
            wildcard = ns.run(lambda: _listener("0.0.0.0"))
            dns_any = ns.run(lambda: _listener("0.0.0.0", kind=socket.SOCK_DGRAM))
            dns_tcp = ns.run(lambda: _listener("127.0.0.53"))
            capture = ns.run(lambda: _listener("0.0.0.0", 80))
            good = ns.run(lambda: _listener("127.0.0.1"))
            with _admin(self.serve.admin_path) as s:
                reply = _request(s, {"op": "adopt", "task": "t1"}, [wildcard.fileno()])
                self.assertFalse(reply["ok"], reply)
                self.assertEqual(reply["reason"], "not_loopback")
                self.assertIn("bound to 0.0.0.0", reply["error"])
                env = _request(s, {"op": "task_env", "task": "t1"})
                self.assertTrue(env["ok"], env)
                reply = _request(s, {"op": "adopt_capture", "task": "t1", "ports": [80]},
                                 [dns_any.fileno(), dns_tcp.fileno(), capture.fileno()])
                self.assertFalse(reply["ok"], reply)
                self.assertEqual(reply["reason"], "not_loopback")
                self.assertIn("the DNS UDP socket is bound to 0.0.0.0", reply["error"])
                # What a sandbox does hand over is served: a loopback listener of a namespace
                # that is not serve's. (So the refusals above are about the address alone.)
                reply = _request(s, {"op": "adopt", "task": "t1"}, [good.fileno()])
                self.assertTrue(reply["ok"], reply)
                port = good.getsockname()[1]

                def ask():
                    c = socket.create_connection(("127.0.0.1", port), timeout=5)
                    c.sendall(b"GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n")
                    data = c.recv(4096)
                    c.close()
                    return data

                self.assertTrue(ns.run(ask).startswith(b"HTTP/1.1 403 "))
                self.serve.wait_audit(task="t1", host="denied.test", verdict="deny")
                reply = _request(s, {"op": "release"})
                self.assertTrue(reply["ok"], reply)
            for sock in (wildcard, dns_any, dns_tcp, capture, good):
                sock.close()
        finally:
            ns.close()

    # --- (e) ---------------------------------------------------------------------------------

    def test_task_admin_groups_narrow_who_may_use_a_task(self):
        serve = self.start_serve(self.group, tasks=[
            {"name": "open", "policy": "p"},
            {"name": "narrow", "policy": "p", "admin_groups": [self.task_group]}])
        try:
            path = serve.admin_path
            # In listen.admin_group only: any task without admin_groups, not this one.
            self.assertTrue(self.as_user(path, "open", [self.gid])["ok"])
            reply = self.as_user(path, "narrow", [self.gid])
            self.assertFalse(reply["ok"], reply)
            self.assertEqual(reply["reason"], "permission_denied")
            self.assertIn("admin_groups", reply["error"])
            # /etc/group lists the user in the task's group too; held, it is served.
            self.assertTrue(self.as_user(path, "narrow", [self.gid, self.task_gid])["ok"])
            # Root may use every task.
            with _admin(path) as s:
                self.assertTrue(_request(s, {"op": "task_env", "task": "narrow"})["ok"])
        finally:
            serve.cleanup()
        # A group that does not exist is an error at load, at its file:line:col.
        bad = Sandgate(policies={"p": {"allow": []}},
                       tasks=[{"name": "t", "policy": "p",
                               "admin_groups": ["sgt-no-such-group"]}])
        bad.config["listen"]["admin"] = bad.admin_path
        bad.config["listen"]["admin_group"] = self.group
        bad.write_config(bad.config)
        try:
            with self.assertRaises(AssertionError) as e:
                bad.start(timeout=10)
            self.assertIn("no group named 'sgt-no-such-group'", str(e.exception))
            self.assertIn(bad.config_path + ":", str(e.exception))
        finally:
            bad.cleanup()


if __name__ == "__main__":
    unittest.main()
