"""ssh inside `sandgate run` (issue 42, the launcher's part): the leased uid (root launcher) and
the launcher's own (rootless) have a passwd entry whose home is the sandbox's, so OpenSSH runs
and reads ~/.ssh/config; every host goes through `sandgate connect` (the sandgate binary shown
read-only at /run/sandgate/bin/sandgate); known_hosts names the run's own host key for the
policy's SSH hosts (those whose rule's credential is an SSH key), which the run's SSH broker
presents; a command that is not git's is refused with its reason, and git's goes on to the real
sshd; a refused host prints sandgate's reason; the broker's private key is nowhere the workload
can read. With `run --proxy`, the same setup names serve's broker key (from its task_env).

Upstreams on host loopback: a TCP echo (echo.test:22) and a real sshd in inetd mode behind a
small accepting loop (git.test:22), each reached only through the run's proxy (`resolve:`).
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import unittest

import artifacts
from run_support import TemporaryUser, namespaces_refused, run_bounded
from sandgate_fixture import binary
from upstreams import TcpEcho

SSHD = "/usr/sbin/sshd"


class InetdSshd:
    """Accepts on 127.0.0.1:<ephemeral> and serves each connection (at most 16) with
    `sshd -i` and a host key of its own: a real SSH server the sandbox reaches through
    sandgate. `connections` counts them."""

    def __init__(self, workdir):
        self.key = os.path.join(workdir, "sshd_host_ed25519")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key],
                       check=True, capture_output=True, timeout=30)
        self.config = os.path.join(workdir, "sshd_config")
        with open(self.config, "w") as f:
            f.write("HostKey %s\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    "UsePAM no\nPidFile none\nLogLevel ERROR\n" % self.key)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.procs = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while self.connections < 16:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self.procs.append(subprocess.Popen([SSHD, "-i", "-e", "-f", self.config],
                                               stdin=c, stdout=c, stderr=subprocess.DEVNULL))
            c.close()

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self.sock.close()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


SCRIPT = r"""
echo "user=$(id -un) home=$(getent passwd $(id -u) | cut -d: -f6) group=$(id -gn)"
echo ==
ssh -G git.test
echo ==
cat /run/sandgate/ssh/known_hosts
echo ==
printf 'hello through sandgate' | /run/sandgate/bin/sandgate connect echo.test 22; echo " rc=$?"
echo ==
/run/sandgate/bin/sandgate connect other.test 22 </dev/null 2>&1; echo "rc=$?"
echo ==
ssh git.test true 2>&1; echo "rc=$?"
echo ==
git ls-remote git@git.test:acme/widgets.git 2>&1; echo "rc=$?"
echo ==
grep -rl "OPENSSH PRIV.TE KEY" /run /tmp /etc /dev/shm /proc/self/environ /proc/1/environ \
  "$PWD" 2>/dev/null; echo end
