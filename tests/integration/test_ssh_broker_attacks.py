"""The SSH broker's core (proxy/ssh/, issue #42) against what an attacker does that OpenSSH's
client and a real sshd never do: a second command on a connection that runs one (another
channel, or the same one), a push command list sent one byte per SSH packet, a command list
past its bound, and hostile upstreams (a garbage banner, an endless banner, a close in the
middle of the key exchange, silence) that must fail closed, with a reason, in bounded time.

The client side is tests/integration/ssh_attack_client.cc (libssh) or OpenSSH; the broker is
ssh_session_harness (test_ssh_broker.py's), the sshd and git user are test_ssh_broker.py's
set-up (user sgssh45, uid/gid 61045, created and removed here).
"""
import hashlib
import json
import os
import socket
import struct
import subprocess
import threading
import time
import unittest

import test_ssh_broker as core
from test_ssh_broker import HARNESS, SSHD, run

ATTACK_CLIENT = os.environ.get("SSH_ATTACK_CLIENT", "")
# A hostile upstream's handshake is bounded by this (the harness's SG_HARNESS_HANDSHAKE_MS).
HANDSHAKE_MS = 3000


class FakeUpstream:
    """A loopback "sshd" whose behaviour the test sets before each connection. Bounded: it
    serves at most 32 connections and holds each at most 30 s."""

    def __init__(self):
        self.mode = "silent"
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        for _ in range(32):
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn, self.mode), daemon=True).start()

    def _one(self, conn, mode):
        conn.settimeout(30)
        try:
            if mode == "garbage":
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nServer: nope\r\n\r\n")
            elif mode == "long":
                # An identification line with no end: 256 KiB of it, then silence.
                conn.sendall(b"SSH-2.0-" + b"A" * (256 * 1024))
            elif mode == "midkex":
                conn.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")
                conn.recv(4096)  # the client's identification, and maybe its KEXINIT
                conn.close()
                return
            # Every mode but midkex then holds the connection open: a broker that waits for
            # more would hang here, which the test's time bound catches.
            self.closed.wait(30)
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self):
        self.closed.set()
        self.sock.close()


@unittest.skipUnless(os.geteuid() == 0 and HARNESS and ATTACK_CLIENT and os.path.exists(SSHD),
                     "needs root, sshd (openssh-server), the harness and the attack client")
