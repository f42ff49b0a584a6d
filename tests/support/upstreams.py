"""Upstream servers for integration tests, all on 127.0.0.1 and an ephemeral port.

HttpUpstream serves (plain, or TLS with the runtime test CA):
  /echo...        request line, headers and body as JSON (any method, CL or chunked bodies;
                  a chunked body's trailer fields are recorded in `trailers`);
                  with ?reflect=1 the request's Authorization also comes back in the response
                  header X-Echo-Authorization (a debug endpoint leaking what it received)
  /bytes?n=N      N bytes of "x" with Content-Length
  /recall?h=NAME  what an earlier request (any path, any connection) sent in header NAME, in
                  the body ("NAME=<value>\n") and in the header X-Recalled: a stored key read
                  back through a route that never carried it (an API listing your keys)
  /stream         chunked: "first\\n", then waits for `release` (bounded), then "last\\n"
  /slow?s=S       waits S seconds, then answers
  /reset          promises 100000 bytes, sends 1000, then resets the connection
  /garbage        answers with bytes that are not HTTP
  /eof-body       HTTP/1.0-style body delimited by closing the connection
  /status?code=C  an empty response with status C
  /spoof          a 200 carrying sandgate's own fields (X-Sandgate-Reason, X-Sandgate-Task),
                  as an upstream posing as sandgate would send them
  /trailer        a chunked body whose trailer echoes the request's Authorization
                  (X-Echo-Authorization) next to X-Checksum: a leak hidden after the body
  /split-echo     the request's Authorization in the header X-Echo-Authorization and in a
                  chunked body, "auth=<value>\\n", cut in the middle of the value into two
                  chunks written 50 ms apart (a secret that arrives in two pieces)
  /redirect?to=U&code=C
                  an empty response with status C (default 302) and Location: U
  /surplus        a 200 with Content-Length, followed at once by bytes that belong to no
                  response (a connection that must not be reused)
  /gzip-echo      the request's headers as JSON, gzip-compressed with Content-Encoding: gzip
                  whatever the request's Accept-Encoding said; ?coding=deflate: zlib-wrapped
                  deflate; ?coding=gzip-corrupt: gzip with its middle bytes flipped;
                  ?coding=echo: gzip named by the request's X-Api-Key as its Content-Encoding;
                  any other ?coding=NAME: gzip bytes labelled NAME; &chunked=1: the
                  compressed bytes in two chunks written 50 ms apart (ETag "gz-1" when whole);
                  &te=1: gzip as a transfer coding (Transfer-Encoding: gzip, chunked) instead
                  of the content coding; &te=2: as well as it
  /layered-echo?ce=A|B&te=C|D
                  the request's headers as JSON with each `|`-separated value of ce (te) sent as
                  a Content-Encoding (Transfer-Encoding) field line of its own, the body coded
                  once per element named, content codings first: deflate is zlib, identity and
                  a final chunked nothing, any other name gzip (br: gzip bytes labelled br); te
                  must end in chunked (the body is then chunked), else Content-Length
  /reason-echo?code=C&h=NAME
                  an empty response with status C (default 401) whose reason phrase is
                  "invalid token " and the value of the request's header NAME (Authorization)
  /drop           a 200 that looks keep-alive (Content-Length, no Connection: close), after which
                  the upstream closes the connection anyway
  /sse?n=N&gap=S&mode=chunked|close
                  text/event-stream: N events ("tick-<i>"; the second also echoes the request's
                  Authorization) S seconds apart, chunked or ended by closing; the
                  time.monotonic() right after each event was written is kept in `sse_sent`
Every request is recorded in `requests` (method, path, headers, trailers, client port, body);
over TLS, the server name each client sent (SNI) is appended to `sni` (None: none sent).
TcpEcho echoes bytes until EOF, then sends b"EOF-SEEN" and half-closes.
"""

