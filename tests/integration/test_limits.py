"""Per-task limits: concurrent connections, concurrent tunnels, new-connection rate. A task
at its limit gets 429 with the reason; another task is served meanwhile. The per-replica
gauges (sandgate_tunnels_active) show what a task holds. The tunnel target
is a TCP echo on 127.0.0.1 (opened with cidrs on purpose).
"""

import os
import socket
import unittest

from sandgate_fixture import Sandgate, read_response_head, wait_until
from upstreams import TcpEcho

TOKEN = "l1mit"


class LimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.echo = TcpEcho()
        allow = {"p": {"allow": [{"host": "echo.test", "ports": [cls.echo.port],
                                  "cidrs": ["127.0.0.0/8"]}]}}
        cls.sg = Sandgate(
            allow,
            [{"name": "conns", "policy": "p", "token": TOKEN, "limits": {"max_connections": 2}},
             {"name": "tunnels", "policy": "p", "token": TOKEN, "limits": {"max_tunnels": 1}},
             {"name": "rate", "policy": "p", "token": TOKEN,
              "limits": {"new_connections_per_second": 1}},
             {"name": "free", "policy": "p", "token": TOKEN}],
            resolve={"echo.test": "127.0.0.1:%d" % cls.echo.port}).start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.echo.close()

    def tunnel(self, task):
        s = self.sg.connect()
        s.sendall(("CONNECT echo.test:%d HTTP/1.1\r\n" % self.echo.port +
                   Sandgate.auth_header(task, TOKEN) + "\r\n").encode())
        status, headers, _ = read_response_head(s)
        return s, status, headers.get("x-sandgate-reason")

    def test_connection_limit(self):
        held = []
        try:
            for _ in range(2):
                s, status, _ = self.tunnel("conns")
                held.append(s)
                self.assertEqual(status, 200)
            s, status, reason = self.tunnel("conns")
            held.append(s)
            self.assertEqual((status, reason), (429, "connection_limit"))
            # Another task is not slowed by this one being at its limit.
            s, status, _ = self.tunnel("free")
            held.append(s)
            self.assertEqual(status, 200)
        finally:
            for s in held:
                s.close()
        self.sg.wait_audit(task="conns", reason="connection_limit", status=429)
        self.assertGreaterEqual(
            self.sg.metric("sandgate_requests_total", task="conns", reason="connection_limit"), 1)

    def test_tunnel_limit(self):
        # Tunnels an earlier test closed may still be ending on sandgate's side (it sees the
        # close on its next read): start from a gauge at 0, so the reading below is this test's.
        wait_until(lambda: (self.sg.metric("sandgate_tunnels_active", task="free") or 0) == 0, 10,
                   interval=0.1, what="earlier tunnels of task free ended")
        held = []
        try:
            s, status, _ = self.tunnel("tunnels")
            held.append(s)
            self.assertEqual(status, 200)
            s, status, reason = self.tunnel("tunnels")
            held.append(s)
            self.assertEqual((status, reason), (429, "tunnel_limit"))
            # The per-replica gauge shows the tunnel held (the refused one never held one).
            self.assertEqual(self.sg.metric("sandgate_tunnels_active", task="tunnels"), 1)
            self.assertEqual(self.sg.metric("sandgate_tunnels_active", task="free") or 0, 0)
        finally:
            for s in held:
                s.close()
        wait_until(lambda: self.sg.metric("sandgate_tunnels_active", task="tunnels") == 0, 10,
                   interval=0.1, what="the tunnel gauge back to 0")
        # Once the first tunnel is gone, the slot is free again (bounded poll).
        def free_again():
            s, status, _ = self.tunnel("tunnels")
            s.close()
            return status == 200
        wait_until(free_again, 10, interval=0.1, what="tunnel slot released")

    def test_rate_limit(self):
        statuses = []
        for _ in range(5):
            s, status, reason = self.tunnel("rate")
            s.close()
            statuses.append((status, reason))
        refused = [x for x in statuses if x == (429, "rate_limited")]
        # 1 per second with a burst of 1: five connections within a second get at most two in.
        self.assertGreaterEqual(len(refused), 3, statuses)
        s, status, _ = self.tunnel("free")
        s.close()
        self.assertEqual(status, 200)


class DescriptorExhaustionTest(unittest.TestCase):
    """Out of file descriptors (accept gets EMFILE): sandgate backs off, keeps the connections
    it has, and serves again once descriptors are free."""

    @unittest.skipIf(os.environ.get("SANDGATE_SANITIZED") == "1",
                     "sanitizer build: the sanitizer runtime needs free descriptors itself (its "
                     "vptr check opens a pipe), so it misreports once they run out; descriptor "
                     "exhaustion is tested in the regular build")
    def test_emfile_backoff_then_recovery(self):
        echo = TcpEcho()
        sg = Sandgate({"p": {"allow": [{"host": "echo.test", "ports": [echo.port],
                                        "cidrs": ["127.0.0.0/8"]}]}},
                      [{"name": "t", "policy": "p", "token": TOKEN}],
                      resolve={"echo.test": "127.0.0.1:%d" % echo.port}, threads=1)
        held = []
        try:
            sg.start(max_fds=64)
            first = sg.connect()
            first.sendall(("CONNECT echo.test:%d HTTP/1.1\r\n" % echo.port +
                           Sandgate.auth_header("t", TOKEN) + "\r\n").encode())
            self.assertEqual(read_response_head(first)[0], 200)
            # More connections than sandgate has descriptors left (bounded count).
            for _ in range(80):
                held.append(socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=5))
            wait_until(lambda: "backing off" in sg.stderr(), 10, what="EMFILE warning")
            # The tunnel it already had still works.
            first.sendall(b"still-here")
            got = b""
            while len(got) < 10:
                got += first.recv(100)
            self.assertEqual(got, b"still-here")
            first.close()
            for s in held:
                s.close()
            held = []
            # Descriptors are back: new clients are served again (bounded poll).
            def served():
                s = sg.connect()
                s.sendall(("CONNECT echo.test:%d HTTP/1.1\r\n" % echo.port +
                           Sandgate.auth_header("t", TOKEN) + "\r\n").encode())
                status = read_response_head(s)[0]
                s.close()
                return status == 200
            wait_until(served, 20, interval=0.2, what="service after EMFILE")
            self.assertIsNone(sg.proc.poll())
        finally:
            for s in held:
                s.close()
            sg.cleanup()
            echo.close()


if __name__ == "__main__":
    unittest.main()
