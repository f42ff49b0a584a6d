"""The HTTP/2 attack surface of interception (issue #40 item 3), from the client's side: raw
frames over the intercepted TLS (hyperframe and hpack, no validation), to an HTTP/2 upstream
of the test's own that records every request it receives whole.

Each malformed request of RFC 9113 §8 is a stream error (RST_STREAM) or a refusal, nothing of it
reaches the upstream, its audit line says so, and the proxy serves the next request; floods
(rapid reset, CONTINUATION, too many streams) are bounded.
"""

import socket
import ssl
import unittest

import h2_upstream  # noqa: F401  (makes python3-h2, hpack and hyperframe importable)
import hpack
from hyperframe.frame import (ContinuationFrame, Frame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame, DataFrame,
                              WindowUpdateFrame)
from pki import test_pki
from sandgate_fixture import wait_until

TOKEN = "h2att4ck"
SECRET = "sk-h2attacksecret-0123456789abcdef"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class RawH2:
    """A client that writes whatever frames it is told to, and reads frames back."""

    def __init__(self, tls):
        self.tls = tls
        self.enc = hpack.Encoder()
        self.buf = b""
        tls.sendall(PREFACE + SettingsFrame(0).serialize())

    def block(self, headers):
        return self.enc.encode(headers)

    def headers(self, sid, headers, end_stream=True, end_headers=True):
        f = HeadersFrame(sid)
        f.data = self.block(headers)
        if end_stream:
            f.flags.add("END_STREAM")
        if end_headers:
            f.flags.add("END_HEADERS")
        return f.serialize()

    def send(self, data):
        self.tls.sendall(data)

    def frames(self, limit=2000):
        """Frames read until the peer closes, goes quiet (2 s), or `limit` frames."""
        self.tls.settimeout(2)
        for _ in range(limit):
            while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
                try:
                    data = self.tls.recv(65536)
                except (socket.timeout, ssl.SSLError, OSError):
                    return
                if not data:
                    return
                self.buf += data
            f, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
            f.parse_body(memoryview(self.buf[9:9 + length]))
            self.buf = self.buf[9 + length:]
            if isinstance(f, SettingsFrame) and "ACK" not in f.flags:
                try:
                    self.send(SettingsFrame(0, flags=["ACK"]).serialize())
                except (OSError, ssl.SSLError):
                    pass  # sandgate has closed: the frames it sent are still read
            yield f

    def outcome(self, sid):
        """('reset', code), ('status', value) or ('goaway', code) for stream `sid`."""
        dec = hpack.Decoder()
        for f in self.frames():
            if isinstance(f, RstStreamFrame) and f.stream_id == sid:
                return ("reset", f.error_code)
            if isinstance(f, GoAwayFrame):
                return ("goaway", f.error_code)
            if isinstance(f, HeadersFrame) and f.stream_id == sid:
                return ("status", dict(dec.decode(f.data)).get(":status"))
            if isinstance(f, HeadersFrame):
                dec.decode(f.data)
        return ("none", None)


def req(path="/ok", extra=(), method="GET"):
    return [(":method", method), (":scheme", "https"), (":authority", "api.test"),
            (":path", path)] + list(extra)


