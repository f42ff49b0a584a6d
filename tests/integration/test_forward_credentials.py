"""Credentials on plain-HTTP forwarding (absolute-form http:// requests through `sandgate serve`).

A secret goes out in clear only for a credential that says `allow_plaintext: true`; then it is
injected (replacing what the client sent) and scrubbed from the response, as inside an
intercepted tunnel. A rule naming a credential without it fails the request closed
(`403 credential_requires_tls`): the request never leaves without its credential, and the
secret never leaves in clear. plain.test and clear.test map to one plain-HTTP echo upstream.
"""

import json
import unittest

from clients import curl
from sandgate_fixture import Sandgate
from upstreams import HttpUpstream

TOKEN = "tok-fwd-cred"
PLAIN_SECRET = "plainsecret-0123456789abcdefghij"
TLS_SECRET = "sk-tlsonlysecret-0123456789abcdef"


class ForwardCredentialsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        cls.sg = Sandgate({}, [])
        rule = {"ports": [80], "cidrs": ["127.0.0.0/8"]}
        creds = {
            "plainok": {"source": {"file": cls.sg.secret_file("plainok", PLAIN_SECRET)},
                        "hosts": ["plain.test"], "allow_plaintext": True,
                        "inject": {"header": "X-Api-Key", "value": "{secret}"}},
            "tlsonly": {"source": {"file": cls.sg.secret_file("tlsonly", TLS_SECRET)},
                        "hosts": ["clear.test"],
                        "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
        }
        policies = {"web": {"allow": [dict(rule, host="plain.test", credential="plainok"),
                                      dict(rule, host="clear.test", credential="tlsonly")]}}
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "web", "token": TOKEN}],
            resolve={"plain.test": "127.0.0.1:%d" % cls.up.port,
                     "clear.test": "127.0.0.1:%d" % cls.up.port},
            extra={"credentials": creds})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def requests_to(self, path):
        return [r for r in self.up.requests if r["path"] == path]

    def test_allow_plaintext_credential_is_injected_and_scrubbed(self):
        r = curl("http://plain.test/echo/plain", "-H", "X-Api-Key: client-own-key",
                 proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        seen = self.requests_to("/echo/plain")
        self.assertEqual(len(seen), 1)
        self.assertEqual([v for k, v in seen[0]["headers"] if k.lower() == "x-api-key"],
                         [PLAIN_SECRET])
        # The echo reflects the injected header; the client sees the marker, not the secret.
        self.assertNotIn(PLAIN_SECRET.encode(), r.body)
        echoed = dict((k.lower(), v) for k, v in json.loads(r.body)["headers"])
        self.assertEqual(echoed["x-api-key"], "[REDACTED:plainok]")
        self.sg.wait_audit(path="/echo/plain", credential="plainok", injected=True)
        self.assertGreaterEqual(self.sg.metric("sandgate_credential_injections_total",
                                               task="demo", credential="plainok", result="ok"), 1)
        self.assertGreaterEqual(self.sg.metric("sandgate_secret_scrubs_total", task="demo",
                                               credential="plainok"), 1)

    def test_credential_without_allow_plaintext_fails_closed(self):
        r = curl("http://clear.test/echo/clear", proxy=self.proxy)
        self.assertEqual(r.status, 403, r)
        self.assertIn(("x-sandgate-reason", "credential_requires_tls"), r.headers)
        self.assertIn(b"only sent over TLS", r.body)
        self.assertEqual(self.requests_to("/echo/clear"), [])
        self.sg.wait_audit(path="/echo/clear", reason="credential_requires_tls",
                           credential="tlsonly", injected=False)
        self.assertGreaterEqual(
            self.sg.metric("sandgate_credential_injections_total", task="demo",
                           credential="tlsonly", result="credential_requires_tls"), 1)

    def test_zz_secrets_never_logged(self):
        with open(self.sg.audit_path) as f:
            audit = f.read()
        for s in (PLAIN_SECRET, TLS_SECRET):
            self.assertNotIn(s, audit)
            self.assertNotIn(s, self.sg.stderr())


if __name__ == "__main__":
    unittest.main()
