"""Placeholders end to end with real clients against `sandgate serve`. The clients here are token
clients on serve's own listener: their placeholders come from the admin socket's token_env.
Each run (task_env) gets placeholders of its own, which token clients' requests never honour.

- A placeholder is honoured only where its credential is injected (the configured header,
  `Authorization: Basic`, the configured query parameter), on a request whose admitting rule
  names that credential: there injection replaces it with the secret. Anywhere else (User-Agent,
  Cookie, an X- header, a Basic token in another header, another query parameter), or on a
  request another rule of the same host admitted, it is refused (`403 placeholder_misplaced`),
  audited and counted as a possible exfiltration attempt, and nothing reaches the upstream.
- An upstream echoing the secret is answered to the client with the placeholder, also when the
  echo arrives split across two chunks.
- `git clone` with the placeholder as its password reaches the git server with the real secret.
- `inject: {query: key}` replaces the client's own `key` parameter with the secret, percent-
  encoded, and the echo of the query comes back with the placeholder.
- A secret the upstream stored and hands back on a connection that never carried it (another
  name of the same backend, whose rule names no credential) reaches the client as the
  placeholder: every response of a task is scrubbed for every secret it can reach, and every
  request of such a task asks for identity bodies.
- The placeholder sent to a host its credential does not name is refused
  (`403 credential_host_mismatch`), counted, audited and logged; nothing reaches the upstream.

api.test and other.test map to the HTTPS echo upstream, maps.test and split.test (GET /echo/v1/**
with the credential, /echo/public/** without) to others with certificates of their own, git.test to a git smart-HTTP server
that requires the real secret (runtime test CA, given to sandgate as tls.upstream_ca).
"""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import urllib.parse

import git_server
from clients import clean_env, curl
from pki import test_pki
from sandgate_fixture import Sandgate
from upstreams import HttpUpstream

TOKEN = "tok-placeholders"
TOKEN2 = "tok-placeholders-2"
API_SECRET = "sk-placeholdersecret-0123456789abcdefXYZ"
GIT_SECRET = "ghp_placeholdergitsecret0123456789abcdef"
MAPS_SECRET = "AIzaMapsSecret+/=&?%-0123456789abcdef"  # reserved characters in a query


def basic(user, password):
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


class InterceptPlaceholdersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.maps = HttpUpstream(cert=cls.pki.other_leaf("maps.test"))
        cls.split = HttpUpstream(cert=cls.pki.other_leaf("split.test"))
        cls.git = (git_server.GitHttpsServer(cls.pki, auth=("git", GIT_SECRET))
                   if git_server.available() else None)
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        rule = {"cidrs": ["127.0.0.0/8"]}
        creds = {
            "api": {"source": {"file": cls.sg.secret_file("ph-api", API_SECRET)},
                    "hosts": ["api.test", "split.test"], "placeholder": "API_KEY",
                    "inject": {"header": "Authorization", "value": "Bearer {secret}"}},
            "maps": {"source": {"file": cls.sg.secret_file("ph-maps", MAPS_SECRET)},
                     "hosts": ["maps.test"], "placeholder": "MAPS_KEY",
                     "inject": {"query": "key"}},
            "git": {"source": {"file": cls.sg.secret_file("ph-git", GIT_SECRET)},
                    "hosts": ["git.test"], "placeholder": "GIT_TOKEN",
                    "inject": {"basic": {"username": "git"}}},
        }
        policies = {"agent": {"allow": [
            dict(rule, host="api.test", credential="api"),
            dict(rule, host="git.test", credential="git"),
            dict(rule, host="maps.test", credential="maps"),
            dict(rule, host="other.test", inspect=True),  # intercepted, no credential of its own
            # One host, two rules: the credential only for what the first admits.
            dict(rule, host="split.test", methods=["GET"], paths=["/echo/v1/**"], credential="api"),
            dict(rule, host="split.test", paths=["/echo/public/**"]),
        ]}}
        resolve = {"api.test": "127.0.0.1:%d" % cls.https.port,
                   "split.test": "127.0.0.1:%d" % cls.split.port,
                   "other.test": "127.0.0.1:%d" % cls.https.port,
                   "maps.test": "127.0.0.1:%d" % cls.maps.port}
        if cls.git:
            resolve["git.test"] = "127.0.0.1:%d" % cls.git.port
        cfg = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN},
                       {"name": "demo2", "policy": "agent", "token": TOKEN2}],
            resolve=resolve,
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cfg["listen"]["admin"] = cls.sg.admin_path
        cls.sg.config = cfg
        cls.sg.write_config(cfg)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)
        env = cls.sg.token_env("demo")["env"]
        cls.api_ph, cls.git_ph, cls.maps_ph = env["API_KEY"], env["GIT_TOKEN"], env["MAPS_KEY"]

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.https.close()
        cls.maps.close()
        cls.split.close()
        if cls.git:
            cls.git.close()

    def get(self, url, *headers):
        args = ["--cacert", self.ca_out]
        for h in headers:
            args += ["-H", h]
        return curl(url, *args, proxy=self.proxy)

    def test_placeholders_keep_the_shape_of_the_secret_and_differ_per_task(self):
        for ph, secret, prefix in ((self.api_ph, API_SECRET, "sk-"),
                                   (self.git_ph, GIT_SECRET, "ghp_")):
            self.assertTrue(ph.startswith(prefix), ph)
            self.assertEqual(len(ph), len(secret))
            self.assertNotEqual(ph, secret)
        other = self.sg.token_env("demo2")["env"]
        self.assertNotEqual(other["API_KEY"], self.api_ph)
        self.assertNotEqual(other["GIT_TOKEN"], self.git_ph)

    def test_each_run_gets_placeholders_of_its_own_which_token_clients_do_not_honour(self):
        run1 = self.sg.task_env("demo")["env"]["API_KEY"]
        run2 = self.sg.task_env("demo")["env"]["API_KEY"]
        self.assertNotEqual(run1, run2)
        self.assertNotIn(self.api_ph, (run1, run2))
        self.assertEqual(self.sg.token_env("demo")["env"]["API_KEY"], self.api_ph)
        self.assertTrue(run1.startswith("sk-") and len(run1) == len(API_SECRET), run1)
        # A run's placeholder is no placeholder on a token client's connection: it is sent as
        # the bytes it is (the token clients' own would be refused there as misplaced).
        r = self.get("https://api.test/echo/run-ph", "User-Agent: agent/" + run1)
        self.assertEqual(r.status, 200, r)
        seen = self.https.requests_to("/echo/run-ph")
        self.assertEqual(len(seen), 1)
        got = dict((k.lower(), v) for k, v in seen[0]["headers"])
        self.assertEqual(got["user-agent"], "agent/" + run1)
        self.assertEqual(got["authorization"], "Bearer " + API_SECRET)  # injected as ever
        r = self.get("https://api.test/echo/token-ph", "User-Agent: agent/" + self.api_ph)
        self.assertEqual(r.status, 403, r)
        self.assertEqual(r.header("x-sandgate-reason"), "placeholder_misplaced")

    def test_a_stored_secret_read_back_where_none_was_sent_is_scrubbed(self):
        # api.test's requests carry the secret (injected); the upstream keeps what it got.
        r = self.get("https://api.test/echo/store-it")
        self.assertEqual(r.status, 200, r)
        # other.test is another name of the same backend, and its rule names no credential:
        # the request carries no secret, on a connection (a curl of its own) that never did.
        r = self.get("https://other.test/recall?h=Authorization")
        self.assertEqual(r.status, 200, r)
        self.assertNotIn(API_SECRET.encode(), r.body)
        self.assertEqual(r.body.decode(), "authorization=Bearer %s\n" % self.api_ph)
        self.assertEqual(r.header("x-recalled"), "Bearer " + self.api_ph)
        seen = self.https.requests_to("/recall?h=Authorization")[-1]
        got = dict((k.lower(), v) for k, v in seen["headers"])
        self.assertNotIn("authorization", got)
        self.assertEqual(got["accept-encoding"], "identity")  # asked for, though no secret went
        # A response such a request cannot have scrubbed is refused, not relayed.
        r = self.get("https://other.test/gzip-echo?coding=br", "Accept-Encoding: br")
        self.assertEqual(r.status, 502, r)
        self.assertEqual(r.header("x-sandgate-reason"), "response_not_scrubbable")
        r = self.get("https://other.test/gzip-echo", "Accept-Encoding: gzip")
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(r.header("content-encoding"))  # decoded on the way, then scrubbed
        self.assertIn("accept-encoding", r.body.decode().lower())

    def test_placeholder_where_the_credential_is_injected_is_replaced(self):
        # The client holds only the placeholder and puts it where the credential is injected:
        # the upstream gets the secret there; the echo comes back with the placeholder.
        before = self.sg.metric("sandgate_credential_injections_total", task="demo",
                                credential="api", result="ok", how="placeholder") or 0
        r = self.get("https://api.test/echo/ph-forms?x=1", "Authorization: Bearer " + self.api_ph)
        self.assertEqual(r.status, 200, r)
        seen = self.https.requests_to("/echo/ph-forms", ignore_query=True)
        self.assertEqual(len(seen), 1)
        got = dict((k.lower(), v) for k, v in seen[0]["headers"])
        self.assertEqual(got["authorization"], "Bearer " + API_SECRET)
        self.assertNotIn(self.api_ph, repr(seen[0]))
        # The client's view: the placeholder it sent, never the secret.
        echo = json.loads(r.body)
        echoed = dict((k.lower(), v) for k, v in echo["headers"])
        self.assertEqual(echoed["authorization"], "Bearer " + self.api_ph)
        self.assertNotIn(API_SECRET.encode(), r.body)
        self.sg.wait_audit(path="/echo/ph-forms", credential="api", injected=True)
        # Counted once, as the sandbox's placeholder going out as the secret.
        self.assertEqual(self.sg.metric("sandgate_credential_injections_total", task="demo",
                                        credential="api", result="ok", how="placeholder"),
                         before + 1)
        # The same through the configured query parameter of a query credential.
        r = self.get("https://maps.test/echo/maps-ph?key=%s&x=1" % self.maps_ph)
        self.assertEqual(r.status, 200, r)
        seen = [q for q in self.maps.requests if q["path"].startswith("/echo/maps-ph?")]
        self.assertEqual(urllib.parse.parse_qs(urllib.parse.urlsplit(seen[0]["path"]).query),
                         {"key": [MAPS_SECRET], "x": ["1"]})

    def assert_misplaced(self, r, upstream, before, path, credential="api"):
        """`r` was refused as a misplaced placeholder, and the upstream saw no request since
        `before` (its request count)."""
        self.assertEqual(r.status, 403, r)
        self.assertIn(("x-sandgate-reason", "placeholder_misplaced"), r.headers)
        self.assertIn(b"possible exfiltration attempt", r.body)
        self.assertEqual(upstream.requests[before:], [])
        for secret in (API_SECRET, MAPS_SECRET):
            self.assertNotIn(secret.encode(), r.body)
        rec = self.sg.wait_audit(path=path, verdict="deny", reason="placeholder_misplaced",
                                 credential=credential, status=403)
        self.assertIn("possible exfiltration attempt", rec["error"])
        return rec

    def test_placeholder_anywhere_else_is_refused(self):
        # The sandbox puts its placeholder where the host would store it (a user agent in a
        # log, a cookie, a header or parameter it reflects or keeps) to read the key back
        # later. None of these reaches the upstream, with the secret or at all.
        cases = [
            ("user-agent", ["User-Agent: agent/" + self.api_ph], "", "header User-Agent"),
            ("cookie", ["Cookie: session=" + self.api_ph], "", "header Cookie"),
            ("x-header", ["X-Api-Key: " + self.api_ph], "", "header X-Api-Key"),
            ("basic-elsewhere", ["X-Basic: " + basic("user", self.api_ph)], "",
             "header X-Basic"),
            ("query", [], "?api_key=" + self.api_ph, "query parameter api_key"),
            # Next to the placeholder in its right place: still refused, whole.
            ("both", ["Authorization: Bearer " + self.api_ph, "X-Note: " + self.api_ph], "",
             "header X-Note"),
        ]
        before_requests = self.sg.metric("sandgate_requests_total", task="demo",
                                         reason="placeholder_misplaced") or 0
        before_refused = self.sg.metric("sandgate_credential_injections_total", task="demo",
                                        credential="api", result="placeholder_misplaced",
                                        how="placeholder") or 0
        for name, headers, query, where in cases:
            with self.subTest(name):
                path = "/echo/misplaced-" + name
                before = len(self.https.requests)
                r = self.get("https://api.test" + path + query, *headers)
                rec = self.assert_misplaced(r, self.https, before, path)
                self.assertIn(where, rec["error"])
        # A query credential's placeholder in a parameter other than the configured one.
        before = len(self.maps.requests)
        r = self.get("https://maps.test/echo/misplaced-maps?key=mine&note=" + self.maps_ph)
        self.assert_misplaced(r, self.maps, before, "/echo/misplaced-maps", credential="maps")
        self.assertGreaterEqual(self.sg.metric("sandgate_requests_total", task="demo",
                                               reason="placeholder_misplaced"),
                                before_requests + len(cases) + 1)
        self.assertGreaterEqual(
            self.sg.metric("sandgate_credential_injections_total", task="demo",
                           credential="api", result="placeholder_misplaced", how="placeholder"),
            before_refused + len(cases))
        self.assertIn("task demo: possible exfiltration attempt refused", self.sg.stderr())

    def test_a_rule_without_the_credential_gets_no_secret(self):
        # GET /echo/v1/** carries the credential, /echo/public/** on the same host does not: a
        # placeholder on a request the second admits is refused, whatever its place.
        before = len(self.split.requests)
        s = self.get("https://split.test/echo/public/x", "Authorization: Bearer " + self.api_ph)
        # And the case: a POST with a body, as an SDK would send it.
        r = curl("https://split.test/echo/public/x", "--cacert", self.ca_out, "-X", "POST",
                 "-d", "x=1", "-H", "Authorization: Bearer " + self.api_ph, proxy=self.proxy)
        for resp in (s, r):
            self.assertEqual(resp.status, 403, resp)
            self.assertIn(("x-sandgate-reason", "placeholder_misplaced"), resp.headers)
            self.assertIn(b"names no credential", resp.body)
        self.assertEqual(self.split.requests[before:], [])
        rec = self.sg.wait_audit(host="split.test", path="/echo/public/x",
                                 reason="placeholder_misplaced", method="POST")
        self.assertIn("possible exfiltration attempt", rec["error"])
        # The rule that names the credential still gets it, placeholder or not; the other
        # rule's requests go out without any.
        r = self.get("https://split.test/echo/v1/x", "Authorization: Bearer " + self.api_ph)
        self.assertEqual(r.status, 200, (r.body, r.stderr))
        r = self.get("https://split.test/echo/public/x")
        self.assertEqual(r.status, 200, (r.body, r.stderr))
        seen = self.split.requests[before:]
        self.assertEqual([q["path"] for q in seen], ["/echo/v1/x", "/echo/public/x"])
        self.assertEqual([v for k, v in seen[0]["headers"] if k.lower() == "authorization"],
                         ["Bearer " + API_SECRET])
        self.assertNotIn(API_SECRET, repr(seen[1]))
        # serve said so when it loaded the config, as `policy lint` does.
        self.assertIn("admits get no credential, and a placeholder of api", self.sg.stderr())

    def test_query_injection_replaces_the_clients_parameter(self):
        # The client sends its own `key`; the upstream gets the secret there instead (once,
        # percent-encoded: it holds + / = & ? %), the other parameters as they were.
        r = self.get("https://maps.test/echo/maps?key=client-own&x=1")
        self.assertEqual(r.status, 200, r)
        seen = [q for q in self.maps.requests if q["path"].startswith("/echo/maps?")]
        self.assertEqual(len(seen), 1)
        query = urllib.parse.urlsplit(seen[0]["path"]).query
        self.assertEqual(urllib.parse.parse_qs(query), {"key": [MAPS_SECRET], "x": ["1"]})
        self.assertNotIn("client-own", seen[0]["path"])
        self.assertIn("key=" + urllib.parse.quote(MAPS_SECRET, safe=""), query)
        # The echoed path shows the placeholder, not the secret in either form.
        echo = json.loads(r.body)
        self.assertIn("key=" + self.maps_ph, echo["path"])
        self.assertNotIn(MAPS_SECRET.encode(), r.body)
        self.assertNotIn(urllib.parse.quote(MAPS_SECRET, safe="").encode(), r.body)
        rec = self.sg.wait_audit(path="/echo/maps", credential="maps", injected=True)
        self.assertNotIn("key=", json.dumps(rec))

    def test_echo_split_across_chunks_comes_back_as_the_placeholder(self):
        # The upstream reflects the injected Authorization in a header and in a body whose two
        # chunks cut the secret in half, 50 ms apart.
        before = self.sg.metric("sandgate_secret_scrubs_total", task="demo", credential="api")
        r = self.get("https://api.test/split-echo")
        self.assertEqual(r.status, 200, r)
        got = [v for k, v in self.https.requests_to("/split-echo", ignore_query=True)[0]["headers"]
               if k.lower() == "authorization"]
        self.assertEqual(got, ["Bearer " + API_SECRET])
        self.assertEqual([v for k, v in r.headers if k == "x-echo-authorization"],
                         ["Bearer " + self.api_ph])
        self.assertEqual(r.body, ("auth=Bearer %s\n" % self.api_ph).encode())
        self.sg.wait_audit(path="/split-echo", credential="api", injected=True)
        self.assertGreaterEqual(
            self.sg.metric("sandgate_secret_scrubs_total", task="demo", credential="api"),
            (before or 0) + 2)

    def test_a_compressed_echo_is_decoded_and_scrubbed(self):
        # The upstream gzips whatever the request asked for (identity, from sandgate), whole or
        # in two chunks 50 ms apart that cut the compressed stream in the middle, as a content
        # coding or as a transfer coding: either way the client gets the identity body, the
        # secret replaced by its placeholder.
        for query in ("chunked=0", "chunked=1", "chunked=1&te=1"):
            with self.subTest(query=query):
                r = self.get("https://api.test/gzip-echo?" + query, "Accept-Encoding: gzip")
                self.assertEqual(r.status, 200, r)
                self.assertNotIn("content-encoding", [k for k, _ in r.headers])
                self.assertNotIn(API_SECRET.encode(), r.body)
                echoed = dict((k.lower(), v) for k, v in json.loads(r.body)["headers"])
                self.assertEqual(echoed["authorization"], "Bearer " + self.api_ph)
                self.assertEqual(echoed["accept-encoding"], "identity")

    def test_a_compressed_body_that_breaks_off_mid_stream_is_cut_short(self):
        # The head and the first chunk's decoded bytes have gone out when the second chunk
        # fails to decode: the response ends without its last chunk, so the client sees an
        # error rather than a body that looks complete; the audit line says why.
        r = self.get("https://api.test/gzip-echo?coding=gzip-corrupt&chunked=1")
        self.assertEqual(r.status, 200, r)
        self.assertNotEqual(r.rc, 0, r.stderr)
        self.assertNotIn(API_SECRET.encode(), r.body)
        rec = self.sg.wait_audit(path="/gzip-echo", reason="upstream_bad_response")
        self.assertIn("not valid gzip", rec["error"])

    def test_placeholder_sent_to_another_host_is_refused_counted_and_logged(self):
        before = len(self.https.requests)
        r = self.get("https://other.test/echo/tripwire", "Authorization: Bearer " + self.api_ph)
        self.assertEqual(r.status, 403, r)
        self.assertIn(("x-sandgate-reason", "credential_host_mismatch"), r.headers)
        self.assertIn(b"may only be sent to api.test", r.body)
        self.assertEqual(self.https.requests[before:], [])
        self.sg.wait_audit(host="other.test", path="/echo/tripwire", verdict="deny",
                           reason="credential_host_mismatch", credential="api")
        self.assertGreaterEqual(
            self.sg.metric("sandgate_credential_injections_total", task="demo",
                           credential="api", result="credential_host_mismatch"), 1)
        self.assertIn("task demo: possible exfiltration attempt refused", self.sg.stderr())
        # The same request without the placeholder goes through: the refusal was its.
        r = self.get("https://other.test/echo/no-tripwire")
        self.assertEqual(r.status, 200, r)

    @unittest.skipUnless(git_server.available(), "git or git-http-backend is not installed")
    def test_git_clone_with_the_placeholder_as_password(self):
        home = tempfile.mkdtemp(prefix="sandgate-git-home-")
        try:
            env = clean_env(HTTPS_PROXY=self.proxy, GIT_SSL_CAINFO=self.ca_out,
                            GIT_TERMINAL_PROMPT="0", HOME=home, GIT_CONFIG_NOSYSTEM="1")
            dest = os.path.join(home, "clone")
            p = subprocess.run(["git", "clone", "-q",
                                "https://git:%s@git.test/repo.git" % self.git_ph, dest],
                               env=env, capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            with open(os.path.join(dest, "README")) as f:
                self.assertEqual(f.read(), "hello\n")
        finally:
            shutil.rmtree(home, ignore_errors=True)
        self.assertTrue(self.git.authorizations)
        self.assertEqual(set(self.git.authorizations), {basic("git", GIT_SECRET)})
        self.sg.wait_audit(kind="intercept", host="git.test", credential="git", injected=True,
                           status=200)


if __name__ == "__main__":
    unittest.main()
