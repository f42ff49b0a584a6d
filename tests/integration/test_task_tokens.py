"""Task tokens (JWTs) end to end: two `sandgate serve` replicas with the same `tokens:` keys and
nothing else shared. A token minted once with `sandgate token issue` is accepted by both, with
curl, Python and Node clients that put it in the proxy URL (http://task:<jwt>@host:port).
From the side of a client that holds a token and wants more: an expired, tampered, wrong-`kid`,
`alg: none`, widening (another policy, a host the policy refuses, higher `limits`), revoked or
wrong-source token gets its own 407 reason on both replicas; a token's `hosts` narrow what the
policy allows (403 denied_by_token); a token for a task no config names, with a `pol`, is an
ad-hoc task with exactly that policy (its hosts, its credentials); a token's lower
max_connections is enforced; the admin API (off by default) mints, lists and revokes; keys
rotate (two at once; a removed key's tokens are
refused). Issue #38: task t reads task t2's key from the upstream they share, scrubbed; tokens
with absurd times, a `crit` header, another base64url spelling, or over 8 KiB are
token_malformed (and a 5 KB one works); with tokens.audience/issuer, `aud` and `iss` must match.
The token is registered for the leak check: no log, audit line or response holds it."""

import base64
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import artifacts
from clients import curl
from sandgate_fixture import Sandgate, binary, read_response_head, wait_until
from upstreams import HttpUpstream

HS_KEY = "task-token-shared-key-0123456789abcdef0123"
OTHER_SECRET = "othersecret-0123456789abcdefghij"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256(claims, kid="k1", alg="HS256", key=HS_KEY, header=None):
    """A token made here, for the claims the CLI cannot write (expired, widened, alg none)."""
    head = b64url(json.dumps(dict({"alg": alg, "typ": "JWT", "kid": kid}, **(header or {})))
                  .encode())
    body = b64url(json.dumps(claims).encode())
    sig = hmac.new(key.encode(), ("%s.%s" % (head, body)).encode(), hashlib.sha256).digest()
    token = "%s.%s.%s" % (head, body, "" if alg == "none" else b64url(sig))
    artifacts.register_secret("token-%s" % hashlib.sha256(token.encode()).hexdigest()[:8], token)
    return token


class TaskTokensTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        cls.keys = tempfile.mkdtemp(prefix="sandgate-token-keys-")
        cls.hs_key = os.path.join(cls.keys, "hs.key")
        with open(cls.hs_key, "w") as f:
            f.write(HS_KEY + "\n")
        artifacts.register_secret("token-hs-key", HS_KEY)
        cls.ed_priv = os.path.join(cls.keys, "ed.pem")
        cls.ed_pub = os.path.join(cls.keys, "ed.pub")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", cls.ed_priv],
                       check=True, capture_output=True)
        subprocess.run(["openssl", "pkey", "-in", cls.ed_priv, "-pubout", "-out", cls.ed_pub],
                       check=True, capture_output=True)
        cls.replicas = [Sandgate({}, []), Sandgate({}, [])]
        for sg in cls.replicas:
            sg.config = cls.config(sg, [{"id": "k1", "file": cls.hs_key},
                                        {"id": "e1", "algorithm": "EdDSA", "file": cls.ed_pub}])
            sg.write_config(sg.config)
            sg.start()

    @classmethod
    def config(cls, sg, keys, revoked=None):
        rule = {"ports": [80], "cidrs": ["127.0.0.0/8"]}
        tokens = {"keys": keys, "max_ttl": "24h"}
        if revoked:
            tokens["revoked"] = revoked
        # other.test's credential goes out in clear (allow_plaintext) so that the echo shows
        # which task's requests get it.
        creds = {"otherkey": {"source": {"file": sg.secret_file("otherkey", OTHER_SECRET)},
                              "hosts": ["other.test"], "allow_plaintext": True,
                              "inject": {"header": "X-Api-Key", "value": "{secret}"}}}
        return sg.make_config(
            {"api": {"allow": [dict(rule, host="api.test"), dict(rule, host="docs.test")]},
             "other": {"allow": [dict(rule, host="other.test", credential="otherkey")]}},
            [{"name": "t1", "policy": "api"}, {"name": "t2", "policy": "other"}],
            resolve={"api.test": "127.0.0.1:%d" % cls.up.port,
                     "docs.test": "127.0.0.1:%d" % cls.up.port,
                     "other.test": "127.0.0.1:%d" % cls.up.port},
            extra={"tokens": tokens, "credentials": creds})

    @classmethod
    def tearDownClass(cls):
        for sg in cls.replicas:
            sg.cleanup()
        cls.up.close()
        shutil.rmtree(cls.keys, ignore_errors=True)

    def issue(self, *args, key=None, kid="k1", alg="HS256"):
        r = subprocess.run([binary(), "token", "issue", "--key-file", key or self.hs_key,
                            "--kid", kid, "--algorithm", alg, *args],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        token = r.stdout.strip()
        artifacts.register_secret("token-%s" % hashlib.sha256(token.encode()).hexdigest()[:8],
                                  token)
        return token

    def get(self, sg, url, task, token):
        return curl(url, proxy="http://%s:%s@127.0.0.1:%d" % (task, token, sg.proxy_port))

    def assert_refused(self, token, reason, task="t1", url="http://api.test/echo/x"):
        for sg in self.replicas:
            r = self.get(sg, url, task, token)
            self.assertEqual(r.status, 407, r)
            self.assertEqual(r.header("x-sandgate-reason"), reason, r)
            self.assertIsNotNone(r.header("proxy-authenticate"))
            self.assertNotIn(token.encode(), r.body)

    def test_one_token_is_accepted_by_every_replica_and_every_client(self):
        token = self.issue("--task", "t1", "--ttl", "10m")
        for i, sg in enumerate(self.replicas):
            r = self.get(sg, "http://api.test/echo/curl-%d" % i, "t1", token)
            self.assertEqual(r.status, 200, r)
            sg.wait_audit(task="t1", path="/echo/curl-%d" % i, verdict="allow")
        # Python's urllib takes the credentials from the proxy URL.
        sg = self.replicas[1]
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(
            {"http": "http://t1:%s@127.0.0.1:%d" % (token, sg.proxy_port)}))
        with opener.open("http://api.test/echo/python", timeout=10) as resp:
            self.assertEqual(resp.status, 200)
        # Node: an absolute-form request with the Basic proxy credentials, as proxy agents send.
        node = shutil.which("node")
        if not node:
            self.skipTest("node is not installed: the Node client was not tried")
        script = ("const http=require('http');const a='Basic '+Buffer.from('t1:'+process.argv[2])"
                  ".toString('base64');http.get({host:'127.0.0.1',port:+process.argv[1],"
                  "path:'http://api.test/echo/node',headers:{'Proxy-Authorization':a,"
                  "Host:'api.test'}},r=>{console.log(r.statusCode);r.resume();});")
        r = subprocess.run([node, "-e", script, str(sg.proxy_port), token], capture_output=True,
                           text=True, timeout=20)
        self.assertEqual(r.stdout.strip(), "200", r.stderr)
        self.assertEqual(len(self.up.requests_to("/echo/node")), 1)
        self.assertEqual(len(self.up.requests_to("/echo/python")), 1)

    def test_an_eddsa_token_from_a_key_the_replicas_never_hold(self):
        token = self.issue("--task", "t1", key=self.ed_priv, kid="e1", alg="EdDSA")
        for sg in self.replicas:
            self.assertEqual(self.get(sg, "http://api.test/echo/ed", "t1", token).status, 200)

    def test_tokens_that_must_be_refused(self):
        now = int(time.time())
        good = {"sub": "t1", "iat": now, "exp": now + 600}
        self.assert_refused(hs256(dict(good, iat=now - 7200, exp=now - 3600)), "token_expired")
        self.assert_refused(hs256(dict(good, nbf=now + 3600)), "token_not_yet_valid")
        self.assert_refused(hs256(dict(good, exp=now + 3 * 86400)), "token_ttl_too_long")
        self.assert_refused(hs256(good, key="another-key-another-key-another-key"),
                            "token_bad_signature")
        valid = self.issue("--task", "t1")
        head, body, sig = valid.split(".")
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        claims["sub"] = "t2"  # another task under the same signature
        tampered = "%s.%s.%s" % (head, b64url(json.dumps(claims).encode()), sig)
        artifacts.register_secret("token-tampered", tampered)
        self.assert_refused(tampered, "token_bad_signature", task="t2")
        self.assert_refused("eyJub3QganNvbg.eyJ4IjoxfQ.c2ln", "token_malformed")  # not JSON
        self.assert_refused(hs256(good, kid="k9"), "token_unknown_key")
        self.assert_refused(hs256(good, alg="none"), "token_wrong_algorithm")
        self.assert_refused(hs256(good, kid="e1"), "token_wrong_algorithm")  # HS256 on an EdDSA key
        self.assert_refused(hs256(dict(good, sub="nobody")), "token_task_mismatch")
        self.assert_refused(hs256(dict(good, sub="nobody")), "token_unknown_task", task="nobody")
        self.assert_refused(hs256(dict(good, pol="other")), "token_widens")
        self.assert_refused(hs256(dict(good, pol="nosuch")), "token_unknown_policy")
        self.assert_refused(hs256(dict(good, hosts=["other.test"])), "token_widens")
        self.assert_refused(hs256(dict(good, limits={"max_connections": 1000})), "token_widens")
        self.assert_refused(hs256(dict(good, src="10.9.9.9")), "token_source_mismatch")
        for sg in self.replicas:
            sg.wait_audit(reason="token_expired")
            self.assertGreaterEqual(sg.metric("sandgate_requests_total", reason="token_widens")
                                    or 0, 1)

    def test_another_tasks_secret_from_a_shared_upstream_is_scrubbed(self):
        # t2's request carries otherkey's secret to the shared upstream, which keeps it; t1,
        # whose policy names no credential, reads it back through api.test (issue #38, item 5).
        t2 = self.issue("--task", "t2", "--ttl", "10m")
        t1 = self.issue("--task", "t1", "--ttl", "10m")
        for i, sg in enumerate(self.replicas):
            r = self.get(sg, "http://other.test/echo/store-%d" % i, "t2", t2)
            self.assertEqual(r.status, 200, r)
            r = self.get(sg, "http://api.test/recall?h=X-Api-Key", "t1", t1)
            self.assertEqual(r.status, 200, r)
            self.assertNotIn(OTHER_SECRET.encode(), r.body)
            self.assertEqual(r.body.decode(), "x-api-key=[REDACTED:otherkey]\n")
            self.assertEqual(r.header("x-recalled"), "[REDACTED:otherkey]")
            # The upstream did hand it out: what t1 got was scrubbed, not never sent.
            self.assertIn(OTHER_SECRET, [v for k, v in self.up.requests_to(
                "/echo/store-%d" % i)[0]["headers"] if k.lower() == "x-api-key"])

    def raw_get(self, sg, task, token, path):
        """A forwarded GET written by hand (curl may bound a proxy password's length)."""
        s = sg.connect()
        try:
            s.sendall(("GET http://api.test%s HTTP/1.1\r\nHost: api.test\r\n%s\r\n"
                       % (path, Sandgate.auth_header(task, token))).encode())
            status, headers, _ = read_response_head(s)
            return status, headers.get("x-sandgate-reason")
        finally:
            s.close()

    def test_token_hygiene(self):
        # Issue #38, item 6, from the side of a client that makes its own tokens.
        now = int(time.time())
        good = {"sub": "t1", "iat": now, "exp": now + 600}
        # exp - iat wrapped around: a token with this iat never expired.
        self.assert_refused(hs256(dict(good, iat=-2 ** 63 + 1)), "token_malformed")
        self.assert_refused(hs256(dict(good, iat=-2 ** 63 + 1, exp=2 ** 63 - 1)),
                            "token_malformed")
        # A critical extension sandgate does not understand (RFC 7515, 4.1.11).
        self.assert_refused(hs256(good, header={"crit": ["exp"]}), "token_malformed")
        # Another spelling of a valid token: an unused bit of the signature's last character.
        token = hs256(good)
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        respelled = token[:-1] + alphabet[alphabet.index(token[-1]) ^ 1]
        artifacts.register_secret("token-respelled", respelled)
        self.assert_refused(respelled, "token_malformed")
        # A 5 KB token (a long jti) is a task token like any other; one over 8 KiB is refused
        # for what it is (token_malformed), not taken for a wrong static token (auth_invalid).
        for sg in self.replicas:
            big = hs256(dict(good, jti="j" * 5000))
            self.assertEqual(self.raw_get(sg, "t1", big, "/echo/big"), (200, None))
            huge = hs256(dict(good, jti="j" * 9000))
            self.assertEqual(self.raw_get(sg, "t1", huge, "/echo/huge"), (407, "token_malformed"))
        self.assertEqual(self.up.requests_to("/echo/huge"), [])

    def test_audience_and_issuer_when_the_config_names_them(self):
        sg = Sandgate({}, [])
        try:
            sg.config = self.config(sg, [{"id": "k1", "file": self.hs_key}])
            sg.config["tokens"].update({"audience": "sandgate-prod", "issuer": "orchestrator"})
            sg.write_config(sg.config)
            sg.start()
            url = "http://api.test/echo/aud"
            ok = self.issue("--task", "t1", "--audience", "sandgate-prod", "--issuer",
                            "orchestrator")
            self.assertEqual(self.get(sg, url, "t1", ok).status, 200)
            for token, reason in (
                    (self.issue("--task", "t1"), "token_wrong_audience"),
                    (self.issue("--task", "t1", "--audience", "sandgate-staging", "--issuer",
                                "orchestrator"), "token_wrong_audience"),
                    (self.issue("--task", "t1", "--audience", "sandgate-prod"),
                     "token_wrong_issuer"),
                    (self.issue("--task", "t1", "--audience", "sandgate-prod", "--issuer",
                                "someone-else"), "token_wrong_issuer")):
                r = self.get(sg, url, "t1", token)
                self.assertEqual((r.status, r.header("x-sandgate-reason")), (407, reason))
            # The replicas that name neither ignore both claims.
            self.assertEqual(self.get(self.replicas[0], url, "t1", ok).status, 200)
        finally:
            sg.cleanup()

    def test_hosts_and_src_narrow_the_policy(self):
        token = self.issue("--task", "t1", "--host", "api.test", "--src", "127.0.0.0/8")
        for sg in self.replicas:
            self.assertEqual(self.get(sg, "http://api.test/echo/narrow", "t1", token).status, 200)
            r = self.get(sg, "http://docs.test/echo/narrow", "t1", token)  # the policy allows it
            self.assertEqual(r.status, 403, r)
            self.assertEqual(r.header("x-sandgate-reason"), "denied_by_token")

    def test_an_ad_hoc_task_gets_exactly_its_policy(self):
        # sandbox-42 is in no config: its token's pol makes it an ad-hoc task of `other`.
        token = self.issue("--task", "sandbox-42", "--policy", "other", "--ttl", "10m")
        for i, sg in enumerate(self.replicas):
            r = self.get(sg, "http://other.test/echo/adhoc-%d" % i, "sandbox-42", token)
            self.assertEqual(r.status, 200, r)
            # Its policy's credential is injected upstream and scrubbed from the echo.
            seen = self.up.requests_to("/echo/adhoc-%d" % i)
            self.assertEqual([v for k, v in seen[0]["headers"] if k.lower() == "x-api-key"],
                             [OTHER_SECRET])
            self.assertNotIn(OTHER_SECRET.encode(), r.body)
            self.assertIn(b"[REDACTED:otherkey]", r.body)
            sg.wait_audit(task="sandbox-42", path="/echo/adhoc-%d" % i, verdict="allow")
            # Another policy's host is refused, as for any task of `other`.
            r = self.get(sg, "http://api.test/echo/adhoc-%d" % i, "sandbox-42", token)
            self.assertEqual(r.status, 403, r)
            self.assertEqual(r.header("x-sandgate-reason"), "no_matching_rule")
            self.assertEqual(len(self.up.requests_to("/echo/adhoc-%d" % i)), 1)
            # Metrics label ad-hoc tasks by policy: minted names never become label values.
            self.assertGreaterEqual(sg.metric("sandgate_requests_total", task="adhoc:other",
                                              reason="allowed") or 0, 1)
            self.assertNotIn('task="sandbox-42"', sg.metrics())
        # An ad-hoc task of `api` gets api's hosts and not other's credential or host.
        token = self.issue("--task", "sandbox-43", "--policy", "api")
        sg = self.replicas[0]
        self.assertEqual(self.get(sg, "http://api.test/echo/adhoc-api", "sandbox-43", token).status,
                         200)
        self.assertNotIn("x-api-key", [k.lower() for k, v in
                                       self.up.requests_to("/echo/adhoc-api")[0]["headers"]])
        self.assertEqual(self.get(sg, "http://other.test/echo/adhoc-api", "sandbox-43",
                                  token).status, 403)

    def test_a_sub_that_names_a_configured_task_is_that_task(self):
        # t1's own policy, named: t1's rules; another policy: refused, never an ad-hoc task.
        token = self.issue("--task", "t1", "--policy", "api")
        sg = self.replicas[0]
        self.assertEqual(self.get(sg, "http://api.test/echo/t1-pol", "t1", token).status, 200)
        sg.wait_audit(task="t1", path="/echo/t1-pol", verdict="allow")
        self.assert_refused(self.issue("--task", "t1", "--policy", "other"), "token_widens",
                            url="http://other.test/echo/t1-widened")
        self.assert_refused(hs256({"sub": "sandbox-44", "pol": "nosuch",
                                   "exp": int(time.time()) + 60}),
                            "token_unknown_policy", task="sandbox-44")

    def held_get(self, sg, task, token, path):
        """A keep-alive request on a connection of its own, which stays open (and counted)."""
        s = sg.connect()
        s.sendall(("GET http://api.test%s HTTP/1.1\r\nHost: api.test\r\n" % path +
                   Sandgate.auth_header(task, token) + "\r\n").encode())
        status, headers, _ = read_response_head(s)
        return s, status, headers.get("x-sandgate-reason")

    def test_a_token_may_lower_the_connection_limit_but_not_raise_it(self):
        lowered = self.issue("--task", "t1", "--max-connections", "1")
        plain = self.issue("--task", "t1")
        sg = self.replicas[0]
        # The connections of earlier tests are gone (the server has seen them close).
        wait_until(lambda: not sg.metric("sandgate_connections_active", task="t1"), 10,
                   interval=0.1, what="t1's earlier connections closed")
        held = []
        try:
            s, status, _ = self.held_get(sg, "t1", lowered, "/echo/limit-1")
            held.append(s)
            self.assertEqual(status, 200)
            # The task now has one connection: this token's limit of 1 is reached...
            s, status, reason = self.held_get(sg, "t1", lowered, "/echo/limit-2")
            held.append(s)
            self.assertEqual((status, reason), (429, "connection_limit"))
            # ... while a token without limits still has the task's own (256).
            s, status, _ = self.held_get(sg, "t1", plain, "/echo/limit-3")
            held.append(s)
            self.assertEqual(status, 200)
            # Limits and their gauges are per replica: this one holds t1's two connections
            # (once the refused one is closed), the other none.
            wait_until(lambda: sg.metric("sandgate_connections_active", task="t1") == 2, 10,
                       interval=0.1, what="t1's two connections on the first replica")
            self.assertFalse(self.replicas[1].metric("sandgate_connections_active", task="t1"))
        finally:
            for s in held:
                s.close()
        self.assertEqual(len(self.up.requests_to("/echo/limit-2")), 0)
        sg.wait_audit(task="t1", reason="connection_limit", status=429)
        # Above the task's limit is widening, refused on every replica.
        self.assert_refused(self.issue("--task", "t1", "--max-connections", "1000"),
                            "token_widens")
        self.assert_refused(hs256({"sub": "t1", "exp": int(time.time()) + 60,
                                   "limits": {"idle_timeout": 1}}), "token_malformed")

    @staticmethod
    def admin(sg, method, path, body=None, token=None):
        """(status, headers, JSON body) of an admin API request on sg's metrics listener."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (sg.metrics_port, path),
                                     data=data, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.headers, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.headers, json.loads(e.read())

    def test_the_admin_api_mints_lists_and_revokes(self):
        # Off by default: the replicas' configs have no metrics.admin_api.
        for sg in self.replicas:
            status, _, body = self.admin(sg, "GET", "/v1/tasks")
            self.assertEqual((status, body["reason"]), (404, "admin_api_off"))
        sg = Sandgate({}, [])
        held = []
        try:
            admin_token = "admin-api-token-0123456789abcdef"
            sg.config = self.config(sg, [{"id": "k1", "file": self.hs_key}])
            sg.config.setdefault("metrics", {})["admin_api"] = {
                "token_file": sg.secret_file("admin-api-token", admin_token),
                "mint": {"kid": "k1"}}
            sg.write_config(sg.config)
            sg.start()
            status, headers, body = self.admin(sg, "GET", "/v1/tasks")
            self.assertEqual((status, body["reason"]), (401, "admin_auth_required"))
            self.assertIn("Bearer", headers["WWW-Authenticate"])
            status, _, body = self.admin(sg, "GET", "/v1/tasks", token="not-the-admin-token")
            self.assertEqual((status, body["reason"]), (401, "admin_auth_invalid"))
            status, headers, body = self.admin(sg, "GET", "/v1/tokens", token=admin_token)
            self.assertEqual((status, headers["Allow"]), (405, "POST"))
            # An orchestrator mints an ad-hoc task's token; every replica with the key accepts it.
            status, _, body = self.admin(sg, "POST", "/v1/tokens",
                                         {"task": "sandbox-77", "policy": "other", "ttl": 600},
                                         token=admin_token)
            self.assertEqual(status, 200, body)
            token = body["token"]
            artifacts.register_secret("token-admin-minted", token)
            self.assertEqual(body["claims"]["sub"], "sandbox-77")
            for i, replica in enumerate([sg] + self.replicas):
                r = self.get(replica, "http://other.test/echo/minted-%d" % i, "sandbox-77", token)
                self.assertEqual(r.status, 200, r)
            # Its connections show in /v1/tasks, this replica's.
            s = sg.connect()
            held.append(s)
            s.sendall(("GET http://other.test/echo/minted-held HTTP/1.1\r\nHost: other.test\r\n" +
                       Sandgate.auth_header("sandbox-77", token) + "\r\n").encode())
            self.assertEqual(read_response_head(s)[0], 200)
            status, _, body = self.admin(sg, "GET", "/v1/tasks", token=admin_token)
            self.assertEqual(status, 200, body)
            self.assertEqual([t["name"] for t in body["tasks"]], ["t1", "t2"])
            self.assertIn({"name": "sandbox-77", "connections": 1, "tunnels": 0}, body["adhoc"])
            # Revoked here until the next reload: a new connection with it is refused.
            status, _, body = self.admin(sg, "POST", "/v1/revoke",
                                         {"jti": self.jti(token)}, token=admin_token)
            self.assertEqual(status, 200, body)
            r = self.get(sg, "http://other.test/echo/minted-revoked", "sandbox-77", token)
            self.assertEqual((r.status, r.header("x-sandgate-reason")), (407, "token_revoked"))
            self.assertEqual(self.up.requests_to("/echo/minted-revoked"), [])
            # The other replicas were not told: revoking everywhere is tokens.revoked's job.
            r = self.get(self.replicas[0], "http://other.test/echo/minted-x", "sandbox-77", token)
            self.assertEqual(r.status, 200)
            self.assertNotIn(admin_token, sg.stderr())
        finally:
            for s in held:
                s.close()
            sg.cleanup()

    @staticmethod
    def jti(token):
        body = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["jti"]

    def test_revocation_and_key_rotation(self):
        sg = Sandgate({}, [])
        try:
            keys = [{"id": "k1", "file": self.hs_key}]
            sg.config = self.config(sg, keys)
            sg.write_config(sg.config)
            sg.start()
            old = self.issue("--task", "t1")
            self.assertEqual(self.get(sg, "http://api.test/echo/rot", "t1", old).status, 200)
            # A second key while the first stays: old tokens still work, new ones too.
            new_key = os.path.join(self.keys, "hs2.key")
            with open(new_key, "w") as f:
                f.write("second-shared-key-0123456789abcdef-0123456\n")
            artifacts.register_secret("token-hs-key-2", "second-shared-key-0123456789abcdef-0123456")
            keys2 = keys + [{"id": "k2", "file": new_key}]
            sg.config = self.config(sg, keys2)
            sg.write_config(sg.config)
            fresh = self.issue("--task", "t1", key=new_key, kid="k2")
            wait_until(lambda: self.get(sg, "http://api.test/echo/rot", "t1", fresh).status == 200,
                       10, interval=0.2, what="the second key")
            self.assertEqual(self.get(sg, "http://api.test/echo/rot", "t1", old).status, 200)
            # The first key removed: its tokens are refused; the second key's still work.
            sg.config = self.config(sg, keys2[1:])
            sg.write_config(sg.config)
            wait_until(lambda: self.get(sg, "http://api.test/echo/rot", "t1", old).status == 407,
                       10, interval=0.2, what="the first key removed")
            r = self.get(sg, "http://api.test/echo/rot", "t1", old)
            self.assertEqual(r.header("x-sandgate-reason"), "token_unknown_key")
            self.assertEqual(self.get(sg, "http://api.test/echo/rot", "t1", fresh).status, 200)
            # Revoked by jti, hot-reloaded.
            jti = json.loads(base64.urlsafe_b64decode(
                fresh.split(".")[1] + "=" * (-len(fresh.split(".")[1]) % 4)))["jti"]
            sg.config = self.config(sg, keys2[1:], revoked=[jti])
            sg.write_config(sg.config)
            wait_until(lambda: self.get(sg, "http://api.test/echo/rot", "t1", fresh).status == 407,
                       10, interval=0.2, what="the revocation")
            r = self.get(sg, "http://api.test/echo/rot", "t1", fresh)
            self.assertEqual(r.header("x-sandgate-reason"), "token_revoked")
        finally:
            sg.cleanup()

    def test_inspect_shows_the_claims_and_checks_the_signature(self):
        token = self.issue("--task", "t1", "--ttl", "5m")
        sg = self.replicas[0]
        r = subprocess.run([binary(), "token", "inspect", "-", "--config", sg.config_path],
                           input=token + "\n", capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"sub":"t1"', r.stdout)
        self.assertIn("valid: signed by key k1", r.stdout)
        bad = hs256({"sub": "t1", "exp": int(time.time()) + 60}, key="x" * 40)
        r = subprocess.run([binary(), "token", "inspect", "-", "--config", sg.config_path],
                           input=bad + "\n", capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 1)
        self.assertIn("invalid: token_bad_signature", r.stdout)

    def test_zz_tokens_never_logged(self):
        for sg in self.replicas:
            text = sg.stderr() + "".join(json.dumps(rec) for rec in sg.audit())
            self.assertNotIn(HS_KEY, text)
            for rec in sg.audit():
                self.assertNotIn("eyJ", json.dumps(rec))


if __name__ == "__main__":
    unittest.main()
