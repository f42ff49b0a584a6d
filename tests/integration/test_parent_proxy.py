"""Parent proxies for the upstream leg (issue #44): sandgate → squid (Debian's, started here on
loopback with its own config, with and without Basic auth) or a SOCKS5 server → loopback
upstreams. Policy still decides on the client's target, the deny ranges on what sandgate
resolves; a parent's refusals become 502s with parent_* reasons and none of its words; its
credential reaches only the parent (never the client, the upstream, the audit log, metrics or
stderr: the suite's leak check greps what these tests recorded for it).

Names: plain.test → the plain HTTP upstream, api.test → the HTTPS upstream (test CA), both
through `resolve:`; hostile parents are small servers of tests/support/parents.py.
"""

import os
import unittest

import artifacts
from clients import curl
from parents import HostileParent, Socks5Server, Squid, TlsConnectParent
from pki import test_pki
from sandgate_fixture import Sandgate, read_response, wait_until
from upstreams import HttpUpstream, free_closed_port

TOKEN = "tok-parent"
PARENT_USER = "sgparent"
PARENT_PASSWORD = "parentpw-7f3a9c1e5b2d4068"
API_SECRET = "sk-parentroute-0123456789abcdef"
FAKE_SECRET = "fake-parent-secret-a1b2c3d4e5"


class ParentProxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.http = HttpUpstream()
        cls.https = HttpUpstream(cls.pki)
        cls.squid = Squid()
        # absolute.test is a name only the parents resolve (resolve: parent).
        names = {"absolute.test": "127.0.0.1"}
        cls.squid_auth = Squid(users={PARENT_USER: PARENT_PASSWORD}, hosts=names)
        cls.squid_deny = Squid(deny_ports=(cls.http.port,), hosts=names)
        cls.socks = Socks5Server(PARENT_USER, PARENT_PASSWORD,
                                 names={"named.test": "127.0.0.1"})
        cls.garbage = HostileParent(b"HTTP/1.1 200 OK\r\n\r\n\x16\x03\x01garbage-not-tls" * 4)
        cls.huge = HostileParent(b"HTTP/1.1 200 " + b"A" * 40000 + b"\r\n\r\n", keep_open=True)
        cls.fake407 = HostileParent(
            b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n"
            b"Content-Length: %d\r\n\r\n" % (len(FAKE_SECRET) + 8) + b"secret: " +
            FAKE_SECRET.encode())
        cls.tls_parent = TlsConnectParent((cls.pki.leaf_cert, cls.pki.leaf_key), PARENT_USER,
                                          PARENT_PASSWORD, names=names)
        cls.redirect = HostileParent(b"HTTP/1.1 302 Found\r\nLocation: http://evil.example/\r\n"
                                     b"Content-Length: 0\r\n\r\n")
        cls.dead_port = free_closed_port()
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        artifacts.register_secret("fake407", FAKE_SECRET)
        # The whole "user:password" is registered by secret_file; the password alone too, so
        # that the leak check finds it in any form a parent's credential could leak in.
        artifacts.register_secret("corp-password", PARENT_PASSWORD)
        creds = {
            "corp": {"source": {"file": cls.sg.secret_file(
                "corp", "%s:%s" % (PARENT_USER, PARENT_PASSWORD))}},
            "wrong": {"source": {"file": cls.sg.secret_file(
                "wrong", "%s:not-the-password-4242" % PARENT_USER)}},
            "api": {"source": {"file": cls.sg.secret_file("api", API_SECRET)},
                    "hosts": ["api.test", "garbage.test", "other.test"],
                    "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
        }
        parents = [
            {"name": "squid", "url": "http://127.0.0.1:%d" % cls.squid.port},
            {"name": "squid-auth", "url": "http://127.0.0.1:%d" % cls.squid_auth.port,
             "credential": "corp"},
            {"name": "squid-wrong", "url": "http://127.0.0.1:%d" % cls.squid_auth.port,
             "credential": "wrong"},
            {"name": "squid-noauth", "url": "http://127.0.0.1:%d" % cls.squid_auth.port},
            {"name": "squid-deny", "url": "http://127.0.0.1:%d" % cls.squid_deny.port},
            {"name": "socks", "url": "socks5://127.0.0.1:%d" % cls.socks.port,
             "credential": "corp"},
            {"name": "socks-remote", "url": "socks5://127.0.0.1:%d" % cls.socks.port,
             "credential": "corp", "resolve": "parent"},
            {"name": "dead", "url": "http://127.0.0.1:%d" % cls.dead_port},
            {"name": "tls", "url": "https://127.0.0.1:%d" % cls.tls_parent.port,
             "credential": "corp"},
            {"name": "garbage", "url": "http://127.0.0.1:%d" % cls.garbage.port},
            {"name": "huge", "url": "http://127.0.0.1:%d" % cls.huge.port},
            {"name": "fake407", "url": "http://127.0.0.1:%d" % cls.fake407.port},
            {"name": "redirect", "url": "http://127.0.0.1:%d" % cls.redirect.port},
            {"name": "abs", "url": "http://127.0.0.1:%d" % cls.squid_auth.port,
             "credential": "corp", "resolve": "parent"},
            {"name": "abs-wrong", "url": "http://127.0.0.1:%d" % cls.squid_auth.port,
             "credential": "wrong", "resolve": "parent"},
            {"name": "abs-deny", "url": "http://127.0.0.1:%d" % cls.squid_deny.port,
             "resolve": "parent"},
            {"name": "tls-abs", "url": "https://127.0.0.1:%d" % cls.tls_parent.port,
             "credential": "corp", "resolve": "parent"},
            {"name": "fake407-abs", "url": "http://127.0.0.1:%d" % cls.fake407.port,
             "resolve": "parent"},
        ]
        lo = {"cidrs": ["127.0.0.0/8"]}
        http80 = dict(lo, ports=[80])

        def host(name, via, **kw):
            return dict(kw, host=name, via=via)
        allow = [
            host("plain.test", ["squid"], **http80),
            host("tunnel.test", ["squid-auth"], **lo),
            dict(lo, host="api.test", credential="api", via=["squid-auth"]),
            host("wrongpw.test", ["squid-wrong"], **lo),
            host("noauth.test", ["squid-noauth"], **lo),
            host("refused.test", ["squid-deny"], **http80),
            host("socks.test", ["socks"], **lo),
            host("failover.test", ["dead", "squid-auth"], **lo),
            host("alldead.test", ["dead"], **lo),
            dict(lo, host="garbage.test", credential="api", via=["garbage"]),
            host("huge.test", ["huge"], **lo),
            host("fake407.test", ["fake407"], **lo),
            host("redirect.test", ["redirect"], **lo),
            host("direct.test", "direct", **lo),
            host("tlsparent.test", ["tls"], **lo),
            dict(lo, host="other.test", credential="api", via=["tls"]),
            # No cidrs: the loopback address it resolves to is in a denied range.
            {"host": "denied.test", "via": ["squid"]},
            {"host": "named.test", "via": ["socks-remote"]},
            {"host": "absolute.test", "ports": [cls.http.port], "via": ["abs"],
             "paths": ["/echo/abs*"]},
            {"host": "absolute.test", "ports": [cls.http.port], "via": ["abs-wrong"],
             "paths": ["/echo/wrong*"]},
            {"host": "absolute.test", "ports": [cls.http.port], "via": ["abs-deny"],
             "paths": ["/echo/deny*"]},
            {"host": "absolute.test", "ports": [cls.http.port], "via": ["tls-abs"],
             "paths": ["/echo/tlsabs*"]},
            {"host": "absolute.test", "ports": [cls.http.port], "via": ["fake407-abs"],
             "paths": ["/echo/fake407*"]},
        ]
        up = "127.0.0.1:%d" % cls.https.port
        resolve = {n: up for n in ("tunnel.test", "api.test", "wrongpw.test", "noauth.test",
                                   "socks.test", "failover.test", "alldead.test",
                                   "garbage.test", "huge.test", "fake407.test", "direct.test", "redirect.test",
                                   "tlsparent.test", "other.test",
                                   "denied.test")}
        resolve.update({"plain.test": "127.0.0.1:%d" % cls.http.port,
                        "refused.test": "127.0.0.1:%d" % cls.http.port})
        cls.sg.config = cls.sg.make_config(
            {"p": {"allow": allow}}, [{"name": "demo", "policy": "p", "token": TOKEN}],
            resolve=resolve,
            extra={"credentials": creds, "upstream_proxies": parents,
                   "ca_cert_out": cls.ca_out, "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        for s in (cls.squid, cls.squid_auth, cls.squid_deny, cls.socks, cls.garbage, cls.huge,
                  cls.fake407, cls.redirect, cls.tls_parent, cls.http, cls.https):
            s.close()

    def https_get(self, host, path, *args):
        """Through a spliced tunnel: the TLS is the client's and the upstream's (whose test
        certificate names none of these hosts: -k), sandgate only routes it."""
        return curl("https://%s%s" % (host, path), "-k", *args, proxy=self.proxy)

    def raw_connect(self, host, port=443):
        """A CONNECT of our own: (status, headers, body) of sandgate's whole answer."""
        s = self.sg.connect(timeout=30)
        try:
            s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n%s\r\n" % (
                host, port, host, port, self.sg.auth_header("demo", TOKEN))).encode())
            return read_response(s)
        finally:
            s.close()

    def assert_refused(self, answer, reason):
        """`answer`: a curl result (forward) or raw_connect()'s (status, headers, body)."""
        if isinstance(answer, tuple):
            status, headers, body = answer
            got = headers.get("x-sandgate-reason")
        else:
            status, body, got = answer.status, answer.body, answer.header("x-sandgate-reason")
        self.assertEqual((status, got), (502, reason), answer)
        self.assertIn(reason.encode(), body)  # sandgate's JSON refusal, not the parent's page
        self.assertNotIn(b"squid/", body.lower())  # squid's own page names its version
        self.assertNotIn(b"err_", body.lower())
        self.assertNotIn(b"<html", body.lower())

    # --- the routes, through squid ---------------------------------------------------------

    def test_forward_goes_through_squid(self):
        r = curl("http://plain.test/echo/fwd-parent", proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(self.http.requests_to("/echo/fwd-parent")), 1)
        rec = self.sg.wait_audit(path="/echo/fwd-parent")
        self.assertEqual(rec["parent"], "squid")
        self.assertGreaterEqual(self.sg.metric("sandgate_upstream_connect_seconds_count",
                                               parent="squid"), 1)
        # The client's proxy credential went to sandgate, never on to the parent or upstream.
        got = dict((k.lower(), v) for k, v in self.http.requests_to("/echo/fwd-parent")[0]
                   ["headers"])
        self.assertNotIn("proxy-authorization", got)

    def test_forward_goes_to_a_resolving_parent_in_absolute_form(self):
        # resolve: parent: plain http:// goes to the parent as the request itself (RFC 9112
        # 3.2.2), with the parent's Proxy-Authorization and none of the client's (a pooled
        # connection to the parent gets it again).
        for i in (1, 2):
            r = curl("http://absolute.test:%d/echo/abs-%d" % (self.http.port, i),
                     proxy=self.proxy)
            self.assertEqual(r.status, 200, r)
        for i in (1, 2):
            seen = self.http.requests_to("/echo/abs-%d" % i)
            self.assertEqual(len(seen), 1)
            got = dict((k.lower(), v) for k, v in seen[0]["headers"])
            self.assertNotIn("proxy-authorization", got)
            self.assertEqual(got["host"], "absolute.test:%d" % self.http.port)
            rec = self.sg.wait_audit(path="/echo/abs-%d" % i)
            self.assertEqual((rec["parent"], rec["upstream"]),
                             ("abs", "absolute.test:%d" % self.http.port))
        access = wait_until(lambda: [l for l in self.squid_auth.access() if "/echo/abs-" in l]
                            if len([l for l in self.squid_auth.access()
                                    if "/echo/abs-" in l]) == 2 else None,
                            what="squid's access lines")
        for line in access:
            self.assertIn(" GET http://absolute.test:%d/echo/abs-" % self.http.port, line)
            self.assertIn(PARENT_USER, line)

    def test_forward_in_absolute_form_inside_a_tls_parents_tls(self):
        r = curl("http://absolute.test:%d/echo/tlsabs" % self.http.port, proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        self.assertIn("http://absolute.test:%d/echo/tlsabs" % self.http.port,
                      self.tls_parent.connects)
        got = dict((k.lower(), v) for k, v in self.http.requests_to("/echo/tlsabs")[0]["headers"])
        self.assertNotIn("proxy-authorization", got)
        self.assertEqual(self.sg.wait_audit(path="/echo/tlsabs")["parent"], "tls-abs")

    def test_absolute_form_wrong_password_is_parent_auth_failed(self):
        r = curl("http://absolute.test:%d/echo/wrong" % self.http.port, proxy=self.proxy)
        self.assert_refused(r, "parent_auth_failed")
        self.assertIsNone(r.header("proxy-authenticate"))  # the parent's challenge stays there
        self.assertEqual(self.http.requests_to("/echo/wrong"), [])

    def test_absolute_form_squid_deny_is_parent_refused_without_its_page(self):
        r = curl("http://absolute.test:%d/echo/deny" % self.http.port, proxy=self.proxy)
        self.assert_refused(r, "parent_refused")
        self.assertEqual(self.http.requests_to("/echo/deny"), [])

    def test_connect_tunnel_through_squid_with_basic_auth(self):
        r = self.https_get("tunnel.test", "/echo/tunnel-parent")
        self.assertEqual(r.status, 200, r)
        rec = self.sg.wait_audit(host="tunnel.test", kind="tunnel")
        self.assertEqual(rec["parent"], "squid-auth")
        self.assertEqual(rec["upstream"], "127.0.0.1:%d" % self.https.port)
        self.assertTrue(any("CONNECT" in l and PARENT_USER in l for l in self.squid_auth.access()),
                        self.squid_auth.access())

    def test_intercepted_request_with_credential_through_squid(self):
        r = curl("https://api.test/echo/intercept-parent", "--cacert", self.ca_out,
                 proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        seen = self.https.requests_to("/echo/intercept-parent")
        self.assertEqual(len(seen), 1)
        got = dict((k.lower(), v) for k, v in seen[0]["headers"])
        self.assertEqual(got["authorization"], "Bearer " + API_SECRET)
        self.assertNotIn("proxy-authorization", got)
        self.assertNotIn(API_SECRET.encode(), r.body)
        rec = self.sg.wait_audit(path="/echo/intercept-parent")
        self.assertEqual(rec["parent"], "squid-auth")
        self.assertTrue(rec["injected"])

    def test_socks5_parent_with_user_password_gets_an_address(self):
        r = self.https_get("socks.test", "/echo/socks")
        self.assertEqual(r.status, 200, r)
        self.assertIn((1, "127.0.0.1", self.https.port), self.socks.requests)
        self.assertIn((PARENT_USER, PARENT_PASSWORD), self.socks.auths)
        self.assertEqual(self.sg.wait_audit(host="socks.test")["parent"], "socks")

    def test_socks5_resolve_parent_sends_the_name(self):
        # resolve: parent: the parent resolves named.test (to loopback, which sandgate would
        # refuse as address_denied): sandgate never saw the address, as the README says.
        s = self.sg.connect()
        try:
            s.sendall(("CONNECT named.test:443 HTTP/1.1\r\nHost: named.test:443\r\n%s\r\n" %
                       self.sg.auth_header("demo", TOKEN)).encode())
            head = s.recv(4096)
        finally:
            s.close()
        # The SOCKS5 server resolved named.test to 127.0.0.1 but nothing listens on 443 there.
        self.assertIn((3, "named.test", 443), self.socks.requests)
        self.assertTrue(head.startswith(b"HTTP/1.1 502"), head)

    def test_tls_parent_carries_a_tunnel_and_an_intercepted_request(self):
        # https:// parent: TLS to the parent (its certificate verified with tls.upstream_ca),
        # CONNECT with Basic inside it, and the upstream's own TLS inside that tunnel.
        r = self.https_get("tlsparent.test", "/echo/tls-parent")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.sg.wait_audit(host="tlsparent.test")["parent"], "tls")
        r = curl("https://other.test/echo/tls-parent-intercept", "--cacert", self.ca_out,
                 proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        got = dict((k.lower(), v) for k, v in
                   self.https.requests_to("/echo/tls-parent-intercept")[0]["headers"])
        self.assertEqual(got["authorization"], "Bearer " + API_SECRET)
        self.assertIn("127.0.0.1:%d" % self.https.port, self.tls_parent.connects)
        self.assertTrue(self.tls_parent.auths)

    def test_direct_rule_skips_the_parents(self):
        r = self.https_get("direct.test", "/echo/direct")
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(self.sg.wait_audit(host="direct.test")["parent"])

    # --- failures ----------------------------------------------------------------------------

    def test_failover_from_a_dead_parent_to_a_live_one(self):
        r = self.https_get("failover.test", "/echo/failover")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.sg.wait_audit(host="failover.test")["parent"], "squid-auth")
        self.assertGreaterEqual(self.sg.metric("sandgate_parent_failures_total", parent="dead",
                                               reason="parent_unreachable"), 1)
        self.assertGreaterEqual(self.sg.metric("sandgate_upstream_connect_seconds_count",
                                               parent="squid-auth"), 1)

    def test_a_dead_parent_alone_is_parent_unreachable(self):
        self.assert_refused(self.raw_connect("alldead.test"), "parent_unreachable")

    def test_squid_acl_deny_is_parent_refused_without_its_page(self):
        r = curl("http://refused.test/echo/refused", proxy=self.proxy)
        self.assert_refused(r, "parent_refused")
        self.assertEqual(self.http.requests_to("/echo/refused"), [])

    def test_wrong_password_is_parent_auth_failed(self):
        self.assert_refused(self.raw_connect("wrongpw.test"), "parent_auth_failed")

    def test_no_credential_for_an_authenticating_parent_is_parent_auth_failed(self):
        self.assert_refused(self.raw_connect("noauth.test"), "parent_auth_failed")

    def test_a_parent_never_dials_a_denied_address(self):
        status, headers, _ = self.raw_connect("denied.test")
        self.assertEqual((status, headers.get("x-sandgate-reason")), (403, "address_denied"))
        # Only denied.test would send squid (no auth) to the HTTPS upstream: it never did.
        self.assertFalse(any(":%d" % self.https.port in l for l in self.squid.access()))

    # --- hostile parents ---------------------------------------------------------------------

    def test_a_407_body_with_a_fake_secret_never_reaches_the_client(self):
        status, headers, body = self.raw_connect("fake407.test")
        self.assert_refused((status, headers, body), "parent_auth_failed")
        self.assertNotIn(FAKE_SECRET.encode(), body)
        self.assertNotIn("proxy-authenticate", headers)  # the parent's challenge stays there

    def test_a_407_with_a_fake_secret_to_a_request_in_absolute_form_stays_with_the_parent(self):
        r = curl("http://absolute.test:%d/echo/fake407" % self.http.port, proxy=self.proxy)
        self.assert_refused(r, "parent_auth_failed")
        self.assertNotIn(FAKE_SECRET.encode(), r.body)
        self.assertIsNone(r.header("proxy-authenticate"))

    def test_a_redirect_from_the_parent_is_refused_not_followed(self):
        status, headers, body = self.raw_connect("redirect.test")
        self.assert_refused((status, headers, body), "parent_refused")
        self.assertNotIn("location", headers)
        self.assertNotIn(b"evil.example", body)

    def test_a_huge_status_line_is_cut_and_refused(self):
        self.assert_refused(self.raw_connect("huge.test"), "parent_unreachable")

    def test_200_then_garbage_fails_upstream_tls_for_an_intercepted_request(self):
        r = curl("https://garbage.test/", "--cacert", self.ca_out, proxy=self.proxy)
        self.assertEqual(r.status, 502, r)
        self.assertEqual(r.header("x-sandgate-reason"), "upstream_tls_failed")
        # The upstream's certificate is still sandgate's to verify: no credential went out.
        self.assertTrue(self.garbage.heads)

    def test_the_parent_credential_reaches_only_the_parent(self):
        r = self.https_get("tunnel.test", "/echo/leak-probe")
        self.assertEqual(r.status, 200, r)
        for req in self.https.requests:
            for _, v in req["headers"]:
                self.assertNotIn(PARENT_PASSWORD, v)
        self.assertNotIn(PARENT_PASSWORD, self.sg.metrics())
        with open(self.sg.audit_path) as f:
            self.assertNotIn(PARENT_PASSWORD, f.read())


if __name__ == "__main__":
    unittest.main()
