"""A task token's expiry and revocation where no request carries it (issue #38, item 3), from
the side of a client that holds a token and keeps its connections open past it.

- Inside an intercepted tunnel requests carry no Proxy-Authorization: once the token that
  opened the tunnel is past exp + tokens.leeway, a request inside is refused (token_expired)
  or finds the tunnel closed, and the upstream never sees the credential again.
- A spliced tunnel opened with the token is closed at exp + leeway (audit: token_expired).
- A reload that removes the signing key: the next request on a keep-alive forwarded
  connection is 407 token_unknown_key; open spliced and intercepted tunnels end at once.
- A reload that puts the token's jti in tokens.revoked: the same, token_revoked; and the same
  for POST /v1/revoke on the admin API (no reload: the housekeeping's next tick).
"""

import base64
import hashlib
import hmac
import json
import os
import signal
import socket
import ssl
import time
import unittest
import urllib.request

import artifacts
from pki import test_pki
from sandgate_fixture import (Sandgate, dechunk, read_response_head, read_until,
                              wait_until)
from upstreams import HttpUpstream, TcpEcho

KEY = "token-expiry-shared-key-0123456789abcdef"
OTHER_KEY = "token-expiry-other-key-0123456789abcdef0"
SECRET = "expirysecret-0123456789abcdefghij"
ADMIN_TOKEN = "expiry-admin-token-0123456789abcdef"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256(claims, kid="k1", key=KEY):
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = b64url(json.dumps(claims).encode())
    sig = hmac.new(key.encode(), ("%s.%s" % (head, body)).encode(), hashlib.sha256).digest()
    token = "%s.%s.%s" % (head, body, b64url(sig))
    artifacts.register_secret("token-%s" % hashlib.sha256(token.encode()).hexdigest()[:8], token)
    return token


