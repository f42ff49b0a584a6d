"""Transparent capture in `sandgate run` through a parent proxy (issue #44): a program in the
sandbox that ignores HTTP_PROXY reaches an intercepted HTTPS upstream (credential injected,
echo scrubbed) and a plain HTTP one, and sandgate's upstream leg goes through squid with Basic
auth (started here on loopback). The parent's password reaches neither the sandbox nor the
upstream. Every connection is to loopback or inside the sandbox's own namespace."""

import json
import os
import shutil
import tempfile
import unittest

import artifacts
from parents import Squid
from pki import test_pki
from run_support import NO_PROXY_ENV, namespaces_refused, run_bounded
from sandgate_fixture import binary
from upstreams import HttpUpstream

SECRET = "sk-parent-transparent-0123456789"
PARENT_USER = "sgrun"
PARENT_PASSWORD = "runparentpw-5e8d2c7a1f"


class ParentTransparentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.http = HttpUpstream()
        cls.squid = Squid(users={PARENT_USER: PARENT_PASSWORD})
        cls.dir = tempfile.mkdtemp(prefix="sandgate-parent-run-")
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.dir, 0o755)
        os.chmod(cls.workspace, 0o777)
        cls.secret_file = os.path.join(cls.dir, "api.key")
        with open(cls.secret_file, "w") as f:
            f.write(SECRET + "\n")
        cls.parent_file = os.path.join(cls.dir, "parent.key")
        with open(cls.parent_file, "w") as f:
            f.write("%s:%s\n" % (PARENT_USER, PARENT_PASSWORD))
        artifacts.register_secret("parent-run-api", SECRET)
        artifacts.register_secret("parent-run-password", PARENT_PASSWORD)
        cls.ca_out = os.path.join(cls.workspace, "sandgate-ca.pem")
        lo = {"cidrs": ["127.0.0.0/8"]}
        cfg = {
            "credentials": {
                "api": {"source": {"file": cls.secret_file}, "hosts": ["api.test"],
                        "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
                "corp": {"source": {"file": cls.parent_file}}},
            "upstream_proxies": [{"name": "corp", "credential": "corp",
                                  "url": "http://127.0.0.1:%d" % cls.squid.port}],
            "upstream_proxy_default": ["corp"],
            "policies": {"p": {"allow": [dict(lo, host="api.test", credential="api"),
                                         dict(lo, host="web.test", ports=[80])]}},
            "tasks": [{"name": "t", "policy": "p"}],
            "resolve": {"api.test": "127.0.0.1:%d" % cls.https.port,
                        "web.test": "127.0.0.1:%d" % cls.http.port},
            "tls": {"upstream_ca": cls.pki.ca_cert},
            "ca_cert_out": cls.ca_out,
        }
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        with open(cls.config, "w") as f:
            json.dump(cfg, f)
        probe = cls.sandgate("--", "true")
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            cls.close()
            raise unittest.SkipTest("this host refuses namespaces or routes: " +
                                    probe.stderr.strip())
        assert probe.returncode == 0, probe.stderr

    @classmethod
    def close(cls):
        cls.https.close()
        cls.http.close()
        cls.squid.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls.close()

    @classmethod
    def sandgate(cls, *args, timeout=90):
        cmd = [binary(), "run", "--audit-stderr", "--config", cls.config, "--workspace",
               cls.workspace, *args]
        r = run_bounded(cmd, timeout)
        artifacts.record("run", "parent-transparent-stdout", r.stdout)
        artifacts.record("log", "parent-transparent-stderr", r.stderr)
        return r

    def sh(self, script):
        r = self.sandgate("--", "sh", "-c", script)
        audit = [json.loads(l) for l in r.stderr.splitlines() if l.startswith("{")]
        return r, audit

    def test_captured_https_and_http_go_through_the_parent(self):
        r, audit = self.sh(NO_PROXY_ENV + "curl -sS --noproxy '*' --cacert %s "
                           "https://api.test/echo/run-parent; echo; "
                           "curl -sS --noproxy '*' http://web.test/bytes?n=5" % self.ca_out)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        seen = self.https.requests_to("/echo/run-parent")
        self.assertEqual(len(seen), 1, r.stderr)
        got = {k.lower(): v for k, v in seen[0]["headers"]}
        self.assertEqual(got["authorization"], "Bearer " + SECRET)
        self.assertNotIn("proxy-authorization", got)
        self.assertNotIn(SECRET, r.stdout)
        self.assertTrue(r.stdout.rstrip().endswith("xxxxx"), r.stdout)
        routed = [a for a in audit if a["host"] in ("api.test", "web.test") and
                  a["kind"] in ("intercept", "forward")]
        self.assertEqual({a["host"] for a in routed}, {"api.test", "web.test"}, audit)
        for a in routed:
            self.assertEqual(a["mode"], "transparent")
            self.assertEqual(a["parent"], "corp")
        self.assertNotIn(PARENT_PASSWORD, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
