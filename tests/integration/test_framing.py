"""Request bodies that try to confuse the framing (issue #24, classes 1 and 2), made over raw
sockets, forwarded and inside an intercepted tunnel, asserting what the client received and
what the upstream received.

- A malformed chunked body (a sign or `0x` before the size, whitespace, `_`, a size over 63
  bits, a chunk longer than its size, bad chunk extensions, trailer fields) gets 400 with its
  reason at once, never a silent close; when the whole body came with the head, the upstream is
  never dialled; when it streams, the upstream's connection is dropped mid-body.
- An upstream that answers a request before reading its body (401 at once) and then takes the
  body for the next request never has that connection reused: the body's bytes can never come
  back to the client as the answer to its next request. Asked with `Expect: 100-continue`, the
  rest of the body is not sent at all once the upstream has answered.

The upstream is a raw loopback server (TLS for the intercepted case, from the test CA) that
logs every byte it receives per connection.
"""

import os
import socket
import ssl
import threading
import time
import unittest

from pki import test_pki
from sandgate_fixture import Sandgate, read_response, read_response_head, read_to_eof, wait_until
from upstreams import TcpServer

TOKEN = "fr4ming"
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: api.test\r\n\r\n"


class RawUpstream(TcpServer):
    """A small HTTP/1.1 server that logs what it receives. `/early...` is answered 401 at once
    without reading the body (what follows is parsed as the next request); any other request has
    its body read (Content-Length, or chunked up to the last chunk) and gets 200 with the body
    `path:<path>`."""

    def __init__(self, tls_context=None):
        self.tls = tls_context
        self.raw = []     # bytes received, one entry per connection
        self.paths = []   # request paths parsed, in order
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c):
        c.settimeout(10)
        with self.lock:
            index = len(self.raw)
            self.raw.append(b"")
        try:
            if self.tls:
                c = self.tls.wrap_socket(c, server_side=True)
            buf = b""

            def more():
                data = c.recv(65536)
                if not data:
                    raise EOFError
                with self.lock:
                    self.raw[index] += data
                return data

            while True:
                while b"\r\n\r\n" not in buf:
                    buf += more()
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.split(b"\r\n")
                path = lines[0].split(b" ")[1].decode("latin-1")
                fields = {}
                for line in lines[1:]:
                    k, _, v = line.partition(b":")
                    fields[k.strip().lower()] = v.strip()
                with self.lock:
                    self.paths.append(path)
                if path.startswith("/cut"):
                    # A response cut short: its chunk promises 20 bytes, 10 come, then the end.
                    c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                              b"14\r\n0123456789")
                    raise EOFError
                if path.startswith("/early"):
                    c.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
                    continue
                if b"content-length" in fields:
                    n = int(fields[b"content-length"])
                    while len(buf) < n:
                        buf += more()
                    buf = buf[n:]
                elif fields.get(b"transfer-encoding", b"").lower() == b"chunked":
                    while b"0\r\n\r\n" not in buf:
                        buf += more()
                    buf = buf.split(b"0\r\n\r\n", 1)[1]
                body = b"path:" + path.encode()
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except (EOFError, OSError, ssl.SSLError, IndexError, ValueError):
            pass
        finally:
            c.close()

    def received(self):
        with self.lock:
            return b"".join(self.raw)


