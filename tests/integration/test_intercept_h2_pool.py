"""HTTP/2 upstream pooling (issue #40): the upstream leg of an intercepted h2 connection is reused
by a later client connection of the same task, target and credential, and by nothing else.

The upstream (support/h2_upstream.py) is hostile in the way that matters here: it records which
of its TLS connections each request arrived on, so a request of one task carried on a connection
dialled for another task's credential would be seen. sandgate runs one worker thread, so that
consecutive client connections meet the same worker's pool; each next connection starts only
after the previous CONNECT's audit line, which sandgate writes after the upstream went back to
the pool.
"""

import os
import ssl
import unittest

import h2_upstream  # noqa: F401  (makes python3-h2 importable)
from pki import test_pki
from sandgate_fixture import Sandgate, wait_until
from test_intercept_h2 import exchange, h2_client, req

TOKENS = {"alpha": "alph4-tok3n", "beta": "b3ta-tok3n"}
SECRETS = {"alpha": "sk-alpha-0123456789abcdef", "beta": "sk-beta-fedcba9876543210"}


class H2UpstreamPoolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.up = h2_upstream.H2Upstream(cls.pki)
        sg = Sandgate({}, [], threads=1)
        creds, policies, tasks = {}, {}, []
        for task in ("alpha", "beta"):
            creds[task] = {"source": {"file": sg.secret_file(task, SECRETS[task])},
                           "hosts": ["api.test"],
                           "inject": {"header": "Authorization", "value": "Bearer {secret}"}}
            policies[task] = {"allow": [{"host": "api.test", "cidrs": ["127.0.0.0/8"],
                                         "credential": task}]}
            tasks.append({"name": task, "policy": task, "token": TOKENS[task]})
        cls.ca_out = os.path.join(sg.dir, "sandgate-ca.pem")
        sg.config = sg.make_config(
            policies, tasks, resolve={"api.test": "127.0.0.1:%d" % cls.up.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        sg.write_config(sg.config)
        sg.start()
        cls.sg = sg
        cls.connects = 0

    @classmethod
    def tearDownClass(cls):
        cls.sg.stop()
        cls.sg.cleanup()
        cls.up.close()

    def one_connection(self, task, path):
        """One client connection of `task` with one request to `path`, closed once answered;
        returns after sandgate has finished the connection (its CONNECT audit line). Returns
        the upstream's record of the request (with `conn`, the connection it came on)."""
        s = self.sg.connect(timeout=10)
        s.sendall(("CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n%s\r\n" %
                   self.sg.auth_header(task, TOKENS[task])).encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 4096:
            chunk = s.recv(1)
            if not chunk:
                break
            head += chunk
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        ctx = ssl.create_default_context(cafile=self.ca_out)
        ctx.set_alpn_protocols(["h2"])
        tls = ctx.wrap_socket(s, server_hostname="api.test")
        self.assertEqual(tls.selected_alpn_protocol(), "h2")
        conn = h2_client(tls)
        res = exchange(tls, conn, [req(path)])
        conn.close_connection()
        tls.sendall(conn.data_to_send())
        tls.close()
        (r,) = res.values()
        self.assertEqual(dict(r["headers"] or [])[":status"], "200", r)
        type(self).connects += 1
        wait_until(lambda: len([a for a in self.sg.audit() if a.get("method") == "CONNECT"]) >=
                   type(self).connects, 10, what="the CONNECT's audit line")
        seen = [q for q in self.up.requests if dict(q["headers"]).get(":path") == path]
        self.assertEqual(len(seen), 1)
        return seen[0]

    @staticmethod
    def auth(seen):
        return [v for k, v in seen["headers"] if k == "authorization"]

    def test_tasks_never_share_an_upstream_connection(self):
        a1 = self.one_connection("alpha", "/pool/alpha-1")
        b1 = self.one_connection("beta", "/pool/beta-1")
        a2 = self.one_connection("alpha", "/pool/alpha-2")
        b2 = self.one_connection("beta", "/pool/beta-2")
        # Each task's credential went out, once, on its own task's connection only.
        for seen, task in ((a1, "alpha"), (a2, "alpha"), (b1, "beta"), (b2, "beta")):
            self.assertEqual(self.auth(seen), ["Bearer " + SECRETS[task]])
        self.assertNotEqual(a1["conn"], b1["conn"])
        self.assertNotEqual(a2["conn"], b2["conn"])
        alpha = {a1["conn"], a2["conn"]}
        beta = {b1["conn"], b2["conn"]}
        self.assertFalse(alpha & beta, (alpha, beta))
        # And each task's later connection reused its own upstream connection (pooled).
        self.assertEqual(a1["conn"], a2["conn"])
        self.assertEqual(b1["conn"], b2["conn"])

    def test_a_connection_whose_upstream_sent_goaway_is_not_reused(self):
        first = self.one_connection("alpha", "/pool/goaway")
        after = self.one_connection("alpha", "/pool/after-goaway")
        self.assertNotEqual(first["conn"], after["conn"])
        again = self.one_connection("alpha", "/pool/after-goaway-2")
        self.assertEqual(after["conn"], again["conn"])  # the new one is pooled in its turn


if __name__ == "__main__":
    unittest.main()
