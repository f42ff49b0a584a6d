"""GitHub App installation tokens minted by `sandgate serve` (source.github_app).

A loopback fake of GitHub's token endpoint (HTTPS with the runtime test CA, reached as api.test
through `resolve:`) checks every request as GitHub would: the App JWT's RS256 signature with the
App's public key (openssl CLI), its claims (iss, iat backdated, exp within 10 minutes), and the
requested repositories and permissions; it answers with a fresh token and its expiry. git.test
and other.test map to an HTTPS echo upstream: the git host gets the token as Basic
(x-access-token), the API host as Bearer (inject.per_host).

What is shown: many concurrent requests, one mint; a task that narrows the repositories gets a
token of its own minted for that set; an API failure is 502 credential_unavailable with the
API's message; neither the tokens nor the App key appear in any log or audit line (and all are
registered for the suite-wide leak check, tests/leak/).
"""

import base64
import datetime
import http.client
import http.server
import json
import os
import secrets
import socketserver
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import artifacts
from pki import test_pki
from sandgate_fixture import Sandgate
from upstreams import HttpUpstream

APP_ID = 123456
INSTALLATION = 7890
BROKEN_INSTALLATION = 9999  # the fake answers 404 for it
REPOSITORIES = ["widgets", "tools-cli"]
PERMISSIONS = {"contents": "write", "pull_requests": "read"}
TOKEN_DEMO = "t0ken-demo"
TOKEN_NARROW = "t0ken-narrow"


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class FakeGitHub:
    """POST /app/installations/<id>/access_tokens over TLS, checked as GitHub checks it."""

    def __init__(self, pki, public_key_path):
        self.public_key = public_key_path
        self.mints = []     # (repositories, token) for each token handed out
        self.refused = []   # why each refused request was refused
        self.lock = threading.Lock()
        self.tmp = tempfile.mkdtemp(prefix="sandgate-fake-github-")
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                code, answer = owner.answer(self.path, self.headers, body)
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki.leaf_cert, pki.leaf_key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def verify_jwt(self, jwt):
        """The claims when the RS256 signature verifies with the App's public key, else None."""
        parts = jwt.split(".")
        if len(parts) != 3:
            return None
        header = json.loads(b64url_decode(parts[0]))
        if header.get("alg") != "RS256":
            return None
        fd, sig = tempfile.mkstemp(dir=self.tmp)
        with os.fdopen(fd, "wb") as f:
            f.write(b64url_decode(parts[2]))
        try:
            r = subprocess.run(["openssl", "dgst", "-sha256", "-verify", self.public_key,
                                "-signature", sig], input=(parts[0] + "." + parts[1]).encode(),
                               capture_output=True, timeout=30)
        finally:
            os.unlink(sig)
        if r.returncode != 0:
            return None
        return json.loads(b64url_decode(parts[1]))

    def answer(self, path, headers, body):
        def refuse(code, why):
            with self.lock:
                self.refused.append(why)
            return code, {"message": why}
        auth = headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return refuse(401, "no bearer token")
        claims = self.verify_jwt(auth[len("Bearer "):])
        if claims is None:
            return refuse(401, "A JSON web token could not be decoded")
        now = int(time.time())
        if not (claims.get("iss") == APP_ID and claims["iat"] <= now - 30 and
                now < claims["exp"] and claims["exp"] - claims["iat"] <= 660):
            return refuse(401, "bad claims %r" % claims)
        if headers.get("Accept") != "application/vnd.github+json":
            return refuse(415, "wrong Accept")
        if path == "/app/installations/%d/access_tokens" % BROKEN_INSTALLATION:
            return refuse(404, "Not Found")
        if path != "/app/installations/%d/access_tokens" % INSTALLATION:
            return refuse(404, "unexpected path " + path)
        req = json.loads(body)
        repos = req.get("repositories")
        if req.get("permissions") != PERMISSIONS:
            return refuse(422, "unexpected permissions %r" % req.get("permissions"))
        if not repos or not set(repos) <= set(REPOSITORIES):
            return refuse(422, "There is at least one repository that does not exist")
        token = "ghs_" + secrets.token_hex(18)
        artifacts.register_secret("minted-%d" % len(self.mints), token)
        expires = (datetime.datetime.now(datetime.timezone.utc) +
                   datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self.lock:
            self.mints.append((repos, token))
        return 201, {"token": token, "expires_at": expires,
                     "permissions": PERMISSIONS, "repository_selection": "selected"}

    def tokens_for(self, repos):
        with self.lock:
            return [t for r, t in self.mints if r == repos]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class GithubAppTokensTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.echo = HttpUpstream(cls.pki)
        cls.sg = Sandgate({}, [])
        d = cls.sg.dir
        key = os.path.join(d, "app.pem")
        pub = os.path.join(d, "app.pub.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt",
                        "rsa_keygen_bits:2048", "-out", key], check=True, capture_output=True,
                       timeout=60)
        subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-out", pub], check=True,
                       capture_output=True, timeout=30)
        with open(key) as f:
            pem = f.read()
        # The key's body (what any copy of it would contain) is a secret too.
        artifacts.register_secret("github-app-key", "".join(pem.strip().splitlines()[1:-1]))
        cls.github = FakeGitHub(cls.pki, pub)
        cls.ca_out = os.path.join(d, "sandgate-ca.pem")
        rule = {"cidrs": ["127.0.0.0/8"]}
        policies = {"agent": {"allow": [
            dict(rule, host="git.test", credential="gh"),
            dict(rule, host="other.test", credential="gh"),
            dict(rule, host="ws.test", credential="broken"),
        ]}}
        app = {"app_id": APP_ID, "private_key": {"file": key},
               "installation_id": INSTALLATION, "repositories": REPOSITORIES,
               "permissions": PERMISSIONS, "api": "https://api.test"}
        creds = {
            "gh": {"source": {"github_app": app},
                   "hosts": ["git.test", "other.test"],
                   "inject": {"per_host": {
                       "git.test": {"basic": {"username": "x-access-token"}},
                       "other.test": {"bearer": {}}}}},
            "broken": {"source": {"github_app": dict(app, installation_id=BROKEN_INSTALLATION)},
                       "optional": True, "hosts": ["ws.test"], "inject": {"bearer": {}}},
        }
        cls.sg.config = cls.sg.make_config(
            policies,
            [{"name": "demo", "policy": "agent", "token": TOKEN_DEMO},
             {"name": "narrow", "policy": "agent", "token": TOKEN_NARROW,
              "repositories": {"gh": ["widgets"]}}],
            resolve={"api.test": "127.0.0.1:%d" % cls.github.port,
                     "git.test": "127.0.0.1:%d" % cls.echo.port,
                     "other.test": "127.0.0.1:%d" % cls.echo.port,
                     "ws.test": "127.0.0.1:%d" % cls.echo.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.echo.close()
        cls.github.close()

    def get(self, host, path, task="demo", token=TOKEN_DEMO):
        conn = http.client.HTTPSConnection(host, 443, timeout=20)
        conn.sock = self.sg.tls_tunnel(host, task, token, self.ca_out)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            artifacts.record_response("%s %s %s" % (task, host, path), r.status,
                                      r.getheaders(), body)
            return r.status, dict(r.getheaders()), body
        finally:
            conn.close()

    def authorization_seen(self, path):
        reqs = self.echo.requests_to(path)
        self.assertEqual(len(reqs), 1, path)
        return [v for k, v in reqs[0]["headers"] if k.lower() == "authorization"]

    def test_concurrent_requests_share_one_minted_token(self):
        full = self.github.tokens_for(REPOSITORIES)
        self.assertEqual(len(full), 1, "the source's own set is minted once, at start")
        token = full[0]
        paths = ["/echo/concurrent/%d" % i for i in range(12)]
        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(lambda p: self.get("git.test", p), paths))
        self.assertEqual([s for s, _, _ in results], [200] * len(paths))
        basic = "Basic " + base64.b64encode(("x-access-token:" + token).encode()).decode()
        for p in paths:
            self.assertEqual(self.authorization_seen(p), [basic])
        # Still one mint for that set, however many requests used it.
        self.assertEqual(self.github.tokens_for(REPOSITORIES), [token])
        # The API host gets the same token as a Bearer header (inject.per_host).
        status, _, _ = self.get("other.test", "/echo/api-host")
        self.assertEqual(status, 200)
        self.assertEqual(self.authorization_seen("/echo/api-host"), ["Bearer " + token])

    def test_a_narrowed_task_gets_a_token_minted_for_its_repositories(self):
        narrow = self.github.tokens_for(["widgets"])
        self.assertEqual(len(narrow), 1, "the narrowed set was requested on its own")
        status, _, _ = self.get("git.test", "/echo/narrow", task="narrow", token=TOKEN_NARROW)
        self.assertEqual(status, 200)
        basic = "Basic " + base64.b64encode(("x-access-token:" + narrow[0]).encode()).decode()
        self.assertEqual(self.authorization_seen("/echo/narrow"), [basic])
        # Not the token that reaches the other repositories.
        self.assertNotIn(narrow[0], self.github.tokens_for(REPOSITORIES))

    def test_an_api_failure_fails_closed_with_the_apis_message(self):
        status, headers, body = self.get("ws.test", "/echo/broken")
        self.assertEqual(status, 502)
        answer = json.loads(body)
        self.assertEqual(answer["reason"], "credential_unavailable")
        self.assertIn("the API answered 404: Not Found", answer["error"])
        self.assertEqual(self.echo.requests_to("/echo/broken"), [], "nothing went upstream")
        rec = self.sg.wait_audit(path="/echo/broken")
        self.assertEqual(rec["reason"], "credential_unavailable")

    def test_the_token_is_scrubbed_from_responses(self):
        token = self.github.tokens_for(REPOSITORIES)[0]
        basic = base64.b64encode(("x-access-token:" + token).encode()).decode()
        # The echo reflects the request's Authorization in its body and in a header.
        status, headers, body = self.get("git.test", "/echo/reflect?reflect=1")
        self.assertEqual(status, 200)
        self.assertEqual(len(self.echo.requests_to("/echo/reflect?reflect=1")), 1)
        seen = body.decode("latin-1") + json.dumps(headers)
        self.assertIn("X-Echo-Authorization", json.dumps(headers), "the echo did reflect it")
        self.assertNotIn(token, seen)
        self.assertNotIn(basic, seen)

    def test_zz_no_token_or_key_in_any_log_or_audit_line(self):
        # Runs last (unittest sorts by name): after the other requests have been logged.
        self.get("git.test", "/echo/last")
        self.sg.wait_audit(path="/echo/last")
        logs = self.sg.stderr() + "\n".join(json.dumps(r) for r in self.sg.audit())
        with self.github.lock:
            minted = [t for _, t in self.github.mints]
        self.assertGreaterEqual(len(minted), 2)
        for token in minted:
            self.assertNotIn(token, logs)
            self.assertNotIn(base64.b64encode(("x-access-token:" + token).encode()).decode(),
                             logs)
        self.assertNotIn("PRIVATE KEY", logs)
        # The fake refused only the broken installation (sandgate's requests were well formed).
        self.assertTrue(self.github.refused)
        self.assertEqual(set(self.github.refused), {"Not Found"})


if __name__ == "__main__":
    unittest.main()
