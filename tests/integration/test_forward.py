"""Plain-HTTP forwarding through `sandgate serve` with token identity, curl and urllib.

Every upstream is a Python server on 127.0.0.1; `resolve:` maps api.test to it, and the
allowing rule lists `cidrs: [127.0.0.0/8]` because reaching loopback is otherwise refused.
"""

import json
import os
import signal
import time
import unittest
import urllib.error
import urllib.request

from clients import clean_env, curl
from sandgate_fixture import Sandgate, read_all, read_response_head, wait_until
from upstreams import HttpUpstream, free_closed_port

TOKEN = "tok-demo"
OTHER_TOKEN = "tok-other"


class ForwardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        dead = free_closed_port()
        policies = {
            "web": {"allow": [
                {"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]},
                {"host": "dead.test", "ports": [80], "cidrs": ["127.0.0.0/8"]},
                {"host": "ro.test", "ports": [80], "methods": ["GET"], "paths": ["/echo/**"],
                 "cidrs": ["127.0.0.0/8"]},
                {"host": "tls-only.test"},  # ports default to [443]
            ]},
        }
        cls.sg = Sandgate(
            policies,
            [{"name": "demo", "policy": "web", "token": TOKEN},
             {"name": "other", "policy": "web", "token": OTHER_TOKEN}],
            limits={"idle_timeout": "2s"},
            resolve={"api.test": "127.0.0.1:%d" % cls.up.port,
                     "ro.test": "127.0.0.1:%d" % cls.up.port,
                     "tls-only.test": "127.0.0.1:%d" % cls.up.port,
                     "dead.test": "127.0.0.1:%d" % dead}).start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def test_allowed_get_with_curl_x(self):
        r = curl("http://api.test/echo/hello", proxy=self.proxy)
        self.assertEqual(r.status, 200, r.stderr)
        echo = json.loads(r.body)
        self.assertEqual(echo["path"], "/echo/hello")
        names = [k.lower() for k, _ in echo["headers"]]
        self.assertNotIn("proxy-authorization", names)
        self.assertNotIn("proxy-connection", names)
        self.sg.wait_audit(kind="forward", task="demo", host="api.test", path="/echo/hello",
                           status=200, verdict="allow")

    def test_allowed_get_with_http_proxy_env(self):
        env = clean_env(http_proxy=self.proxy)
        r = curl("http://api.test/bytes?n=100000", env=env)
        self.assertEqual(r.status, 200, r.stderr)
        self.assertEqual(r.body, b"x" * 100000)

    def test_denied_host_is_403_with_reason(self):
        r = curl("http://evil.test/", proxy=self.proxy)
        self.assertEqual(r.status, 403)
        self.assertEqual(r.header("x-sandgate-reason"), "no_matching_rule")
        body = json.loads(r.body)
        self.assertEqual(body["reason"], "no_matching_rule")
        self.assertEqual(body["task"], "demo")
        self.assertEqual(body["host"], "evil.test")
        for key in ("error", "rule", "hint"):
            self.assertIn(key, body)
        rec = self.sg.wait_audit(kind="refusal", host="evil.test")
        self.assertEqual(rec["status"], 403)
        self.assertEqual(rec["reason"], "no_matching_rule")

    def test_plain_http_needs_port_80_in_the_rule(self):
        r = curl("http://tls-only.test/echo", proxy=self.proxy)
        self.assertEqual(r.status, 403)
        self.assertEqual(r.header("x-sandgate-reason"), "port_not_allowed")

    def test_method_and_path_rules(self):
        self.assertEqual(curl("http://ro.test/echo/a", proxy=self.proxy).status, 200)
        r = curl("http://ro.test/echo/a", "-X", "DELETE", proxy=self.proxy)
        self.assertEqual((r.status, r.header("x-sandgate-reason")), (403, "method_not_allowed"))
        r = curl("http://ro.test/bytes?n=1", proxy=self.proxy)
        self.assertEqual((r.status, r.header("x-sandgate-reason")), (403, "path_not_allowed"))

    def test_missing_token_is_407_with_challenge(self):
        r = curl("http://api.test/echo", proxy=self.sg.proxy_url())
        self.assertEqual(r.status, 407)
        self.assertEqual(r.header("proxy-authenticate"), 'Basic realm="sandgate"')
        self.assertEqual(r.header("x-sandgate-reason"), "auth_required")

    def test_wrong_token_is_407(self):
        for task, token in (("demo", "nope"), ("demo", OTHER_TOKEN), ("ghost", TOKEN)):
            r = curl("http://api.test/echo", proxy=self.sg.proxy_url(task, token))
            self.assertEqual(r.status, 407, (task, token))
            self.assertEqual(r.header("x-sandgate-reason"), "auth_invalid")
        rec = self.sg.wait_audit(reason="auth_invalid", status=407)
        self.assertIsNone(rec["task"])  # a claimed but unproven task name is not logged as one

    def test_other_task_token_identifies_other_task(self):
        r = curl("http://evil.test/", proxy=self.sg.proxy_url("other", OTHER_TOKEN))
        self.assertEqual(json.loads(r.body)["task"], "other")

    def test_urllib_proxy_handler(self):
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": self.proxy}))
        with opener.open("http://api.test/echo/urllib", timeout=10) as resp:
            self.assertEqual(resp.status, 200)
            self.assertEqual(json.loads(resp.read())["path"], "/echo/urllib")
        with self.assertRaises(urllib.error.HTTPError) as ctx:
            opener.open("http://evil.test/", timeout=10)
        self.assertEqual(ctx.exception.code, 403)
        self.assertEqual(ctx.exception.headers["X-Sandgate-Reason"], "no_matching_rule")

    def test_post_bodies_content_length_and_chunked(self):
        r = curl("http://api.test/echo", "--data-binary", "a=1&b=2", proxy=self.proxy)
        self.assertEqual(json.loads(r.body)["body"], "a=1&b=2")
        r = curl("http://api.test/echo", "--data-binary", "chunked-body",
                 "-H", "Transfer-Encoding: chunked", proxy=self.proxy)
        echo = json.loads(r.body)
        self.assertEqual(echo["body"], "chunked-body")
        self.assertIn(("Transfer-Encoding", "chunked"), [tuple(h) for h in echo["headers"]])

    def test_expect_100_continue(self):
        r = curl("http://api.test/echo", "--data-binary", "after-continue",
                 "-H", "Expect: 100-continue", proxy=self.proxy)
        self.assertEqual(r.status, 200, r.stderr)
        echo = json.loads(r.body)
        self.assertEqual(echo["body"], "after-continue")
        self.assertNotIn("expect", [k.lower() for k, _ in echo["headers"]])

    def test_hop_by_hop_and_connection_listed_headers_are_stripped(self):
        s = self.sg.connect()
        s.sendall(b"GET http://api.test/echo/hop HTTP/1.1\r\nHost: api.test\r\n" +
                  Sandgate.auth_header("demo", TOKEN).encode() +
                  b"Connection: close, X-Secret-Hop\r\nX-Secret-Hop: 1\r\nKeep-Alive: 5\r\n"
                  b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
                  b"Proxy-Connection: keep-alive\r\nTE: trailers\r\nX-Kept: yes\r\n\r\n")
        status, headers, rest = read_response_head(s)
        body = rest + read_all(s)
        s.close()
        self.assertEqual(status, 200)
        names = [k.lower() for k, _ in json.loads(body)["headers"]]
        for gone in ("x-secret-hop", "keep-alive", "upgrade", "http2-settings",
                     "proxy-connection", "te", "proxy-authorization"):
            self.assertNotIn(gone, names)
        self.assertIn("x-kept", names)

    def test_sandgate_fields_are_sandgates_own_both_ways(self):
        # A client cannot tell the upstream what sandgate decided or who the client is...
        r = curl("http://api.test/echo/own", "-H", "X-Sandgate-Task: admin",
                 "-H", "x-sandgate-credential: github", "-H", "X-Sandgate-Reason: allowed",
                 "-H", "X-Sandgated: kept", proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        names = [k.lower() for k, _ in self.up.requests_to("/echo/own")[0]["headers"]]
        self.assertFalse([n for n in names if n.startswith("x-sandgate-")], names)
        self.assertIn("x-sandgated", names)  # only the namespace itself is sandgate's
        # ...and an upstream cannot make its answer look like sandgate's refusal.
        r = curl("http://api.test/spoof", proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        self.assertFalse([k for k, _ in r.headers if k.startswith("x-sandgate-")], r.headers)
        self.assertEqual(r.body, b"spoofed\n")

    def test_keep_alive_and_upstream_reuse(self):
        s = self.sg.connect()
        ports = []
        for i in range(3):
            s.sendall(("GET http://api.test/echo/ka%d HTTP/1.1\r\nHost: api.test\r\n" % i +
                       Sandgate.auth_header("demo", TOKEN) + "\r\n").encode())
            status, headers, rest = read_response_head(s)
            self.assertEqual(status, 200)
            n = int(headers["content-length"])
            while len(rest) < n:
                rest += s.recv(65536)
            ports.append(json.loads(rest)["client_port"])
        s.close()
        # One upstream connection served all three (the pool), the client kept its one.
        self.assertEqual(len(set(ports)), 1, ports)

    def test_streaming_response_is_not_buffered(self):
        self.up.release.clear()
        s = self.sg.connect()
        s.sendall(b"GET http://api.test/stream HTTP/1.1\r\nHost: api.test\r\n" +
                  Sandgate.auth_header("demo", TOKEN).encode() + b"Connection: close\r\n\r\n")
        status, headers, rest = read_response_head(s)
        self.assertEqual(status, 200)
        # The first chunk arrives while the upstream still holds back the last one.
        deadline = time.monotonic() + 5
        while b"first" not in rest and time.monotonic() < deadline:
            rest += s.recv(4096)
        self.assertIn(b"first", rest)
        self.assertNotIn(b"last", rest)
        self.up.release.set()
        body = rest + read_all(s)
        s.close()
        self.assertIn(b"last", body)
        self.assertEqual(headers.get("transfer-encoding"), "chunked")

    def test_close_delimited_body_is_rechunked(self):
        r = curl("http://api.test/eof-body", proxy=self.proxy)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"until-close" * 100)

    def test_head_request(self):
        r = curl("http://api.test/bytes?n=5", "-I", proxy=self.proxy)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-length"), "5")

    def test_upstream_refused_is_502(self):
        r = curl("http://dead.test/", proxy=self.proxy)
        self.assertEqual((r.status, r.header("x-sandgate-reason")), (502, "upstream_refused"))
        rec = self.sg.wait_audit(host="dead.test")
        self.assertEqual(rec["reason"], "upstream_refused")

    def test_upstream_garbage_is_502(self):
        r = curl("http://api.test/garbage", proxy=self.proxy)
        self.assertEqual((r.status, r.header("x-sandgate-reason")),
                         (502, "upstream_bad_response"))

    def test_upstream_timeout_is_504(self):
        r = curl("http://api.test/slow?s=4", proxy=self.proxy)
        self.assertEqual((r.status, r.header("x-sandgate-reason")), (504, "upstream_timeout"))

    def test_upstream_reset_mid_body_then_keeps_serving(self):
        r = curl("http://api.test/reset", proxy=self.proxy)
        self.assertEqual(r.status, 200)
        self.assertNotEqual(r.rc, 0)  # the body was cut short
        self.assertLess(len(r.body), 100000)
        self.sg.wait_audit(path="/reset", reason="upstream_reset")
        # Everyone (including this task) is still served.
        self.assertEqual(curl("http://api.test/echo/after", proxy=self.proxy).status, 200)

    def test_one_connection_cannot_switch_task(self):
        s = self.sg.connect()
        s.sendall(b"GET http://api.test/echo/first HTTP/1.1\r\nHost: api.test\r\n" +
                  Sandgate.auth_header("demo", TOKEN).encode() + b"\r\n")
        status, headers, rest = read_response_head(s)
        self.assertEqual(status, 200)
        n = int(headers["content-length"])
        while len(rest) < n:
            rest += s.recv(65536)
        s.sendall(b"GET http://api.test/echo/second HTTP/1.1\r\nHost: api.test\r\n" +
                  Sandgate.auth_header("other", OTHER_TOKEN).encode() + b"\r\n")
        status, headers, _ = read_response_head(s)
        s.close()
        self.assertEqual((status, headers.get("x-sandgate-reason")), (407, "task_mismatch"))

    def test_http10_client(self):
        s = self.sg.connect()
        s.sendall(b"GET http://api.test/echo/ten HTTP/1.0\r\n" +
                  Sandgate.auth_header("demo", TOKEN).encode() + b"\r\n")
        status, headers, rest = read_response_head(s)
        body = rest + read_all(s)  # ends: HTTP/1.0 without keep-alive closes
        s.close()
        self.assertEqual(status, 200)
        echo = json.loads(body)
        self.assertEqual(echo["path"], "/echo/ten")
        self.assertIn(("Host", "api.test"), [tuple(h) for h in echo["headers"]])

    def test_origin_form_is_400(self):
        s = self.sg.connect()
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                  Sandgate.auth_header("demo", TOKEN).encode() + b"\r\n")
        status, headers, _ = read_response_head(s)
        s.close()
        self.assertEqual((status, headers.get("x-sandgate-reason")),
                         (400, "not_a_proxy_request"))


class SelfLoopTest(unittest.TestCase):
    """A rule that opens loopback still never lets a client reach sandgate's own ports."""

    def test_proxy_loop(self):
        sg = Sandgate({"p": {"allow": [{"cidrs": ["127.0.0.0/8"], "ports": [1, 65535]}]}},
                      [{"name": "t", "policy": "p", "token": "x"}])
        try:
            sg.start()
            # The rule must allow the proxy's own port: rewrite it now that we know the port.
            cfg = sg.config
            cfg["policies"]["p"]["allow"][0]["ports"] = [sg.proxy_port, sg.metrics_port]
            sg.write_config(cfg)
            os.kill(sg.proc.pid, signal.SIGHUP)
            wait_until(lambda: "reloaded" in sg.stderr(), 10, what="reload")
            for port in (sg.proxy_port, sg.metrics_port):
                r = curl("http://127.0.0.1:%d/" % port, proxy=sg.proxy_url("t", "x"))
                self.assertEqual((r.status, r.header("x-sandgate-reason")), (403, "proxy_loop"),
                                 r.stderr)
        finally:
            sg.cleanup()


if __name__ == "__main__":
    unittest.main()
