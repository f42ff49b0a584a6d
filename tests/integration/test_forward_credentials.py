"""Credentials on plain-HTTP forwarding (absolute-form http:// requests through `sandgate serve`).

A secret goes out in clear only for a credential that says `allow_plaintext: true`; then it is
injected (replacing what the client sent) and scrubbed from the response, as inside an
intercepted tunnel: the upstream is asked for identity bodies, a gzip or deflate body sent
anyway is decoded and scrubbed, any other coding is refused (`502 response_not_scrubbable`),
and a credential with `scrub: false` is not scrubbed at all. A rule naming a credential
without it fails the request closed (`403 credential_requires_tls`): the request never
leaves without its credential, and the secret never leaves in clear. A placeholder is honoured
only in the header its credential is injected into; anywhere else on the request it is refused
(`403 placeholder_misplaced`) and the upstream sees nothing. plain.test, ph.test and clear.test
map to one plain-HTTP echo upstream.
"""

import base64
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
PH_SECRET = "sk-plainphsecret-0123456789abcdef"


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
            "plainph": {"source": {"file": cls.sg.secret_file("plainph", PH_SECRET)},
                        "hosts": ["ph.test"], "allow_plaintext": True, "placeholder": "PH_KEY",
                        "inject": {"header": "X-Api-Key", "value": "{secret}"}},
            "tlsonly": {"source": {"file": cls.sg.secret_file("tlsonly", TLS_SECRET)},
                        "hosts": ["clear.test"],
                        "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
        }
        policies = {"web": {"allow": [dict(rule, host="plain.test", credential="plainok"),
                                      dict(rule, host="noscrub.test", credential="noscrub"),
                                      dict(rule, host="ph.test", credential="plainph"),
                                      dict(rule, host="clear.test", credential="tlsonly"),
                                      dict(rule, host="mirror.test")]}}
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "web", "token": TOKEN}],
            resolve={"plain.test": "127.0.0.1:%d" % cls.up.port,
                     "noscrub.test": "127.0.0.1:%d" % cls.up.port,
                     "ph.test": "127.0.0.1:%d" % cls.up.port,
                     "clear.test": "127.0.0.1:%d" % cls.up.port,
                     "mirror.test": "127.0.0.1:%d" % cls.up.port},
            extra={"credentials": creds})
        cls.sg.config["listen"]["admin"] = cls.sg.admin_path
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)
        cls.ph = cls.sg.token_env("demo")["env"]["PH_KEY"]

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

    def test_a_stored_secret_read_back_on_another_route_is_scrubbed(self):
        # plain.test's request carries the secret; the upstream keeps it. mirror.test names
        # the same backend with a rule that names no credential: its answer, to a request that
        # carries no secret on a connection that never did, still reaches the client redacted.
        r = curl("http://plain.test/echo/store-plain", proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        r = curl("http://mirror.test/recall?h=X-Api-Key", proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        self.assertNotIn(PLAIN_SECRET.encode(), r.body)
        self.assertEqual(r.body.decode(), "x-api-key=[REDACTED:plainok]\n")
        self.assertEqual(r.header("x-recalled"), "[REDACTED:plainok]")
        seen = self.up.requests_to("/recall?h=X-Api-Key")[-1]
        got = dict((k.lower(), v) for k, v in seen["headers"])
        self.assertNotIn("x-api-key", got)
        self.assertEqual(got["accept-encoding"], "identity")

    def raw_get(self, url, *headers, cut=False):
        """GET `url` through the proxy on a socket of its own; (status, headers, body). Not
        recorded for the leak check: for responses that are meant to hold a secret. A chunked
        body must be complete; with `cut`, (status, headers, body, complete)."""
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
            if cut:
                return status, head, rest, complete
            self.assertTrue(complete, rest)
        return (status, head, rest, True) if cut else (status, head, rest)

    def test_identity_is_asked_for_and_a_compressed_body_is_decoded_and_scrubbed(self):
        # The client would take gzip; with a secret in the request the upstream is asked for
        # identity instead (an absent Accept-Encoding would allow any coding).
        r = curl("http://plain.test/echo/identity", "-H", "Accept-Encoding: gzip, br",
                 proxy=self.proxy)
        self.assertEqual(r.status, 200, r)
        seen = self.up.requests_to("/echo/identity")[0]["headers"]
        self.assertEqual([v for k, v in seen if k.lower() == "accept-encoding"], ["identity"])
        # An upstream that compresses anyway (gzip, or zlib-wrapped deflate, as a content
        # coding; gzip as a transfer coding): the body is decoded on the way and scrubbed, and
        # the client gets the identity body it asked for.
        for query in ("coding=gzip", "coding=deflate", "chunked=1&te=1"):
            with self.subTest(query=query):
                before = self.sg.metric("sandgate_secret_scrubs_total", task="demo",
                                        credential="plainok") or 0
                status, head, body = self.raw_get(
                    "http://plain.test/gzip-echo?" + query, "Accept-Encoding: gzip")
                self.assertEqual(status, 200, body)
                self.assertNotIn("content-encoding", head)
                if "te=" in query:
                    self.assertEqual(head.get("transfer-encoding"), "chunked")
                else:
                    self.assertEqual(head.get("etag"), 'W/"gz-1"')  # no longer these bytes
                self.assertNotIn(PLAIN_SECRET.encode(), body)
                echoed = dict((k.lower(), v) for k, v in json.loads(body)["headers"])
                self.assertEqual(echoed["x-api-key"], "[REDACTED:plainok]")
                self.assertGreater(self.sg.metric("sandgate_secret_scrubs_total", task="demo",
                                                  credential="plainok"), before)

    def test_a_response_in_a_coding_that_cannot_be_scrubbed_is_refused(self):
        # br is not decoded here; a coding the upstream makes up (here: the secret itself) is
        # not named anywhere. Either way the body never reaches the client unscrubbed.
        # Two layers (a content coding, and a transfer coding on top) are not undone either.
        for coding, named in (("br", "Content-Encoding br"),
                              ("echo", "Content-Encoding an unregistered coding"),
                              ("gzip&chunked=1&te=2", "2 codings one upon another")):
            with self.subTest(coding=coding):
                path = "/gzip-echo?coding=" + coding
                status, head, body = self.raw_get("http://plain.test" + path)
                self.assertEqual(status, 502, body)
                self.assertEqual(head.get("x-sandgate-reason"), "response_not_scrubbable")
                self.assertIn(named, json.loads(body)["error"])
                self.assertNotIn(PLAIN_SECRET.encode(), body)
                rec = self.sg.wait_audit(path="/gzip-echo", reason="response_not_scrubbable",
                                         status=502)
                self.assertEqual(rec["verdict"], "error")
                self.assertGreaterEqual(self.sg.metric("sandgate_requests_total", task="demo",
                                                       reason="response_not_scrubbable"), 1)
        self.assertNotIn(PLAIN_SECRET, self.sg.stderr())

    def test_a_compressed_body_that_does_not_decode_is_refused(self):
        # When the whole body came with the head, nothing has been sent yet and the client
        # gets a 502. When the head came first (the upstream writes them apart; a loaded
        # machine can see them apart), the head has gone out already: the response then ends
        # without its last chunk, so the client cannot take it for a complete body.
        status, head, body, complete = self.raw_get(
            "http://plain.test/gzip-echo?coding=gzip-corrupt", cut=True)
        self.assertNotIn(PLAIN_SECRET.encode(), body)
        rec = self.sg.wait_audit(path="/gzip-echo", reason="upstream_bad_response")
        self.assertIn("not valid gzip", rec["error"])
        self.assertGreaterEqual(self.sg.metric("sandgate_requests_total", task="demo",
                                               reason="upstream_bad_response"), 1)
        if status == 502:
            self.assertEqual(head.get("x-sandgate-reason"), "upstream_bad_response")
            self.assertIn("body could not be decoded to scrub it: not valid gzip",
                          json.loads(body)["error"])
        else:
            self.assertEqual(status, 200, body)
            self.assertFalse(complete, body)

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

    def test_placeholder_only_in_the_injected_header(self):
        # From the sandbox's side, over a raw socket: the placeholder in the header the
        # credential is injected into goes out as the secret ...
        status, _, body = self.raw_get("http://ph.test/echo/ph-right", "X-Api-Key: " + self.ph)
        self.assertEqual(status, 200, body)
        seen = self.up.requests_to("/echo/ph-right")
        self.assertEqual([v for k, v in seen[0]["headers"] if k.lower() == "x-api-key"],
                         [PH_SECRET])
        self.assertNotIn(PH_SECRET.encode(), body)
        # ... and anywhere else it is refused: the upstream sees no request at all.
        cases = [("user-agent", ["User-Agent: agent/" + self.ph], ""),
                 ("cookie", ["Cookie: s=" + self.ph], ""),
                 ("x-header", ["X-Note: " + self.ph], ""),
                 ("basic-elsewhere", ["X-Auth: Basic " + base64.b64encode(
                     ("u:" + self.ph).encode()).decode()], ""),
                 ("query", [], "?api_key=" + self.ph)]
        for name, headers, query in cases:
            with self.subTest(name):
                path = "/echo/ph-wrong-" + name
                before = len(self.up.requests)
                status, head, body = self.raw_get("http://ph.test" + path + query, *headers)
                self.assertEqual(status, 403, body)
                self.assertEqual(head.get("x-sandgate-reason"), "placeholder_misplaced")
                self.assertEqual(self.up.requests[before:], [])
                self.assertNotIn(PH_SECRET.encode(), body)
                rec = self.sg.wait_audit(path=path, reason="placeholder_misplaced",
                                         credential="plainph", verdict="deny")
                self.assertIn("possible exfiltration attempt", rec["error"])
        self.assertGreaterEqual(self.sg.metric("sandgate_requests_total", task="demo",
                                               reason="placeholder_misplaced"), len(cases))
        self.assertGreaterEqual(
            self.sg.metric("sandgate_credential_injections_total", task="demo",
                           credential="plainph", result="placeholder_misplaced",
                           how="placeholder"), len(cases))

    def test_zz_secrets_never_logged(self):
        with open(self.sg.audit_path) as f:
            audit = f.read()
        for s in (PLAIN_SECRET, NOSCRUB_SECRET, TLS_SECRET, PH_SECRET):
            self.assertNotIn(s, audit)
            self.assertNotIn(s, self.sg.stderr())


if __name__ == "__main__":
    unittest.main()
