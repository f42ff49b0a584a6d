"""Strict request parsing, end to end: raw bytes over a socket, the status, the reason token,
and the connection closed afterwards. The upstream (127.0.0.1, opened with cidrs on
purpose) records what reaches it, so a smuggled second request would be seen.
"""

import unittest

from sandgate_fixture import Sandgate, read_all, read_response_head, read_to_eof
from upstreams import HttpUpstream

TOKEN = "p4rse"


class ParsingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        cls.sg = Sandgate(
            {"p": {"allow": [{"host": "api.test", "ports": [80, 443], "cidrs": ["127.0.0.0/8"]}]}},
            [{"name": "t", "policy": "p", "token": TOKEN}],
            limits={"max_header_bytes": "4KiB", "header_timeout": "1s", "body_timeout": "1s"},
            resolve={"api.test": "127.0.0.1:%d" % cls.up.port}).start()
        cls.auth = Sandgate.auth_header("t", TOKEN).encode()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def send(self, raw):
        """Sends raw bytes; returns (status, reason, closed by sandgate within 5 s)."""
        s = self.sg.connect()
        try:
            s.sendall(raw)
            status, headers, _ = read_response_head(s)
            _, closed = read_to_eof(s, 5)
            return status, headers.get("x-sandgate-reason"), closed
        finally:
            s.close()

    def upstream_paths(self):
        return [r["path"] for r in self.up.requests if r["path"] != "/echo/slowbody"]

    def expect_400(self, raw, reason, status=400):
        before = len(self.upstream_paths())
        got_status, got_reason, closed = self.send(raw)
        self.assertEqual((got_status, got_reason), (status, reason), raw[:200])
        self.assertTrue(closed, "connection left open after %s" % reason)
        self.assertEqual(len(self.upstream_paths()), before,
                         "a refused request reached the upstream")

    def req(self, line, fields=b"Host: api.test\r\n", body=b""):
        return line + b"\r\n" + fields + self.auth + b"\r\n" + body

    def test_valid_request_passes(self):
        s = self.sg.connect()
        s.sendall(self.req(b"GET http://api.test/echo HTTP/1.1", b"Host: api.test\r\n"
                           b"Connection: close\r\n"))
        status, _, _ = read_response_head(s)
        s.close()
        self.assertEqual(status, 200)

    def test_http11_request_without_host_is_400(self):
        # RFC 9112 section 3.2: it was forwarded with a Host sandgate made up.
        self.expect_400(self.req(b"GET http://api.test/echo/nohost HTTP/1.1", b""),
                        "missing_host")
        self.sg.wait_audit(reason="missing_host", status=400)
        # HTTP/1.0 has no such rule.
        s = self.sg.connect()
        s.sendall(self.req(b"GET http://api.test/echo/http10 HTTP/1.0", b""))
        status, _, _ = read_response_head(s)
        s.close()
        self.assertEqual(status, 200)

    def test_content_length_and_transfer_encoding(self):
        self.expect_400(self.req(b"POST http://api.test/echo HTTP/1.1",
                                 b"Host: api.test\r\nContent-Length: 4\r\n"
                                 b"Transfer-Encoding: chunked\r\n",
                                 b"0\r\n\r\nGET http://api.test/smuggled HTTP/1.1\r\n\r\n"),
                        "ambiguous_framing")

    def test_duplicate_content_length(self):
        self.expect_400(self.req(b"POST http://api.test/echo HTTP/1.1",
                                 b"Host: api.test\r\nContent-Length: 3\r\nContent-Length: 3\r\n",
                                 b"abc"), "bad_content_length")

    def test_non_numeric_content_length(self):
        for v in (b"abc", b"-1", b"3, 3", b"0x10", b" "):
            self.expect_400(self.req(b"POST http://api.test/echo HTTP/1.1",
                                     b"Host: api.test\r\nContent-Length: " + v + b"\r\n"),
                            "bad_content_length")

    def test_transfer_encoding_not_final_chunked(self):
        for v in (b"gzip", b"chunked, gzip", b"identity", b"chunked, chunked"):
            self.expect_400(self.req(b"POST http://api.test/echo HTTP/1.1",
                                     b"Host: api.test\r\nTransfer-Encoding: " + v + b"\r\n"),
                            "bad_transfer_encoding")

    def test_obs_fold(self):
        self.expect_400(self.req(b"GET http://api.test/echo HTTP/1.1",
                                 b"Host: api.test\r\nX-A: one\r\n two\r\n"), "obs_fold")

    def test_control_characters(self):
        self.expect_400(self.req(b"GET http://api.test/echo HTTP/1.1",
                                 b"Host: api.test\r\nX-A: a\x00b\r\n"), "bad_header")
        self.expect_400(self.req(b"GET http://api.test/echo HTTP/1.1",
                                 b"Host: api.test\r\nX\x01A: v\r\n"), "bad_header")
        self.expect_400(self.req(b"GET http://api.test/echo HTTP/1.1",
                                 b"Host: api.test\r\nX-A : v\r\n"), "bad_header")

    def test_bare_lf(self):
        self.expect_400(b"GET http://api.test/echo HTTP/1.1\nHost: api.test\n\n",
                        "bad_request_line")

    def test_connect_target_not_host_port(self):
        self.expect_400(self.req(b"CONNECT api.test HTTP/1.1", b""), "bad_target")
        self.expect_400(self.req(b"CONNECT /api.test:443 HTTP/1.1", b""), "bad_authority")

    def test_absolute_uri_host_disagrees_with_host(self):
        self.expect_400(self.req(b"GET http://api.test/echo HTTP/1.1", b"Host: evil.test\r\n"),
                        "host_mismatch")

    def test_scheme_other_than_http(self):
        self.expect_400(self.req(b"GET https://api.test/echo HTTP/1.1"), "bad_scheme")
        self.expect_400(self.req(b"GET ftp://api.test/ HTTP/1.1"), "bad_scheme")

    def test_authority_tricks(self):
        for target in (b"http://user@api.test/", b"http://api.test\\@evil.test/",
                       b"http://api.test#@evil.test/", b"http://api%2etest/"):
            self.expect_400(self.req(b"GET " + target + b" HTTP/1.1", b""), "bad_authority")
        self.expect_400(self.req(b"GET http://\xc3\xa9.test/ HTTP/1.1", b""), "bad_target")

    def test_port_out_of_range(self):
        self.expect_400(self.req(b"GET http://api.test:0/ HTTP/1.1", b""), "bad_port")
        self.expect_400(self.req(b"GET http://api.test:65536/ HTTP/1.1", b""), "bad_port")
        self.expect_400(self.req(b"CONNECT api.test:99999 HTTP/1.1", b""), "bad_port")

    def test_connect_with_body(self):
        self.expect_400(self.req(b"CONNECT api.test:443 HTTP/1.1", b"Content-Length: 5\r\n",
                                 b"hello"), "connect_with_body")

    def test_two_proxy_authorizations(self):
        self.expect_400(b"GET http://api.test/echo HTTP/1.1\r\nHost: api.test\r\n" + self.auth +
                        self.auth + b"\r\n", "duplicate_proxy_authorization")

    def test_head_too_large_is_431(self):
        big = b"X-Big: " + b"a" * 5000 + b"\r\n"
        self.expect_400(self.req(b"GET http://api.test/echo HTTP/1.1", b"Host: api.test\r\n" + big),
                        "header_too_large", status=431)

    def test_methods_are_case_sensitive(self):
        # "get" is a different (unknown) method: it does not match a GET rule, and it is
        # certainly not CONNECT.
        status, reason, _ = self.send(self.req(b"connect api.test:443 HTTP/1.1", b""))
        self.assertNotEqual(status, 200)
        self.assertEqual(self.sg.wait_audit(method="connect")["kind"], "refusal")

    def test_upgrade_is_stripped(self):
        s = self.sg.connect()
        s.sendall(self.req(b"GET http://api.test/echo/upgrade HTTP/1.1",
                           b"Host: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                           b"Sec-WebSocket-Version: 13\r\n"))
        status, _, _ = read_response_head(s)
        s.close()
        self.assertEqual(status, 200)
        names = [k.lower() for k, _ in self.up.requests[-1]["headers"]]
        self.assertNotIn("upgrade", names)
        self.assertNotIn("connection", names)

    def test_slow_client_header_deadline(self):
        s = self.sg.connect()
        s.sendall(b"GET http://api.test/echo HTTP/1.1\r\nHost: api")
        s.settimeout(10)
        self.assertEqual(s.recv(100), b"")  # closed after header_timeout (1 s)
        s.close()

    def test_slow_client_body_deadline(self):
        s = self.sg.connect()
        s.sendall(self.req(b"POST http://api.test/echo/slowbody HTTP/1.1",
                           b"Host: api.test\r\nContent-Length: 100\r\n", b"only-some"))
        s.settimeout(10)
        data = read_all(s, 10)
        s.close()
        self.assertEqual(data, b"")  # closed after body_timeout (1 s), nothing answered
        self.sg.wait_audit(path="/echo/slowbody", reason="client_timeout")


if __name__ == "__main__":
    unittest.main()
