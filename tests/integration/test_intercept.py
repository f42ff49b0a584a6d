"""TLS interception: credential injection over verified upstream TLS, scrubbing of echoed
secrets, Host and SNI checks, method rules inside the tunnel, rotation, failing sources.

api.test and other.test map to an HTTPS echo upstream (runtime test CA, given to sandgate as
tls.upstream_ca); bad.test maps to an upstream whose certificate does not name it, expired.test
to one whose certificate (from the test CA) has expired, selfsigned.test to one whose
certificate no CA signed.
Clients trust sandgate's ephemeral CA through ca_cert_out. The three source kinds each hold a
secret: a file (api.test), an environment variable (git.test) and a command (other.test); all
are registered for the suite-wide leak check (tests/leak/).
"""

import http.client
import os
import ssl
import time
import unittest

import artifacts
from clients import curl
from pki import test_pki
from sandgate_fixture import (Sandgate, dechunk, read_all, read_response_head, read_to_eof,
                              read_until, wait_until)
from upstreams import HttpUpstream

TOKEN = "t0ken"
TOKEN2 = "t0ken-two"  # task demo2: the same policy, its own upstream connections
SECRET = "sk-realsecretvalue-0123456789abcdef"
SECRET2 = "sk-rotatedsecretvalue-9876543210fedcba"
ENV_SECRET = "ghp_envsourcedsecret+/=?&%0123456789"  # reserved characters: URL/base64 forms
EXEC_SECRET = "xoxb-execsourcedsecret-5566778899aabb"
ENV_VAR = "SANDGATE_IT_ENV_SECRET"


class InterceptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.expired = HttpUpstream(cert=cls.pki.other_leaf("expired.test", days=-1))
        cls.selfsigned = HttpUpstream(cert=cls.pki.other_leaf("selfsigned.test",
                                                              self_signed=True))
        cls.cnonly = HttpUpstream(cert=cls.pki.other_leaf("cnonly.test", san=False))
        cls.sg = Sandgate({}, [])
        d = cls.sg.dir
        cls.secret_file = cls.sg.secret_file("openai", SECRET)
        cls.ca_out = os.path.join(d, "sandgate-ca.pem")
        rule = {"cidrs": ["127.0.0.0/8"]}
        policies = {"agent": {"allow": [
            dict(rule, host="api.test", methods=["GET", "POST"], credential="openai"),
            dict(rule, host="bad.test", credential="openai"),
            dict(rule, host="expired.test", credential="openai"),
            dict(rule, host="selfsigned.test", credential="openai"),
            dict(rule, host="cnonly.test", credential="openai"),
            dict(rule, host="gone.test", credential="broken"),
            dict(rule, host="git.test", credential="envcred"),
            dict(rule, host="other.test", credential="execcred"),
        ]}}
        creds = {
            "openai": {"source": {"file": cls.secret_file},
                       "hosts": ["api.test", "bad.test", "expired.test", "selfsigned.test",
                                 "cnonly.test"],
                       "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
            "broken": {"source": {"exec": ["false"]}, "optional": True,
                       "hosts": ["gone.test"],
                       "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
            "envcred": {"source": {"env": ENV_VAR}, "hosts": ["git.test"],
                        "inject": {"header": "Authorization", "value": "token {secret}"}},
            "execcred": {"source": {"exec": [cls.sg.secret_script("execcred", EXEC_SECRET)]},
                         "hosts": ["other.test"],
                         "inject": {"header": "X-Api-Key", "value": "{secret}"}},
        }
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN},
                       {"name": "demo2", "policy": "agent", "token": TOKEN2}],
            resolve={"api.test": "127.0.0.1:%d" % cls.https.port,
                     "bad.test": "127.0.0.1:%d" % cls.https.port,
                     "expired.test": "127.0.0.1:%d" % cls.expired.port,
                     "selfsigned.test": "127.0.0.1:%d" % cls.selfsigned.port,
                     "cnonly.test": "127.0.0.1:%d" % cls.cnonly.port,
                     "gone.test": "127.0.0.1:%d" % cls.https.port,
                     "git.test": "127.0.0.1:%d" % cls.https.port,
                     "other.test": "127.0.0.1:%d" % cls.https.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start(env={ENV_VAR: ENV_SECRET})  # the fixture registers the env secret

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.https.close()
        cls.expired.close()
        cls.selfsigned.close()
        cls.cnonly.close()

    def proxy(self):
        return self.sg.proxy_url("demo", TOKEN)

    def tunnel(self, host, sni=None):
        """A TLS connection to `host` through a CONNECT tunnel (Python ssl, our CA)."""
        return self.sg.tls_tunnel(host, "demo", TOKEN, self.ca_out, sni=sni)

    def api_connection(self, task="demo", token=TOKEN):
        """An HTTPS client connection to api.test through its own intercepted CONNECT."""
        conn = http.client.HTTPSConnection("api.test", 443)
        conn.sock = self.sg.tls_tunnel("api.test", task, token, self.ca_out)
        return conn

    def get_once(self, path, task="demo", token=TOKEN):
        """GET `path` of api.test on a client connection of its own; returns the status."""
        conn = self.api_connection(task, token)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            artifacts.record_response(path, r.status, r.getheaders(), r.read())
            return r.status
        finally:
            conn.close()

    def sent_authorization(self, path):
        """The Authorization values the upstream received with the (first) request for `path`."""
        headers = self.https.requests_to(path)[0]["headers"]
        return [v for k, v in headers if k.lower() == "authorization"]

    def upstream_port(self, path):
        """The client port the upstream saw the (one) request for `path` come from."""
        seen = self.https.requests_to(path)
        self.assertEqual(len(seen), 1, path)
        return seen[0]["client_port"]

    def raw_connect(self, host):
        """A plain socket through an accepted CONNECT to `host`:443 (the 200 head read)."""
        s = self.sg.connect()
        s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n%s\r\n" %
                   (host, host, self.sg.auth_header("demo", TOKEN))).encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 4096:
            chunk = s.recv(1)  # one byte at a time: nothing after the head is consumed
            if not chunk:
                break
            head += chunk
        if not head.startswith(b"HTTP/1.1 200 "):
            s.close()
            self.fail("CONNECT refused: %r" % head)
        return s

    @staticmethod
    def exchange(sock, request, label):
        """Sends raw request bytes on `sock`, parses one response (Content-Length or chunked
        body); returns (status, [(name, value)], body)."""
        sock.sendall(request)
        r = http.client.HTTPResponse(sock, method=request.split(b" ", 1)[0].decode())
        r.begin()
        body = r.read()
        artifacts.record_response(label, r.status, r.getheaders(), body)
        return r.status, r.getheaders(), body

    def request_after_drop(self, drop_path, path):
        """On one client connection: GET `drop_path` (a /drop: the upstream closes its
        connection after answering), then GET `path`, which must be answered 200."""
        conn = self.api_connection()
        try:
            conn.request("GET", drop_path)
            r1 = conn.getresponse()
            self.assertEqual((r1.status, r1.read()), (200, b"dropped"))
            time.sleep(0.3)  # the upstream's FIN reaches sandgate
            conn.request("GET", path)
            r2 = conn.getresponse()
            artifacts.record_response(path, r2.status, r2.getheaders(), r2.read())
            self.assertEqual(r2.status, 200)
        finally:
            conn.close()

    def wait_no_connections(self):
        for task in ("demo", "demo2"):
            wait_until(lambda: not self.sg.metric("sandgate_connections_active", task=task),
                       what="task %s's client connections to end" % task)

    def test_upstream_connection_pooled_per_task(self):
        # Client connections one after another reuse the task's verified upstream connections.
        # Pools are per worker thread, so after as many connections as there are workers each
        # later one finds an idle upstream connection on its worker: the upstream sees at most
        # one TCP connection per worker. Another task never gets them.
        paths = ["/echo/pool%d" % i for i in range(self.sg.threads + 2)]
        for path in paths:
            self.wait_no_connections()  # the last session ended and gave its connection back
            self.assertEqual(self.get_once(path), 200)
        ports = {self.upstream_port(p) for p in paths}
        self.assertLessEqual(len(ports), self.sg.threads, ports)
        self.wait_no_connections()
        self.assertEqual(self.get_once("/echo/pool-other", "demo2", TOKEN2), 200)
        self.assertNotIn(self.upstream_port("/echo/pool-other"), ports)
        # Each request carried the credential, whichever connection it went over.
        for path in paths + ["/echo/pool-other"]:
            self.assertEqual(self.sent_authorization(path), ["Bearer " + SECRET], path)

    def test_upstream_closed_kept_connection(self):
        # The upstream closes a connection that looked keep-alive: the next request of the
        # client connection goes out again on a new upstream connection, no 502.
        self.request_after_drop("/drop", "/echo/after-drop")
        drops = [r for r in self.https.requests if r["path"] == "/drop"]
        self.assertNotEqual(self.upstream_port("/echo/after-drop"), drops[-1]["client_port"])
        # A pooled connection the upstream has closed since is never handed out either.
        self.wait_no_connections()
        self.assertEqual(self.get_once("/drop"), 200)
        self.wait_no_connections()
        time.sleep(0.3)
        self.assertEqual(self.get_once("/echo/after-pooled-drop"), 200)

    def test_injects_and_scrubs(self):
        r = curl("https://api.test/echo/inject", "--cacert", self.ca_out,
                 "-H", "Authorization: Bearer client-own-value", proxy=self.proxy())
        self.assertEqual(r.status, 200, r)
        seen = self.https.requests_to("/echo/inject")
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

    def test_scrubs_a_secret_echoed_in_response_headers(self):
        # An upstream that reflects the Authorization it received in a response header: the
        # client sees the redaction marker there, never the secret.
        before = self.sg.metric("sandgate_secret_scrubs_total", task="demo", credential="openai")
        r = curl("https://api.test/echo/reflect?reflect=1", "--cacert", self.ca_out,
                 proxy=self.proxy())
        self.assertEqual(r.status, 200, r)
        seen = self.https.requests_to("/echo/reflect?reflect=1")
        self.assertEqual([v for k, v in seen[0]["headers"] if k.lower() == "authorization"],
                         ["Bearer " + SECRET])
        self.assertEqual([v for k, v in r.headers if k == "x-echo-authorization"],
                         ["Bearer [REDACTED:openai]"])
        self.assertNotIn(SECRET, repr(r.headers))
        self.assertNotIn(SECRET.encode(), r.body)
        # One replacement in the header, one in the JSON body's copy of the request headers
        # (counted before the audit line is written).
        self.sg.wait_audit(path="/echo/reflect", credential="openai", injected=True)
        self.assertGreaterEqual(
            self.sg.metric("sandgate_secret_scrubs_total", task="demo", credential="openai"),
            (before or 0) + 2)

    def test_large_bodies_arrive_whole(self):
        # Many reads and writes of the relay each way: every piece must arrive once, in order.
        # The upload keeps its Content-Length (its pieces go upstream as they are read); the
        # download is re-chunked (scrubbing with a marker of another length).
        upload = bytes(range(256)) * (12 * 1024) + b"tail"
        n = 3 * 1024 * 1024 + 17
        conn = self.api_connection()
        try:
            conn.request("POST", "/echo/upload", body=upload,
                         headers={"Content-Type": "application/octet-stream"})
            r = conn.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            conn.request("GET", "/bytes?n=%d" % n)
            r = conn.getresponse()
            body = r.read()
        finally:
            conn.close()
        self.assertEqual(self.https.requests_to("/echo/upload")[0]["body"], upload)
        self.assertEqual(r.status, 200)
        self.assertEqual(len(body), n)
        self.assertEqual(body, b"x" * n)
        self.sg.wait_audit(path="/bytes", credential="openai", injected=True)

    def test_request_with_trailers_is_refused(self):
        # A chunked request whose trailer carries an Authorization of the client's own: a
        # trailer is a header field no check saw, so the request is refused (400
        # request_trailers) and no complete request reaches the upstream, whether the body
        # arrives with the head (then the upstream is never dialled) or after it (then the
        # upstream's connection is dropped before the last chunk).
        head = ("POST %s HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n"
                "Trailer: Authorization, X-Trailer-Kept\r\nConnection: close\r\n\r\n")
        chunk = b"5\r\nhello\r\n"
        last = b"0\r\nAuthorization: Bearer client-trailer\r\nX-Trailer-Kept: 1\r\n\r\n"
        for path, pieces in (("/echo/trailer-whole", [chunk + last]),
                             ("/echo/trailer-streamed", [chunk, last])):
            t = self.tunnel("api.test")
            t.settimeout(10)
            try:
                t.sendall((head % path).encode() + pieces[0])
                if len(pieces) > 1:
                    time.sleep(0.2)  # the head and the first chunk go upstream on their own
                    t.sendall(pieces[1])
                status, headers, rest = read_response_head(t)
                raw = rest + read_all(t)
            finally:
                t.close()
            artifacts.record_response(path, status, list(headers.items()), raw)
            self.assertEqual((status, headers.get("x-sandgate-reason")),
                             (400, "request_trailers"), path)
            self.assertEqual(self.https.requests_to(path), [], path)
            self.assertNotIn("client-trailer", repr(self.https.requests), path)

        # An upstream that echoes the injected Authorization in its response trailer: the
        # client gets the body and an empty trailer, never the secret.
        t = self.tunnel("api.test")
        t.settimeout(10)
        try:
            t.sendall(b"GET /trailer HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
            status, headers, rest = read_response_head(t)
            raw = rest + read_all(t)
        finally:
            t.close()
        artifacts.record_response("/trailer", status, list(headers.items()), raw)
        self.assertEqual(status, 200)
        self.assertEqual(self.sent_authorization("/trailer"), ["Bearer " + SECRET])
        self.assertNotIn("trailer", [k.lower() for k in headers])
        self.assertEqual(raw, b"4\r\nbody\r\n0\r\n\r\n")

    def test_upstream_tls_failure(self):
        # A certificate for another name, one that has expired, one no CA signed, one that
        # names the host only in its subject's CN (no subjectAltName; RFC 6125: it names
        # nothing): each is a 502 that says why, and the request (with its injected secret)
        # never reaches the upstream.
        for host, upstream, why in (("bad.test", self.https, "hostname mismatch"),
                                    ("expired.test", self.expired, "certificate has expired"),
                                    ("selfsigned.test", self.selfsigned, "self-signed"),
                                    ("cnonly.test", self.cnonly, "hostname mismatch")):
            before = len(upstream.requests)
            r = curl("https://%s/echo/bad" % host, "--cacert", self.ca_out, proxy=self.proxy())
            self.assertEqual(r.status, 502, r)
            self.assertIn(("x-sandgate-reason", "upstream_tls_failed"), r.headers)
            self.assertIn(why.encode(), r.body, host)
            self.assertEqual(len(upstream.requests), before, host)
            self.sg.wait_audit(host=host, reason="upstream_tls_failed", credential="openai")

    def test_trace_never_carries_a_credential(self):
        # TRACE answers with the request as received: with the credential injected, the secret
        # would come back in the body. Refused (405) before anything is sent, though the rule
        # for other.test names no methods; the upstream never sees the request.
        for method in ("TRACE", "TRACK"):
            path = "/echo/" + method.lower()
            r = curl("https://other.test" + path, "--cacert", self.ca_out, "-X", method,
                     proxy=self.proxy())
            self.assertEqual(r.status, 405, r)
            self.assertIn(("x-sandgate-reason", "trace_with_credential"), r.headers)
            self.assertNotIn(EXEC_SECRET.encode(), r.body)
            self.assertEqual(self.https.requests_to(path), [], method)
            self.sg.wait_audit(host="other.test", reason="trace_with_credential", status=405)

    def test_sandgate_fields_are_sandgates_own_inside_a_tunnel(self):
        r = curl("https://api.test/echo/own", "--cacert", self.ca_out,
                 "-H", "X-Sandgate-Task: admin", "-H", "X-SANDGATE-CREDENTIAL: openai",
                 proxy=self.proxy())
        self.assertEqual(r.status, 200, r)
        names = [k.lower() for k, _ in self.https.requests_to("/echo/own")[0]["headers"]]
        self.assertFalse([n for n in names if n.startswith("x-sandgate-")], names)
        r = curl("https://api.test/spoof", "--cacert", self.ca_out, proxy=self.proxy())
        self.assertEqual(r.status, 200, r)
        self.assertFalse([k for k, _ in r.headers if k.startswith("x-sandgate-")], r.headers)

    def test_host_mismatch(self):
        r = curl("https://api.test/echo/host", "--cacert", self.ca_out,
                 "-H", "Host: other.test", proxy=self.proxy())
        self.assertEqual(r.status, 421, r)
        self.assertIn(("x-sandgate-reason", "misdirected_request"), r.headers)
        self.assertEqual(self.https.requests_to("/echo/host"), [])

    def test_request_without_host_inside_a_tunnel_is_400(self):
        t = self.tunnel("api.test")
        t.settimeout(10)
        try:
            t.sendall(b"GET /echo/nohost HTTP/1.1\r\nX-A: 1\r\n\r\n")
            status, headers, _ = read_response_head(t)
        finally:
            t.close()
        self.assertEqual(status, 400)
        self.assertEqual(headers.get("x-sandgate-reason"), "missing_host")
        self.assertEqual(self.https.requests_to("/echo/nohost"), [])
        self.sg.wait_audit(host="api.test", reason="missing_host", status=400)

    def test_sni_mismatch(self):
        t = self.tunnel("api.test", sni="other.test")
        t.settimeout(10)
        try:
            t.sendall(b"GET /echo/sni HTTP/1.1\r\nHost: api.test\r\n\r\n")
            data = t.recv(100)
        except (ssl.SSLError, OSError):
            data = b""
        self.assertEqual(data, b"")
        self.assertEqual(self.https.requests_to("/echo/sni"), [])
        self.sg.wait_audit(reason="sni_mismatch")

    def test_method_rule_inside_tunnel(self):
        conn = self.api_connection()
        conn.request("GET", "/echo/m1")
        r1 = conn.getresponse()
        artifacts.record_response("m1", r1.status, r1.getheaders(), r1.read())
        self.assertEqual(r1.status, 200)
        conn.request("DELETE", "/echo/m2")
        r2 = conn.getresponse()
        artifacts.record_response("m2", r2.status, r2.getheaders(), r2.read())
        self.assertEqual(r2.status, 403)
        self.assertEqual(r2.getheader("X-Sandgate-Reason"), "method_not_allowed")
        self.assertEqual(self.https.requests_to("/echo/m2"), [])

    def test_rotation_on_open_connection(self):
        conn = self.api_connection()
        try:
            conn.request("GET", "/echo/rot1")
            r1 = conn.getresponse()
            artifacts.record_response("rot1", r1.status, r1.getheaders(), r1.read())
            self.sg.secret_file("openai", SECRET2)
            conn.request("GET", "/echo/rot2")
            r2 = conn.getresponse()
            body = r2.read()
            artifacts.record_response("rot2", r2.status, r2.getheaders(), body)
            self.assertNotIn(SECRET2.encode(), body)
        finally:
            self.sg.secret_file("openai", SECRET)
        self.assertEqual(self.sent_authorization("/echo/rot1"), ["Bearer " + SECRET])
        self.assertEqual(self.sent_authorization("/echo/rot2"), ["Bearer " + SECRET2])

    def test_env_and_exec_sources(self):
        for host, path, header, value, secret in (
                ("git.test", "/echo/envsrc", "authorization", "token " + ENV_SECRET, ENV_SECRET),
                ("other.test", "/echo/execsrc", "x-api-key", EXEC_SECRET, EXEC_SECRET)):
            r = curl("https://%s%s" % (host, path), "--cacert", self.ca_out, proxy=self.proxy())
            self.assertEqual(r.status, 200, r)
            seen = self.https.requests_to(path)
            self.assertEqual(len(seen), 1)
            self.assertEqual([v for k, v in seen[0]["headers"] if k.lower() == header], [value])
            self.assertNotIn(secret.encode(), r.body)
            self.assertIn(b"[REDACTED:", r.body)

    def test_failing_exec_source(self):
        r = curl("https://gone.test/echo/gone", "--cacert", self.ca_out, proxy=self.proxy())
        self.assertEqual(r.status, 502, r)
        self.assertIn(("x-sandgate-reason", "credential_unavailable"), r.headers)
        self.assertEqual(self.https.requests_to("/echo/gone"), [])

    def test_plaintext_in_intercepted_tunnel(self):
        # Plain HTTP sent where the ClientHello belongs ends the tunnel: no HTTP answer, the
        # request never reaches the upstream, the audit says not_tls.
        s = self.raw_connect("api.test")
        try:
            s.sendall(b"GET /echo/plaintext HTTP/1.1\r\nHost: api.test\r\n\r\n")
            data, closed = read_to_eof(s, timeout=10)
        finally:
            s.close()
        artifacts.record("response", "plaintext", data)
        self.assertTrue(closed, "tunnel still open after plaintext: %r" % data)
        self.assertNotIn(b"HTTP/", data)
        self.assertEqual(self.https.requests_to("/echo/plaintext"), [])
        self.sg.wait_audit(host="api.test", reason="not_tls")
        self.assertGreaterEqual(self.sg.metric("sandgate_requests_total", task="demo",
                                               reason="not_tls"), 1)

    def test_hop_by_hop_fields_stripped_in_tunnel(self):
        # Hop-by-hop fields, the names Connection lists and Proxy-* fields from the client stay
        # at sandgate; an end-to-end field passes; the credential is injected exactly once.
        t = self.tunnel("api.test")
        t.settimeout(10)
        try:
            status, headers, body = self.exchange(t, (
                b"GET /echo/hop HTTP/1.1\r\nHost: api.test\r\n"
                b"Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\n"
                b"TE: trailers\r\nProxy-Foo: 1\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\n"
                b"X-Kept: yes\r\n\r\n"), "hop")
        finally:
            t.close()
        self.assertEqual(status, 200)
        seen = self.https.requests_to("/echo/hop")
        self.assertEqual(len(seen), 1)
        sent = [(k.lower(), v) for k, v in seen[0]["headers"]]
        names = [k for k, _ in sent]
        for gone in ("x-hop", "keep-alive", "te", "proxy-foo", "proxy-authorization"):
            self.assertNotIn(gone, names, sent)
        for k, v in sent:
            if k == "connection":
                self.assertNotIn("x-hop", v.lower(), sent)
        self.assertNotIn("Zm9vOmJhcg==", repr(seen[0]))
        self.assertEqual([v for k, v in sent if k == "x-kept"], ["yes"])
        self.assertEqual([v for k, v in sent if k == "authorization"], ["Bearer " + SECRET])
        # The client's echo shows X-Kept, not the secret.
        self.assertIn(b"X-Kept", body)
        self.assertNotIn(SECRET.encode(), body)

    def test_alpn_negotiates_http11(self):
        # A client offering h2 and http/1.1 gets http/1.1 (sandgate speaks only HTTP/1.1 inside
        # the tunnel), and a request on that connection is served.
        s = self.raw_connect("api.test")
        ctx = ssl.create_default_context(cafile=self.ca_out)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        try:
            t = ctx.wrap_socket(s, server_hostname="api.test")
        except BaseException:
            s.close()
            raise
        t.settimeout(10)
        try:
            self.assertEqual(t.selected_alpn_protocol(), "http/1.1")
            status, _, body = self.exchange(
                t, b"GET /echo/alpn HTTP/1.1\r\nHost: api.test\r\n\r\n", "alpn")
        finally:
            t.close()
        self.assertEqual(status, 200)
        self.assertEqual(self.sent_authorization("/echo/alpn"), ["Bearer " + SECRET])
        self.assertNotIn(SECRET.encode(), body)

    def test_absolute_form_refused_in_tunnel(self):
        # Inside the tunnel only origin-form is accepted: an absolute URI (another host, or even
        # the tunnel's own) is a 421 misdirected_request, audited and counted under that reason, and
        # nothing reaches the upstream.
        def refused():
            audited = [a for a in self.sg.audit()
                       if a.get("reason") == "misdirected_request" and a.get("status") == 421]
            counted = self.sg.metric("sandgate_requests_total", task="demo",
                                     reason="misdirected_request")
            return len(audited), counted or 0
        before = refused()
        for target, path in ((b"https://other.test/echo/abs", "/echo/abs"),
                             (b"https://api.test/echo/abs2", "/echo/abs2")):
            t = self.tunnel("api.test")
            t.settimeout(10)
            try:
                status, headers, _ = self.exchange(
                    t, b"GET " + target + b" HTTP/1.1\r\nHost: api.test\r\n\r\n", path)
            finally:
                t.close()
            self.assertEqual(status, 421, target)
            self.assertEqual([v for k, v in headers if k.lower() == "x-sandgate-reason"],
                             ["misdirected_request"], target)
            self.assertEqual([r for r in self.https.requests if r["path"].endswith(path)], [],
                             target)
        wait_until(lambda: refused() == (before[0] + 2, before[1] + 2),
                   what="two misdirected_request audit lines and requests counted")

    def test_redirect_passed_not_followed(self):
        # A 302 from the upstream goes to the client as it is; sandgate does not follow it.
        to = "https://other.test/echo/followed"
        path = "/redirect?to=%s&code=302" % to
        r = curl("https://api.test" + path, "--cacert", self.ca_out, proxy=self.proxy())
        self.assertEqual(r.status, 302, r)
        self.assertEqual(r.header("location"), to)
        self.assertEqual(len(self.https.requests_to(path)), 1)
        self.assertEqual(self.sent_authorization(path), ["Bearer " + SECRET])
        self.assertEqual(self.https.requests_to("/echo/followed"), [])

    def test_upstream_sni_is_connect_host(self):
        # A new upstream TLS connection (the upstream closed the last one after /drop) sends
        # the CONNECT host as SNI.
        before = len(self.https.sni)
        self.request_after_drop("/drop?sni=1", "/echo/sni-upstream")
        self.assertNotEqual(self.upstream_port("/echo/sni-upstream"),
                            self.upstream_port("/drop?sni=1"))
        new = self.https.sni[before:]
        self.assertGreaterEqual(len(new), 1, self.https.sni)
        self.assertEqual(set(new), {"api.test"}, new)
        # Only names the tests use ever reached this upstream as SNI (never None, never an IP).
        self.assertLessEqual(set(self.https.sni),
                             {"api.test", "bad.test", "git.test", "other.test", "gone.test"},
                             self.https.sni)

    def metric_sum(self, name, **labels):
        """The sum of every sample of `name` whose labels include `labels`."""
        total = 0.0
        for line in self.sg.metrics().splitlines():
            if line.startswith(name + "{") and all('%s="%s"' % kv in line for kv in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def test_intercepted_requests_are_counted_once(self):
        # Three requests in one intercepted tunnel are three requests in sandgate_requests_total
        # (a plain sum over it counts what clients asked for); the tunnel is one tunnel in
        # sandgate_tunnels_total{mode="intercepted"}, and its life is not a request latency.
        before = self.metric_sum("sandgate_requests_total", task="demo2")
        latencies = self.metric_sum("sandgate_request_duration_seconds_count", task="demo2")
        ended = self.metric_sum("sandgate_tunnels_total", task="demo2", mode="intercepted")
        conn = self.api_connection("demo2", TOKEN2)
        try:
            for i in range(3):
                conn.request("GET", "/echo/counted-%d" % i)
                r = conn.getresponse()
                r.read()
                self.assertEqual(r.status, 200)
        finally:
            conn.close()
        wait_until(lambda: self.metric_sum("sandgate_tunnels_total", task="demo2",
                                           mode="intercepted") == ended + 1,
                   what="the intercepted tunnel's end to be counted")
        self.assertEqual(self.metric_sum("sandgate_requests_total", task="demo2") - before, 3)
        self.assertEqual(self.metric_sum("sandgate_request_duration_seconds_count",
                                         task="demo2") - latencies, 3)
        self.assertEqual(self.metric_sum("sandgate_request_duration_seconds_count", task="demo2",
                                         kind="tunnel"), 0)
        self.assertGreaterEqual(self.metric_sum("sandgate_tunnel_duration_seconds_count",
                                                task="demo2", mode="intercepted"), 1)
        # The tunnel's line and the lines of the requests inside it join on connection_id;
        # the CONNECT was the connection's first request.
        inner = [self.sg.wait_audit(path="/echo/counted-%d" % i) for i in range(3)]
        conn_id = inner[0]["connection_id"]
        self.assertEqual({r["connection_id"] for r in inner}, {conn_id})
        self.assertEqual([r["request_id"] for r in inner],
                         ["%s-%d" % (conn_id, n) for n in (2, 3, 4)])
        tunnel = self.sg.wait_audit(connection_id=conn_id, kind="tunnel")
        self.assertEqual(tunnel["request_id"], conn_id + "-1")

    def leaf_cache(self, result):
        return self.sg.metric("sandgate_leaf_cache_lookups_total", result=result)

    def test_leaf_cache_metric(self):
        # Two intercepted CONNECTs to the same host: the second finds the leaf minted (or kept)
        # before; lookups are counted as hit and miss.
        hits_before = self.leaf_cache("hit") or 0
        self.assertEqual(self.get_once("/echo/leaf1"), 200)
        self.assertEqual(self.get_once("/echo/leaf2"), 200)
        hits, misses = self.leaf_cache("hit"), self.leaf_cache("miss")
        self.assertIsNotNone(hits)
        self.assertIsNotNone(misses)
        self.assertGreaterEqual(hits, 1)
        self.assertGreaterEqual(hits, hits_before + 1)
        self.assertGreaterEqual(misses, 1)

    def test_long_download_streams(self):
        # The first chunk reaches the client while the upstream still holds the rest back: the
        # response is streamed, not buffered whole.
        t = self.tunnel("api.test")
        t.settimeout(10)
        try:
            t.sendall(b"GET /stream HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
            status, headers, raw = read_response_head(t)
            self.assertEqual(status, 200)
            self.assertEqual(headers.get("transfer-encoding", "").lower(), "chunked", headers)
            # Bounded well below the 10 s the upstream itself waits for release.
            raw = read_until(t, raw, lambda r: dechunk(r)[0] == b"first\n", timeout=5)
            self.assertFalse(self.https.release.is_set())
            self.assertEqual(dechunk(raw), (b"first\n", False), raw)
            self.https.release.set()
            raw += read_all(t, timeout=10)
        finally:
            t.close()
            self.https.release.clear()
        artifacts.record_response("stream", status, list(headers.items()), raw)
        self.assertEqual(dechunk(raw), (b"first\nlast\n", True), raw)
        self.assertEqual(self.sent_authorization("/stream"), ["Bearer " + SECRET])

    def test_surplus_upstream_bytes_not_relayed(self):
        # Bytes an upstream sends after a complete response are never relayed, and the
        # connection they came on is not reused: the next request of the same client connection
        # goes out on a new upstream connection and is answered normally.
        t = self.tunnel("api.test")
        t.settimeout(10)
        try:
            t.sendall(b"GET /surplus HTTP/1.1\r\nHost: api.test\r\n\r\n")
            status1, headers1, raw1 = read_response_head(t)
            # Content-Length 7 from the upstream; sandgate may re-chunk it (scrubbing).
            chunked = headers1.get("transfer-encoding", "").lower() == "chunked"
            n = int(headers1.get("content-length", "-1"))
            raw1 = read_until(t, raw1,
                              lambda r: dechunk(r)[1] if chunked else 0 <= n <= len(r))
            time.sleep(0.3)  # anything stray would have arrived by now
            raw1 += read_all(t, timeout=0.5)  # returns on the timeout: the connection stays
            t.settimeout(10)
            t.sendall(b"GET /echo/after-surplus HTTP/1.1\r\nHost: api.test\r\n"
                      b"Connection: close\r\n\r\n")
            raw2 = read_all(t, timeout=10)
        finally:
            t.close()
        artifacts.record_response("surplus", status1, list(headers1.items()), raw1)
        artifacts.record("response", "after-surplus", raw2)
        self.assertEqual(status1, 200)
        self.assertNotIn(b"EXTRA-BYTES", raw1)
        if chunked:
            self.assertEqual(dechunk(raw1), (b"surplus", True), raw1)
            self.assertTrue(raw1.endswith(b"0\r\n\r\n"), raw1)  # nothing after the response
        else:
            self.assertEqual((n, raw1), (7, b"surplus"), headers1)
        self.assertNotIn(b"EXTRA-BYTES", raw2)
        self.assertTrue(raw2.startswith(b"HTTP/1.1 200 "), raw2[:200])
        self.assertIn(b"/echo/after-surplus", raw2)
        self.assertEqual(len(self.https.requests_to("/surplus")), 1)
        self.assertNotEqual(self.upstream_port("/echo/after-surplus"),
                            self.upstream_port("/surplus"))
        self.assertEqual(self.sent_authorization("/echo/after-surplus"), ["Bearer " + SECRET])

    def test_zz_secret_never_logged(self):
        curl("https://api.test/echo/log", "--cacert", self.ca_out, proxy=self.proxy())
        with open(self.sg.audit_path) as f:
            audit = f.read()
        for s in (SECRET, SECRET2, ENV_SECRET, EXEC_SECRET):
            self.assertNotIn(s, audit)
            self.assertNotIn(s, self.sg.stderr())


if __name__ == "__main__":
    unittest.main()
