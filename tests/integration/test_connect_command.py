"""`sandgate connect HOST PORT` (an OpenSSH ProxyCommand) against a real `sandgate serve` and a
loopback TCP echo: bytes both ways, the half-close each way, a refusal's reason on stderr, no
proxy set; and against hostile proxies (a head that never ends, no blank line, a 200 followed
at once by the tunnel's first bytes), over raw sockets the test controls.
"""

import os
import socket
import subprocess
import threading
import unittest

from sandgate_fixture import Sandgate, binary
from upstreams import TcpEcho

TOKEN = "t0ken-connect"


def run_connect(host, port, env, data=b"", timeout=30):
    """Runs `sandgate connect` with exactly `env`; returns (rc, stdout, stderr)."""
    p = subprocess.run([binary(), "connect", host, str(port)], input=data, env=env,
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


class FakeProxy:
    """Accepts one connection on 127.0.0.1, reads the CONNECT head, sends `answer` (bytes, in
    one write), then relays nothing: records what it got after the head and closes when the
    client does (bounded by a timeout)."""

    def __init__(self, answer, close_after=False):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.answer = answer
        self.close_after = close_after
        self.request = b""
        self.after = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.sock.settimeout(30)
        try:
            c, _ = self.sock.accept()
        except OSError:
            return
        c.settimeout(30)
        try:
            while b"\r\n\r\n" not in self.request and len(self.request) < 65536:
                data = c.recv(4096)
                if not data:
                    break
                self.request += data
            for i in range(0, len(self.answer), 65536):
                c.sendall(self.answer[i:i + 65536])
            if self.close_after:
                c.shutdown(socket.SHUT_WR)
            while True:
                data = c.recv(4096)
                if not data:
                    break
                self.after += data
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        # Wakes an accept() still waiting (a test where the client never dialled).
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=30)


class ConnectCommandTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.echo = TcpEcho()
        p = cls.echo.port
        policies = {"ssh": {"allow": [{"host": "git.test", "ports": [p],
                                       "cidrs": ["127.0.0.0/8"]}]}}
        cls.sg = Sandgate(policies, [{"name": "agent", "policy": "ssh", "token": TOKEN}],
                          resolve={"git.test": "127.0.0.1"}).start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.echo.close()

    def env(self, **extra):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        env.update(extra)
        return env

    def test_bytes_both_ways_and_both_half_closes(self):
        # The echo answers "EOF-SEEN" only once it has seen our end of input: stdin's EOF went
        # through as a half-close, and the tunnel stayed open the other way until the echo's.
        data = b"".join(b"line %d\n" % i for i in range(20000))
        rc, out, err = run_connect("git.test", self.echo.port,
                                   self.env(HTTPS_PROXY=self.sg.proxy_url("agent", TOKEN)), data)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, data + b"EOF-SEEN")
        self.sg.wait_audit(task="agent", host="git.test")

    def test_lowercase_and_all_proxy_variables(self):
        for name in ("https_proxy", "ALL_PROXY", "all_proxy"):
            with self.subTest(variable=name):
                rc, out, err = run_connect(
                    "git.test", self.echo.port,
                    self.env(**{name: self.sg.proxy_url("agent", TOKEN)}), b"x")
                self.assertEqual((rc, out), (0, b"xEOF-SEEN"), err)

    def test_refusal_prints_the_reason(self):
        dialled = self.echo.connections
        rc, out, err = run_connect("other.test", 22,
                                   self.env(HTTPS_PROXY=self.sg.proxy_url("agent", TOKEN)))
        self.assertEqual(rc, 1)
        self.assertEqual(out, b"")
        self.assertIn("other.test:22 refused by the proxy: 403 no_matching_rule: "
                      "no rule of policy ssh allows host other.test", err)
        self.assertEqual(self.echo.connections, dialled)

    def test_wrong_token_is_refused_with_407(self):
        rc, _, err = run_connect("git.test", self.echo.port,
                                 self.env(HTTPS_PROXY=self.sg.proxy_url("agent", "wrong")))
        self.assertEqual(rc, 1)
        self.assertIn("refused by the proxy: 407", err)

    def test_no_proxy_variable(self):
        rc, out, err = run_connect("git.test", self.echo.port,
                                   self.env(HTTP_PROXY=self.sg.proxy_url("agent", TOKEN)))
        self.assertEqual((rc, out), (2, b""))
        self.assertIn("no proxy: set HTTPS_PROXY", err)

    def test_a_host_that_would_forge_the_head(self):
        proxy = FakeProxy(b"HTTP/1.1 200 OK\r\n\r\n")
        try:
            rc, _, err = run_connect("git.test\r\nX-Forged: 1", 22,
                                     self.env(HTTPS_PROXY="http://127.0.0.1:%d" % proxy.port))
        finally:
            proxy.close()
        self.assertEqual(rc, 2)
        self.assertIn("is not a host name", err)
        self.assertEqual(proxy.request, b"")

    # --- hostile proxies ------------------------------------------------------------------

    def test_bytes_right_after_the_head_belong_to_the_tunnel(self):
        # An SSH server speaks first: its banner may share a segment with the proxy's 200. A
        # client that read the head in blocks would swallow it and ssh would hang.
        proxy = FakeProxy(b"HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0-sandgate\r\n",
                          close_after=True)
        try:
            rc, out, err = run_connect("git.test", 22,
                                       self.env(HTTPS_PROXY="http://a:b@127.0.0.1:%d" % proxy.port),
                                       b"client bytes")
        finally:
            proxy.close()
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, b"SSH-2.0-sandgate\r\n")
        self.assertEqual(proxy.after, b"client bytes")
        self.assertTrue(proxy.request.startswith(b"CONNECT git.test:22 HTTP/1.1\r\n"),
                        proxy.request)
        self.assertIn(b"\r\nProxy-Authorization: Basic YTpi\r\n", proxy.request)

    def test_a_head_that_never_ends(self):
        for answer in (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * (1 << 20),
                       b"A" * (1 << 20)):
            with self.subTest(answer=answer[:20]):
                proxy = FakeProxy(answer, close_after=True)
                try:
                    rc, out, err = run_connect(
                        "git.test", 22, self.env(HTTPS_PROXY="http://127.0.0.1:%d" % proxy.port))
                finally:
                    proxy.close()
                self.assertEqual((rc, out), (1, b""))
                self.assertIn("answer head is longer than 16384 bytes", err)

    def test_garbage_answers(self):
        for answer in (b"HTTP/1.1 200 OK", b"SSH-2.0-x\r\n\r\n", b"HTTP/1.1 200 OK\r\nbad\r\n\r\n",
                       b"\x00\xff\r\n\r\n", b""):
            with self.subTest(answer=answer):
                proxy = FakeProxy(answer, close_after=True)
                try:
                    rc, out, err = run_connect(
                        "git.test", 22, self.env(HTTPS_PROXY="http://127.0.0.1:%d" % proxy.port))
                finally:
                    proxy.close()
                self.assertEqual((rc, out), (1, b""), err)
                self.assertRegex(err, r"sandgate connect: the proxy('s answer is not| closed)")

    def test_a_refusal_with_controls_in_its_reason_is_escaped(self):
        body = b'{"error": "no\\u001b[2J rule", "hint": "h"}'
        proxy = FakeProxy(b"HTTP/1.1 403 Forbidden\r\nX-Sandgate-Reason: bad\x1b]0;x\x07\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body) + body, close_after=True)
        try:
            rc, _, err = run_connect("git.test", 22,
                                     self.env(HTTPS_PROXY="http://127.0.0.1:%d" % proxy.port))
        finally:
            proxy.close()
        self.assertEqual(rc, 1)
        self.assertNotIn("\x1b", err)
        self.assertIn("403 bad", err)


if __name__ == "__main__":
    unittest.main()
