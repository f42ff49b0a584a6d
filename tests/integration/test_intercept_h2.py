"""HTTP/2 through interception (issue #40): both legs in h2 where the upstream speaks it, each
stream a request with the policy, the credential and the scrubbing an HTTP/1.1 request gets.

api.test is an HTTP/2-only upstream of the test's own (support/h2_upstream.py) that echoes the
Authorization it received in a header, in the body (split across two DATA frames inside the
value) and in a trailer; h1.test is an HTTP/1.1-only upstream. Clients: curl --http2, and a raw
Python h2 client over a CONNECT tunnel (for trailers, frames and multiplexing).
"""

import json
import os
import socket
import ssl
import subprocess
import threading
import time
import unittest

import h2_upstream  # noqa: F401  (makes python3-h2 importable)
import h2.config
import h2.connection
import h2.events
from clients import clean_env
from pki import test_pki
from sandgate_fixture import Sandgate
from upstreams import HttpUpstream, TcpServer

TOKEN = "h2tok3n"
SECRET = "sk-h2secretvalue-0123456789abcdef"


def h2_client(tls, validate=True):
    """An h2 client connection over `tls` (its preface sent)."""
    cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                    validate_outbound_headers=validate,
                                    normalize_outbound_headers=validate,
                                    validate_inbound_headers=False)
    conn = h2.connection.H2Connection(cfg)
    conn.initiate_connection()
    tls.sendall(conn.data_to_send())
    return conn


def post(tls, conn, headers, body, limit=400):
    """One request with `body` (sent as the windows allow); its status and the audit-visible
    outcome: ("status", value) or ("reset", code)."""
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, headers)
    pending = body
    ended = False
    for _ in range(limit):  # bounded: a few windows of body and the answer
        while pending:  # everything the windows allow, before waiting for an answer
            n = min(len(pending), conn.local_flow_control_window(sid), 16384)
            if not n:
                break
            conn.send_data(sid, pending[:n])
            pending = pending[n:]
        if not pending and not ended:
            conn.end_stream(sid)
            ended = True
        tls.sendall(conn.data_to_send())
        data = tls.recv(65536)
        if not data:
            return ("closed", None)
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                return ("status", dict(ev.headers)[":status"])
            if isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                return ("reset", ev.error_code)
        tls.sendall(conn.data_to_send())
    return ("none", None)


def exchange(tls, conn, requests, limit=200):
    """Sends `requests` (a list of header lists, each ended with END_STREAM) as streams of one
    connection and reads until each has ended or been reset. Returns {stream_id: result} with
    headers, data (the DATA frames' payloads, in order), trailers and reset (an error code)."""
    results = {}
    for headers in requests:
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, headers, end_stream=True)
        results[sid] = {"headers": None, "data": [], "trailers": None, "reset": None,
                        "ended": False}
    tls.sendall(conn.data_to_send())
    for _ in range(limit):  # bounded: frames of a few small responses
        if all(r["ended"] or r["reset"] is not None for r in results.values()):
            break
        data = tls.recv(65536)
        if not data:
            break
        for ev in conn.receive_data(data):
            r = results.get(getattr(ev, "stream_id", None))
            if isinstance(ev, h2.events.ResponseReceived):
                r["headers"] = list(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                r["data"].append(ev.data)
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.TrailersReceived):
                r["trailers"] = list(ev.headers)
            elif isinstance(ev, h2.events.StreamEnded):
                r["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                r["reset"] = ev.error_code
        tls.sendall(conn.data_to_send())
    return results


def req(path, method="GET", authority="api.test", extra=()):  # noqa: D103
    return [(":method", method), (":scheme", "https"), (":authority", authority),
            (":path", path)] + list(extra)


class ProbeCountingUpstream(TcpServer):
    """An HTTPS upstream that speaks only HTTP/1.1 (its ALPN), answers each request with
    `Connection: close`, and counts the TLS connections that carried no request: sandgate's h2
    probes (a handshake offering h2, then nothing)."""

    def __init__(self, pki):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(pki.leaf_cert, pki.leaf_key)
        self.ctx.set_alpn_protocols(["http/1.1"])
        self.probes = self.requests = 0
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c):
        c.settimeout(10)
        try:
            tls = self.ctx.wrap_socket(c, server_side=True)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = tls.recv(4096)
                if not chunk:
                    break
                head += chunk
            with self.lock:
                if b"\r\n\r\n" in head:
                    self.requests += 1
                else:
                    self.probes += 1
            if b"\r\n\r\n" in head:
                tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            tls.close()
        except OSError:
            with self.lock:
                self.probes += 1
        finally:
            c.close()


