"""Credentials on plain-HTTP forwarding (absolute-form http:// requests through `sandgate serve`).

A secret goes out in clear only for a credential that says `allow_plaintext: true`; then it is
injected (replacing what the client sent) and scrubbed from the response, as inside an
intercepted tunnel: the upstream is asked for identity bodies, a body compressed anyway is
relayed unscrubbed with a warning in the log, and a credential with `scrub: false` is not
scrubbed at all. A rule naming a credential without it fails the request closed
(`403 credential_requires_tls`): the request never leaves without its credential, and the
secret never leaves in clear. plain.test and clear.test map to one plain-HTTP echo upstream.
"""

import gzip
import json
import unittest

from clients import curl
from sandgate_fixture import Sandgate, dechunk, read_all
from upstreams import HttpUpstream

TOKEN = "tok-fwd-cred"
PLAIN_SECRET = "plainsecret-0123456789abcdefghij"
NOSCRUB_SECRET = "noscrubsecret-0123456789abcdefghij"
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
            "noscrub": {"source": {"file": cls.sg.secret_file("noscrub", NOSCRUB_SECRET)},
                        "hosts": ["noscrub.test"], "allow_plaintext": True, "scrub": False,
                        "inject": {"header": "X-Api-Key", "value": "{secret}"}},
            "tlsonly": {"source": {"file": cls.sg.secret_file("tlsonly", TLS_SECRET)},
                        "hosts": ["clear.test"],
                        "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
        }
        policies = {"web": {"allow": [dict(rule, host="plain.test", credential="plainok"),
                                      dict(rule, host="noscrub.test", credential="noscrub"),
                                      dict(rule, host="clear.test", credential="tlsonly")]}}
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "web", "token": TOKEN}],
            resolve={"plain.test": "127.0.0.1:%d" % cls.up.port,
                     "noscrub.test": "127.0.0.1:%d" % cls.up.port,
                     "clear.test": "127.0.0.1:%d" % cls.up.port},
            extra={"credentials": creds})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def test_allow_plaintext_credential_is_injected_and_scrubbed(self):
        r = curl("http://plain.test/echo/plain", "-H", "X-Api-Key: client-own-key",
                 proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        seen = self.up.requests_to("/echo/plain")
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

    def raw_get(self, url, *headers):
        """GET `url` through the proxy on a socket of its own; (status, headers, body). Not
        recorded for the leak check: for responses that are meant to hold a secret."""
        s = self.sg.connect()
        try:
            s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n%s%sConnection: close\r\n\r\n" % (
                url, url.split("/")[2], self.sg.auth_header("demo", TOKEN),
                "".join(h + "\r\n" for h in headers))).encode())
            data = read_all(s)
        finally:
            s.close()
        head_text, _, rest = data.partition(b"\r\n\r\n")
        lines = head_text.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        head = dict((k.strip().lower(), v.strip())
                    for k, _, v in (line.partition(":") for line in lines[1:]))
        if head.get("transfer-encoding", "").lower() == "chunked":
            rest, complete = dechunk(rest)  # re-chunked by sandgate (scrubbing may change lengths)
            self.assertTrue(complete, rest)
        return status, head, rest

    def test_identity_is_asked_for_and_a_compressed_body_is_reported(self):
        # The client would take gzip; with a secret in the request the upstream is asked for
        # identity instead (an absent Accept-Encoding would allow any coding).
        r = curl("http://plain.test/echo/identity", "-H", "Accept-Encoding: gzip, br",
                 proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        seen = self.up.requests_to("/echo/identity")[0]["headers"]
        self.assertEqual([v for k, v in seen if k.lower() == "accept-encoding"], ["identity"])
        # An upstream that compresses anyway: the body cannot be scrubbed; it is relayed as it
        # is, and the log says so.
        status, head, body = self.raw_get("http://plain.test/gzip-echo",
                                          "Accept-Encoding: gzip")
        self.assertEqual(status, 200)
        self.assertEqual(head.get("content-encoding"), "gzip")
        echoed = dict((k.lower(), v) for k, v in json.loads(gzip.decompress(body))["headers"])
        self.assertEqual(echoed["x-api-key"], PLAIN_SECRET)
        self.assertIn("Content-Encoding gzip although identity was asked for", self.sg.stderr())
        # A coding the upstream makes up (here: the secret itself) is scrubbed from the header
        # the client gets and never named in the log.
        status, head, _ = self.raw_get("http://plain.test/gzip-echo?coding=echo")
        self.assertEqual(status, 200)
        self.assertEqual(head.get("content-encoding"), "[REDACTED:plainok]")
        self.assertIn("Content-Encoding an unregistered coding although", self.sg.stderr())
        self.assertNotIn(PLAIN_SECRET, self.sg.stderr())

    def test_scrub_false_leaves_responses_as_sent(self):
        # `scrub: false`: injected as usual, and the echo comes back untouched, the secret in it.
        status, _, body = self.raw_get("http://noscrub.test/echo/noscrub",
                                       "X-Api-Key: client-own-key")
        self.assertEqual(status, 200)
        self.assertEqual([v for k, v in self.up.requests_to("/echo/noscrub")[0]["headers"]
                          if k.lower() == "x-api-key"], [NOSCRUB_SECRET])
        echoed = dict((k.lower(), v) for k, v in json.loads(body)["headers"])
        self.assertEqual(echoed["x-api-key"], NOSCRUB_SECRET)
        rec = self.sg.wait_audit(path="/echo/noscrub", credential="noscrub", injected=True)
        self.assertNotIn(NOSCRUB_SECRET, json.dumps(rec))

    def test_credential_without_allow_plaintext_fails_closed(self):
        r = curl("http://clear.test/echo/clear", proxy=self.proxy)
        self.assertEqual(r.status, 403, r)
        self.assertIn(("x-sandgate-reason", "credential_requires_tls"), r.headers)
        self.assertIn(b"only sent over TLS", r.body)
        self.assertEqual(self.up.requests_to("/echo/clear"), [])
        self.sg.wait_audit(path="/echo/clear", reason="credential_requires_tls",
                           credential="tlsonly", injected=False)
        self.assertGreaterEqual(
            self.sg.metric("sandgate_credential_injections_total", task="demo",
                           credential="tlsonly", result="credential_requires_tls"), 1)

    def test_zz_secrets_never_logged(self):
        with open(self.sg.audit_path) as f:
            audit = f.read()
        for s in (PLAIN_SECRET, NOSCRUB_SECRET, TLS_SECRET):
            self.assertNotIn(s, audit)
            self.assertNotIn(s, self.sg.stderr())


if __name__ == "__main__":
    unittest.main()
