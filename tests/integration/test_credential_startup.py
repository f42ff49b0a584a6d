"""Credential sources at start-up: one that cannot be loaded stops `sandgate serve` with an error
naming it, unless it is marked `optional`; then serve starts, and the requests that need it fail
closed (`502 credential_unavailable`) without reaching the upstream, until it can be loaded.
"""

import os
import unittest

from clients import curl
from sandgate_fixture import Sandgate, wait_until
from upstreams import HttpUpstream

TOKEN = "tok-startup"
SECRET = "startupsecret-0123456789abcdefghij"


class CredentialStartupTest(unittest.TestCase):
    def setUp(self):
        self.up = HttpUpstream()
        self.sg = None

    def tearDown(self):
        if self.sg:
            self.sg.cleanup()
        self.up.close()

    def serve(self, optional):
        self.sg = Sandgate({}, [])
        self.secret_path = os.path.join(self.sg.dir, "not-there-yet.key")
        cred = {"source": {"file": self.secret_path}, "hosts": ["plain.test"],
                "allow_plaintext": True, "inject": {"header": "X-Api-Key", "value": "{secret}"}}
        if optional:
            cred["optional"] = True
        rule = {"host": "plain.test", "ports": [80], "cidrs": ["127.0.0.0/8"],
                "credential": "late"}
        self.sg.config = self.sg.make_config(
            {"web": {"allow": [rule]}}, [{"name": "demo", "policy": "web", "token": TOKEN}],
            resolve={"plain.test": "127.0.0.1:%d" % self.up.port},
            extra={"credentials": {"late": cred}})
        self.sg.write_config(self.sg.config)
        return self.sg.start()

    def test_missing_source_stops_serve(self):
        with self.assertRaises(AssertionError) as caught:
            self.serve(optional=False)
        self.assertIn("sandgate exited", str(caught.exception))
        self.assertNotEqual(self.sg.proc.returncode, 0)
        self.assertIn(self.secret_path, self.sg.stderr())
        self.assertIn("late", self.sg.stderr())
        self.assertFalse(os.path.exists(self.sg.ready_path))

    def test_missing_optional_source_fails_its_requests_closed(self):
        self.serve(optional=True)
        proxy = self.sg.proxy_url("demo", TOKEN)
        r = curl("http://plain.test/echo/early", proxy=proxy)
        self.assertEqual(r.status, 502, r)
        self.assertIn(("x-sandgate-reason", "credential_unavailable"), r.headers)
        self.assertEqual(self.up.requests, [])
        self.sg.wait_audit(path="/echo/early", reason="credential_unavailable", credential="late")
        # Once the file appears, the next request carries it (no restart).
        self.sg.secret_file("late", SECRET)
        os.rename(os.path.join(self.sg.dir, "secret-late"), self.secret_path)

        def injected():
            r = curl("http://plain.test/echo/late", proxy=proxy)
            return r if r.status == 200 else None
        wait_until(injected, 10, interval=0.2, what="the late secret to be loaded")
        got = [v for req in self.up.requests for k, v in req["headers"]
               if k.lower() == "x-api-key"]
        self.assertEqual(set(got), {SECRET})


if __name__ == "__main__":
    unittest.main()
