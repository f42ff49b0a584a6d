"""TLS interception: credential injection over verified upstream TLS, scrubbing of echoed
secrets, Host and SNI checks, method rules inside the tunnel, rotation, failing sources.

api.test and other.test map to an HTTPS echo upstream (runtime test CA, given to sandgate as
tls.upstream_ca); bad.test maps to an upstream whose certificate does not name it.
Clients trust sandgate's ephemeral CA through ca_cert_out.
"""

import http.client
import json
import os
import socket
import ssl
import unittest

from clients import curl
from pki import test_pki
from sandgate_fixture import Sandgate, wait_until
from upstreams import HttpUpstream

TOKEN = "t0ken"
SECRET = "sk-realsecretvalue-0123456789abcdef"
SECRET2 = "sk-rotatedsecretvalue-9876543210fedcba"


class InterceptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.sg = Sandgate({}, [])
        d = cls.sg.dir
        cls.secret_file = os.path.join(d, "openai.key")
        with open(cls.secret_file, "w") as f:
            f.write(SECRET + "\n")
        cls.ca_out = os.path.join(d, "sandgate-ca.pem")
        rule = {"cidrs": ["127.0.0.0/8"]}
        policies = {"agent": {"allow": [
            dict(rule, host="api.test", methods=["GET", "POST"], credential="openai"),
            dict(rule, host="bad.test", credential="openai"),
            dict(rule, host="gone.test", credential="broken"),
        ]}}
        creds = {
            "openai": {"source": {"file": cls.secret_file},
                       "hosts": ["api.test", "bad.test"],
                       "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
            "broken": {"source": {"exec": ["false"]}, "optional": True,
                       "hosts": ["gone.test"],
                       "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
        }
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN}],
            resolve={"api.test": "127.0.0.1:%d" % cls.https.port,
                     "bad.test": "127.0.0.1:%d" % cls.https.port,
                     "gone.test": "127.0.0.1:%d" % cls.https.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.https.close()

    def proxy(self):
        return self.sg.proxy_url("demo", TOKEN)

    def requests_to(self, path):
        return [r for r in self.https.requests if r["path"] == path]

    def tunnel(self, host, sni=None):
        """A TLS connection to `host` through a CONNECT tunnel (Python ssl, our CA)."""
        return self.sg.tls_tunnel(host, "demo", TOKEN, self.ca_out, sni=sni)

    def test_injects_and_scrubs(self):
        r = curl("https://api.test/echo/inject", "--cacert", self.ca_out,
                 "-H", "Authorization: Bearer client-own-value", proxy=self.proxy())
        self.assertEqual(r.status, 200, r)
        seen = self.requests_to("/echo/inject")
        self.assertEqual(len(seen), 1)
        auth = [v for k, v in seen[0]["headers"] if k.lower() == "authorization"]
        self.assertEqual(auth, ["Bearer " + SECRET])
        # The echo reflected the injected header; the client must not see the secret.
        self.assertNotIn(SECRET.encode(), r.body)
        self.assertNotIn(b"client-own-value", r.body)
        self.assertIn(b"[REDACTED:openai]", r.body)
        self.sg.wait_audit(path="/echo/inject", credential="openai", injected=True)
        self.assertGreaterEqual(self.sg.metric("sandgate_credential_injections_total",
                                               task="demo", credential="openai", result="ok"), 1)
        self.assertGreaterEqual(self.sg.metric("sandgate_secret_scrubs_total",
                                               task="demo", credential="openai"), 1)
        self.assertGreaterEqual(self.sg.metric("sandgate_tls_intercepted_total", task="demo"), 1)

    def test_upstream_tls_failure(self):
        before = len(self.https.requests)
        r = curl("https://bad.test/echo/bad", "--cacert", self.ca_out, proxy=self.proxy())
        self.assertEqual(r.status, 502, r)
        self.assertIn(("x-sandgate-reason", "upstream_tls_failed"), r.headers)
        self.assertEqual(len(self.https.requests), before)

    def test_host_mismatch(self):
        r = curl("https://api.test/echo/host", "--cacert", self.ca_out,
                 "-H", "Host: other.test", proxy=self.proxy())
        self.assertEqual(r.status, 421, r)
        self.assertEqual(self.requests_to("/echo/host"), [])

    def test_sni_mismatch(self):
        t = self.tunnel("api.test", sni="other.test")
        t.settimeout(10)
        try:
            t.sendall(b"GET /echo/sni HTTP/1.1\r\nHost: api.test\r\n\r\n")
            data = t.recv(100)
        except (ssl.SSLError, OSError):
            data = b""
        self.assertEqual(data, b"")
        self.assertEqual(self.requests_to("/echo/sni"), [])
        self.sg.wait_audit(reason="sni_mismatch")

    def test_method_rule_inside_tunnel(self):
        conn = http.client.HTTPSConnection("api.test", 443)
        conn.sock = self.tunnel("api.test")
        conn.request("GET", "/echo/m1")
        r1 = conn.getresponse()
        r1.read()
        self.assertEqual(r1.status, 200)
        conn.request("DELETE", "/echo/m2")
        r2 = conn.getresponse()
        self.assertEqual(r2.status, 403)
        self.assertEqual(r2.getheader("X-Sandgate-Reason"), "method_not_allowed")
        self.assertEqual(self.requests_to("/echo/m2"), [])

    def test_rotation_on_open_connection(self):
        conn = http.client.HTTPSConnection("api.test", 443)
        conn.sock = self.tunnel("api.test")
        try:
            conn.request("GET", "/echo/rot1")
            conn.getresponse().read()
            with open(self.secret_file + ".tmp", "w") as f:
                f.write(SECRET2 + "\n")
            os.rename(self.secret_file + ".tmp", self.secret_file)
            conn.request("GET", "/echo/rot2")
            body = conn.getresponse().read()
            self.assertNotIn(SECRET2.encode(), body)
        finally:
            with open(self.secret_file + ".tmp", "w") as f:
                f.write(SECRET + "\n")
            os.rename(self.secret_file + ".tmp", self.secret_file)
        a1 = [v for k, v in self.requests_to("/echo/rot1")[0]["headers"] if k.lower() == "authorization"]
        a2 = [v for k, v in self.requests_to("/echo/rot2")[0]["headers"] if k.lower() == "authorization"]
        self.assertEqual(a1, ["Bearer " + SECRET])
        self.assertEqual(a2, ["Bearer " + SECRET2])

    def test_failing_exec_source(self):
        r = curl("https://gone.test/echo/gone", "--cacert", self.ca_out, proxy=self.proxy())
        self.assertEqual(r.status, 502, r)
        self.assertIn(("x-sandgate-reason", "credential_unavailable"), r.headers)
        self.assertEqual(self.requests_to("/echo/gone"), [])

    def test_zz_secret_never_logged(self):
        curl("https://api.test/echo/log", "--cacert", self.ca_out, proxy=self.proxy())
        with open(self.sg.audit_path) as f:
            audit = f.read()
        for s in (SECRET, SECRET2):
            self.assertNotIn(s, audit)
            self.assertNotIn(s, self.sg.stderr())


if __name__ == "__main__":
    unittest.main()
