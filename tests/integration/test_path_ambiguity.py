"""Paths and methods an upstream reads differently from the rule that admitted them, from the
client's side, intercepted HTTPS and plain-HTTP forwarding.

A rule with `paths: [/v1/**]` must not admit `/v1/..;/admin` (Tomcat, Spring and Jetty read
`/admin`), dot segments in any spelling, backslashes or encoded slashes: each is refused with
`403 path_ambiguous`. A request admitted by a rule with `methods` or `paths` that carries a
method or URL override header (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override,
X-Original-URL, X-Rewrite-URL) is refused with `403 override_header`. For each refusal the
upstream receives nothing, and the audit line and the request metric carry the reason; normal
paths keep working, and a rule without paths or methods is not affected.

api.test (HTTPS, intercepted: the rule has methods and paths) and plain.test (HTTP, forwarded)
map to echo upstreams on loopback; open.test has a rule with neither.
"""

import json
import os
import unittest

from clients import curl
from pki import test_pki
from sandgate_fixture import Sandgate, wait_until
from upstreams import HttpUpstream

TOKEN = "tok-paths"

AMBIGUOUS = [
    "/v1/..;/admin",
    "/v1/x;jsessionid=1",
    "/v1/%2e%2e/admin",
    "/v1/%2E%2e/admin",
    "/v1/.%2e/admin",
    "/v1/%2e/admin",
    "/v1/..%2fadmin",
    "/v1/x%2Fy",
    "/v1/x%5cy",
    "/v1/..%5Cadmin",
    "/v1/..%3Badmin",
    "/v1/%c0%ae%c0%ae/admin",
    "/v1/x\\..\\admin",
    "/v1/../admin",
    "/v1/./x",
]

OVERRIDES = [
    ("X-HTTP-Method-Override", "DELETE"),
    ("X-HTTP-Method", "DELETE"),
    ("X-Method-Override", "DELETE"),
    ("x-http-method-override", "PUT"),
    ("X-Original-URL", "/admin"),
    ("X-Rewrite-URL", "/admin"),
]


class PathAmbiguityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.http = HttpUpstream()
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        loop = {"cidrs": ["127.0.0.0/8"]}
        policies = {"agent": {"allow": [
            dict(loop, host="api.test", methods=["GET"], paths=["/v1/**"]),
            dict(loop, host="plain.test", ports=[80], methods=["GET"], paths=["/v1/**"]),
            dict(loop, host="open.test", ports=[80]),
        ]}}
        cfg = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN}],
            resolve={"api.test": "127.0.0.1:%d" % cls.https.port,
                     "plain.test": "127.0.0.1:%d" % cls.http.port,
                     "open.test": "127.0.0.1:%d" % cls.http.port},
            extra={"ca_cert_out": cls.ca_out, "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.config = cfg
        cls.sg.write_config(cfg)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.https.close()
        cls.http.close()

    def fetch(self, url, *headers):
        # --path-as-is: curl would otherwise resolve dot segments itself.
        args = ["--path-as-is", "--cacert", self.ca_out]
        for h in headers:
            args += ["-H", h]
        return curl(url, *args, proxy=self.proxy)

    def refused(self, kind, reason):
        return self.sg.metric("sandgate_requests_total", task="demo", kind=kind,
                              verdict="deny", reason=reason) or 0

    def assert_refused(self, upstream, base, path, reason, kind, *headers):
        before_up = len(upstream.requests)
        before_metric = self.refused(kind, reason)
        r = self.fetch(base + path, *headers)
        self.assertEqual(r.status, 403, "%s: %s" % (path, r.body))
        self.assertEqual(r.header("x-sandgate-reason"), reason, path)
        self.assertEqual(json.loads(r.body)["reason"], reason)
        # The upstream saw nothing: the refusal came before any byte went out.
        self.assertEqual(len(upstream.requests), before_up, (path, upstream.requests[before_up:]))
        rec = self.sg.wait_audit(reason=reason, path=path.split("?")[0])
        self.assertEqual((rec["verdict"], rec["status"]), ("deny", 403))
        wait_until(lambda: self.refused(kind, reason) == before_metric + 1,
                   what="%s counted for %s" % (reason, path))

    def test_normal_paths_are_admitted(self):
        # The upstream answers 404 for these paths: it got the request, sandgate refused nothing.
        for base, up in (("https://api.test", self.https), ("http://plain.test", self.http)):
            for path in ("/v1/echo/ok?x=1", "/v1/a..b/.well-known", "/v1/a%20b"):
                r = self.fetch(base + path)
                self.assertEqual((r.status, r.header("x-sandgate-reason")), (404, None), path)
                self.assertEqual(up.requests[-1]["path"], path)
        r = self.fetch("https://api.test/admin")
        self.assertEqual((r.status, r.header("x-sandgate-reason")), (403, "path_not_allowed"))

    def test_ambiguous_paths_are_refused_intercepted(self):
        for path in AMBIGUOUS:
            with self.subTest(path=path):
                self.assert_refused(self.https, "https://api.test", path, "path_ambiguous",
                                    "intercept")

    def test_ambiguous_paths_are_refused_forwarded(self):
        for path in AMBIGUOUS:
            with self.subTest(path=path):
                self.assert_refused(self.http, "http://plain.test", path, "path_ambiguous",
                                    "forward")

    def test_override_headers_are_refused(self):
        for base, up, kind in (("https://api.test", self.https, "intercept"),
                               ("http://plain.test", self.http, "forward")):
            for name, value in OVERRIDES:
                with self.subTest(base=base, header=name):
                    self.assert_refused(up, base, "/v1/echo/override", "override_header", kind,
                                        "%s: %s" % (name, value))

    def test_a_rule_without_methods_or_paths_is_not_affected(self):
        before = len(self.http.requests)
        r = self.fetch("http://open.test/echo/x;y", "X-HTTP-Method-Override: DELETE")
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(len(self.http.requests), before + 1)
        self.assertEqual(self.http.requests[-1]["path"], "/echo/x;y")


if __name__ == "__main__":
    unittest.main()