class TokenExpiryTest(unittest.TestCase):
    LEEWAY = 1

    def setUp(self):
        self.pki = test_pki()
        self.http = HttpUpstream()
        self.https = HttpUpstream(self.pki)
        self.echo = TcpEcho()
        self.sg = Sandgate({}, [])
        self.keys = {}
        for kid, key in (("k1", KEY), ("k2", OTHER_KEY)):
            self.keys[kid] = self.sg.secret_file("token-key-" + kid, key)
        artifacts.register_secret("token-expiry-key", KEY)
        artifacts.register_secret("token-expiry-other-key", OTHER_KEY)
        self.admin_file = self.sg.secret_file("admin-token", ADMIN_TOKEN)
        self.ca_out = os.path.join(self.sg.dir, "sandgate-ca.pem")
        self.write(["k1", "k2"])
        self.sg.start()

    def tearDown(self):
        self.sg.cleanup()
        self.http.close()
        self.https.close()
        self.echo.close()

    def write(self, kids, revoked=None):
        rule = {"cidrs": ["127.0.0.0/8"]}
        tokens = {"keys": [{"id": k, "file": self.keys[k]} for k in kids], "max_ttl": "1h",
                  "leeway": "%ds" % self.LEEWAY}
        if revoked:
            tokens["revoked"] = revoked
        creds = {"apikey": {"source": {"file": self.sg.secret_file("apikey", SECRET)},
                            "hosts": ["api.test"],
                            "inject": {"header": "X-Api-Key", "value": "{secret}"}}}
        policies = {"p": {"allow": [dict(rule, host="a.test", ports=[80]),
                                    dict(rule, host="tunnel.test", ports=[7000]),
                                    dict(rule, host="api.test", ports=[443], credential="apikey")]}}
        self.sg.config = self.sg.make_config(
            policies, [{"name": "t", "policy": "p"}],
            resolve={"a.test": "127.0.0.1:%d" % self.http.port,
                     "tunnel.test": "127.0.0.1:%d" % self.echo.port,
                     "api.test": "127.0.0.1:%d" % self.https.port},
            extra={"tokens": tokens, "credentials": creds, "ca_cert_out": self.ca_out,
                   "tls": {"upstream_ca": self.pki.ca_cert},
                   "metrics": {"admin_api": {"token_file": self.admin_file}}})
        self.sg.write_config(self.sg.config)

    def reload(self):
        before = self.sg.metric("sandgate_config_reloads_total", result="ok") or 0
        os.kill(self.sg.proc.pid, signal.SIGHUP)
        wait_until(lambda: (self.sg.metric("sandgate_config_reloads_total", result="ok") or 0)
                   > before, 10, interval=0.05, what="the reload")

    def token(self, ttl, jti="j-1"):
        now = int(time.time())
        return hs256({"sub": "t", "iat": now, "exp": now + ttl, "jti": jti}), now + ttl

    def forward(self, s, path, token):
        s.sendall(("GET http://a.test%s HTTP/1.1\r\nHost: a.test\r\n%s\r\n"
                   % (path, Sandgate.auth_header("t", token))).encode())
        return self.read_one(s)

    @staticmethod
    def read_one(s):
        """(status, headers) of one response, its body read to its end (a scrubbed response
        comes chunked), so that the connection can carry the next; (None, {}) when closed."""
        status, headers, rest = read_response_head(s)
        if status is None:
            return None, {}
        if headers.get("transfer-encoding") == "chunked":
            read_until(s, rest, lambda d: dechunk(d)[1], 10)
        else:
            n = int(headers.get("content-length", "0"))
            read_until(s, rest, lambda d: len(d) >= n, 10)
        s.settimeout(10)
        return status, headers

    def tunnel(self, token):
        s = self.sg.connect()
        s.sendall(("CONNECT tunnel.test:7000 HTTP/1.1\r\nHost: tunnel.test:7000\r\n%s\r\n"
                   % Sandgate.auth_header("t", token)).encode())
        status, _, rest = read_response_head(s)
        self.assertEqual((status, rest), (200, b""))
        return s

    def echoes(self, s, data):
        s.sendall(data)
        got = b""
        while len(got) < len(data):
            piece = s.recv(65536)
            if not piece:
                return False
            got += piece
        return got == data

    def ended_within(self, s, seconds):
        """True when `s` ends (EOF, reset, TLS error) within `seconds`."""
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                s.settimeout(max(0.05, deadline - time.monotonic()))
                if not s.recv(65536):
                    return True
        except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False

    def inside(self, tls, path):
        """A request inside an intercepted tunnel: (status, reason), or None when the tunnel
        is closed."""
        try:
            tls.sendall(("GET %s HTTP/1.1\r\nHost: api.test\r\n\r\n" % path).encode())
            status, headers = self.read_one(tls)
            return None if status is None else (status, headers.get("x-sandgate-reason"))
        except (ConnectionError, ssl.SSLError, OSError):
            return None

    def keys_seen(self, path):
        return [v for r in self.https.requests_to(path) for k, v in r["headers"]
                if k.lower() == "x-api-key"]

    def test_an_expired_token_gets_nothing_inside_its_tunnels(self):
        token, exp = self.token(3)
        tls = self.sg.tls_tunnel("api.test", "t", token, self.ca_out)
        spliced = self.tunnel(token)
        self.assertEqual(self.inside(tls, "/echo/before"), (200, None))
        self.assertEqual(self.keys_seen("/echo/before"), [SECRET])
        self.assertTrue(self.echoes(spliced, b"ping-before"))
        # The tunnel kept busy up to exp + leeway (whole seconds) and a second more, the
        # housekeeping's tick: requests until then may pass; at most 40, each bounded by its
        # socket timeout. Then one more: refused, or the tunnel is gone.
        for i in range(40):
            if time.time() > exp + self.LEEWAY + 1:
                break
            if self.inside(tls, "/echo/during-%d" % i) != (200, None):
                break
            time.sleep(0.2)
        got = self.inside(tls, "/echo/after")
        self.assertIn(got, (None, (407, "token_expired")), got)
        self.assertEqual(self.https.requests_to("/echo/after"), [])
        self.assertTrue(self.ended_within(spliced, 2.5), "the spliced tunnel outlived its token")
        tls.close()
        spliced.close()
        rec = self.sg.wait_audit(host="tunnel.test", reason="token_expired")
        self.assertEqual(rec["verdict"], "deny")
        self.sg.wait_audit(host="api.test", reason="token_expired")
        counted = sum(float(line.rsplit(" ", 1)[1]) for line in self.sg.metrics().splitlines()
                      if line.startswith("sandgate_requests_total{")
                      and 'reason="token_expired"' in line)
        self.assertGreaterEqual(counted, 2)

    def revoke_by_admin(self, jti):
        req = urllib.request.Request("http://127.0.0.1:%d/v1/revoke" % self.sg.metrics_port,
                                     data=json.dumps({"jti": jti}).encode(), method="POST")
        req.add_header("Authorization", "Bearer " + ADMIN_TOKEN)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as r:
            self.assertEqual(r.status, 200)

    def refused_after(self, change, reason):
        token, _ = self.token(600)
        forward = self.sg.connect()
        self.assertEqual(self.forward(forward, "/echo/before", token)[0], 200)
        spliced = self.tunnel(token)
        self.assertTrue(self.echoes(spliced, b"ping-before"))
        tls = self.sg.tls_tunnel("api.test", "t", token, self.ca_out)
        self.assertEqual(self.inside(tls, "/echo/in-before"), (200, None))

        change()
        # No revoke_grace for a refused token: the README says a removed key refuses at once
        # (an admin revocation: at the housekeeping's next one-second tick).
        self.assertTrue(self.ended_within(spliced, 2.5), "the spliced tunnel outlived its token")
        got = self.inside(tls, "/echo/in-after")
        self.assertIn(got, (None, (407, reason)), got)
        self.assertEqual(self.https.requests_to("/echo/in-after"), [])
        status, headers = self.forward(forward, "/echo/after", token)
        self.assertEqual((status, headers.get("x-sandgate-reason")), (407, reason))
        self.assertEqual(self.http.requests_to("/echo/after"), [])
        for s in (forward, spliced, tls):
            s.close()
        self.sg.wait_audit(host="tunnel.test", reason=reason)
        self.sg.wait_audit(host="api.test", reason=reason)
        self.sg.wait_audit(host="a.test", reason=reason, status=407)

    def test_a_reload_removing_the_key_refuses_open_connections(self):
        self.refused_after(lambda: (self.write(["k2"]), self.reload()), "token_unknown_key")

    def test_a_reload_revoking_the_jti_refuses_open_connections(self):
        self.refused_after(lambda: (self.write(["k1", "k2"], ["j-1"]), self.reload()),
                           "token_revoked")

    def test_an_admin_revocation_refuses_open_connections(self):
        self.refused_after(lambda: self.revoke_by_admin("j-1"), "token_revoked")


if __name__ == "__main__":
    unittest.main()