# Chunked bodies that must be refused, each with its reason. Each is complete (it ends with a
# last chunk), so a parser that took it would forward it.
BAD_BODIES = [
    (b"0x5\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),
    (b"+5\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),
    (b"-5\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),
    (b" 5\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),
    (b"5 x\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),
    (b"5_0\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),
    (b"10000000000000005\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),  # over 64 bits
    (b"3\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),  # a chunk longer than its size
    (b"5;a\nb\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),  # a bare LF in an extension
    (b"5;a\x00b\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),  # NUL
    (b"5;a=\"open\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),  # unterminated quoted string
    (b"5;a=\x01\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),  # a control character
    (b"5;" + b"e" * 5000 + b"\r\nhello\r\n0\r\n\r\n", "bad_chunked_body"),  # a line too long
    (b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", "request_trailers"),
]


class FramingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cls.pki.leaf_cert, cls.pki.leaf_key)
        cls.plain = RawUpstream()
        cls.tls = RawUpstream(ctx)
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        rule = {"cidrs": ["127.0.0.0/8"]}
        policies = {"p": {"allow": [dict(rule, host="api.test", ports=[80]),
                                    dict(rule, host="git.test", ports=[443], inspect=True)]}}
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "t", "policy": "p", "token": TOKEN}],
            limits={"body_timeout": "3s"},
            resolve={"api.test": "127.0.0.1:%d" % cls.plain.port,
                     "git.test": "127.0.0.1:%d" % cls.tls.port},
            extra={"ca_cert_out": cls.ca_out, "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.auth = Sandgate.auth_header("t", TOKEN).encode()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.plain.close()
        cls.tls.close()

    # The two routes: (open a client connection, the request line's target for a path, the
    # upstream, the extra head fields).
    def forward(self):
        return self.sg.connect(), lambda p: b"http://api.test" + p, self.plain, self.auth

    def intercept(self):
        s = self.sg.tls_tunnel("git.test", "t", TOKEN, self.ca_out)
        return s, lambda p: p, self.tls, b""

    def routes(self):
        return [("forward", self.forward), ("intercept", self.intercept)]

    def head(self, target, auth, fields, method=b"POST"):
        """A request head; `fields` ends it (its last line is the blank one)."""
        host = b"git.test" if not target.startswith(b"http:") else b"api.test"
        return method + b" " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + auth + fields

    def test_malformed_chunked_body_with_the_head_is_400_and_never_dialled(self):
        for name, route in self.routes():
            for body, reason in BAD_BODIES:
                with self.subTest(route=name, body=body[:24]):
                    s, target, up, auth = route()
                    before = up.connections
                    start = time.monotonic()
                    s.sendall(self.head(target(b"/bad"), auth,
                                        b"Transfer-Encoding: chunked\r\n\r\n") + body)
                    status, headers, _ = read_response_head(s)
                    _, closed = read_to_eof(s, 5)
                    s.close()
                    self.assertEqual((status, headers.get("x-sandgate-reason")), (400, reason))
                    self.assertTrue(closed)
                    # Answered at once, not after the body deadline.
                    self.assertLess(time.monotonic() - start, 2.5)
                    self.assertEqual(up.connections, before, "the upstream was dialled")
        self.sg.wait_audit(reason="bad_chunked_body", status=400, kind="refusal")
        self.sg.wait_audit(reason="request_trailers", status=400, kind="intercept")
        counted = sum(float(line.rsplit(" ", 1)[1]) for line in self.sg.metrics().splitlines()
                      if line.startswith("sandgate_requests_total{")
                      and 'reason="bad_chunked_body"' in line)
        self.assertGreaterEqual(counted, 2 * (len(BAD_BODIES) - 1))

    def test_malformed_chunk_while_streaming_is_400_and_the_upstream_dropped(self):
        for name, route in self.routes():
            with self.subTest(route=name):
                s, target, up, auth = route()
                s.sendall(self.head(target(b"/streaming"), auth,
                                    b"Transfer-Encoding: chunked\r\n\r\n") + b"5\r\nhello\r\n")
                # The head and the first chunk reach the upstream before the bad chunk is sent.
                wait_until(lambda: b"hello" in up.received() and "/streaming" in up.paths,
                           what="the first chunk upstream")
                s.sendall(b"+3\r\nabc\r\n0\r\n\r\n")
                status, headers, _ = read_response_head(s)
                _, closed = read_to_eof(s, 5)
                s.close()
                self.assertEqual((status, headers.get("x-sandgate-reason")),
                                 (400, "bad_chunked_body"))
                self.assertTrue(closed)
                # Nothing of the bad chunk (nor a last chunk) was sent on.
                self.assertNotIn(b"abc", up.received())
                up.paths.remove("/streaming")

    def test_cut_response_does_not_end_like_a_whole_one(self):
        # An HTTP/1.0 client reads the body to the end of the connection: a cut upstream
        # response must reach it as an abortive end (a reset, or TLS without close_notify),
        # never as a clean one that makes the cut body look complete.
        for name, route in self.routes():
            with self.subTest(route=name):
                s, target, up, auth = route()
                if isinstance(s, ssl.SSLSocket):
                    # An end without close_notify is then an error, as a careful client has it.
                    s.suppress_ragged_eofs = False
                s.sendall(self.head(target(b"/cut"), auth, b"\r\n", method=b"GET").replace(
                    b"HTTP/1.1", b"HTTP/1.0", 1))
                data, clean_end = b"", False
                try:
                    while len(data) < 65536:
                        piece = s.recv(65536)
                        if not piece:
                            clean_end = True
                            break
                        data += piece
                except (ConnectionResetError, ssl.SSLError):
                    pass
                finally:
                    s.close()
                self.assertIn(b"0123456789", data)
                self.assertFalse(clean_end, "a cut response ended like a whole one: %r" % data)
        self.sg.wait_audit(path="/cut", reason="upstream_reset")

    def test_head_cut_off_by_the_client_is_audited(self):
        # A client that closes in the middle of a request head leaves an audit line (the
        # upstream never saw any of it), as one that falls silent there does.
        for name, route, kind in (("forward", self.forward, "refusal"),
                                  ("intercept", self.intercept, "intercept")):
            with self.subTest(route=name):
                s, target, up, auth = route()
                before = up.connections
                partial = self.head(target(b"/cut-head"), auth, b"X-Half: yes\r\n")
                s.sendall(partial)
                time.sleep(0.2)  # the bytes are sandgate's before the close
                s.close()
                line = self.sg.wait_audit(reason="client_closed", kind=kind)
                self.assertEqual(line["verdict"], "error")
                self.assertIn("request head", line["error"])
                self.assertEqual(up.connections, before, "the upstream was dialled")
                self.assertNotIn("/cut-head", up.paths)

    def exchange(self, s, raw):
        s.sendall(raw)
        return read_response(s)

    def test_early_answer_connection_is_not_reused(self):
        # The body is a whole request: an upstream that answered without reading it reads it
        # as the next request, and a reused connection would hand its answer to the client's
        # next request.
        for name, route in self.routes():
            with self.subTest(route=name):
                s, target, up, auth = route()
                before = up.connections
                status, _, _ = self.exchange(s, self.head(
                    target(b"/early-a"), auth,
                    b"Content-Length: %d\r\n\r\n" % len(SMUGGLED)) + SMUGGLED)
                self.assertEqual(status, 401)
                wait_until(lambda: "/smuggled" in up.paths, what="the upstream reading the body")
                status, _, body = self.exchange(s, self.head(target(b"/next"), auth, b"\r\n",
                                                             method=b"GET"))
                s.close()
                self.assertEqual((status, body), (200, b"path:/next"))
                self.assertEqual(up.connections, before + 2,
                                 "the connection that answered early was reused")

    def test_early_answer_with_expect_continue_stops_the_body(self):
        for name, route in self.routes():
            with self.subTest(route=name):
                s, target, up, auth = route()
                s.sendall(self.head(target(b"/early-b"), auth,
                                    b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                                    % len(SMUGGLED)))
                status, _, _ = read_response_head(s)
                self.assertEqual(status, 100)
                wait_until(lambda: "/early-b" in up.paths, what="the head upstream")
                time.sleep(0.3)  # the upstream's 401 is on its way back by now
                s.sendall(SMUGGLED)
                status, headers, _ = read_response_head(s)
                _, closed = read_to_eof(s, 5)
                s.close()
                self.assertEqual(status, 401)
                self.assertEqual(headers.get("connection"), "close")
                self.assertTrue(closed, "the client connection stayed open with a body unread")
                with up.lock:
                    conns = [r for r in up.raw if b"POST /early-b" in r]
                self.assertEqual(len(conns), 1)
                received = conns[0].split(b"POST /early-b", 1)[1]
                self.assertNotIn(b"/smuggled", received,
                                 "the body was sent after the upstream had answered")
                up.paths.remove("/early-b")


if __name__ == "__main__":
    unittest.main()
