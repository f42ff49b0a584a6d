"""Node's built-in `http2` client through interception (issue #40): a CONNECT tunnel through
sandgate (Node's `http` module), TLS over it offering only h2 (`tls`), and `http2.connect` on
that socket, to the HTTP/2-only upstream of support/h2_upstream.py. Two streams multiplexed on
the one connection: both legs speak h2, the upstream sees the credential once and never the
client's own Authorization, and the secret the upstream echoes (header, DATA split across two
frames, trailer) reaches Node only as the redaction marker.
"""

import base64
import json
import shutil
import subprocess
import unittest

import artifacts
import h2_upstream
from clients import clean_env
from pki import test_pki

TOKEN = "h2n0detok"
SECRET = "sk-h2nodesecret-0123456789abcdef"

NODE_CLIENT = r"""
const http = require('http'), http2 = require('http2'), tls = require('tls');
const [proxyPort, proxyAuth, host, ...paths] = process.argv.slice(1);
setTimeout(() => { console.error('timeout'); process.exit(3); }, 20000);
const req = http.request({host: '127.0.0.1', port: Number(proxyPort), method: 'CONNECT',
                          path: host + ':443',
                          headers: {'Host': host + ':443', 'Proxy-Authorization': 'Basic ' + proxyAuth}});
req.on('error', (e) => { console.error(String(e)); process.exit(2); });
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.error('CONNECT ' + res.statusCode); process.exit(2); }
  const sock = tls.connect({socket, servername: host, ALPNProtocols: ['h2']});
  sock.on('secureConnect', () => {
    const session = http2.connect('https://' + host, {createConnection: () => sock});
    session.on('error', (e) => { console.error(String(e)); process.exit(2); });
    const out = {alpn: sock.alpnProtocol, streams: {}};
    let left = paths.length;
    for (const path of paths) {  // all opened before any answer: multiplexed
      const r = {headers: null, trailers: null, body: ''};
      out.streams[path] = r;
      const s = session.request({':path': path, 'authorization': 'Bearer the-clients-own'});
      s.setEncoding('utf8');
      s.on('response', (h) => { r.headers = h; });
      s.on('trailers', (t) => { r.trailers = t; });
      s.on('data', (d) => { r.body += d; });
      s.on('end', () => {
        if (--left === 0) {
          process.stdout.write(JSON.stringify(out));
          session.close(() => process.exit(0));
        }
      });
      s.on('error', (e) => { console.error(path + ': ' + String(e)); process.exit(2); });
      s.end();
    }
  });
});
req.end();
"""


@unittest.skipUnless(shutil.which("node"), "node is not installed")
class InterceptH2NodeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.up = h2_upstream.H2Upstream(cls.pki)
        cls.sg, cls.ca_out = h2_upstream.intercepting_sandgate(cls.pki, cls.up.port, TOKEN, SECRET)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def node(self, *paths):
        auth = base64.b64encode(("demo:" + TOKEN).encode()).decode()
        env = clean_env(NODE_EXTRA_CA_CERTS=self.ca_out)
        p = subprocess.run(["node", "-e", NODE_CLIENT, str(self.sg.proxy_port), auth, "api.test"]
                           + list(paths), env=env, capture_output=True, timeout=40)
        artifacts.record("response", "node-h2", p.stdout + p.stderr)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return json.loads(p.stdout)

    def test_node_http2_on_both_legs_injects_once_and_scrubs(self):
        paths = ["/echo/node-h2-a", "/echo/node-h2-b"]
        out = self.node(*paths)
        self.assertEqual(out["alpn"], "h2")  # HTTP/2 to sandgate
        self.assertIn("h2", self.up.alpn_seen)  # and to the upstream
        self.assertNotIn(SECRET, json.dumps(out))
        for path in paths:
            r = out["streams"][path]
            self.assertEqual(r["headers"][":status"], 200)
            # The upstream echoed what it saw in a header, the body and a trailer: each is
            # the marker now, so the upstream saw the secret and Node never does.
            self.assertEqual(r["headers"]["x-echo-auth"], "Bearer [REDACTED:api]")
            self.assertEqual(r["body"], "auth=Bearer [REDACTED:api];")
            self.assertEqual(r["trailers"]["x-trailer-auth"], "Bearer [REDACTED:api]")
            seen = [q for q in self.up.requests if dict(q["headers"]).get(":path") == path]
            self.assertEqual(len(seen), 1)
            auths = [v for k, v in seen[0]["headers"] if k == "authorization"]
            self.assertEqual(auths, ["Bearer " + SECRET])  # once, over the client's own
            line = self.sg.wait_audit(path=path)
            self.assertEqual((line["verdict"], line["status"], line["kind"]),
                             ("allow", 200, "intercept"))


if __name__ == "__main__":
    unittest.main()
