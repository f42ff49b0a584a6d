"""The SSH broker (proxy/ssh/, issue #42) between a real OpenSSH client / git and a real sshd,
from the attacker's side: git clone, fetch and push under git rules, a wrong pinned host key,
and everything that is not git refused with a reason. SshBroker drives the core alone
(tests/integration/ssh_session_harness.cc); test_ssh_broker_serve.py goes through serve.

The sshd is this test's own: loopback, its own config, host key and authorized_keys in a temp
directory, a git user (uid 61042, gid 66042, shell git-shell) created here and removed after.
"""
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import artifacts

HARNESS = os.environ.get("SSH_SESSION_HARNESS", "")
SSHD = "/usr/sbin/sshd"
GIT_SHELL = shutil.which("git-shell") or "/usr/bin/git-shell"
# Each test module has its own user and ids (CTest may run the modules at once).
USER = "sgssh42"
UID = 61042
TIMEOUT = 60


def run(cmd, **kw):
    kw.setdefault("timeout", TIMEOUT)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited: {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} did not listen on {port}")


def keygen(path):
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", path], check=True)
    with open(path + ".pub") as f:
        return " ".join(f.read().split()[:2])


@unittest.skipUnless(os.geteuid() == 0 and HARNESS and os.path.exists(SSHD),
                     "needs root, sshd (openssh-server) and the harness")
