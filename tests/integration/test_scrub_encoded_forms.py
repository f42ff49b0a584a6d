"""A hostile upstream that hands the injected secret back encoded: base64 (standard and
URL-safe, the secret at each of the three alignments, padded and not), hex (lower and upper
case) and JSON-escaped (\\uXXXX for every byte, `\\/`, mixed), in response headers and in a
Content-Length or a chunked body split into 5-byte chunks; and a WebSocket upstream that sends
the secret in text, binary, fragmented and split frames, a Ping and base64. Everything goes
over raw TLS sockets through `sandgate serve`; the client holds only the placeholder, and what
it receives must never contain the secret in any of these forms. The upgrade request must
reach the upstream without Sec-WebSocket-Extensions, and a 101 selecting one is refused.

api.test maps to an HTTPS upstream on loopback serving /encoded; ws.test to the test
WebSocket server (tests/support/ws_server.py).
"""

import base64
import json
import os
import unittest
import urllib.parse

import ws_server
from pki import test_pki
from sandgate_fixture import Sandgate, dechunk
from upstreams import HttpUpstream, _Handler

TOKEN = "tok-enc-forms"
# A known prefix keeps the placeholder as long as the secret; the '/' is there for `\/`.
API_SECRET = "sk-enc/forms0123456789abcdefXYZ"


def b64_forms(secret):
    """name -> (encoded text, bytes around the secret): every alignment, both alphabets,
    padded and not."""
    out = {}
    for before in (b"", b"a", b"ab"):
        for after in (b"", b"!", b"!?"):
            plain = before + secret + after
            std = base64.b64encode(plain).decode()
            url = base64.urlsafe_b64encode(plain).decode()
            tag = "%d_%d" % (len(before), len(after))
            out["b64_std_" + tag] = (std, before, after)
            out["b64_url_" + tag] = (url, before, after)
            out["b64_url_nopad_" + tag] = (url.rstrip("="), before, after)
    return out


def other_forms(secret):
    """name -> encoded text: hex and JSON escapes."""
    every_u = "".join("\\u%04x" % b for b in secret)
    mixed = "".join(("\\u%04X" % b) if i % 3 == 0 else chr(b) for i, b in enumerate(secret))
    return {
        "hex_lower": secret.hex(),
        "hex_upper": secret.hex().upper(),
        "json_every_byte": every_u,
        "json_slash": json.dumps(secret.decode())[1:-1].replace("/", "\\/"),
        "json_mixed": mixed.replace("/", "\\/"),
    }


def decode(name, text):
    if name.startswith("b64"):
        t = text.replace("-", "+").replace("_", "/")
        return base64.b64decode(t + "=" * (-len(t) % 4))
    if name.startswith("hex"):
        return bytes.fromhex(text)
    return json.loads('"' + text + '"').encode()