class SshBrokerAttacks(unittest.TestCase):
    user = "sgssh45"  # not the other modules' users: CTest may run them at once
    uid = 61045

    @classmethod
    def setUpClass(cls):
        try:
            cls._set_up()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _set_up(cls):
        core.SshBroker._set_up_sshd.__func__(cls)
        cls.port, cls.out = cls._start_harness("pins", ["refs/heads/agent/*"])
        cls.fake = FakeUpstream()
        with open(os.path.join(cls.dir, "fake_pins"), "w") as f:
            f.write(f"[127.0.0.1]:{cls.fake.port} {cls.sshd_pub}\n")
        cls.fake_port, cls.fake_out = cls._start_fake_harness()

    @classmethod
    def _start_fake_harness(cls):
        d = cls.dir
        port_file = os.path.join(d, "harness-fake.port")
        out = os.path.join(d, "harness-fake.out")
        p = subprocess.Popen([HARNESS, port_file, str(cls.fake.port),
                              os.path.join(d, "broker_host_key"), cls.user,
                              os.path.join(d, "fake_pins"), os.path.join(d, "deploy_key"),
                              "org/repo"],
                             stdout=open(out, "w"), stderr=subprocess.STDOUT,
                             env=dict(os.environ, SG_HARNESS_HANDSHAKE_MS=str(HANDSHAKE_MS)))
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

    @classmethod
    def tearDownClass(cls):
        fake = getattr(cls, "fake", None)
        if fake is not None:
            fake.stop()
        core.SshBroker.tearDownClass.__func__(cls)
        core.artifacts.record_file("log", "ssh-harness", getattr(cls, "fake_out", None))

    _create_user = core.SshBroker.__dict__["_create_user"]
    gid = core.SshBroker.__dict__["gid"]
    _start_sshd = core.SshBroker.__dict__["_start_sshd"]
    _start_harness = core.SshBroker.__dict__["_start_harness"]
    ssh_args = core.SshBroker.ssh_args
    events = core.SshBroker.events
    wait_event = core.SshBroker.wait_event
    assert_no_secret = core.SshBroker.assert_no_secret
    bare_rev = core.SshBroker.bare_rev
    raw_receive_pack = core.SshBroker.raw_receive_pack
    pkt = staticmethod(core.SshBroker.pkt)

    def attack(self, mode, command, data=b""):
        r = subprocess.run([ATTACK_CLIENT, str(self.port), mode, command], input=data,
                           capture_output=True, timeout=60)
        self.assert_no_secret((r.stdout + r.stderr).decode(errors="replace"))
        steps = {}
        for line in r.stdout.splitlines():
            if line.startswith(b'{"step"'):
                s = json.loads(line)
                steps[s["step"]] = s["rc"]
        return r, steps

    # A second command on a connection that runs one: the broker checked one command and one
    # repository; anything more on the same connection would run unchecked or wait forever.

    def test_second_channel_is_refused_and_audited(self):
        since = len(self.events())
        start = time.monotonic()
        r, steps = self.attack("second-channel", "git-upload-pack 'org/repo.git'")
        self.assertEqual(steps.get("exec"), 0, r.stderr)
        # Refused at once (SSH_ERROR), not left unanswered until libssh's 5 s timeout.
        self.assertEqual(steps.get("second-open"), -1, r)
        self.assertNotIn("second-exec", steps)
        self.assertGreater(steps.get("first-reads", 0), 0, "the first channel still works")
        self.assertLess(time.monotonic() - start, 4.5)
        self.wait_event(lambda e: e["event"] == "refusal" and e["reason"] == "ssh_channel_limit",
                        since=since)

    def test_second_exec_on_the_same_channel_is_refused_and_audited(self):
        since = len(self.events())
        start = time.monotonic()
        r, steps = self.attack("second-exec", "git-upload-pack 'org/repo.git'")
        self.assertEqual(steps.get("exec"), 0, r.stderr)
        self.assertEqual(steps.get("second-exec"), -1, r)
        self.assertLess(time.monotonic() - start, 4.5)
        e = self.wait_event(lambda e: e["event"] == "refusal" and
                            e["reason"] == "ssh_command_refused", since=since)
        self.assertIn("second", e["detail"])

    # The push gate reads the command list whole whatever its packets.

    def empty_pack(self):
        head = b"PACK" + struct.pack(">II", 2, 0)
        return head + hashlib.sha1(head).digest()

    def test_push_one_byte_per_packet_is_read_whole(self):
        main = self.bare_rev("refs/heads/main")
        # Allowed: a new agent/ ref at main's commit (an empty pack) lands intact.
        cmd = b"%s %s refs/heads/agent/slow\0report-status\n" % (b"0" * 40, main.encode())
        r, steps = self.attack("slow", "git-receive-pack 'org/repo.git'",
                               self.pkt(cmd) + b"0000" + self.empty_pack())
        self.assertIn(b"ok refs/heads/agent/slow", r.stdout, r)
        self.assertEqual(self.bare_rev("refs/heads/agent/slow"), main)
        # Refused: main, one byte per packet, still gets git's ng with the reason; main stays.
        since = len(self.events())
        cmd = b"%s %s refs/heads/main\0report-status\n" % (main.encode(), b"1" * 40)
        r, steps = self.attack("slow", "git-receive-pack 'org/repo.git'",
                               self.pkt(cmd) + b"0000" + b"PACK-that-never-goes-up")
        self.assertIn(b"ng refs/heads/main", r.stdout, r)
        self.assertIn(b"git_ref_not_allowed", r.stdout)
        self.assertEqual(self.bare_rev("refs/heads/main"), main)
        e = self.wait_event(lambda e: e["event"] == "session" and
                            e["reason"] == "git_ref_not_allowed", since=since)
        self.assertEqual(e["refs"], ["refs/heads/main"])
        self.assertEqual(e["up"], 0)

    def test_command_list_over_the_bound_is_refused(self):
        main = self.bare_rev("refs/heads/main")
        # Allowed commands only, 80 KiB of them: past the 64 KiB bound, so refused whole and
        # nothing goes upstream, rather than buffered until the flush.
        lines = [self.pkt(b"%s %s refs/heads/agent/n%05d%s\n" % (
            b"0" * 40, main.encode(), i, b"\0report-status" if i == 0 else b""))
            for i in range(900)]
        data = b"".join(lines)
        self.assertGreater(len(data), 80 * 1024)
        since = len(self.events())
        start = time.monotonic()
        self.raw_receive_pack(data + b"0000" + self.empty_pack())
        self.assertLess(time.monotonic() - start, 15)
        e = self.wait_event(lambda e: e["event"] == "session", since=since)
        self.assertEqual(e["reason"], "git_protocol_error")
        self.assertIn("longer than", e["detail"])
        self.assertEqual(e["up"], 0)
        self.assertEqual(self.bare_rev("refs/heads/agent/n00000"), "")

    # A hostile upstream: fails closed with upstream_ssh_failed, in bounded time, git never
    # started.

    def test_hostile_upstreams_fail_closed_in_bounded_time(self):
        for mode in ("garbage", "long", "midkex", "silent"):
            with self.subTest(mode=mode):
                self.fake.mode = mode
                since = len(self.events(self.fake_out))
                start = time.monotonic()
                r = run(self.ssh_args(self.fake_port) +
                        ["git@127.0.0.1", "git-upload-pack 'org/repo.git'"],
                        stdin=subprocess.DEVNULL, timeout=30)
                elapsed = time.monotonic() - start
                self.assert_no_secret(r.stdout + r.stderr)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn("upstream_ssh_failed", r.stderr)
                # The handshake bound, plus set-up: never a hang.
                self.assertLess(elapsed, HANDSHAKE_MS / 1000 + 5)
                e = self.wait_event(lambda e: e["event"] == "session", self.fake_out, since)
                self.assertEqual(e["reason"], "upstream_ssh_failed")
                self.assertFalse(e["git"])


if __name__ == "__main__":
    unittest.main()