class SshBroker(unittest.TestCase):
    user = USER
    uid = UID

    @classmethod
    def setUpClass(cls):
        # unittest skips tearDownClass when setUpClass fails: the user and processes made so
        # far are removed here then.
        try:
            cls._set_up()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _set_up(cls):
        cls._set_up_sshd()
        cls.port, cls.out = cls._start_harness("pins", ["refs/heads/agent/*"])
        cls.wrong_port, cls.wrong_out = cls._start_harness("wrong_pins", ["refs/heads/agent/*"])
        cls.archive_port, cls.archive_out = cls._start_harness(
            "pins", ["refs/heads/agent/*", "+archive"], tag="archive")

    @classmethod
    def _set_up_sshd(cls):
        """The git user, the keys, the bare repositories and the sshd (no harness)."""
        cls.procs = []
        cls.dir = tempfile.mkdtemp(prefix="sg-ssh-")
        os.chmod(cls.dir, 0o755)
        d = cls.dir
        cls.home = os.path.join(d, "home")
        os.makedirs(cls.home)
        cls._create_user()
        cls.sshd_pub = keygen(os.path.join(d, "sshd_host_key"))
        cls.deploy_pub = keygen(os.path.join(d, "deploy_key"))
        cls.broker_pub = keygen(os.path.join(d, "broker_host_key"))
        cls.other_pub = keygen(os.path.join(d, "other_key"))
        with open(os.path.join(d, "deploy_key")) as f:
            cls.deploy_secret = f.read()
        # For the suite's leak check: the key, and each line of its body (a line is what a
        # log or a message would carry of it).
        artifacts.register_secret("ssh-deploy-key", cls.deploy_secret)
        for i, line in enumerate(cls.deploy_secret.splitlines()[1:-1]):
            if len(line) >= 32:
                artifacts.register_secret(f"ssh-deploy-key-line{i}", line)
        with open(os.path.join(d, "authorized_keys"), "w") as f:
            f.write(cls.deploy_pub + "\n")
        # The bare repositories the git user serves, seeded with one commit on main.
        for repo in ("org/repo.git", "org/other.git"):
            path = os.path.join(cls.home, repo)
            run(["git", "init", "-q", "--bare", "-b", "main", path], check=True)
        seed = os.path.join(d, "seed")
        run(["git", "init", "-q", "-b", "main", seed], check=True)
        with open(os.path.join(seed, "README"), "w") as f:
            f.write("hello over ssh\n")
        git_id = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
        run(["git", "-C", seed] + git_id + ["add", "README"], check=True)
        run(["git", "-C", seed] + git_id + ["commit", "-qm", "seed"], check=True)
        for repo in ("org/repo.git", "org/other.git"):
            run(["git", "-C", seed, "push", "-q", os.path.join(cls.home, repo), "main"],
                check=True)
        run(["chown", "-R", f"{cls.uid}:{cls.gid()}", cls.home], check=True)
        cls._start_sshd()
        with open(os.path.join(d, "pins"), "w") as f:
            f.write(f"[127.0.0.1]:{cls.sshd_port} {cls.sshd_pub}\n")
        with open(os.path.join(d, "wrong_pins"), "w") as f:
            f.write(f"[127.0.0.1]:{cls.sshd_port} {cls.other_pub}\n")

    @classmethod
    def tearDownClass(cls):
        for p in getattr(cls, "procs", []):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        for out in (getattr(cls, "out", None), getattr(cls, "wrong_out", None),
                    getattr(cls, "archive_out", None)):
            artifacts.record_file("log", "ssh-harness", out)
        if getattr(cls, "created_user", False):
            # sshd's per-connection processes outlive its killed listener for a moment, and
            # userdel refuses a user with a process: bounded retries, then say so.
            deadline = time.monotonic() + 10
            while run(["userdel", cls.user]).returncode == 8 and time.monotonic() < deadline:
                time.sleep(0.1)
            run(["groupdel", cls.user])
        if hasattr(cls, "dir") and not os.environ.get("SG_SSH_KEEP"):
            shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def gid(cls):
        # Not the uid: a uid taken for a gid (or the reverse) must show, as it would not if
        # both were one number.
        return cls.uid + 5000

    @classmethod
    def _create_user(cls):
        for name in (cls.user,):
            try:
                pwd.getpwnam(name)
                raise AssertionError(f"user {name} exists already: not ours to reuse")
            except KeyError:
                pass
        cls.created_user = True
        run(["groupadd", "-g", str(cls.gid()), cls.user], check=True)
        run(["useradd", "-u", str(cls.uid), "-g", str(cls.gid()), "-d", cls.home, "-M", "-s", GIT_SHELL,
             cls.user], check=True)
        # useradd leaves the password locked ("!"), which sshd without PAM takes for a locked
        # account even for key logins; "*" is no password at all, and not locked.
        run(["usermod", "-p", "*", cls.user], check=True)

    @classmethod
    def _start_sshd(cls):
        d = cls.dir
        cls.sshd_port = free_port()
        cfg = os.path.join(d, "sshd_config")
        with open(cfg, "w") as f:
            f.write(f"""ListenAddress 127.0.0.1
Port {cls.sshd_port}
HostKey {d}/sshd_host_key
AuthorizedKeysFile {d}/authorized_keys
PidFile {d}/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowUsers {cls.user}
""")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        log = open(os.path.join(d, "sshd.log"), "w")
        p = subprocess.Popen([SSHD, "-D", "-e", "-f", cfg], stdout=log, stderr=log)
        cls.procs.append(p)
        wait_port(cls.sshd_port, p, "sshd")

    @classmethod
    def _start_harness(cls, pins, refs, tag=None):
        d = cls.dir
        port_file = os.path.join(d, f"harness-{tag or pins}.port")
        out = os.path.join(d, f"harness-{tag or pins}.out")
        p = subprocess.Popen([HARNESS, port_file, str(cls.sshd_port),
                              os.path.join(d, "broker_host_key"), cls.user,
                              os.path.join(d, pins), os.path.join(d, "deploy_key"),
                              "org/repo"] + refs,
                             stdout=open(out, "w"), stderr=subprocess.STDOUT)
        cls.procs.append(p)
        deadline = time.monotonic() + 20
        while not os.path.exists(port_file):
            if p.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"harness did not start: {open(out).read()}")
            time.sleep(0.05)
        port = int(open(port_file).read())
        with open(os.path.join(d, f"known-{port}"), "w") as f:
            f.write(f"[127.0.0.1]:{port} {cls.broker_pub}\n")
        return port, out

    def ssh_args(self, port=None):
        port = port or self.port
        return ["ssh", "-F", "/dev/null", "-p", str(port),
                "-o", f"UserKnownHostsFile={self.dir}/known-{port}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10"]

    def git(self, args, port=None, cwd=None):
        env = dict(os.environ, GIT_SSH_COMMAND=" ".join(self.ssh_args(port)),
                   GIT_TERMINAL_PROMPT="0")
        r = run(["git"] + args, env=env, cwd=cwd)
        self.assert_no_secret(r.stdout + r.stderr)
        return r

    def events(self, out=None):
        with open(out or self.out) as f:
            text = f.read()
        self.assert_no_secret(text)
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def wait_event(self, pred, out=None, since=0):
        """The last event matching `pred` among those after the first `since`."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            found = [e for e in self.events(out)[since:] if pred(e)]
            if found:
                return found[-1]
            time.sleep(0.05)
        self.fail(f"no such event in {self.events(out)}")

    def assert_no_secret(self, text):
        artifacts.record("response", "ssh-client", text)
        body = "".join(self.deploy_secret.splitlines()[1:-1])
        for chunk in (body[i:i + 40] for i in range(0, len(body), 40)):
            self.assertNotIn(chunk, text.replace("\n", ""))

    def url(self, repo, port=None):
        return f"ssh://git@127.0.0.1:{port or self.port}/{repo}"

    def clone(self, name):
        dest = os.path.join(self.dir, name)
        r = self.git(["clone", "-q", self.url("org/repo.git"), dest])
        self.assertEqual(r.returncode, 0, r.stderr)
        return dest

    def test_clone_and_fetch(self):
        since = len(self.events())
        dest = self.clone("c1")
        with open(os.path.join(dest, "README")) as f:
            self.assertEqual(f.read(), "hello over ssh\n")
        self.assertEqual(self.git(["-C", dest, "fetch", "-q"]).returncode, 0)
        e = self.wait_event(lambda e: e["event"] == "session" and
                            e["service"] == "git-upload-pack" and e["git"], since=since)
        self.assertEqual(e["repository"], "org/repo")
        self.assertEqual(e["exit"], 0)

    def commit(self, dest, text):
        with open(os.path.join(dest, "f.txt"), "w") as f:
            f.write(text)
        git_id = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
        run(["git", "-C", dest] + git_id + ["add", "f.txt"], check=True)
        run(["git", "-C", dest] + git_id + ["commit", "-qm", text], check=True)

    def bare_rev(self, ref):
        r = run(["git", "--git-dir", os.path.join(self.home, "org/repo.git"), "rev-parse",
                 "--verify", "-q", ref])
        return r.stdout.strip()

    def test_push_to_allowed_ref(self):
        dest = self.clone("c2")
        self.commit(dest, "agent work")
        r = self.git(["-C", dest, "push", "origin", "HEAD:refs/heads/agent/one"])
        self.assertEqual(r.returncode, 0, r.stderr)
        head = run(["git", "-C", dest, "rev-parse", "HEAD"]).stdout.strip()
        self.assertEqual(self.bare_rev("refs/heads/agent/one"), head)

    def test_push_to_protected_ref_prints_reason(self):
        dest = self.clone("c3")
        before = self.bare_rev("refs/heads/main")
        since = len(self.events())
        self.commit(dest, "sneaky")
        r = self.git(["-C", dest, "push", "origin", "HEAD:main"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("git_ref_not_allowed", r.stderr)
        self.assertIn("[remote rejected]", r.stderr)
        self.assertEqual(self.bare_rev("refs/heads/main"), before)
        self.wait_event(lambda e: e["event"] == "session" and
                        e["reason"] == "git_ref_not_allowed" and "refs/heads/main" in e["refs"],
                        since=since)

    def test_mixed_push_is_refused_whole(self):
        dest = self.clone("c4")
        self.commit(dest, "mixed")
        r = self.git(["-C", dest, "push", "origin", "HEAD:refs/heads/agent/two", "HEAD:main"])
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(self.bare_rev("refs/heads/agent/two"), "")

    def test_repository_outside_rules(self):
        r = self.git(["clone", "-q", self.url("org/other.git"), os.path.join(self.dir, "o")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("git_repository_not_allowed", r.stderr)

    def test_wrong_pinned_host_key_fails_closed(self):
        r = self.git(["clone", "-q", self.url("org/repo.git", self.wrong_port),
                      os.path.join(self.dir, "w")], port=self.wrong_port)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("upstream_host_key_mismatch", r.stderr)
        self.wait_event(lambda e: e["event"] == "session" and
                        e["reason"] == "upstream_host_key_mismatch", self.wrong_out)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "w", "README")))

    def test_archive_only_where_the_rule_allows_it(self):
        # git.archive: true (the harness's "+archive"): git archive --remote gets main's tree.
        tar = os.path.join(self.dir, "main.tar")
        r = self.git(["archive", f"--remote={self.url('org/repo.git', self.archive_port)}",
                      "-o", tar, "main"], port=self.archive_port)
        self.assertEqual(r.returncode, 0, r.stderr)
        listing = run(["tar", "-tf", tar])
        self.assertEqual(listing.stdout.split(), ["README"])
        e = self.wait_event(lambda e: e["event"] == "session" and
                            e["service"] == "git-upload-archive", self.archive_out)
        self.assertEqual(e["reason"], "")
        self.assertTrue(e["git"])
        # Not outside git.repositories, even with archive: true.
        r = self.git(["archive", f"--remote={self.url('org/other.git', self.archive_port)}",
                      "main"], port=self.archive_port)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("git_repository_not_allowed", r.stderr)
        # Without git.archive: refused with its reason, nothing went upstream.
        since = len(self.events())
        r = self.git(["archive", f"--remote={self.url('org/repo.git')}", "main"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("git_archive_not_allowed", r.stderr)
        e = self.wait_event(lambda e: e["event"] == "session" and
                            e["service"] == "git-upload-archive", since=since)
        self.assertEqual(e["reason"], "git_archive_not_allowed")
        self.assertFalse(e["git"])

    def ssh(self, extra, command=None):
        args = self.ssh_args() + extra + ["git@127.0.0.1"]
        if command is not None:
            args.append(command)
        r = run(args, stdin=subprocess.DEVNULL)
        self.assert_no_secret(r.stdout + r.stderr)
        return r

    def test_other_commands_are_refused(self):
        cases = [
            ("id", "ssh_command_refused"),
            ("git-upload-pack 'org/repo.git'; id", "ssh_command_refused"),
            ("git-upload-pack '../org/repo.git'", "ssh_command_refused"),
            ("git-upload-pack 'org/../org/repo.git'", "ssh_command_refused"),
            ("git-upload-pack '--help'", "ssh_command_refused"),
            ("git-upload-pack 'org/repo.git\nid'", "ssh_command_refused"),
            ("git-upload-pack $(id)", "ssh_command_refused"),
        ]
        for command, reason in cases:
            with self.subTest(command=command):
                r = self.ssh([], command)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(reason, r.stderr)

    def test_shell_is_refused(self):
        r = self.ssh(["-T"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ssh_shell_refused", r.stderr)

    def test_sftp_is_refused(self):
        r = self.ssh(["-s"], "sftp")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ssh_subsystem_refused", r.stderr)

    def test_port_forwarding_is_refused(self):
        # -W opens a direct-tcpip channel at once, as -L does for each local connection.
        r = self.ssh(["-W", f"127.0.0.1:{self.sshd_port}"])
        self.assertNotEqual(r.returncode, 0)
        self.wait_event(lambda e: e["event"] == "refusal" and
                        e["reason"] == "ssh_forwarding_refused")
        r = self.ssh(["-o", "ExitOnForwardFailure=yes", "-R", "0:127.0.0.1:9"], "id")
        self.assertNotEqual(r.returncode, 0)

    def test_pty_is_refused(self):
        since = len(self.events())
        self.ssh(["-tt"], "git-upload-pack 'org/repo.git'")
        self.wait_event(lambda e: e["event"] == "refusal" and e["reason"] == "ssh_pty_refused",
                        since=since)

    def raw_receive_pack(self, data):
        """Runs git-receive-pack through the broker with `data` as the client's whole input
        (then EOF), as an attacker would: no git on the client side."""
        args = self.ssh_args() + ["git@127.0.0.1", "git-receive-pack 'org/repo.git'"]
        r = subprocess.run(args, input=data, capture_output=True, timeout=20)
        self.assert_no_secret((r.stdout + r.stderr).decode(errors="replace"))
        return r

    @staticmethod
    def pkt(payload):
        return b"%04x" % (len(payload) + 4) + payload

    def test_raw_push_to_protected_ref_gets_ng(self):
        before = self.bare_rev("refs/heads/main")
        cmd = b"%s %s refs/heads/main\0report-status side-band-64k\n" % (
            before.encode(), b"1" * 40)
        r = self.raw_receive_pack(self.pkt(cmd) + b"0000" + b"PACK-that-never-goes-up")
        self.assertIn(b"ng refs/heads/main", r.stdout)
        self.assertIn(b"git_ref_not_allowed", r.stdout)
        self.assertEqual(self.bare_rev("refs/heads/main"), before)

    def test_truncated_or_lying_command_lists(self):
        before = self.bare_rev("refs/heads/main")
        cmd = b"%s %s refs/heads/main\0report-status\n" % (before.encode(), b"1" * 40)
        cases = [
            # A length that promises more than ever comes, then EOF: ends at once, nothing up.
            (b"0100" + cmd, "client_closed"),
            # A length no push sends.
            (b"ffff" + cmd, "git_protocol_error"),
            # A command list cut before its flush.
            (self.pkt(cmd), "client_closed"),
            # A length below 4 is no pkt-line.
            (b"0002" + cmd, "git_protocol_error"),
        ]
        for data, reason in cases:
            with self.subTest(reason=reason, data=data[:8]):
                since = len(self.events())
                start = time.monotonic()
                self.raw_receive_pack(data)
                self.assertLess(time.monotonic() - start, 15)
                e = self.wait_event(lambda e: e["event"] == "session", since=since)
                self.assertEqual(e["reason"], reason)
                self.assertEqual(e["up"], 0)
        self.assertEqual(self.bare_rev("refs/heads/main"), before)

    def test_agent_forwarding_is_refused(self):
        sock = os.path.join(self.dir, "agent.sock")
        agent = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            wait = time.monotonic() + 10
            while not os.path.exists(sock) and time.monotonic() < wait:
                time.sleep(0.05)
            # OpenSSH asks auth-agent-req@openssh.com without wanting a reply; the broker never
            # grants it (libssh may not even pass it on), and the command is refused anyway.
            # The upstream leg is libssh's client, which never forwards an agent.
            args = self.ssh_args() + ["-A", "git@127.0.0.1", "ssh-add -l"]
            r = run(args, env=dict(os.environ, SSH_AUTH_SOCK=sock), stdin=subprocess.DEVNULL)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("ssh_command_refused", r.stderr)
        finally:
            agent.kill()
            agent.wait(timeout=10)


if __name__ == "__main__":
    unittest.main()
