"""The drain the chart relies on (serve --drain-delay): on SIGTERM /readyz answers 503 at
once, while new connections are still accepted and served for the delay (clients kube-proxy
still routes here); then sandgate stops accepting, serves the tunnel that is open to its end,
and exits 0 once it has ended (well before shutdown_grace).
"""

import http.client
import signal
import socket
import time
import unittest

from sandgate_fixture import Sandgate, read_response_head, read_to_eof, wait_until
from upstreams import TcpEcho

TOKEN = "dr4in"
DELAY = 3.0  # seconds; long enough for the checks below on a loaded machine


class DrainTest(unittest.TestCase):
    def setUp(self):
        self.echo = TcpEcho()
        self.addCleanup(self.echo.close)
        policies = {"p": {"allow": [{"host": "echo.test", "ports": [self.echo.port],
                                     "cidrs": ["127.0.0.1/32"]}]}}
        self.sg = Sandgate(policies, [{"name": "t", "policy": "p", "token": TOKEN}],
                           resolve={"echo.test": "127.0.0.1:%d" % self.echo.port},
                           limits={"shutdown_grace": "30s"},
                           serve_args=["--drain-delay", "%gs" % DELAY]).start()
        self.addCleanup(self.sg.cleanup)

    def readyz(self):
        c = http.client.HTTPConnection("127.0.0.1", self.sg.metrics_port, timeout=5)
        c.request("GET", "/readyz")
        status = c.getresponse().status
        c.close()
        return status

    def tunnel(self):
        s = self.sg.connect()
        target = "echo.test:%d" % self.echo.port
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n" % (target, target) +
                   Sandgate.auth_header("t", TOKEN) + "\r\n").encode())
        status, _, rest = read_response_head(s)
        self.assertEqual(status, 200)
        self.assertEqual(rest, b"")
        return s

    def echo_round(self, s, data):
        s.sendall(data)
        got = b""
        s.settimeout(10)
        while len(got) < len(data):
            chunk = s.recv(65536)
            self.assertTrue(chunk, "tunnel closed early")
            got += chunk
        self.assertEqual(got, data)

    def refused(self):
        try:
            socket.create_connection(("127.0.0.1", self.sg.proxy_port), timeout=2).close()
            return False
        except ConnectionRefusedError:
            return True

    def test_sigterm_not_ready_at_once_accepts_during_delay_then_drains(self):
        self.assertEqual(self.readyz(), 200)
        old = self.tunnel()
        self.echo_round(old, b"before")

        t0 = time.monotonic()
        self.sg.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: self.readyz() == 503, timeout=DELAY / 2, interval=0.02,
                   what="/readyz to answer 503 right after SIGTERM")

        # Still accepting and serving: a tunnel opened now works end to end.
        new = self.tunnel()
        self.echo_round(new, b"during the delay")
        new.close()
        self.assertLess(time.monotonic() - t0, DELAY, "the checks above ran past the delay")
        self.assertIsNone(self.sg.proc.poll())

        # After the delay: no more accepting, but the open tunnel is served.
        wait_until(self.refused, timeout=DELAY + 10, interval=0.05,
                   what="the proxy listener to close after the drain delay")
        self.assertGreaterEqual(time.monotonic() - t0, DELAY - 0.1)
        self.echo_round(old, b"after the listeners closed")
        self.assertIsNone(self.sg.proc.poll(), "exited while a tunnel was open")

        # The tunnel's end lets sandgate finish, long before the 30 s grace.
        old.shutdown(socket.SHUT_WR)
        rest, closed = read_to_eof(old)
        old.close()
        self.assertEqual((rest, closed), (b"EOF-SEEN", True))
        t_end = time.monotonic()
        self.assertEqual(self.sg.stop(timeout=20), 0)
        self.assertLess(time.monotonic() - t_end, 15)

    def test_the_default_delay_is_five_seconds(self):
        sg = Sandgate({"p": {"allow": []}}, [{"name": "t", "policy": "p", "token": TOKEN}])
        sg.serve_args = []  # no --drain-delay at all (the fixture passes 0 otherwise)
        sg.start()
        self.addCleanup(sg.cleanup)
        t0 = time.monotonic()
        self.assertEqual(sg.stop(timeout=30), 0)
        self.assertGreaterEqual(time.monotonic() - t0, 4.5)

    def test_delay_0_stops_accepting_at_once(self):
        # With --drain-delay 0 the acceptors close as the shutdown starts.
        sg = Sandgate({"p": {"allow": []}}, [{"name": "t", "policy": "p", "token": TOKEN}]).start()
        self.addCleanup(sg.cleanup)
        t0 = time.monotonic()
        self.assertEqual(sg.stop(timeout=20), 0)
        self.assertLess(time.monotonic() - t0, DELAY)


if __name__ == "__main__":
    unittest.main()
