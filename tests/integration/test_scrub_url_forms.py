"""A hostile upstream that hands the secret back re-encoded, the way its own URL encoder would
write it ('/' left raw, lower-case hex, '+' for a space, every byte escaped, mixed case), in the
body (one Content-Length body, one chunked body split inside escapes) and in Location. The
client holds only the placeholder; whatever it decodes, it must never get the secret.

api.test (secret injected as a header) and maps.test (secret injected as the `key` query
parameter) map to an HTTPS echo upstream on loopback that also serves /reencode.
"""

import json
import os
import re
import unittest
import urllib.parse

from clients import curl
from pki import test_pki
from sandgate_fixture import Sandgate, wait_until
from upstreams import HttpUpstream, _Handler

TOKEN = "tok-url-forms"
# A known key prefix keeps the placeholder as long as the secret (the body keeps its length).
API_SECRET = "sk-url/forms key+0123456789abcdef~XYZ"
MAPS_SECRET = "sk-maps/q s+tuvwxyz0123456789:@!XYZ"


def forms(secret):
    """Spellings of `secret` that URL encoders produce."""
    every = "".join("%%%02X" % b for b in secret.encode())
    mixed = "".join(("%%%02x" if i % 2 else "%%%02X") % b for i, b in enumerate(secret.encode()))
    def lower_hex(text):
        return re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)
    return {
        "quote_slash_raw": urllib.parse.quote(secret),  # Python's default: '/' raw
        "quote_all": urllib.parse.quote(secret, safe=""),
        "quote_all_lower": lower_hex(urllib.parse.quote(secret, safe="")),
        "quote_plus": urllib.parse.quote_plus(secret),
        "quote_plus_slash_raw": urllib.parse.quote_plus(secret, safe="/"),
        "encode_uri": urllib.parse.quote(secret, safe="~@#$&()*!+=:;,?/'"),
        "every_byte_upper": every,
        "every_byte_lower": lower_hex(every),
        "every_byte_mixed": mixed,
    }


class _ReencodeHandler(_Handler):
    """The shared echo upstream plus /reencode: the secret it received, in every form."""

    def _handle(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/reencode":
            return super()._handle()
        q = dict(urllib.parse.parse_qsl(url.query))
        self._record_bodyless()
        secret = q.get("key") or self.headers.get("Authorization", "")[len("Bearer "):]
        lines = ["%s=%s" % kv for kv in forms(secret).items()]
        body = ("\n".join(lines) + "\n").encode()
        # Pieces of 5 bytes: most escapes and every form are split across chunks.
        self._send_in_pieces(
            body, [("Location", "/next?k=" + urllib.parse.quote_plus(secret, safe="/"))],
            q.get("chunked") == "1")

    do_GET = _handle


class ScrubUrlFormsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.up = HttpUpstream(cls.pki)
        cls.maps = HttpUpstream(cert=cls.pki.other_leaf("maps.test"))
        for up in (cls.up, cls.maps):
            up.server.RequestHandlerClass = _ReencodeHandler
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        creds = {
            "api": {"source": {"file": cls.sg.secret_file("uf-api", API_SECRET)},
                    "hosts": ["api.test"], "placeholder": "API_KEY",
                    "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
            "maps": {"source": {"file": cls.sg.secret_file("uf-maps", MAPS_SECRET)},
                     "hosts": ["maps.test"], "placeholder": "MAPS_KEY",
                     "inject": {"query": "key"}},
        }
        loop = {"cidrs": ["127.0.0.0/8"]}
        policies = {"agent": {"allow": [dict(loop, host="api.test", credential="api"),
                                        dict(loop, host="maps.test", credential="maps")]}}
        cfg = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN}],
            resolve={"api.test": "127.0.0.1:%d" % cls.up.port,
                     "maps.test": "127.0.0.1:%d" % cls.maps.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cfg["listen"]["admin"] = cls.sg.admin_path
        cls.sg.config = cfg
        cls.sg.write_config(cfg)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)
        env = cls.sg.token_env("demo")["env"]
        cls.api_ph, cls.maps_ph = env["API_KEY"], env["MAPS_KEY"]

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()
        cls.maps.close()

    def assert_never_decodes_to(self, text, secret, placeholder, where):
        self.assertNotIn(secret, text, where)
        for decode in (urllib.parse.unquote, urllib.parse.unquote_plus):
            decoded = decode(text)
            self.assertNotIn(secret, decoded, where)
            # Not even most of it: a form that escaped in part would show here.
            self.assertNotIn(secret[3:20], decoded, where)

    def check(self, url, secret, placeholder, *headers):
        args = ["--cacert", self.ca_out]
        for h in headers:
            args += ["-H", h]
        up = self.maps if "maps.test" in url else self.up
        before = len(up.requests)
        r = curl(url, *args, proxy=self.proxy)
        self.assertEqual(r.status, 200, r.body)
        # The attack is real: the upstream had the secret and sent it back in every form.
        got = up.requests[before:]
        self.assertEqual(len(got), 1)
        sent = dict(got[0]["headers"]).get("Authorization", "") + got[0]["path"]
        self.assertIn(urllib.parse.quote(secret, safe="") if up is self.maps else secret, sent)
        body = r.body.decode("latin-1")
        lines = dict(line.split("=", 1) for line in body.splitlines())
        self.assertEqual(set(lines), set(forms(secret)))
        for name, value in lines.items():
            with self.subTest(form=name):
                self.assert_never_decodes_to(value, secret, placeholder, name)
                # What the client decodes is its own placeholder.
                self.assertEqual(urllib.parse.unquote_plus(value)
                                 if "plus" in name else urllib.parse.unquote(value), placeholder)
        location = r.header("location")
        self.assert_never_decodes_to(location, secret, placeholder, "Location")
        self.assertEqual(urllib.parse.unquote_plus(location), "/next?k=" + placeholder)
        return r

    def test_header_secret_echoed_re_encoded(self):
        for q in ("", "?chunked=1"):
            with self.subTest(chunked=bool(q)):
                r = self.check("https://api.test/reencode" + q, API_SECRET, self.api_ph,
                               "Authorization: Bearer " + self.api_ph)
                if not q:
                    # The secret has a '/' where its placeholder has a letter: the JSON form
                    # "\/" would need "\u00XX" in the placeholder's spelling, so scrubbing may
                    # change the length and the body is re-framed (README, "What scrubbing
                    # catches").
                    self.assertIsNone(r.header("content-length"))
                    self.assertEqual(r.header("transfer-encoding"), "chunked")

    def test_query_secret_echoed_re_encoded(self):
        for q in ("", "&chunked=1"):
            with self.subTest(chunked=bool(q)):
                self.check("https://maps.test/reencode?key=mine" + q, MAPS_SECRET, self.maps_ph)

    def test_scrubs_are_counted(self):
        def count():
            return self.sg.metric("sandgate_secret_scrubs_total", task="demo",
                                  credential="api") or 0
        before = count()
        self.check("https://api.test/reencode", API_SECRET, self.api_ph,
                   "Authorization: Bearer " + self.api_ph)
        # Nine forms in the body and one in Location.
        wait_until(lambda: count() >= before + 10, what="ten scrubs counted")


if __name__ == "__main__":
    unittest.main()
