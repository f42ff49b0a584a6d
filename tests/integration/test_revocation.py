"""Revocation on reload (issue #24, class 7), from the client's side: connections opened under
one configuration, then a reload that no longer allows what they reach.

- A keep-alive forwarded connection: its next request is decided against the new policy.
- A spliced CONNECT tunnel and an intercepted one whose host the new policy removed still work
  during limits.revoke_grace (default 2 s) and are closed once it is up, with audit lines that
  say revoked_by_reload, and counted; with `revoke_grace: 0s` at once; a reload that allows the
  tunnel again before its grace is up keeps it.
- A tunnel whose host is still allowed stays open and keeps working.
- A removed task: its connection's next request gets 403 revoked_by_reload.
"""

import os
import signal
import socket
import ssl
import time
import unittest

from pki import test_pki
from sandgate_fixture import Sandgate, read_response, read_response_head, wait_until
from upstreams import HttpUpstream, TcpEcho

TOKEN = "rev0ke"
GONE_TOKEN = "g0ne"


class RevocationTest(unittest.TestCase):
    def setUp(self):
        self.pki = test_pki()
        self.http = HttpUpstream()
        self.https = HttpUpstream(self.pki)
        self.echo = TcpEcho()
        self.keep_echo = TcpEcho()
        self.sg = Sandgate({}, [])
        self.ca_out = os.path.join(self.sg.dir, "sandgate-ca.pem")
        self.resolve = {"a.test": "127.0.0.1:%d" % self.http.port,
                        "tunnel.test": "127.0.0.1:%d" % self.echo.port,
                        "keep.test": "127.0.0.1:%d" % self.keep_echo.port,
                        "api.test": "127.0.0.1:%d" % self.https.port}
        self.write(["a.test", "tunnel.test", "keep.test", "api.test"], with_gone_task=True)
        self.sg.start()

    def tearDown(self):
        self.sg.cleanup()
        self.http.close()
        self.https.close()
        self.echo.close()
        self.keep_echo.close()

    def write(self, hosts, with_gone_task=False, grace=None):
        rule = {"cidrs": ["127.0.0.0/8"]}
        allow = []
        for h in hosts:
            if h == "a.test":
                allow.append(dict(rule, host=h, ports=[80]))
            elif h == "api.test":
                allow.append(dict(rule, host=h, ports=[443], inspect=True))
            else:  # a plain TCP tunnel (no TLS check off 443)
                allow.append(dict(rule, host=h, ports=[7000]))
        tasks = [{"name": "t", "policy": "p", "token": TOKEN}]
        if with_gone_task:
            tasks.append({"name": "gone", "policy": "p", "token": GONE_TOKEN})
        self.sg.config = self.sg.make_config(
            {"p": {"allow": allow}}, tasks, resolve=self.resolve,
            limits={"revoke_grace": grace} if grace is not None else None,
            extra={"ca_cert_out": self.ca_out, "tls": {"upstream_ca": self.pki.ca_cert}})
        self.sg.write_config(self.sg.config)

    def reload(self):
        before = self.sg.metric("sandgate_config_reloads_total", result="ok") or 0
        os.kill(self.sg.proc.pid, signal.SIGHUP)
        wait_until(lambda: (self.sg.metric("sandgate_config_reloads_total", result="ok") or 0)
                   > before, 10, interval=0.05, what="the reload")

    def get(self, s, host, path, task="t", token=TOKEN):
        s.sendall(("GET http://%s%s HTTP/1.1\r\nHost: %s\r\n%s\r\n"
                   % (host, path, host, Sandgate.auth_header(task, token))).encode())
        status, headers, _ = read_response(s)
        return status, headers

    def tunnel(self, host):
        s = self.sg.connect()
        s.sendall(("CONNECT %s:7000 HTTP/1.1\r\nHost: %s:7000\r\n%s\r\n"
                   % (host, host, Sandgate.auth_header("t", TOKEN))).encode())
        status, _, rest = read_response_head(s)
        self.assertEqual(status, 200)
        self.assertEqual(rest, b"")
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
        s.settimeout(seconds)
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                if not s.recv(65536):
                    return True
        except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False

    def test_reload_revokes_what_it_no_longer_allows(self):
        forward = self.sg.connect()
        self.assertEqual(self.get(forward, "a.test", "/echo/before")[0], 200)
        removed = self.tunnel("tunnel.test")
        kept = self.tunnel("keep.test")
        self.assertTrue(self.echoes(removed, b"ping-1"))
        self.assertTrue(self.echoes(kept, b"ping-2"))
        intercepted = self.sg.tls_tunnel("api.test", "t", TOKEN, self.ca_out)
        intercepted.sendall(b"GET /echo/inside HTTP/1.1\r\nHost: api.test\r\n\r\n")
        status, headers, rest = read_response_head(intercepted)
        self.assertEqual(status, 200)
        gone = self.sg.connect()
        self.assertEqual(self.get(gone, "a.test", "/echo/gone", "gone", GONE_TOKEN)[0], 200)

        self.write(["keep.test"])
        start = time.monotonic()
        self.reload()

        # During the default revoke_grace (2 s) a revoked tunnel still carries what is under way;
        # once it is up, the open tunnels the policy no longer allows end.
        self.assertTrue(self.echoes(removed, b"ping-in-grace"))
        self.assertTrue(self.ended_within(removed, 5), "a revoked tunnel stayed open")
        self.assertGreaterEqual(time.monotonic() - start, 2)
        self.assertTrue(self.ended_within(intercepted, 3),
                        "a revoked intercepted connection stayed open")
        self.assertLess(time.monotonic() - start, 5)
        # The next request on a keep-alive connection is decided under the new policy.
        status, headers = self.get(forward, "a.test", "/echo/after")
        self.assertEqual((status, headers.get("x-sandgate-reason")), (403, "no_matching_rule"))
        self.assertNotIn("/echo/after", [r["path"] for r in self.http.requests])
        # A task the reload removed: its connection's next request is refused.
        status, headers = self.get(gone, "a.test", "/echo/gone-after", "gone", GONE_TOKEN)
        self.assertEqual((status, headers.get("x-sandgate-reason")), (403, "revoked_by_reload"))
        # What is still allowed keeps working.
        self.assertTrue(self.echoes(kept, b"ping-3"))
        for s in (forward, removed, kept, intercepted, gone):
            s.close()

        rec = self.sg.wait_audit(host="tunnel.test", reason="revoked_by_reload")
        self.assertIn("no longer allows", rec["error"])
        self.sg.wait_audit(host="api.test", reason="revoked_by_reload")
        self.sg.wait_audit(task="gone", reason="revoked_by_reload", status=403)
        counted = sum(float(line.rsplit(" ", 1)[1]) for line in self.sg.metrics().splitlines()
                      if line.startswith("sandgate_requests_total{")
                      and 'reason="revoked_by_reload"' in line)
        self.assertGreaterEqual(counted, 3)


    def test_zero_grace_closes_at_once(self):
        removed = self.tunnel("tunnel.test")
        self.assertTrue(self.echoes(removed, b"ping"))
        self.write(["a.test", "keep.test", "api.test"], grace="0s")
        self.reload()
        start = time.monotonic()
        self.assertTrue(self.ended_within(removed, 1.5), "a revoked tunnel stayed open")
        self.assertLess(time.monotonic() - start, 1.5)  # the 2 s default grace did not apply
        removed.close()
        rec = self.sg.wait_audit(host="tunnel.test", reason="revoked_by_reload")
        self.assertIn("no longer allows", rec["error"])

    def test_a_reload_that_allows_it_again_in_the_grace_keeps_it(self):
        tunnel = self.tunnel("tunnel.test")
        self.assertTrue(self.echoes(tunnel, b"ping-1"))
        self.write(["a.test", "keep.test", "api.test"])  # refused, with the 2 s default grace
        self.reload()
        self.write(["a.test", "tunnel.test", "keep.test", "api.test"])  # allowed again
        self.reload()
        time.sleep(3.5)  # past the grace and the next housekeeping tick
        self.assertTrue(self.echoes(tunnel, b"ping-2"), "a tunnel allowed again was closed")
        tunnel.close()
        rec = self.sg.wait_audit(host="tunnel.test")
        self.assertNotEqual(rec.get("reason"), "revoked_by_reload", rec)


if __name__ == "__main__":
    unittest.main()
