"""on_unknown: ask inside an intercepted TLS tunnel (issue #43): a request that the task's policy
refuses only for want of a rule is held inside the tunnel until an operator answers from a
second process with `sandgate approve`; an approved one goes upstream over verified TLS without
the credential the host's rule injects, a denied one gets 403 approval_denied inside the tunnel
and never reaches the upstream. The upstream is the tests' HTTPS stand-in pinned by `resolve:`.
"""

import concurrent.futures
import http.client
import os
import subprocess
import unittest

from pki import test_pki
from sandgate_fixture import Sandgate, binary, wait_until
from upstreams import HttpUpstream

TOKEN = "tok-ask-tls"
SECRET = "sk-asktlssecret-0123456789abcdef"


class AskInterceptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.sg = Sandgate({}, [], threads=2)
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        creds = {"api": {"source": {"file": cls.sg.secret_file("api-tls", SECRET)},
                         "hosts": ["api.test"],
                         "inject": {"header": "Authorization", "value": "Bearer {secret}"}}}
        # GET is allowed (with the credential, so the tunnel is intercepted); POST has no rule.
        policies = {"agent": {"allow": [{"host": "api.test", "cidrs": ["127.0.0.0/8"],
                                         "methods": ["GET"], "credential": "api"}]}}
        cls.sg.config = cls.sg.make_config(
            policies,
            [{"name": "asker", "policy": "agent", "token": TOKEN, "on_unknown": "ask",
              "ask": {"timeout": "30s"}}],
            resolve={"api.test": "127.0.0.1:%d" % cls.https.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.config["listen"]["admin"] = cls.sg.admin_path
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)

    @classmethod
    def tearDownClass(cls):
        try:
            for q in cls.questions():  # whatever a failed test left waiting
                cls.approve("deny", q[0])
        finally:
            cls.pool.shutdown(wait=True)
            cls.sg.cleanup()
            cls.https.close()

    @classmethod
    def approve(cls, *args):
        return subprocess.run([binary(), "approve", "--config", cls.sg.config_path, *args],
                              capture_output=True, text=True, timeout=30)

    @classmethod
    def questions(cls):
        p = cls.approve("list")
        assert p.returncode == 0, p.stderr
        return [line.split("\t") for line in p.stdout.splitlines()]

    def question_for(self, request):
        def find():
            for q in self.questions():
                if q[2] == request:
                    return q
            return None
        return wait_until(find, 10, interval=0.05, what="question %s" % request)

    def post(self, path):
        """POST `path` to api.test inside an intercepted tunnel; (status, reason header)."""
        conn = http.client.HTTPSConnection("api.test", 443, timeout=45)
        conn.sock = self.sg.tls_tunnel("api.test", "asker", TOKEN, self.ca_out)
        try:
            conn.request("POST", path, body=b"{}", headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            return r.status, r.getheader("x-sandgate-reason")
        finally:
            conn.close()

    def test_allowed_inside_tls_goes_upstream_without_the_credential(self):
        held = self.pool.submit(self.post, "/echo/ask-tls-allowed")
        q = self.question_for("POST api.test:443/echo/ask-tls-allowed")
        self.assertEqual(self.https.requests_to("/echo/ask-tls-allowed"), [])  # held, not sent
        self.assertEqual(self.approve("allow", q[0], "--once").returncode, 0)
        self.assertEqual(held.result(timeout=45)[0], 200)
        (seen,) = self.https.requests_to("/echo/ask-tls-allowed")
        self.assertEqual([v for k, v in seen["headers"] if k.lower() == "authorization"], [])
        rec = self.sg.wait_audit(path="/echo/ask-tls-allowed")
        self.assertEqual((rec["verdict"], rec["reason"]), ("allow", "approved"))
        self.assertEqual(rec["approval"]["answer"], "once")
        self.assertFalse(rec["injected"])

    def test_denied_inside_tls_is_refused_and_never_sent(self):
        held = self.pool.submit(self.post, "/echo/ask-tls-denied")
        q = self.question_for("POST api.test:443/echo/ask-tls-denied")
        self.assertEqual(self.approve("deny", q[0]).returncode, 0)
        self.assertEqual(held.result(timeout=45), (403, "approval_denied"))
        self.assertEqual(self.https.requests_to("/echo/ask-tls-denied"), [])
        rec = self.sg.wait_audit(path="/echo/ask-tls-denied")
        self.assertEqual(rec["reason"], "approval_denied")


if __name__ == "__main__":
    unittest.main()