class _EncodedHandler(_Handler):
    """The shared upstream plus /encoded: the Bearer token it received, in every form."""

    def _handle(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/encoded":
            return super()._handle()
        q = dict(urllib.parse.parse_qsl(url.query))
        self._record_bodyless()
        secret = self.headers.get("Authorization", "")[len("Bearer "):].encode()
        forms = {k: v[0] for k, v in b64_forms(secret).items()}
        forms.update(other_forms(secret))
        body = ("\n".join("%s=%s" % kv for kv in forms.items()) + "\n").encode()
        echoed = ("b64_std_1_0", "b64_url_nopad_2_1", "hex_upper", "json_every_byte")
        # Pieces of 5 bytes: every form is split across chunks, at every offset somewhere.
        self._send_in_pieces(body, [("X-Echo-" + n.replace("_", "-"), forms[n]) for n in echoed],
                             q.get("chunked") == "1")

    do_GET = _handle


def read_response(t, limit=1 << 20):
    """(head text, body) of one response on `t` (the request asked for Connection: close)."""
    data = b""
    while len(data) < limit:
        chunk = t.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, raw = data.partition(b"\r\n\r\n")
    text = head.decode("latin-1")
    if "transfer-encoding: chunked" in text.lower():
        body, done = dechunk(raw)
        assert done, "a chunked body cut short"
        return text, body
    return text, raw


class ScrubEncodedFormsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.up = HttpUpstream(cls.pki)
        cls.up.server.RequestHandlerClass = _EncodedHandler
        cls.ws = ws_server.WebSocketEchoServer(cls.pki)
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        creds = {
            "api": {"source": {"file": cls.sg.secret_file("ef-api", API_SECRET)},
                    "hosts": ["api.test", "ws.test"], "placeholder": "API_KEY",
                    "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
        }
        loop = {"cidrs": ["127.0.0.0/8"]}
        policies = {"agent": {"allow": [
            dict(loop, host="api.test", credential="api"),
            dict(loop, host="ws.test", methods=["GET"], paths=["/ws/*"], credential="api")]}}
        cfg = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN}],
            resolve={"api.test": "127.0.0.1:%d" % cls.up.port,
                     "ws.test": "127.0.0.1:%d" % cls.ws.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cfg["listen"]["admin"] = cls.sg.admin_path
        cls.sg.config = cfg
        cls.sg.write_config(cfg)
        cls.sg.start()
        cls.placeholder = cls.sg.token_env("demo")["env"]["API_KEY"]

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()
        cls.ws.close()

    def tunnel(self, host):
        return self.sg.tls_tunnel(host, "demo", TOKEN, self.ca_out, timeout=15)

    def assert_no_form_of_secret(self, data, where):
        """`data` (bytes) holds the secret in none of the forms, raw or encoded."""
        secret = API_SECRET.encode()
        self.assertNotIn(secret, data, where)
        for text, _, _ in b64_forms(secret).values():
            # The characters the secret alone fixes (the core), in either alphabet.
            self.assertNotIn(text[4:-4].encode(), data, where)
        for text in other_forms(secret).values():
            self.assertNotIn(text.encode(), data, where)
        self.assertNotIn(secret.hex().encode(), data.lower(), where)

    def get_encoded(self, query):
        before = len(self.up.requests)
        t = self.tunnel("api.test")
        try:
            t.sendall(("GET /encoded%s HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s"
                       "\r\nConnection: close\r\n\r\n" % (query, self.placeholder)).encode())
            head, body = read_response(t)
        finally:
            t.close()
        # The attack is real: the upstream got the secret and sent it back.
        got = self.up.requests[before:]
        self.assertEqual(len(got), 1)
        self.assertEqual(dict(got[0]["headers"]).get("Authorization"), "Bearer " + API_SECRET)
        return head, body

    def check_forms(self, head, body):
        self.assertIn(" 200 ", head.split("\r\n")[0] + " ")
        self.assert_no_form_of_secret(head.encode("latin-1"), "head")
        self.assert_no_form_of_secret(body, "body")
        lines = dict(line.split("=", 1) for line in body.decode().splitlines())
        ph = self.placeholder.encode()
        b64 = b64_forms(API_SECRET.encode())
        self.assertEqual(set(lines), set(b64) | set(other_forms(API_SECRET.encode())))
        for name, value in lines.items():
            with self.subTest(form=name):
                # The client decodes its own placeholder where the secret was.
                want = b64[name][1] + ph + b64[name][2] if name in b64 else ph
                self.assertEqual(decode(name, value), want)
        fields = dict(ws_server.parse_head(head)[1])
        for name in ("b64_std_1_0", "b64_url_nopad_2_1", "hex_upper", "json_every_byte"):
            value = fields["X-Echo-" + name.replace("_", "-")]
            want = b64[name][1] + ph + b64[name][2] if name in b64 else ph
            self.assertEqual(decode(name, value), want, name)

    def test_encoded_forms_content_length_body(self):
        self.check_forms(*self.get_encoded(""))

    def test_encoded_forms_chunked_body(self):
        self.check_forms(*self.get_encoded("?chunked=1"))

    # --- WebSocket --------------------------------------------------------------------------

    def ws_connect(self, path):
        t = self.tunnel("ws.test")
        key = base64.b64encode(os.urandom(16)).decode()
        t.sendall(("GET %s HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                   "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
                   "Authorization: Bearer %s\r\n\r\n" % (path, key, self.placeholder)).encode())
        text, rest = ws_server.read_head(t)
        self.assertIsNotNone(text, rest)
        return t, text, rest

    def test_websocket_frames_are_scrubbed(self):
        before = len(self.ws.requests)
        t, text, rest = self.ws_connect("/ws/leak")
        raw = rest
        try:
            self.assertIn(" 101 ", text.split("\r\n")[0] + " ")
            self.assertIsNone(ws_server.header(ws_server.parse_head(text)[1],
                                               "Sec-WebSocket-Extensions"))
            t.sendall(ws_server.client_frame(ws_server.OP_TEXT, b"go"))
            # Everything up to the upstream's Close, read as it comes (bounded by the
            # tunnel's timeout and the frame count).
            reader = ws_server.FrameReader(t, rest)
            frames = []
            for _ in range(100):
                op, payload = reader.read()
                frames.append((reader.last_fin, op, payload))
                if op == ws_server.OP_CLOSE:
                    break
            t.sendall(ws_server.client_frame(ws_server.OP_CLOSE, b"\x03\xe8"))
        finally:
            t.close()
        req = self.ws.requests[before]
        # The upgrade reached the upstream without the extension offer, with the secret.
        self.assertIsNone(ws_server.header(req["headers"], "Sec-WebSocket-Extensions"))
        self.assertEqual(ws_server.header(req["headers"], "Authorization"),
                         "Bearer " + API_SECRET)
        self.assert_no_form_of_secret(b"".join(p for _, _, p in frames), "frames")
        self.assert_no_form_of_secret(raw, "bytes with the 101")
        # Messages reassembled from their fragments (sandgate may cut them anew), control
        # frames apart: each as the upstream sent it, with the placeholder for the secret.
        data, control, current = [], [], None
        for fin, op, payload in frames:
            if op & 0x8:
                control.append((op, payload))
                continue
            current = (op, payload) if current is None else (current[0], current[1] + payload)
            if fin:
                data.append(current)
                current = None
        self.assertIsNone(current)
        secret, ph = API_SECRET.encode(), self.placeholder.encode()
        want_data = [(ws_server.OP_TEXT, b"welcome")]
        want_control = []
        for name, _, op, payload in ws_server.leak_frames(secret):
            scrubbed = (base64.b64encode(b"x" + ph) if name == "base64"
                        else payload.replace(secret, ph))
            (want_control if op & 0x8 else want_data).append((op, scrubbed))
            if name == "fragmented":
                want_control.append((ws_server.OP_PING, b"p"))
        self.assertEqual(data, want_data)
        self.assertEqual(sorted(control[:-1]), sorted(want_control))
        self.assertEqual(control[-1], (ws_server.OP_CLOSE, b"\x03\xe8bye"))
        rec = self.sg.wait_audit(kind="websocket", host="ws.test", path="/ws/leak")
        self.assertEqual(rec["status"], 101)

    def test_websocket_101_selecting_an_extension_is_refused(self):
        t, text, rest = self.ws_connect("/ws/deflate")
        t.close()
        line, headers = ws_server.parse_head(text)
        self.assertIn(" 502 ", line + " ")
        self.assertEqual(ws_server.header(headers, "X-Sandgate-Reason"),
                         "websocket_extension_selected")
        self.assertNotIn(b"welcome", rest)
        self.sg.wait_audit(reason="websocket_extension_selected", host="ws.test")


if __name__ == "__main__":
    unittest.main()