class InterceptH2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.up = h2_upstream.H2Upstream(cls.pki)
        cls.h1 = HttpUpstream(cls.pki)
        cls.probed = ProbeCountingUpstream(cls.pki)
        cls.sg = Sandgate({}, [])
        key = cls.sg.secret_file("api", SECRET)
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        rule = {"cidrs": ["127.0.0.0/8"]}
        policies = {"agent": {"allow": [
            dict(rule, host="api.test", paths=["/echo/**", "/allowed/**"], credential="api"),
            dict(rule, host="other.test", credential="api"),
            dict(rule, host="ws.test", inspect=True),
        ]}, "counted": {"allow": [dict(rule, host="api.test", paths=["/echo/**"])],
                        "budgets": [{"name": "two", "window": "run", "requests": 2}]}}
        creds = {"api": {"source": {"file": key}, "hosts": ["api.test", "other.test"],
                         "inject": {"header": "Authorization", "value": "Bearer {secret}"}}}
        resolve = {"api.test": "127.0.0.1:%d" % cls.up.port,
                   "other.test": "127.0.0.1:%d" % cls.h1.port,
                   "ws.test": "127.0.0.1:%d" % cls.probed.port}
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN},
                       {"name": "counted", "policy": "counted", "token": TOKEN}], resolve=resolve,
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()
        cls.h1.close()
        cls.probed.close()

    def tunnel(self, host="api.test", task="demo"):
        s = self.sg.connect(timeout=10)
        s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n%s\r\n" %
                   (host, host, self.sg.auth_header(task, TOKEN))).encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 4096:
            chunk = s.recv(1)
            if not chunk:
                break
            head += chunk
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        import ssl
        ctx = ssl.create_default_context(cafile=self.ca_out)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        return ctx.wrap_socket(s, server_hostname=host)

    def curl(self, url, *args):
        p = subprocess.run(["curl", "-sS", "--max-time", "15", "--http2", "-x", self.proxy,
                            "--cacert", self.ca_out, "-D", "-", "-w", "\n%{http_version}",
                            *args, url], env=clean_env(), capture_output=True, timeout=20)
        out = p.stdout.decode("latin-1")
        # What follows the proxy's "200 Connection established" head.
        out = out.split("\r\n\r\n", 1)[1] if out.startswith("HTTP/1.1 200 Connection") else out
        return p.returncode, out, p.stderr.decode("latin-1")

    def upstream_requests(self, path):
        return [r for r in self.up.requests if dict(r["headers"]).get(":path") == path]

    def test_curl_http2_on_both_legs_injects_once_and_scrubs(self):
        rc, out, err = self.curl("https://api.test/echo/curl")
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.rstrip().endswith("\n2"), out)  # HTTP/2 to sandgate
        self.assertTrue(out.startswith("HTTP/2 200"), out)
        self.assertIn("h2", self.up.alpn_seen)  # and HTTP/2 to the upstream
        seen = self.upstream_requests("/echo/curl")
        self.assertEqual(len(seen), 1)
        auths = [v for k, v in seen[0]["headers"] if k == "authorization"]
        self.assertEqual(auths, ["Bearer " + SECRET])
        self.assertNotIn(SECRET, out)
        self.assertIn("auth=Bearer ", out)  # the echoed body arrived, scrubbed
        line = self.sg.wait_audit(path="/echo/curl")
        self.assertEqual(line["verdict"], "allow")
        self.assertEqual(line["status"], 200)
        self.assertEqual(line["kind"], "intercept")

    def test_streams_count_against_the_tasks_budgets(self):
        # Each stream is a request of the task's budgets as an HTTP/1.1 request is (#41): over
        # one h2 connection, the third stream of a 2-request budget is 429 budget_exceeded and
        # never reaches the upstream. (Streams once bypassed the budgets: h2 had its own path.)
        tls = self.tunnel(task="counted")
        self.assertEqual(tls.selected_alpn_protocol(), "h2")
        conn = h2_client(tls)
        paths = ["/echo/budget-%d" % i for i in range(3)]
        results = {}
        for path in paths:  # one after another, so that which one is refused is known
            (r,) = exchange(tls, conn, [req(path)]).values()
            results[path] = r
        tls.close()
        statuses = [dict(results[p]["headers"] or [])[":status"] for p in paths]
        self.assertEqual(statuses, ["200", "200", "429"], results)
        refused = dict(results[paths[2]]["headers"])
        self.assertEqual(refused["x-sandgate-reason"], "budget_exceeded")
        self.assertEqual(self.upstream_requests(paths[2]), [])
        line = self.sg.wait_audit(path=paths[2])
        self.assertEqual((line["reason"], line["status"]), ("budget_exceeded", 429))

    def test_secret_never_in_header_data_or_trailer_and_client_value_overwritten(self):
        tls = self.tunnel()
        self.assertEqual(tls.selected_alpn_protocol(), "h2")
        conn = h2_client(tls)
        res = exchange(tls, conn, [req("/echo/frames", extra=[("authorization", "Bearer mine")])])
        tls.close()
        (r,) = res.values()
        self.assertTrue(r["ended"], r)
        self.assertEqual(dict(r["headers"])[":status"], "200")
        everything = json.dumps([r["headers"], r["trailers"]]) + \
            b"".join(r["data"]).decode("latin-1")
        self.assertNotIn(SECRET, everything)
        self.assertIsNotNone(r["trailers"])
        self.assertIn("x-trailer-auth", dict(r["trailers"]))
        self.assertGreaterEqual(len(r["data"]), 1)
        (seen,) = self.upstream_requests("/echo/frames")
        auths = [v for k, v in seen["headers"] if k == "authorization"]
        self.assertEqual(auths, ["Bearer " + SECRET])  # the client's value was overwritten

    def test_a_secret_split_across_padded_data_frames_is_still_scrubbed(self):
        tls = self.tunnel()
        conn = h2_client(tls)
        res = exchange(tls, conn, [req("/echo/padded")])
        tls.close()
        (r,) = res.values()
        self.assertTrue(r["ended"], r)
        body = b"".join(r["data"])
        self.assertNotIn(SECRET.encode(), body)
        self.assertIn(b"auth=Bearer [REDACTED:api];", body)

    def test_expect_100_continue_is_answered_by_sandgate(self):
        tls = self.tunnel()
        conn = h2_client(tls)
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, req("/allowed/expect", "POST", extra=[("expect", "100-continue")]))
        tls.sendall(conn.data_to_send())
        informational = None
        for _ in range(50):  # bounded: SETTINGS, its ACK, the 100
            for ev in conn.receive_data(tls.recv(65536)):
                if isinstance(ev, h2.events.InformationalResponseReceived):
                    informational = dict(ev.headers)[":status"]
            tls.sendall(conn.data_to_send())
            if informational:
                break
        self.assertEqual(informational, "100")
        conn.send_data(sid, b"body", end_stream=True)
        tls.sendall(conn.data_to_send())
        status = None
        for _ in range(50):  # bounded: the answer's frames
            for ev in conn.receive_data(tls.recv(65536)):
                if isinstance(ev, h2.events.ResponseReceived):
                    status = dict(ev.headers)[":status"]
            tls.sendall(conn.data_to_send())
            if status:
                break
        tls.close()
        self.assertEqual(status, "200")
        (seen,) = self.upstream_requests("/allowed/expect")
        self.assertEqual(seen["body"], b"body")
        self.assertNotIn("expect", dict(seen["headers"]))

    def test_two_streams_on_one_connection_get_their_own_decisions(self):
        tls = self.tunnel()
        conn = h2_client(tls)
        res = exchange(tls, conn, [req("/allowed/one"), req("/forbidden/two")])
        tls.close()
        ok, denied = res[1], res[3]
        self.assertEqual(dict(ok["headers"])[":status"], "200")
        self.assertEqual(dict(denied["headers"])[":status"], "403")
        self.assertEqual(dict(denied["headers"])["x-sandgate-reason"], "path_not_allowed")
        body = json.loads(b"".join(denied["data"]))
        self.assertEqual(body["reason"], "path_not_allowed")
        self.assertEqual(len(self.upstream_requests("/allowed/one")), 1)
        self.assertEqual(self.upstream_requests("/forbidden/two"), [])
        self.sg.wait_audit(path="/forbidden/two", verdict="deny", reason="path_not_allowed")

    def test_authority_naming_another_host_is_refused_421(self):
        tls = self.tunnel()
        conn = h2_client(tls)
        res = exchange(tls, conn, [req("/allowed/x", authority="other.test"),
                                   req("/allowed/y")])
        tls.close()
        self.assertEqual(dict(res[1]["headers"])[":status"], "421")
        self.assertEqual(dict(res[1]["headers"])["x-sandgate-reason"], "misdirected_request")
        self.assertEqual(dict(res[3]["headers"])[":status"], "200")  # the connection goes on
        self.assertEqual(self.upstream_requests("/allowed/x"), [])

    def test_a_mebibyte_each_way_passes_the_windows_and_the_scrubber(self):
        upload = os.path.join(self.sg.dir, "upload.bin")
        with open(upload, "wb") as f:
            f.write(b"u" * (1024 * 1024))
        rc, out, err = self.curl("https://api.test/allowed/upload", "--data-binary", "@" + upload,
                                 "-H", "content-type: application/octet-stream")
        self.assertEqual(rc, 0, err)
        self.assertIn('"received": 1048576', out)
        rc, out, err = self.curl("https://api.test/allowed/big")
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.startswith("HTTP/2 200"), out[:200])
        self.assertNotIn(SECRET, out)
        self.assertIn("Bearer [REDACTED:api]", out)
        body = out.split("\r\n\r\n", 1)[1]
        self.assertGreater(len(body), 1024 * 1024 - 64)  # all of it, the marker for the secret
        self.assertNotIn("content-length", out.split("\r\n\r\n", 1)[0].lower())

    def test_a_form_body_is_judged_before_the_upstream_sees_it(self):
        form = [("content-type", "application/x-www-form-urlencoded")]
        tls = self.tunnel()
        conn = h2_client(tls)
        ok = post(tls, conn, req("/allowed/form", "POST", extra=form), b"a=b&c=d")
        override = post(tls, conn, req("/allowed/override", "POST", extra=form),
                        b"a=b&_method=DELETE")
        # Past the stream's window: judged unchecked (refused on this host), never a stall.
        big = post(tls, conn, req("/allowed/big", "POST", extra=form), b"a=" + b"x" * 100000)
        tls.close()
        self.assertEqual(ok, ("status", "200"))
        self.assertEqual(override, ("status", "403"))
        self.assertEqual(big, ("status", "403"))
        self.assertEqual(len(self.upstream_requests("/allowed/form")), 1)
        self.assertEqual(self.upstream_requests("/allowed/override"), [])
        self.assertEqual(self.upstream_requests("/allowed/big"), [])

    def test_an_h1_only_upstream_is_probed_for_h2_once(self):
        # curl offers h2 to every host: an upstream that answered the offer with HTTP/1.1 is
        # remembered, so the next clients get http/1.1 at once, with no probe connection
        # dialled and thrown away before each of them.
        for i in range(3):
            rc, out, err = self.curl("https://ws.test/probe-%d" % i)
            self.assertEqual(rc, 0, err)
            self.assertTrue(out.rstrip().endswith("\n1.1"), out)
        with self.probed.lock:
            self.assertEqual((self.probed.probes, self.probed.requests), (1, 3))

    def test_h2_client_to_an_h1_only_upstream_stays_on_http11(self):
        rc, out, err = self.curl("https://other.test/echo/h1")
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.rstrip().endswith("\n1.1"), out)
        self.assertTrue(out.startswith("HTTP/1.1 200"), out)