"""


@unittest.skipUnless(os.path.exists(SSHD) and shutil.which("ssh"), "needs openssh-client and -server")
class RunSshTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (sshd -i, and the rootless case creates a user)")
        # sshd's privilege separation directory (Debian's package makes it at boot only).
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        cls.dir = tempfile.mkdtemp(prefix="sandgate-runssh-")
        os.chmod(cls.dir, 0o755)
        cls.echo = TcpEcho()
        cls.sshd = InetdSshd(cls.dir)
        # git.test's rule names an SSH key: the run's broker serves it, and logs in to the
        # sshd (pinned by its host key) as `git`, a user that sshd does not have.
        deploy = cls.deploy = os.path.join(cls.dir, "deploy_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", deploy],
                       check=True, capture_output=True, timeout=30)
        with open(deploy) as f:
            artifacts.register_secret("run-ssh-deploy-key", f.read())
        pins = os.path.join(cls.dir, "pins")
        with open(cls.sshd.key + ".pub") as f, open(pins, "w") as out:
            out.write("git.test " + " ".join(f.read().split()[:2]) + "\n")
        os.chmod(pins, 0o644)
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        cfg = {
            "credentials": {"deploy": {"source": {"file": deploy}, "hosts": ["git.test"],
                                       "ssh": {"user": "git", "known_hosts": pins}}},
            "policies": {"agent": {"allow": [
                {"host": "git.test", "ports": [22], "cidrs": ["127.0.0.0/8"],
                 "credential": "deploy", "git": {"repositories": ["acme/widgets"]}},
                {"host": "echo.test", "ports": [22], "cidrs": ["127.0.0.0/8"]},
                {"host": "api.test"}]}},
            "tasks": [{"name": "agent", "policy": "agent"}],
            "resolve": {"git.test": "127.0.0.1:%d" % cls.sshd.port,
                        "echo.test": "127.0.0.1:%d" % cls.echo.port},
        }
        cls.cfg = cfg
        with open(cls.config, "w") as f:
            json.dump(cfg, f)
        os.chmod(cls.config, 0o644)

    @classmethod
    def tearDownClass(cls):
        cls.echo.close()
        cls.sshd.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def workspace(self, owner=None):
        ws = tempfile.mkdtemp(dir=self.dir, prefix="ws-")
        os.chmod(ws, 0o755)
        if owner is not None:
            os.chown(ws, owner.uid, owner.gid)
        return ws

    def run_script(self, owner=None, admin=None):
        kwargs = owner.popen_args() if owner is not None else {}
        ws = self.workspace(owner)
        parent = self.workspace(owner)  # the run's directory goes in it (made by run)
        run_dir = os.path.join(parent, "run")
        source = (["--proxy", "unix:" + admin, "--task", "agent"] if admin
                  else ["--config", self.config])
        # The sandbox refuses ptrace, which LeakSanitizer needs at exit: a sanitizer build's
        # `sandgate connect` inside it would exit 1 after a whole relay (other builds ignore it).
        r = run_bounded([binary(), "run"] + source + ["--workspace", ws,
                         "--run-dir", run_dir, "--env", "ASAN_OPTIONS=detect_leaks=0",
                         "--", "sh", "-c", SCRIPT], 120, **kwargs)
        # The host key's private half is in no file the run left either.
        for root, _, files in os.walk(run_dir):
            for name in files:
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        # (The script, in the report and exec log, spells the marker as a pattern.)
                        self.assertNotIn(b"OPENSSH PRIVATE KEY", f.read(), path)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses namespaces: " + r.stderr.strip())
        self.assertEqual(r.returncode, 0, r.stderr)
        parts = r.stdout.split("==\n")
        self.assertEqual(len(parts), 8, r.stdout)
        return parts

    def check(self, parts, user):
        ident, config, known, echo, refused, ssh, git, leak = parts
        # OpenSSH runs only for a uid with a passwd entry, and reads ~/.ssh from its home.
        self.assertEqual(ident.strip().split()[:2], ["user=" + user, "home=/tmp/home"], ident)
        self.assertNotIn("group=\n", ident)
        # `ssh -G` without -F: the passwd home's ~/.ssh/config is the run's.
        self.assertIn("proxycommand /run/sandgate/bin/sandgate connect %h %p\n", config)
        self.assertIn("userknownhostsfile /run/sandgate/ssh/known_hosts\n", config)
        self.assertIn("stricthostkeychecking true\n", config)
        self.assertIn("batchmode yes\n", config)
        self.assertIn("identitiesonly yes\n", config)
        self.assertIn("forwardagent no\n", config)
        lines = known.splitlines()
        # Only the host the SSH broker serves (its rule's credential has ssh:).
        self.assertEqual([l.split()[:2] for l in lines], [["git.test", "ssh-ed25519"]], known)
        with open(self.sshd.key + ".pub") as f:
            self.assertNotIn(f.read().split()[1], known)
        self.assertEqual(echo.strip(), "hello through sandgateEOF-SEEN rc=0", echo)
        self.assertIn("other.test:22 refused by the proxy: 403 no_matching_rule", refused)
        self.assertIn("rc=1", refused)
        # ssh trusted the run's broker (its key is the run's) and the broker refused a command
        # that is not git's, with its reason.
        self.assertNotIn("Host key verification failed", ssh)
        self.assertIn("ssh_command_refused", ssh)
        self.assertNotIn("rc=0", ssh)
        # git over SSH with no flags takes the same path (GIT_SSH_COMMAND / the config): the
        # broker took it and went on to the sshd, which has no user `git`.
        self.assertNotIn("Host key verification failed", git)
        self.assertNotIn("rc=0", git)
        self.assertEqual(leak.strip(), "end", leak)  # no file named before it
        return lines[0].split()[2]

    def test_root_launcher_leased_uid(self):
        before = self.sshd.connections
        key = self.check(self.run_script(), "sandbox")
        self.assertGreaterEqual(self.sshd.connections, before + 2)
        # Per run: a second run presents another key.
        key2 = self.check(self.run_script(), "sandbox")
        self.assertNotEqual(key, key2)

    def test_plain_ssh_on_port_22_is_captured_to_the_broker(self):
        # No ProxyCommand, no config: ssh dials git.test:22 itself (the run's DNS gives a
        # synthetic address), transparent capture takes port 22 to the run's SSH broker, with
        # the run's task; the broker's key is the one known_hosts names.
        self.plain_ssh(["--config", self.config])

    def plain_ssh(self, source):
        script = ("ssh -F /dev/null -o UserKnownHostsFile=/run/sandgate/ssh/known_hosts "
                  "-o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=10 "
                  "git.test true 2>&1; echo rc=$?")
        ws = self.workspace()
        r = run_bounded([binary(), "run"] + source + ["--workspace", ws,
                         "--", "sh", "-c", script], 120)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        if r.returncode == 125 and namespaces_refused(r.stderr):
            self.skipTest("this host refuses namespaces: " + r.stderr.strip())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("Host key verification failed", r.stdout)
        self.assertIn("ssh_command_refused", r.stdout)
        self.assertIn("rc=", r.stdout)
        self.assertNotIn("rc=0", r.stdout)

    def test_run_with_proxy_trusts_serves_broker(self):
        # `run --proxy`: serve's broker serves the run's connections, so the sandbox's
        # known_hosts must name serve's key, which the launcher learns from task_env.
        from sandgate_fixture import Sandgate
        host_key = os.path.join(self.dir, "serve_host_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key],
                       check=True, capture_output=True, timeout=30)
        with open(host_key + ".pub") as f:
            serve_pub = f.read().split()[1]
        sg = Sandgate(self.cfg["policies"], [{"name": "agent", "policy": "agent"}],
                      resolve=self.cfg["resolve"],
                      extra={"credentials": self.cfg["credentials"],
                             "ssh": {"host_key": host_key}})
        sg.config["listen"]["admin"] = sg.admin_path
        sg.write_config(sg.config)
        self.addCleanup(sg.cleanup)
        sg.start()
        before = self.sshd.connections
        key = self.check(self.run_script(admin=sg.admin_path), "sandbox")
        self.assertEqual(key, serve_pub)
        self.assertGreaterEqual(self.sshd.connections, before + 2)
        sg.wait_audit(reason="ssh_command_refused")
        # Port 22 captured there too (task_env's capture ports): serve's broker, the run's task.
        self.plain_ssh(["--proxy", "unix:" + sg.admin_path, "--task", "agent"])
        sg.wait_audit(reason="ssh_command_refused", mode="transparent", task="agent")

    def test_rootless_launcher(self):
        with TemporaryUser() as user:
            # The rootless launcher reads the deploy key as its user (a key of its own).
            os.chown(self.deploy, user.uid, user.gid)
            try:
                self.check(self.run_script(owner=user), user.name)
            finally:
                os.chown(self.deploy, 0, 0)


if __name__ == "__main__":
    unittest.main()
