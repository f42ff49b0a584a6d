"""A hostile upstream hides an echoed secret from the scrubber in the response head, forwarded
(plain http://) and intercepted (TLS), over raw sockets so that every byte the client got is
seen.

- Codings on more than one field line: `Content-Encoding: identity` then `Content-Encoding:
  gzip` is one gzip layer (decoded and scrubbed); `gzip` twice, `identity` then `br`, and
  `Transfer-Encoding: gzip` then `gzip, chunked` are more than one layer or one sandgate cannot
  undo, and are refused (`502 response_not_scrubbable`, audited, counted). Either way nothing
  the client got decompresses to the secret.
- The status line's reason phrase ("401 invalid token <the injected header>"): the client gets
  the standard phrase for the code, never the upstream's.

plain.test maps to a plain-HTTP upstream (a credential with allow_plaintext injects X-Api-Key),
api.test to an HTTPS one (Authorization: Bearer), both echoing what they were sent.
"""

import json
import os
import unittest
import urllib.parse
import zlib

import artifacts
from pki import test_pki
from sandgate_fixture import Sandgate, dechunk, read_all, wait_until
from upstreams import HttpUpstream

TOKEN = "tok-scrub-head"
FWD_SECRET = "fwdheadsecret-0123456789abcdefghij"
API_SECRET = "sk-apiheadsecret-0123456789abcdefXYZ"

# (ce field lines, te field lines, refused): each line is sent as a field line of its own.
LAYERS = [
    (["identity", "gzip"], [], False),
    (["gzip", "gzip"], [], True),
    (["identity", "br"], [], True),
    (["identity", "gzip"], ["chunked"], False),
    (["gzip"], ["gzip", "chunked"], True),
    ([], ["gzip", "gzip, chunked"], True),
]


