"""Attempts to get out of `sandgate run`'s view, made from inside a real sandbox: host Unix
sockets outside /run and /tmp, other users' and runs' files, /sys, a workspace redirected by a
planted link, an unsafe default workspace, a directory handed in as stdin, and a secret the
host rotates while a sandbox runs. Each test asserts the attempt failed and what the host saw.

Runs as root (CI is root); the rootless variants run as an unprivileged user the test creates
and removes. Where the kernel refuses namespaces the file skips with the reason."""

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import artifacts
from run_support import TemporaryUser, namespaces_refused, run_bounded
from sandgate_fixture import binary

ID_RANGE_FIRST = 0x7E000000
SECRET = "sk-escape-view-rotated-7c1d2e3f4a5b"
ROTATED = "sk-escape-view-rotated-NEW-9e8d7c6b"


class UnixServer:
    """A Unix socket server at `path` that counts the connections it accepts."""

    def __init__(self, path, mode=0o777):
        self.path = path
        self.accepted = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, mode)
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted += 1
            c.sendall(b"HOST-SOCKET-ANSWERED\n")
            c.close()

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        self.sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


CONNECT_ALL = (
    "import socket,sys\n"
    "for p in sys.argv[1:]:\n"
    "  s=socket.socket(socket.AF_UNIX)\n"
    "  try:\n"
    "    s.connect(p); print(p,'CONNECTED',s.recv(64))\n"
    "  except OSError as e:\n"
    "    print(p,'errno',e.errno)\n")


class EscapeViewTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (as CI runs): the rootless variants create a user")
        cls.dir = tempfile.mkdtemp(prefix="sandgate-escape-")
        os.chmod(cls.dir, 0o755)
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        with open(cls.config, "w") as f:
            json.dump({"policies": {"nothing": {"allow": []}},
                       "tasks": [{"name": "t", "policy": "nothing"}]}, f)
        os.chmod(cls.config, 0o644)
        cls.workspace = cls.new_workspace()
        probe = cls.sandgate(["true"])
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def new_workspace(cls, mode=0o755, owner=None):
        """A new workspace, root's or `owner`'s (a TemporaryUser: its uid and its own gid)."""
        ws = tempfile.mkdtemp(dir=cls.dir, prefix="ws-")
        os.chmod(ws, mode)
        if owner is not None:
            os.chown(ws, owner.uid, owner.gid)
        return ws

    @classmethod
    def sandgate(cls, argv, *flags, workspace=None, config=None, timeout=60, **kwargs):
        cmd = [binary(), "run", "--config", config or cls.config]
        if workspace is not False:
            cmd += ["--workspace", workspace or cls.workspace]
        cmd += [*flags, "--", *argv]
        r = run_bounded(cmd, timeout, **kwargs)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    def sh(self, script, *flags, **kwargs):
        return self.sandgate(["sh", "-c", script], *flags, **kwargs)

    # --- 2. host Unix sockets; the view is an allowlist -------------------------------------

    def host_socket_dirs(self):
        """Directories outside /run and /tmp where host services keep sockets, made for the test
        (and removed after)."""
        dirs = []
        for parent in ("/var/tmp", "/var/lib", "/srv", "/home", "/opt"):
            if os.path.isdir(parent):
                d = tempfile.mkdtemp(dir=parent, prefix="sandgate-escape-")
                os.chmod(d, 0o755)
                dirs.append(d)
        self.addCleanup(lambda: [shutil.rmtree(d, ignore_errors=True) for d in dirs])
        return dirs

    def check_host_sockets_unreachable(self, run):
        servers = [UnixServer(os.path.join(d, "daemon.sock")) for d in self.host_socket_dirs()]
        try:
            r = run(["python3", "-c", CONNECT_ALL] + [s.path for s in servers])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("CONNECTED", r.stdout)
            for s in servers:
                self.assertIn(f"{s.path} errno 2", r.stdout)  # ENOENT: not in the view at all
                self.assertEqual(s.accepted, 0, s.path)
        finally:
            for s in servers:
                s.close()

    def test_host_unix_sockets_outside_run_and_tmp_are_not_in_the_view(self):
        self.check_host_sockets_unreachable(lambda argv: self.sandgate(argv))

    def test_rootless_host_unix_sockets_are_not_in_the_view(self):
        with TemporaryUser() as user:
            ws = self.new_workspace(owner=user)
            self.check_host_sockets_unreachable(
                lambda argv: self.sandgate(argv, workspace=ws, **user.popen_args()))

    def test_root_holds_only_the_allowlisted_directories(self):
        r = self.sh("ls -A /; echo ==; ls -A /home /var /srv /opt /root /mnt 2>&1; echo ==; "
                    "wc -c < /etc/shadow; ls -A /etc/ssh 2>&1 | wc -l; echo ==; "
                    "touch /new-top-level 2>&1; echo top=$?")
        self.assertEqual(r.returncode, 0, r.stderr)
        top, rest, etc, touch = r.stdout.split("==\n")
        listed = set(top.split())
        self.assertTrue({"usr", "etc", "tmp", "proc", "dev", "run", "sys"} <= listed, listed)
        self.assertNotIn("work", listed)  # the host's other top-level directories are absent
        self.assertNotIn(os.path.basename(self.dir), rest)
        # Empty directories, whatever the host holds there (the home of root included).
        for line in rest.splitlines():
            self.assertFalse(line and not line.endswith(":"), f"{line!r} listed in {rest!r}")
        self.assertEqual(etc.split()[:2], ["0", "0"])  # /etc/shadow and /etc/ssh: hidden
        self.assertIn("top=1", touch)

    def test_other_users_files_are_not_in_the_view(self):
        # Secrets the old 12-name denylist missed, in a home under /home that the test makes for
        # a user (not under /tmp, which is private anyway).
        with TemporaryUser() as user:
            home = tempfile.mkdtemp(dir="/home" if os.path.isdir("/home") else "/var/tmp",
                                    prefix="sandgate-escape-")
            self.addCleanup(shutil.rmtree, home, True)
            files = {".config/hub/token": "hub", ".cargo/credentials.toml": "cargo",
                     ".pgpass": "pg", ".vault-token": "vault", ".bash_history": "history"}
            for rel, content in files.items():
                path = os.path.join(home, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(f"SECRET-{content}")
                os.chmod(path, 0o644)
            for root, dirs, _ in os.walk(home):
                for d in dirs:
                    os.chmod(os.path.join(root, d), 0o755)
            os.chmod(home, 0o755)
            os.chown(home, user.uid, user.gid)
            r = self.sh("for f in " + " ".join(os.path.join(home, k) for k in files) +
                        "; do cat $f 2>&1; done; ls -A " + home + " 2>&1; true")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("SECRET-", r.stdout)
            self.assertIn("No such file or directory", r.stdout)

    def test_sys_is_the_sandboxes_own(self):
        host_nics = sorted(os.listdir("/sys/class/net"))
        r = self.sh("ls /sys/class/net; echo ==; ls -A /sys/fs/cgroup 2>&1 | wc -l")
        self.assertEqual(r.returncode, 0, r.stderr)
        nics, cgroups = r.stdout.split("==\n")
        self.assertEqual(nics.split(), ["lo"], f"host: {host_nics}")
        self.assertEqual(cgroups.strip(), "0")

    def test_ro_path_is_read_only_and_secrets_and_config_in_it_stay_hidden(self):
        # A toolchain directory shown on purpose, which also holds a secret and the config.
        tool = tempfile.mkdtemp(dir=self.dir, prefix="toolchain-")
        os.chmod(tool, 0o755)
        os.makedirs(os.path.join(tool, "creds"))
        os.makedirs(os.path.join(tool, "conf"))
        with open(os.path.join(tool, "tool.txt"), "w") as f:
            f.write("TOOL-VISIBLE")
        with open(os.path.join(tool, "creds", "key"), "w") as f:
            f.write(SECRET)
        artifacts.register_secret("escape-view", SECRET)
        config = os.path.join(tool, "conf", "sandgate.yaml")
        with open(config, "w") as f:
            json.dump({"policies": {"p": {"allow": []}},
                       "credentials": {"c": {"source": {"file": os.path.join(tool, "creds",
                                                                             "key")},
                                             "hosts": ["x.test"],
                                             "inject": {"header": "X-Key", "value": "{secret}"}}},
                       "tasks": [{"name": "t", "policy": "p"}]}, f)
        for root, dirs, files in os.walk(tool):
            for n in dirs + files:
                os.chmod(os.path.join(root, n), 0o755)
        r = self.sh(f"cat {tool}/tool.txt; echo; touch {tool}/x 2>&1; echo touch=$?; "
                    f"cat {tool}/creds/key {config} 2>&1; echo ==; ls -A {tool}; echo ==; "
                    f"grep -c -e {tool}/creds -e {tool}/conf /proc/self/mountinfo; true",
                    "--ro", tool, config=config)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("TOOL-VISIBLE", r.stdout)
        self.assertIn("Read-only file system", r.stdout)
        self.assertIn("touch=1", r.stdout)
        self.assertNotIn(SECRET, r.stdout)
        self.assertNotIn("policies", r.stdout)  # the config file is hidden too
        self.assertFalse(os.path.exists(os.path.join(tool, "x")))
        # Left out of the shown directory, not covered: no name of theirs in the view or in the
        # mount table (issue 37, item 9).
        _, listing, mounts = r.stdout.split("==\n")
        self.assertEqual(listing.split(), ["tool.txt"])
        self.assertEqual(mounts.strip(), "0")

    def test_ro_path_under_run_is_refused(self):
        r = self.sh("echo RAN", "--ro", "/run")
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn("host sockets stay connectable", r.stderr)
        self.assertNotIn("RAN", r.stdout)

    # --- 3. one identity per run ------------------------------------------------------------

    def test_every_run_has_its_own_uid_outside_the_user_database(self):
        r1 = self.sh("id -u; id -g")
        r2 = self.sh("id -u; id -g")
        self.assertEqual(r1.returncode, 0, r1.stderr)
        u1, g1 = map(int, r1.stdout.split())
        u2, _ = map(int, r2.stdout.split())
        for uid in (u1, u2):
            self.assertGreaterEqual(uid, ID_RANGE_FIRST)
            self.assertLess(uid, ID_RANGE_FIRST + 65536)
            with self.assertRaises(KeyError):
                pwd.getpwuid(uid)
        self.assertEqual(u1, g1)

    def test_concurrent_runs_cannot_reach_each_other(self):
        # Run A serves a 0777 socket in its workspace and holds a file; run B, at the same time,
        # tries both and reads A's uid.
        ws_a, ws_b = self.new_workspace(), self.new_workspace()
        with open(os.path.join(ws_a, "private.txt"), "w") as f:
            f.write("A-ONLY")
        server = ("import socket,os,time\n"
                  "s=socket.socket(socket.AF_UNIX); s.bind('a.sock'); os.chmod('a.sock',0o777)\n"
                  "s.listen(1); s.settimeout(20); open('ready','w').write(str(os.getuid()))\n"
                  "try:\n  c,_=s.accept(); c.sendall(b'A-ANSWERED'); print('A accepted')\n"
                  "except OSError as e: print('A timeout')\n")
        # Run A in bind mode: its `ready` file must reach the host's workspace.
        a = subprocess.Popen([binary(), "run", "--config", self.config, "--workspace", ws_a,
                              "--workspace-mode", "bind", "--allow-root-workspace",
                              "--timeout", "40s", "--", "python3",
                              "-c", server],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(ws_a, "ready")):
                self.assertLess(time.monotonic(), deadline, "run A did not start")
                self.assertIsNone(a.poll(), a.stderr.read() if a.poll() is not None else "")
                time.sleep(0.05)
            b = self.sandgate(["python3", "-c", CONNECT_ALL + f"""
for p in ['{ws_a}/private.txt', '{ws_a}']:
  try: print(p, 'READ', open(p).read())
  except OSError as e: print(p, 'errno', e.errno)
import os; print('uid', os.getuid())
""", os.path.join(ws_a, "a.sock")], workspace=ws_b)
            self.assertEqual(b.returncode, 0, b.stderr)
            self.assertIn("a.sock errno 2", b.stdout)
            self.assertNotIn("A-ANSWERED", b.stdout)
            self.assertNotIn("A-ONLY", b.stdout)
            with open(os.path.join(ws_a, "ready")) as f:
                uid_a = int(f.read())
            uid_b = int(b.stdout.split("uid ")[1].split()[0])
            self.assertNotEqual(uid_a, uid_b)
        finally:
            a.kill()
            a.communicate(timeout=30)

    def test_root_owned_workspace_is_writable_and_files_belong_to_its_owner(self):
        ws = self.new_workspace(mode=0o755)  # root-owned, as in CI and containers
        with open(os.path.join(ws, "existing.txt"), "w") as f:
            f.write("old")
        os.chmod(os.path.join(ws, "existing.txt"), 0o644)
        # Bind mode: what the run writes lands in the host's workspace, owned by its owner.
        r = self.sh("echo new > created.txt && echo more >> existing.txt && mkdir d && "
                    "stat -c '%u' existing.txt && id -u", "--workspace-mode", "bind",
                    "--allow-root-workspace", workspace=ws)
        if "cannot be idmapped" in r.stderr:
            self.skipTest("the kernel or this filesystem refuses idmapped mounts: " + r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)
        owner_inside, uid = r.stdout.split()
        self.assertEqual(owner_inside, uid)  # the workspace owner's files are the run's inside
        for name in ("created.txt", "d", "existing.txt"):
            self.assertEqual(os.stat(os.path.join(ws, name)).st_uid, 0, name)
        with open(os.path.join(ws, "existing.txt")) as f:
            self.assertEqual(f.read(), "oldmore\n")

    def test_user_owned_workspace_files_belong_to_that_user(self):
        with TemporaryUser() as user:
            ws = self.new_workspace(owner=user)
            r = self.sh("touch made-inside", "--workspace-mode", "bind", workspace=ws)
            self.assertEqual(r.returncode, 0, r.stderr)
            st = os.stat(os.path.join(ws, "made-inside"))
            self.assertEqual((st.st_uid, st.st_gid), (user.uid, user.gid))

    # --- 8, 9. the workspace: links and unsafe places ----------------------------------------

    def test_workspace_through_a_planted_link_is_refused(self):
        victim = tempfile.mkdtemp(dir=self.dir, prefix="victim-")
        ws = self.new_workspace()
        # An earlier run plants a link in its (persistent: bind mode) workspace; the next run,
        # in overlay mode (the default), is asked to use it.
        r = self.sh(f"ln -s {victim} next", "--workspace-mode", "bind", "--allow-root-workspace",
                    workspace=ws)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.sh("touch written-through-link", workspace=os.path.join(ws, "next"))
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn("symbolic link", r.stderr)
        self.assertEqual(os.listdir(victim), [])

    def test_unsafe_workspaces_are_refused(self):
        with TemporaryUser() as user:
            secret_dir = tempfile.mkdtemp(dir=self.dir, prefix="secrets-")
            secret = os.path.join(secret_dir, "key")
            with open(secret, "w") as f:
                f.write(SECRET)
            artifacts.register_secret("escape-view", SECRET)
            config = os.path.join(self.dir, "with-secret.yaml")
            with open(config, "w") as f:
                json.dump({"policies": {"p": {"allow": []}},
                           "credentials": {"c": {"source": {"file": secret}, "hosts": ["x.test"],
                                                 "inject": {"header": "X-Key",
                                                            "value": "{secret}"}}},
                           "tasks": [{"name": "t", "policy": "p"}]}, f)
            cases = {"/": "system or shared", "/tmp": "system or shared",
                     "/var/tmp": "system or shared", "/etc": "under /etc", "/usr": "system or",
                     "/run": "under /run", user.home: "home directory",
                     pwd.getpwuid(0).pw_dir: "home directory", secret_dir: "which the sandbox",
                     self.dir: "which the sandbox"}
            for ws, why in cases.items():
                with self.subTest(workspace=ws):
                    r = self.sh("echo RAN", workspace=ws, config=config)
                    self.assertEqual(r.returncode, 125, r.stderr)
                    self.assertIn("refusing the workspace", r.stderr)
                    self.assertIn(why, r.stderr)
                    self.assertNotIn("RAN", r.stdout)
            # The default workspace is the current directory: from /tmp or a home, refused too.
            for cwd in ("/tmp", user.home):
                r = self.sandgate(["sh", "-c", "echo RAN"], workspace=False, cwd=cwd)
                self.assertEqual(r.returncode, 125, r.stderr)
                self.assertIn("refusing the workspace", r.stderr)
                self.assertNotIn("RAN", r.stdout)
            # Rootless, from its own home.
            args = user.popen_args()
            r = self.sandgate(["sh", "-c", "echo RAN > .bashrc"], workspace=False, **args)
            self.assertEqual(r.returncode, 125, r.stderr)
            self.assertIn("home directory", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(user.home, ".bashrc")))

    # --- 11. stdio ---------------------------------------------------------------------------

    def test_a_directory_as_stdin_does_not_escape_the_view(self):
        outside = tempfile.mkdtemp(dir=self.dir, prefix="outside-")
        fd = os.open(outside, os.O_RDONLY | os.O_DIRECTORY)
        try:
            r = self.sandgate(["python3", "-c",
                               "import os\ntry:\n  os.fchdir(0); open('escaped','w');"
                               " print('ESCAPED', os.listdir('.'))\n"
                               "except OSError as e: print('errno', e.errno)"], stdin=fd)
        finally:
            os.close(fd)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("ESCAPED", r.stdout)
        self.assertIn("errno 20", r.stdout)  # ENOTDIR: stdin is /dev/null
        self.assertIn("stdin is a directory", r.stderr)
        self.assertEqual(os.listdir(outside), [])


if __name__ == "__main__":
    unittest.main()