import gzip
import http.server
import json
import socket
import socketserver
import ssl
import struct
import threading
import time
import urllib.parse
import zlib


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as streaming servers set it. Without it Nagle holds a small write made
    # right after another (an SSE event just after the head) until the reader's delayed ACK,
    # about 40 ms later, whoever the reader is: timing tests would measure that, not sandgate.
    disable_nagle_algorithm = True

    def log_message(self, *args):  # quiet
        pass

    def _read_body(self):
        """The body, and the trailer fields of a chunked one as (name, value) pairs."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    trailers = []
                    while True:
                        line = self.rfile.readline()
                        if line in (b"\r\n", b"\n", b""):
                            return body, trailers
                        name, _, value = line.decode("latin-1").partition(":")
                        trailers.append((name.strip(), value.strip()))
                body += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0") or 0)
        return (self.rfile.read(n) if n else b""), []

    def _send(self, code, body, ctype="text/plain", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _record_bodyless(self):
        """Logs this request (a GET: no body read) in the owner's `requests`."""
        self.server.owner.requests.append({"method": self.command, "path": self.path,
                                           "headers": list(self.headers.items()),
                                           "trailers": [], "client_port": self.client_address[1],
                                           "body": b""})

    def _send_in_pieces(self, body, extra, chunked, piece=5):
        """200 text/plain with `body`: with Content-Length, or chunked in `piece`-byte chunks
        (so that whatever the body holds is split across chunks), flushed now and then."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        for k, v in extra:
            self.send_header(k, v)
        if not chunked:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(body), piece):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(body[i:i + piece]), body[i:i + piece]))
            if i % (20 * piece) == 0:
                self.wfile.flush()
                time.sleep(0.01)
        self.wfile.write(b"0\r\n\r\n")

    def _handle(self):
        srv = self.server.owner
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        body, trailers = self._read_body()
        srv.requests.append({"method": self.command, "path": self.path,
                             "headers": list(self.headers.items()), "trailers": trailers,
                             "client_port": self.client_address[1], "body": body})
        p = url.path
        if p.startswith("/echo"):
            out = json.dumps({"method": self.command, "path": self.path,
                              "version": self.request_version,
                              "headers": list(self.headers.items()),
                              "body": body.decode("latin-1"),
                              "client_port": self.client_address[1]}).encode()
            extra = []
            if q.get("reflect") == "1" and self.headers.get("Authorization") is not None:
                extra.append(("X-Echo-Authorization", self.headers["Authorization"]))
            self._send(200, out, "application/json", extra)
        elif p == "/bytes":
            self._send(200, b"x" * int(q.get("n", "0")))
        elif p == "/recall":
            name = q.get("h", "X-Api-Key").lower()
            value = ""
            for r in reversed(srv.requests[:-1]):
                got = [v for k, v in r["headers"] if k.lower() == name]
                if got:
                    value = got[0]
                    break
            self._send(200, ("%s=%s\n" % (name, value)).encode(), "text/plain",
                       [("X-Recalled", value)])
        elif p == "/stream":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"6\r\nfirst\n\r\n")
            self.wfile.flush()
            srv.release.wait(10)
            self.wfile.write(b"5\r\nlast\n\r\n0\r\n\r\n")
        elif p == "/slow":
            time.sleep(float(q.get("s", "2")))
            self._send(200, b"slow")
        elif p == "/reset":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"y" * 1000)
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
        elif p == "/garbage":
            self.wfile.write(b"THIS IS NOT HTTP\r\n\r\n")
            self.close_connection = True
        elif p == "/eof-body":
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" +
                             b"until-close" * 100)
            self.close_connection = True
        elif p == "/sse":
            self._sse(srv, int(q.get("n", "3")), float(q.get("gap", "0.3")),
                      q.get("mode", "chunked") == "chunked")
        elif p == "/status":
            self._send(int(q.get("code", "200")), b"")
        elif p == "/spoof":
            self._send(200, b"spoofed\n", extra=[("X-Sandgate-Reason", "allowed_by_upstream"),
                                                 ("x-sandgate-task", "someone-else")])
        elif p == "/split-echo":
            value = self.headers.get("Authorization", "")
            body = ("auth=" + value + "\n").encode("latin-1")
            cut = len("auth=") + len(value) // 2
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("X-Echo-Authorization", value)
            self.end_headers()
            for piece in (body[:cut], body[cut:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
        elif p == "/redirect":
            self._send(int(q.get("code", "302")), b"", extra=[("Location", q.get("to", "/"))])
        elif p == "/gzip-echo":
            raw = json.dumps({"headers": list(self.headers.items())}).encode()
            coding = q.get("coding", "gzip")
            out = zlib.compress(raw) if coding == "deflate" else gzip.compress(raw)
            if coding == "gzip-corrupt":
                mid = len(out) // 2
                out = out[:mid] + bytes(b ^ 0x55 for b in out[mid:mid + 4]) + out[mid + 4:]
                coding = "gzip"
            elif coding == "echo":
                coding = self.headers.get("X-Api-Key", "")
            if q.get("chunked") != "1":
                self._send(200, out, "application/json",
                           [("Content-Encoding", coding), ("ETag", '"gz-1"')])
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if q.get("te") != "1":
                self.send_header("Content-Encoding", coding)
            self.send_header("Transfer-Encoding", "gzip, chunked" if q.get("te") else "chunked")
            self.end_headers()
            for piece in (out[:len(out) // 2], out[len(out) // 2:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
        elif p == "/layered-echo":
            self._layered_echo(q)
        elif p == "/reason-echo":
            value = self.headers.get(q.get("h", "Authorization"), "")
            self.send_response(int(q.get("code", "401")), "invalid token " + value)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif p == "/surplus":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nsurplusEXTRA-BYTES")
            self.wfile.flush()
        elif p == "/trailer":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Trailer", "X-Checksum, X-Echo-Authorization")
            self.end_headers()
            echoed = self.headers.get("Authorization", "")
            self.wfile.write(b"4\r\nbody\r\n0\r\nX-Checksum: 1234\r\n" +
                             b"X-Echo-Authorization: " + echoed.encode("latin-1") + b"\r\n\r\n")
        elif p == "/drop":
            self._send(200, b"dropped")
            self.close_connection = True
        else:
            self._send(404, b"not found")

    def _layered_echo(self, q):
        body = json.dumps({"headers": list(self.headers.items())}).encode()
        ce = [v for v in q.get("ce", "").split("|") if v]
        te = [v for v in q.get("te", "").split("|") if v]
        names = [c.strip().lower() for line in ce + te for c in line.split(",") if c.strip()]
        if te:
            assert names[-1] == "chunked", "te must end in chunked"
            names.pop()
        for name in names:
            if name == "deflate":
                body = zlib.compress(body)
            elif name != "identity":
                body = gzip.compress(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        for line in ce:
            self.send_header("Content-Encoding", line)
        for line in te:
            self.send_header("Transfer-Encoding", line)
        if not te:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if te:
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        else:
            self.wfile.write(body)

    def _sse(self, srv, n, gap, chunked):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        srv.sse_sent = []
        for i in range(1, n + 1):
            if i > 1:
                time.sleep(gap)
            data = "tick-%d" % i
            if i == 2:
                data += " auth=" + self.headers.get("Authorization", "")
            event = ("id: %d\ndata: %s\n\n" % (i, data)).encode()
            if chunked:
                event = b"%x\r\n%s\r\n" % (len(event), event)
            self.wfile.write(event)
            self.wfile.flush()
            srv.sse_sent.append(time.monotonic())
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _handle


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # Clients (and sandgate, on purpose) close connections mid-response in these tests.
        import sys
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class HttpUpstream:
    """An HTTP (or, with `pki`, HTTPS) upstream on 127.0.0.1:<ephemeral>."""

    def __init__(self, pki=None, cert=None):
        """`cert`: (certificate, key) files to serve TLS with instead of pki's leaf."""
        self.requests = []
        self.sni = []
        self.sse_sent = []
        self.release = threading.Event()
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.owner = self
        if pki or cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*(cert or (pki.leaf_cert, pki.leaf_key)))
            ctx.sni_callback = lambda sock, name, c: self.sni.append(name)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def requests_to(self, target, ignore_query=False):
        """The requests received for `target` (the whole request target; with `ignore_query`,
        the path before any query)."""
        return [r for r in self.requests
                if (r["path"].split("?")[0] if ignore_query else r["path"]) == target]

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class TcpServer:
    """Accepts on 127.0.0.1:<ephemeral> and serves each connection with `_serve(sock)` on a
    thread of its own; `connections` counts them."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        raise NotImplementedError

    def close(self):
        self.sock.close()


class TcpEcho(TcpServer):
    """Echoes what it receives; after the client's EOF sends b"EOF-SEEN" and half-closes."""

    def __init__(self):
        self.closed = threading.Event()
        super().__init__()

    def _serve(self, c):
        c.settimeout(30)
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    c.sendall(b"EOF-SEEN")
                    c.shutdown(socket.SHUT_WR)
                    break
                c.sendall(data)
            # Wait for the peer to go away (bounded by the timeout).
            while c.recv(65536):
                pass
        except OSError:
            pass
        finally:
            c.close()
            self.closed.set()


def free_closed_port():
    """A loopback port with nothing listening on it (bound then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