def inflations(data, depth=0):
    """`data` and everything that decompresses (gzip, zlib or raw deflate, any depth) from
    any offset of it where a compressed stream could start."""
    yield data
    if depth >= 4:
        return
    starts = set()
    for magic in (b"\x1f\x8b", b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda"):
        i = data.find(magic)
        while i >= 0 and len(starts) < 64:
            starts.add(i)
            i = data.find(magic, i + 1)
    for i in sorted(starts):
        for wbits in (47, -15):
            try:
                d = zlib.decompressobj(wbits).decompress(data[i:], 1 << 22)
            except zlib.error:
                continue
            if d:
                yield from inflations(d, depth + 1)


class ScrubResponseHeadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.plain = HttpUpstream()
        cls.https = HttpUpstream(cls.pki)
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        creds = {
            "fwd": {"source": {"file": cls.sg.secret_file("head-fwd", FWD_SECRET)},
                    "hosts": ["plain.test"], "allow_plaintext": True,
                    "inject": {"header": "X-Api-Key", "value": "{secret}"}},
            "api": {"source": {"file": cls.sg.secret_file("head-api", API_SECRET)},
                    "hosts": ["api.test"],
                    "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
        }
        policies = {"web": {"allow": [
            {"host": "plain.test", "ports": [80], "cidrs": ["127.0.0.0/8"], "credential": "fwd"},
            {"host": "api.test", "cidrs": ["127.0.0.0/8"], "credential": "api"},
        ]}}
        cfg = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "web", "token": TOKEN}],
            resolve={"plain.test": "127.0.0.1:%d" % cls.plain.port,
                     "api.test": "127.0.0.1:%d" % cls.https.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.config = cfg
        cls.sg.write_config(cfg)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.plain.close()
        cls.https.close()

    def exchange(self, intercept, target):
        """GET `target` (a path and query) on plain.test (forwarded) or api.test (intercepted)
        on a connection of its own; every byte the client got, until the close."""
        if intercept:
            s = self.sg.tls_tunnel("api.test", "demo", TOKEN, self.ca_out)
            req = "GET %s HTTP/1.1\r\nHost: api.test\r\n" % target
        else:
            s = self.sg.connect()
            req = "GET http://plain.test%s HTTP/1.1\r\nHost: plain.test\r\n%s" % (
                target, self.sg.auth_header("demo", TOKEN))
        try:
            s.sendall((req + "Accept-Encoding: gzip, br\r\nConnection: close\r\n\r\n").encode())
            data = read_all(s)
        finally:
            s.close()
        artifacts.record("response", "raw", data)
        return data

    def assert_no_secret(self, data, secret):
        body = data.partition(b"\r\n\r\n")[2]
        forms = list(inflations(data)) + list(inflations(dechunk(body)[0]))
        for form in forms:
            artifacts.record("response", "inflated", form)
            self.assertNotIn(secret.encode(), form, "the client got the secret: %r" % data[:300])

    @staticmethod
    def parse(data):
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = [(k.strip().lower(), v.strip())
                  for k, _, v in (line.partition(":") for line in lines[1:])]
        if ("transfer-encoding", "chunked") in fields:
            body, complete = dechunk(body)
            assert complete, body
        return lines[0], fields, body

    def refused_count(self):
        """sandgate_requests_total for response_not_scrubbable, summed over its other labels."""
        total = 0.0
        for line in self.sg.metrics().splitlines():
            if (line.startswith("sandgate_requests_total{") and 'task="demo"' in line and
                    'reason="response_not_scrubbable"' in line):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def refusals(self, host, at_least=0):
        """The audit lines of refused /layered-echo responses to `host` (None: fewer than
        `at_least`)."""
        recs = [r for r in self.sg.audit()
                if r.get("path") == "/layered-echo" and r.get("host") == host and
                r.get("status") == 502 and r.get("reason") == "response_not_scrubbable"]
        return recs if len(recs) >= at_least else None

    def test_codings_on_several_field_lines_are_all_read(self):
        for intercept, secret, header in ((False, FWD_SECRET, "x-api-key"),
                                          (True, API_SECRET, "authorization")):
            for ce, te, refused in LAYERS:
                with self.subTest(intercept=intercept, ce=ce, te=te):
                    before = self.refused_count()
                    seen_before = len(self.refusals("api.test" if intercept else "plain.test"))
                    query = urllib.parse.urlencode({"ce": "|".join(ce), "te": "|".join(te)})
                    data = self.exchange(intercept, "/layered-echo?" + query)
                    self.assert_no_secret(data, secret)
                    status, fields, body = self.parse(data)
                    if not refused:
                        # One gzip layer (identity is none): decoded, scrubbed, sent as identity.
                        self.assertTrue(status.startswith("HTTP/1.1 200 "), data[:300])
                        self.assertNotIn("content-encoding", [k for k, _ in fields])
                        echoed = dict((k.lower(), v) for k, v in json.loads(body)["headers"])
                        self.assertNotIn(secret, echoed[header])
                        continue
                    self.assertTrue(status.startswith("HTTP/1.1 502 "), data[:300])
                    self.assertIn(("x-sandgate-reason", "response_not_scrubbable"), fields)
                    self.assertEqual(json.loads(body)["reason"], "response_not_scrubbable")
                    host = "api.test" if intercept else "plain.test"
                    recs = wait_until(lambda: self.refusals(host, seen_before + 1),
                                      what="audit line for %s" % query)
                    self.assertEqual(recs[-1]["verdict"], "error")
                    wait_until(lambda: self.refused_count() == before + 1,
                               what="sandgate_requests_total{reason=response_not_scrubbable} + 1")
        stderr = self.sg.stderr()
        self.assertNotIn(FWD_SECRET, stderr)
        self.assertNotIn(API_SECRET, stderr)

    def test_the_reason_phrase_is_the_standard_one(self):
        for intercept, secret, header in ((False, FWD_SECRET, "X-Api-Key"),
                                          (True, API_SECRET, "Authorization")):
            for code, phrase in ((401, "Unauthorized"), (200, "OK"), (599, None)):
                with self.subTest(intercept=intercept, code=code):
                    target = "/reason-echo?code=%d&h=%s" % (code, header)
                    data = self.exchange(intercept, target)
                    self.assert_no_secret(data, secret)
                    status, _, _ = self.parse(data)
                    self.assertNotIn("invalid token", status)
                    if phrase:
                        self.assertEqual(status, "HTTP/1.1 %d %s" % (code, phrase))
                    else:
                        self.assertTrue(status.startswith("HTTP/1.1 %d " % code), status)
                    # The upstream did put the secret there.
                    seen = (self.https if intercept else self.plain).requests_to(target)
                    self.assertEqual(len(seen), 1)
                    sent = [v for k, v in seen[0]["headers"] if k.lower() == header.lower()]
                    self.assertEqual(len(sent), 1)
                    self.assertIn(secret, sent[0])
                    self.sg.wait_audit(path="/reason-echo", status=code, injected=True)


if __name__ == "__main__":
    unittest.main()
