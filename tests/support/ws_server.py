"""A minimal WebSocket echo server for tests (stdlib only, handshake by hand, RFC 6455), TLS
with the runtime test PKI, on 127.0.0.1 and an ephemeral port.

GET /ws/...: answers 101 and, in the same write, a text frame "welcome"; then echoes each text
or binary frame back (unmasked, as a server must) until a Close frame, which it answers.
GET /ws/leak: a hostile upstream: after the 101 and the client's first frame it sends back the
Bearer token it received in `leak_frames` (text, binary, fragmented and split, in a Ping, in
base64), then a Close. GET /ws/deflate: a 101 that selects permessage-deflate, which nobody
offered (`Sec-WebSocket-Extensions`). Any other request gets 404. Every request head is recorded in `requests` (path, headers).
Frame helpers for clients: `client_frame` (masked) and `read_frame`.
"""

import base64
import hashlib
import os
import ssl
import struct

from upstreams import TcpServer

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_TEXT, OP_BINARY, OP_CLOSE = 0x1, 0x2, 0x8
MAX_FRAME = 1 << 20


def accept_key(key):
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def _frame(opcode, payload, mask):
    head = bytes([0x80 | opcode])
    n = len(payload)
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def raw_frame(fin, opcode, payload):
    """An unmasked frame with FIN as given (fragments, as a server sends them)."""
    return bytes([(0x80 if fin else 0) | opcode]) + _frame(opcode, payload, False)[1:]


OP_CONTINUATION, OP_PING = 0x0, 0x9


def leak_frames(secret):
    """What /ws/leak sends for `secret` (bytes): (name, bytes on the wire, opcode of the
    message, its payload as sent)."""
    a, b = secret[:len(secret) // 3], secret[len(secret) // 3:]
    frag = b"split:" + secret + b":end"
    cut1, cut2 = 6 + len(secret) // 2, 6 + len(secret) - 1
    out = [
        ("text", server_frame(OP_TEXT, b"text " + secret), OP_TEXT, b"text " + secret),
        ("binary", server_frame(OP_BINARY, b"\x00\x01" + secret + b"\xff"), OP_BINARY,
         b"\x00\x01" + secret + b"\xff"),
        # The secret split across three fragments, a Ping among them.
        ("fragmented", raw_frame(False, OP_TEXT, frag[:cut1]) + server_frame(OP_PING, b"p")
         + raw_frame(False, OP_CONTINUATION, frag[cut1:cut2])
         + raw_frame(True, OP_CONTINUATION, frag[cut2:]), OP_TEXT, frag),
        ("split_two_frames", raw_frame(False, OP_BINARY, a) + raw_frame(True, OP_CONTINUATION, b),
         OP_BINARY, secret),
        ("ping", server_frame(OP_PING, b"ping " + secret), OP_PING, b"ping " + secret),
        ("base64", server_frame(OP_TEXT, base64.b64encode(b"x" + secret)), OP_TEXT,
         base64.b64encode(b"x" + secret)),
        ("long_16bit", server_frame(OP_TEXT, b"L" * 300 + secret), OP_TEXT, b"L" * 300 + secret),
    ]
    return out


def client_frame(opcode, payload):
    """A final frame as a client sends it (masked)."""
    return _frame(opcode, payload, True)


def server_frame(opcode, payload):
    return _frame(opcode, payload, False)


class FrameReader:
    """Reads whole frames from a socket, keeping what it read past the last one."""

    def __init__(self, sock, initial=b""):
        self.sock = sock
        self.buf = initial

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed inside a frame")
            self.buf += chunk

    def read(self):
        """(opcode, payload) of the next frame; unmasks if masked. `last_fin`: its FIN bit."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        self.last_fin = bool(b0 & 0x80)
        n = b1 & 0x7F
        pos = 2
        if n == 126:
            self._need(4)
            n = struct.unpack("!H", self.buf[2:4])[0]
            pos = 4
        elif n == 127:
            self._need(10)
            n = struct.unpack("!Q", self.buf[2:10])[0]
            pos = 10
        if n > MAX_FRAME:
            raise ValueError("frame too large")
        key = None
        if b1 & 0x80:
            self._need(pos + 4)
            key = self.buf[pos:pos + 4]
            pos += 4
        self._need(pos + n)
        payload = self.buf[pos:pos + n]
        self.buf = self.buf[pos + n:]
        if key:
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        return b0 & 0x0F, payload


def read_head(sock, limit=65536):
    """(head text, bytes after it) or (None, data) when the peer closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > limit:
            return None, data
        chunk = sock.recv(4096)
        if not chunk:
            return None, data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


def parse_head(text):
    lines = text.split("\r\n")
    headers = []
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.append((k.strip(), v.strip()))
    return lines[0], headers


def header(headers, name):
    for k, v in headers:
        if k.lower() == name.lower():
            return v
    return None


class WebSocketEchoServer(TcpServer):
    def __init__(self, pki, timeout=20):
        self.requests = []
        self.timeout = timeout
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(pki.leaf_cert, pki.leaf_key)
        super().__init__()

    def _serve(self, raw):
        raw.settimeout(self.timeout)
        try:
            with self.ctx.wrap_socket(raw, server_side=True) as c:
                text, rest = read_head(c)
                if text is None:
                    return
                line, headers = parse_head(text)
                path = line.split(" ")[1] if len(line.split(" ")) > 1 else ""
                self.requests.append({"line": line, "path": path, "headers": headers})
                key = header(headers, "Sec-WebSocket-Key")
                upgrade = (header(headers, "Upgrade") or "").lower()
                if not path.startswith("/ws/") or upgrade != "websocket" or not key:
                    body = b"not found"
                    c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n"
                              b"Connection: close\r\n\r\n%s" % (len(body), body))
                    return
                ext = ("Sec-WebSocket-Extensions: permessage-deflate\r\n"
                       if path.startswith("/ws/deflate") else "")
                c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s\r\n"
                           % (accept_key(key), ext)).encode() + server_frame(OP_TEXT, b"welcome"))
                reader = FrameReader(c, rest)
                if path.startswith("/ws/leak"):
                    reader.read()
                    token = (header(headers, "Authorization") or "").partition(" ")[2]
                    c.sendall(b"".join(f[1] for f in leak_frames(token.encode())))
                    c.sendall(server_frame(OP_CLOSE, struct.pack("!H", 1000) + b"bye"))
                    reader.read()
                    return
                for _ in range(1000):  # bounded: a test sends a handful of frames
                    op, payload = reader.read()
                    if op == OP_CLOSE:
                        c.sendall(server_frame(OP_CLOSE, payload[:2]))
                        return
                    c.sendall(server_frame(op, payload))
        except (OSError, EOFError, ValueError, ssl.SSLError):
            pass