class DrainH2Test(unittest.TestCase):
    """SIGTERM with an HTTP/2 connection open and idle (a gRPC channel between calls): the
    client gets a graceful GOAWAY and serve exits well before its shutdown grace."""

    def test_an_idle_h2_connection_gets_goaway_and_does_not_hold_the_drain(self):
        pki = test_pki()
        up = h2_upstream.H2Upstream(pki)
        sg = Sandgate({}, [], limits={"shutdown_grace": "30s"})
        try:
            ca_out = os.path.join(sg.dir, "sandgate-ca.pem")
            policies = {"agent": {"allow": [
                {"host": "api.test", "cidrs": ["127.0.0.0/8"], "paths": ["/**"]}]}}
            sg.config = sg.make_config(
                policies, [{"name": "demo", "policy": "agent", "token": TOKEN}],
                limits={"shutdown_grace": "30s"},
                resolve={"api.test": "127.0.0.1:%d" % up.port},
                extra={"ca_cert_out": ca_out, "tls": {"upstream_ca": pki.ca_cert}})
            sg.write_config(sg.config)
            sg.start()
            s = sg.connect(timeout=10)
            s.sendall(("CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n%s\r\n" %
                       sg.auth_header("demo", TOKEN)).encode())
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 4096:
                head += s.recv(1)
            import ssl
            ctx = ssl.create_default_context(cafile=ca_out)
            ctx.set_alpn_protocols(["h2"])
            tls = ctx.wrap_socket(s, server_hostname="api.test")
            conn = h2_client(tls)
            res = exchange(tls, conn, [req("/one")])
            self.assertEqual(dict(res[1]["headers"])[":status"], "200")
            started = time.monotonic()
            self.assertEqual(sg.stop(timeout=25), 0)
            took = time.monotonic() - started
            goaway = False
            tls.settimeout(5)
            for _ in range(20):  # bounded: what sandgate sent before it closed
                try:
                    data = tls.recv(65536)
                except OSError:
                    break
                if not data:
                    break
                goaway = goaway or any(isinstance(ev, h2.events.ConnectionTerminated)
                                       for ev in conn.receive_data(data))
            tls.close()
            self.assertTrue(goaway, "no GOAWAY before the close")
            self.assertLess(took, 10, "the drain waited %.1f s for an idle h2 connection" % took)
        finally:
            sg.cleanup()
            up.close()


if __name__ == "__main__":
    unittest.main()
