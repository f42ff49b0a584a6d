"""CONNECT tunnels: policy, address vetting in every loopback spelling, early bytes, SNI,
half-close, idle timeout; curl, Python ssl and Node as clients.

Upstreams are on 127.0.0.1. `resolve:` maps api.test/other.test/echo.test to them (with a
port where the test needs port 443 as seen by policy), and only rules that say
`cidrs: [127.0.0.0/8]` may reach them: that is what this file tests.
"""

import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import unittest

from clients import curl
from pki import test_pki
from sandgate_fixture import Sandgate, read_all, read_response_head
from upstreams import HttpUpstream, TcpEcho

TOKEN = "t0ken"


class ConnectTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.echo = TcpEcho()
        p = cls.echo.port
        hosts = ["127.0.0.1", "0.0.0.0", "[::1]", "[::ffff:127.0.0.1]", "loop.test"]
        strict = [{"host": h, "ports": [p]} for h in hosts]
        opened = [{"host": h, "ports": [p], "cidrs": ["127.0.0.0/8"]} for h in hosts]
        tls = [{"host": h, "cidrs": ["127.0.0.0/8"]} for h in ("api.test", "other.test")]
        policies = {
            "strict": {"allow": strict + [{"host": "api.test"}]},
            "open": {"allow": opened + tls + [
                {"host": "echo.test", "ports": [p, 443], "cidrs": ["127.0.0.0/8"]}]},
        }
        cls.sg = Sandgate(
            policies,
            [{"name": "strict", "policy": "strict", "token": TOKEN},
             {"name": "open", "policy": "open", "token": TOKEN},
             {"name": "idle", "policy": "open", "token": TOKEN,
              "limits": {"idle_timeout": "1s"}}],
            resolve={"loop.test": "127.0.0.1",
                     "api.test": "127.0.0.1:%d" % cls.https.port,
                     "other.test": "127.0.0.1:%d" % cls.https.port,
                     "echo.test": "127.0.0.1:%d" % p}).start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.https.close()
        cls.echo.close()

    def open_tunnel(self, target, task="open", early=b""):
        """CONNECT; returns (socket, status, headers, bytes after the head)."""
        s = self.sg.connect()
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n" % (target, target) +
                   Sandgate.auth_header(task, TOKEN) + "\r\n").encode() + early)
        status, headers, rest = read_response_head(s)
        return s, status, headers, rest

    # --- policy and address vetting -------------------------------------------------------

    def test_address_forms_denied_without_cidrs(self):
        p = self.echo.port
        dialled = self.echo.connections
        for target in ("127.0.0.1:%d" % p, "2130706433:%d" % p, "[::1]:%d" % p,
                       "[::ffff:127.0.0.1]:%d" % p, "0.0.0.0:%d" % p, "loop.test:%d" % p):
            s, status, headers, _ = self.open_tunnel(target, task="strict")
            s.close()
            with self.subTest(target=target):
                self.assertEqual((status, headers.get("x-sandgate-reason")),
                                 (403, "address_denied"))
        self.assertEqual(self.echo.connections, dialled, "a denied address was dialled")

    def test_address_forms_allowed_with_cidrs(self):
        p = self.echo.port
        for target in ("127.0.0.1:%d" % p, "2130706433:%d" % p, "[::ffff:127.0.0.1]:%d" % p,
                       "loop.test:%d" % p):
            with self.subTest(target=target):
                s, status, _, rest = self.open_tunnel(target)
                self.assertEqual(status, 200)
                s.sendall(b"ping")
                got = rest
                while len(got) < 4:
                    got += s.recv(100)
                self.assertEqual(got, b"ping")
                s.close()
        # 0.0.0.0 and ::1 are outside 127.0.0.0/8: still refused.
        for target in ("0.0.0.0:%d" % p, "[::1]:%d" % p):
            s, status, headers, _ = self.open_tunnel(target)
            s.close()
            self.assertEqual((status, headers.get("x-sandgate-reason")), (403, "address_denied"))

    def test_denied_connect_is_closed_without_reading_early_bytes(self):
        s, status, headers, rest = self.open_tunnel("evil.test:443", early=b"\x16\x03\x01junk")
        self.assertEqual((status, headers.get("x-sandgate-reason")), (403, "no_matching_rule"))
        self.assertEqual(headers.get("connection"), "close")
        read_all(s, 5)  # EOF (or reset): the connection ends
        s.close()
        self.sg.wait_audit(kind="refusal", host="evil.test", method="CONNECT", status=403)

    def test_curl_https_through_tunnel(self):
        r = curl("https://api.test/echo/tls", "--cacert", self.pki.ca_cert,
                 proxy=self.sg.proxy_url("open", TOKEN))
        self.assertEqual(r.status, 200, r.stderr)
        self.assertEqual(r.connect_status, 200)
        self.assertEqual(json.loads(r.body)["path"], "/echo/tls")
        rec = self.sg.wait_audit(kind="tunnel", host="api.test", task="open")
        self.assertEqual(rec["port"], 443)
        self.assertGreater(rec["bytes_up"], 0)
        self.assertGreater(rec["bytes_down"], 0)

    def test_curl_https_denied(self):
        r = curl("https://evil.test/", "--cacert", self.pki.ca_cert,
                 proxy=self.sg.proxy_url("open", TOKEN))
        self.assertEqual(r.connect_status, 403, r.stderr)
        self.assertEqual(r.header("x-sandgate-reason"), "no_matching_rule")

    # --- bytes on the tunnel -------------------------------------------------------------

    def test_early_bytes_are_forwarded_first(self):
        s, status, _, rest = self.open_tunnel("echo.test:%d" % self.echo.port,
                                              early=b"early-bytes|")
        self.assertEqual(status, 200)
        s.sendall(b"later")
        got = rest
        while len(got) < len(b"early-bytes|later"):
            chunk = s.recv(100)
            if not chunk:
                break
            got += chunk
        s.close()
        self.assertEqual(got, b"early-bytes|later")

    def test_half_close_is_propagated(self):
        s, status, _, rest = self.open_tunnel("echo.test:%d" % self.echo.port)
        self.assertEqual(status, 200)
        s.sendall(b"abc")
        s.shutdown(socket.SHUT_WR)
        got = rest + read_all(s, 10)
        s.close()
        # The upstream saw our EOF (it says so) and its own EOF reached us (read_all ended).
        self.assertEqual(got, b"abcEOF-SEEN")

    def test_idle_timeout_ends_tunnel(self):
        s, status, _, _ = self.open_tunnel("echo.test:%d" % self.echo.port, task="idle")
        self.assertEqual(status, 200)
        s.settimeout(10)
        self.assertEqual(s.recv(100), b"")  # closed by sandgate after ~1 s of silence
        s.close()
        self.sg.wait_audit(kind="tunnel", task="idle", reason="idle_timeout")

    # --- SNI on port 443 -------------------------------------------------------------------

    def tls_over_tunnel(self, connect_host, sni, task="open"):
        s, status, _, rest = self.open_tunnel(connect_host + ":443", task=task)
        self.assertEqual(status, 200)
        self.assertEqual(rest, b"")
        ctx = ssl.create_default_context(cafile=self.pki.ca_cert)
        if sni is None:
            ctx.check_hostname = False
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.sendall(b"GET /echo/sni HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = t.recv(65536)
            if not chunk:
                break
            data += chunk
        t.close()
        return data

    def test_sni_matching_connect_host(self):
        self.assertIn(b"/echo/sni", self.tls_over_tunnel("api.test", "api.test"))

    def test_sni_absent_is_allowed(self):
        self.assertIn(b"/echo/sni", self.tls_over_tunnel("api.test", None))

    def test_sni_mismatch_closes(self):
        # other.test is allowed too, and the certificate is valid for it: only the check
        # that the SNI equals the CONNECT host stops this.
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            self.tls_over_tunnel("api.test", "other.test")
        rec = self.sg.wait_audit(kind="tunnel", host="api.test", reason="sni_mismatch")
        self.assertEqual(rec["verdict"], "deny")

    def test_non_tls_on_443_is_closed(self):
        s, status, _, _ = self.open_tunnel("echo.test:443")
        self.assertEqual(status, 200)
        s.sendall(b"GET / HTTP/1.1\r\nHost: echo.test\r\n\r\n")
        self.assertEqual(read_all(s, 10), b"")
        s.close()
        self.sg.wait_audit(kind="tunnel", host="echo.test", port=443, reason="not_tls")

    # --- Node ------------------------------------------------------------------------------

    @unittest.skipUnless(shutil.which("node"), "node is not installed")
    def test_node_https_through_connect(self):
        script = r"""
const http = require('http'), https = require('https'), tls = require('tls'), fs = require('fs');
const [port, auth, host, ca] = process.argv.slice(2);
const req = http.request({host: '127.0.0.1', port, method: 'CONNECT', path: host + ':443',
  headers: {'Proxy-Authorization': 'Basic ' + Buffer.from(auth).toString('base64')}});
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.log('CONNECT ' + res.statusCode); process.exit(3); }
  // A CONNECT agent: every connection it makes is TLS over the tunnel's socket.
  const agent = new https.Agent({keepAlive: false});
  agent.createConnection = () => tls.connect({socket, servername: host, ca: fs.readFileSync(ca)});
  const get = https.request({host, path: '/echo/node', agent},
    (r) => { let d = ''; r.on('data', (c) => d += c);
             r.on('end', () => { console.log(r.statusCode + ' ' + d); process.exit(0); }); });
  get.on('error', (e) => { console.error(e); process.exit(4); });
  get.end();
});
req.on('error', (e) => { console.error(e); process.exit(5); });
req.setTimeout(10000, () => { console.error('timeout'); process.exit(6); });
req.end();
"""
        with tempfile.NamedTemporaryFile("w", suffix=".js", delete=False) as f:
            f.write(script)
        try:
            p = subprocess.run(["node", f.name, str(self.sg.proxy_port), "open:" + TOKEN,
                                "api.test", self.pki.ca_cert],
                               capture_output=True, timeout=30)
        finally:
            os.unlink(f.name)
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 0, out + p.stderr.decode())
        self.assertTrue(out.startswith("200 "), out)
        self.assertEqual(json.loads(out[4:])["path"], "/echo/node")


if __name__ == "__main__":
    unittest.main()