class InterceptH2AttacksTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.up = h2_upstream.H2Upstream(cls.pki)
        cls.sg, cls.ca_out = h2_upstream.intercepting_sandgate(cls.pki, cls.up.port, TOKEN, SECRET)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def client(self):
        s = self.sg.connect(timeout=10)
        s.sendall(("CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n%s\r\n" %
                   self.sg.auth_header("demo", TOKEN)).encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 4096:
            chunk = s.recv(1)
            if not chunk:
                break
            head += chunk
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        ctx = ssl.create_default_context(cafile=self.ca_out)
        ctx.set_alpn_protocols(["h2"])
        tls = ctx.wrap_socket(s, server_hostname="api.test")
        self.assertEqual(tls.selected_alpn_protocol(), "h2")
        return RawH2(tls)

    def upstream_saw(self, path):
        return [r for r in self.up.requests if dict(r["headers"]).get(":path") == path]

    def assert_still_serving(self):
        c = self.client()
        c.send(c.headers(1, req("/after")))
        self.assertEqual(c.outcome(1), ("status", "200"))
        c.tls.close()

    def malformed(self, path, headers, data=None):
        """Sends one malformed request on a new connection: its outcome."""
        c = self.client()
        c.send(c.headers(1, headers, end_stream=data is None))
        if data is not None:
            c.send(DataFrame(1, data, flags=["END_STREAM"]).serialize())
        out = c.outcome(1)
        c.tls.close()
        self.assertEqual(self.upstream_saw(path), [], "the upstream got %s" % path)
        return out

    def test_malformed_requests_are_stream_errors_and_never_reach_the_upstream(self):
        cases = {
            "/upper": req("/upper", [("X-Upper", "1")]),
            "/connection": req("/connection", [("connection", "keep-alive")]),
            "/te": req("/te", [("te", "gzip")]),
            "/crlf": req("/crlf", [("x-a", "b\r\nx-injected: 1")]),
            "/nul": req("/nul", [("x-a", "b\x00c")]),
            "/dup": req("/dup") + [(":path", "/dup")],
            "/late": [(":method", "GET"), (":scheme", "https"), ("x-a", "1"),
                      (":authority", "api.test"), (":path", "/late")],
            "/te-transfer": req("/te-transfer", [("transfer-encoding", "chunked")]),
        }
        for path, headers in cases.items():
            with self.subTest(path=path):
                kind, code = self.malformed(path, headers)
                self.assertIn(kind, ("reset", "goaway"), (path, kind, code))
        missing = [(":method", "GET"), (":scheme", "https"), (":authority", "api.test")]
        self.assertIn(self.malformed("/", missing)[0], ("reset", "goaway"))
        relative = req("nopath")
        self.assertIn(self.malformed("nopath", relative)[0], ("reset", "goaway"))
        wait_until(lambda: any(r.get("reason") == "h2_protocol_error" for r in self.sg.audit()),
                   what="an h2_protocol_error audit line")
        self.assert_still_serving()

    def test_content_length_unlike_the_data_never_completes_upstream(self):
        kind, _ = self.malformed("/cl", req("/cl", [("content-length", "10")], "POST"), b"abc")
        self.assertIn(kind, ("reset", "goaway"))
        self.assert_still_serving()

    def test_connect_inside_the_tunnel_is_refused(self):
        c = self.client()
        c.send(c.headers(1, [(":method", "CONNECT"), (":authority", "other.test:443")]))
        self.assertEqual(c.outcome(1), ("status", "400"))
        c.tls.close()
        self.sg.wait_audit(method="CONNECT", reason="bad_target")

    def test_rapid_reset_ends_the_connection_with_goaway(self):
        c = self.client()
        burst = b""
        for i in range(1200):  # bounded: past the 1000-stream burst nghttp2 allows
            sid = 2 * i + 1
            burst += c.headers(sid, req("/rapid"), end_stream=False)
            burst += RstStreamFrame(sid, error_code=8).serialize()
        try:
            c.send(burst)
        except OSError:
            pass
        goaway = [f for f in c.frames(limit=20000) if isinstance(f, GoAwayFrame)]
        c.tls.close()
        self.assertTrue(goaway, "no GOAWAY after 1200 resets")
        wait_until(lambda: any(r.get("reason") == "h2_protocol_error" and r.get("kind") == "tunnel"
                               for r in self.sg.audit()), what="the tunnel's h2_protocol_error")
        self.assert_still_serving()

    def continued(self, path, continuations):
        """A request whose header block is a HEADERS frame and `continuations` CONTINUATION
        frames: its outcome."""
        c = self.client()
        first = HeadersFrame(1)
        first.data = c.block(req(path))
        first.flags.add("END_STREAM")
        out = first.serialize()
        for i in range(continuations):
            f = ContinuationFrame(1, data=c.block([("x-pad%d" % i, "a")]))
            if i == continuations - 1:
                f.flags.add("END_HEADERS")
            out += f.serialize()
        try:
            c.send(out)
        except OSError:
            pass
        result = c.outcome(1)
        c.tls.close()
        return result

    def test_continuation_flood_ends_the_connection(self):
        # Eight CONTINUATION frames are a header block; the ninth is a flood (nghttp2's
        # max_continuations), and nothing of it reaches the upstream.
        self.assertEqual(self.continued("/cont8", 8), ("status", "200"))
        self.assertEqual(self.continued("/cont9", 9), ("goaway", 1))
        self.assertEqual(self.upstream_saw("/cont9"), [])
        self.assert_still_serving()

    def test_streams_past_the_concurrency_limit_are_refused(self):
        c = self.client()
        out = b""
        for i in range(110):  # 100 may be open at once
            out += c.headers(2 * i + 1, req("/many"), end_stream=False)
        c.send(out)
        resets = [f for f in c.frames() if isinstance(f, RstStreamFrame)]
        c.tls.close()
        self.assertGreaterEqual(len(resets), 10)

    def test_hpack_bomb_past_the_header_limit_is_431_and_nothing_goes_upstream(self):
        # One 4000-byte field, then 40 one-byte references to it: ~160 KiB decoded from ~4 KiB,
        # past limits.max_header_bytes (64 KiB).
        c = self.client()
        big = ("x-bomb", "b" * 4000)
        block = c.enc.encode(req("/bomb") + [big])
        for _ in range(40):
            block += c.enc.encode([big])
        f = HeadersFrame(1)
        f.data = block
        f.flags.add("END_HEADERS")
        f.flags.add("END_STREAM")
        c.send(f.serialize())
        out = c.outcome(1)
        c.tls.close()
        self.assertEqual(out, ("status", "431"))
        self.sg.wait_audit(path=None, reason="header_too_large", kind="intercept")
        self.assertEqual(self.upstream_saw("/bomb"), [])
        self.assert_still_serving()

    def test_ping_flood_without_reading_is_bounded(self):
        c = self.client()
        ping = b"".join(PingFrame(0, opaque_data=b"12345678").serialize() for _ in range(1000))
        ended = False
        c.tls.settimeout(5)
        try:
            for _ in range(100):  # bounded: 100,000 PINGs, none of their ACKs read
                c.send(ping)
        except (OSError, ssl.SSLError):
            ended = True  # sandgate ended the connection (flooded)
        if not ended:
            ended = any(isinstance(f, GoAwayFrame) for f in c.frames(limit=200000))
        c.tls.close()
        self.assertTrue(ended, "100,000 unread PING ACKs did not end the connection")
        self.assert_still_serving()

    def test_settings_flood_without_reading_is_bounded(self):
        c = self.client()
        frame = SettingsFrame(0, settings={SettingsFrame.ENABLE_PUSH: 0}).serialize()
        ended = False
        c.tls.settimeout(5)
        try:
            for _ in range(100):  # bounded: 100,000 SETTINGS, none of their ACKs read
                c.send(frame * 1000)
        except (OSError, ssl.SSLError):
            ended = True
        if not ended:
            ended = any(isinstance(f, GoAwayFrame) for f in c.frames(limit=200000))
        c.tls.close()
        self.assertTrue(ended, "100,000 unread SETTINGS ACKs did not end the connection")
        self.assert_still_serving()

    def test_window_update_past_the_maximum_is_a_flow_control_error(self):
        c = self.client()
        c.send(WindowUpdateFrame(0, window_increment=2 ** 31 - 1).serialize() * 2)
        goaway = [f for f in c.frames() if isinstance(f, GoAwayFrame)]
        c.tls.close()
        self.assertTrue(goaway)
        self.assertEqual(goaway[0].error_code, 3)  # FLOW_CONTROL_ERROR
        self.assert_still_serving()

    def test_proxy_and_sandgate_fields_in_a_stream_do_not_reach_the_upstream(self):
        c = self.client()
        c.send(c.headers(1, req("/idfields", [("proxy-authorization", "Basic b3RoZXI6dG9r"),
                                               ("x-sandgate-task", "other"),
                                               ("authorization", "Bearer mine")])))
        self.assertEqual(c.outcome(1), ("status", "200"))
        c.tls.close()
        (seen,) = self.upstream_saw("/idfields")
        names = [k for k, _ in seen["headers"]]
        self.assertNotIn("proxy-authorization", names)
        self.assertNotIn("x-sandgate-task", names)
        self.assertEqual([v for k, v in seen["headers"] if k == "authorization"],
                         ["Bearer " + SECRET])
        line = self.sg.wait_audit(path="/idfields")
        self.assertEqual(line["task"], "demo")


if __name__ == "__main__":
    unittest.main()


class ConfiguredH2LimitsTest(unittest.TestCase):
    """The task's `limits:` keys replace the built-in bounds: with h2_max_concurrent_streams 4
    the fifth stream a client opens is refused (it would be served under the default 100), and
    with h2_max_continuations 2 a header block of three CONTINUATION frames ends the
    connection (eight are allowed by default)."""

    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.up = h2_upstream.H2Upstream(cls.pki)
        cls.sg, cls.ca_out = h2_upstream.intercepting_sandgate(
            cls.pki, cls.up.port, TOKEN, SECRET,
            task_limits={"h2_max_concurrent_streams": 4, "h2_max_continuations": 2})

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    client = InterceptH2AttacksTest.client
    upstream_saw = InterceptH2AttacksTest.upstream_saw
    assert_still_serving = InterceptH2AttacksTest.assert_still_serving
    continued = InterceptH2AttacksTest.continued

    def test_streams_past_the_concurrency_limit_are_refused(self):
        c = self.client()
        # Five streams at once, none ended (so none is answered and closed in between): the
        # fifth is past the four the task allows, refused before anything of it goes upstream.
        c.send(b"".join(c.headers(2 * i + 1, req("/four%d" % i), end_stream=False)
                        for i in range(5)))
        frames = list(c.frames(limit=200))
        c.tls.close()
        settings = {}
        for f in frames:
            if isinstance(f, SettingsFrame) and "ACK" not in f.flags:
                settings.update(f.settings)
        self.assertEqual(settings.get(SettingsFrame.MAX_CONCURRENT_STREAMS), 4)
        reset = {f.stream_id: f.error_code for f in frames if isinstance(f, RstStreamFrame)}
        self.assertEqual(reset.get(9), 7, "the fifth stream was not refused (REFUSED_STREAM)")
        self.assertEqual([sid for sid in (1, 3, 5, 7) if sid in reset], [])
        self.assertEqual(self.upstream_saw("/four4"), [])
        self.assert_still_serving()

    def test_continuation_flood_ends_the_connection(self):
        self.assertEqual(self.continued("/cont2", 2), ("status", "200"))
        self.assertEqual(self.continued("/cont3", 3), ("goaway", 1))
        self.assertEqual(self.upstream_saw("/cont3"), [])
        self.assert_still_serving()
