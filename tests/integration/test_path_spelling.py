"""Paths and methods as a server reads them (issue #38 items 1, 2 and 4), from a raw client,
over intercepted TLS and plain-HTTP forwarding, each host with a credential.

1. A refused push (refs/heads/main) or a fetch of a repository outside `git.repositories`,
   with the endpoint spelled as a lenient forge still routes it (`;x`, `;jsessionid=1`, `/.`,
   `/x/..`, a trailing `.`, `%20`, `%00`, `\\`, `%2F.`), is refused: the upstream sees no
   request and no credential.
2. Under a broad allow narrowed by `deny paths: [/admin/**]`, every spelling a server may read
   as /admin/... (`/%61dmin/x`, `/ADMIN/x`, `/admin`, `/admin./x`, `/admin%20/x`) is refused,
   and `policy check` agrees.
3. Method and URL overrides (headers in any spelling, `?_method=`, `_method` in a urlencoded
   form body) are refused on a broad allow narrowed by deny rules and on a method-restricted
   allow; a host with a plain allow passes them.

git.test and api.test, other.test (HTTPS) map to an echo upstream over TLS; their plain-HTTP
twins (gitplain.test, plain.test, getplain.test) to a plain echo upstream. Both upstreams
record every request, so "never saw it" is checked on what arrived, not on what we sent.
"""

import json
import os
import subprocess
import unittest

from pki import test_pki
from sandgate_fixture import Sandgate, binary, read_all, read_response_head
from upstreams import HttpUpstream

TOKEN = "tok-spelling"
SECRET = "sk-spellingsecret-0123456789abcdef"
PLAIN_SECRET = "plainspellingsecret-0123456789abcdef"

GIT = {"repositories": ["acme/widgets"], "push": {"refs": ["refs/heads/agent/*"]}}

# What followed /git-receive-pack (or /info/refs) in the attack; each made it "ordinary".
ENDPOINT_SUFFIXES = [";x", ";jsessionid=1", "/.", "/x/..", ".", "%20", "%00", "\\", "%2F."]

# Spellings of /admin/x a server may read as it.
ADMIN_SPELLINGS = [
    ("/%61dmin/x", "denied_by_rule"),
    ("/%61%64%6d%69%6e/x", "denied_by_rule"),
    ("/ADMIN/x", "denied_by_rule"),
    ("/Admin/x", "denied_by_rule"),
    ("/admin", "denied_by_rule"),
    ("/admin./x", "path_ambiguous"),
    ("/admin%20/x", "path_ambiguous"),
    ("/admin%00/x", "path_ambiguous"),
]

OVERRIDE_HEADERS = [
    ("X-HTTP-Method-Override", "DELETE"),
    ("X_HTTP_METHOD_OVERRIDE", "DELETE"),
    ("X-HTTP-Method", "DELETE"),
    ("X-Method-Override", "DELETE"),
    ("X-Method", "DELETE"),
    ("X-Forwarded-Method", "DELETE"),
    ("X-Original-Method", "DELETE"),
    ("X-Original-URL", "/admin/x"),
    ("X-Original-URI", "/admin/x"),
    ("X-Rewrite-URL", "/admin/x"),
    ("X-Forwarded-Uri", "/admin/x"),
    ("X-Forwarded-Prefix", "/admin"),
    ("X-Forwarded-Path", "/admin/x"),
    ("x_original_url", "/admin/x"),
]

OVERRIDE_QUERIES = ["_method=DELETE", "a=1&_method=DELETE", "%5Fmethod=DELETE",
                    "_method[]=DELETE", "x=1;_method=DELETE", "X-HTTP-Method-Override=DELETE"]


class PathSpellingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.http = HttpUpstream()
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        tls = {"cidrs": ["127.0.0.0/8"]}
        plain = {"cidrs": ["127.0.0.0/8"], "ports": [80]}
        creds = {
            "key": {"source": {"file": cls.sg.secret_file("key", SECRET)},
                    "hosts": ["git.test", "api.test", "other.test"],
                    "inject": {"header": "X-Api-Key", "value": "{secret}"}},
            "plainkey": {"source": {"file": cls.sg.secret_file("plainkey", PLAIN_SECRET)},
                         "hosts": ["gitplain.test", "plain.test", "getplain.test"],
                         "allow_plaintext": True,
                         "inject": {"header": "X-Api-Key", "value": "{secret}"}},
        }
        policies = {"agent": {
            "allow": [
                dict(tls, host="git.test", credential="key", git=GIT),
                dict(plain, host="gitplain.test", credential="plainkey", git=GIT),
                dict(tls, host="api.test", credential="key"),
                dict(plain, host="plain.test", credential="plainkey"),
                dict(tls, host="other.test", credential="key", methods=["GET"]),
                dict(plain, host="getplain.test", credential="plainkey", methods=["GET"]),
                dict(plain, host="open.test"),
            ],
            "deny": [
                {"host": "api.test", "paths": ["/admin/**"]},
                {"host": "plain.test", "paths": ["/admin/**"]},
                {"host": "api.test", "methods": ["DELETE"]},
                {"host": "plain.test", "methods": ["DELETE"]},
            ],
        }}
        resolve = {h: "127.0.0.1:%d" % cls.https.port for h in ("git.test", "api.test",
                                                                 "other.test")}
        resolve.update({h: "127.0.0.1:%d" % cls.http.port
                        for h in ("gitplain.test", "plain.test", "getplain.test", "open.test")})
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN}], resolve=resolve,
            # Several hundred connections in a few seconds, one per attempt.
            limits={"new_connections_per_second": 10000},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.https.close()
        cls.http.close()

    # --- raw clients ------------------------------------------------------------------------

    def send(self, tls, host, method, path, headers=(), body=b""):
        """One request written by hand: inside an intercepted tunnel (`tls`) or as an
        absolute-form request to the proxy. Returns (status, headers, rest)."""
        extra = "".join("%s: %s\r\n" % h for h in headers)
        if body:
            extra += "Content-Length: %d\r\n" % len(body)
        if tls:
            s = self.sg.tls_tunnel(host, "demo", TOKEN, self.ca_out)
            line = "%s %s HTTP/1.1\r\nHost: %s\r\n" % (method, path, host)
        else:
            s = self.sg.connect()
            line = "%s http://%s%s HTTP/1.1\r\nHost: %s\r\n%s" % (
                method, host, path, host, self.sg.auth_header("demo", TOKEN))
        try:
            s.sendall((line + extra + "Connection: close\r\n\r\n").encode("latin-1") + body)
            status, head, rest = read_response_head(s)
            if status is not None:
                rest += read_all(s)
            if status == 100:  # the interim answer to Expect: 100-continue, then the answer
                first, _, rest = rest.partition(b"\r\n\r\n")
                lines = first.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ")[1])
                head = dict((k.strip().lower(), v.strip())
                            for k, _, v in (line.partition(":") for line in lines[1:]))
            return status, head, rest
        except (ConnectionError, OSError):
            return None, {}, b""
        finally:
            s.close()

    def upstream(self, tls):
        return self.https if tls else self.http

    def assert_unseen(self, tls, before, what):
        """Nothing reached the upstream since `before` requests: no request, so no key (the
        key, where a request did arrive, says so in the failure)."""
        seen = self.upstream(tls).requests[before:]
        keys = [v for r in seen for k, v in r["headers"] if k.lower() == "x-api-key"]
        self.assertEqual((seen, keys), ([], []), what)

    def assert_refused(self, tls, host, method, path, reasons, headers=(), body=b""):
        before = len(self.upstream(tls).requests)
        status, head, _ = self.send(tls, host, method, path, headers, body)
        what = "%s %s%s %s" % (method, host, path, headers)
        # A 400 from the head's validation is a refusal too (nothing is forwarded).
        self.assertIn(status, (400, 403), what)
        if status == 403:
            self.assertIn(head.get("x-sandgate-reason"), reasons, what)
        self.assert_unseen(tls, before, what)

    @staticmethod
    def pkt(payload):
        return b"%04x" % (len(payload) + 4) + payload

    def push_to_main(self):
        return self.pkt(b"%s %s refs/heads/main\0report-status" % (b"1" * 40, b"2" * 40)) + b"0000"

    # --- item 1: the git gate ---------------------------------------------------------------

    def test_every_spelling_of_a_refused_push_is_refused(self):
        for tls, host in ((True, "git.test"), (False, "gitplain.test")):
            for suffix in ENDPOINT_SUFFIXES:
                with self.subTest(host=host, suffix=suffix):
                    self.assert_refused(
                        tls, host, "POST", "/acme/widgets.git/git-receive-pack" + suffix,
                        ("path_ambiguous", "git_repository_not_allowed"),
                        [("Content-Type", "application/x-git-receive-pack-request")],
                        self.push_to_main())

    def test_every_spelling_of_a_fetch_of_an_unlisted_repository_is_refused(self):
        for tls, host in ((True, "git.test"), (False, "gitplain.test")):
            for suffix in ENDPOINT_SUFFIXES:
                with self.subTest(host=host, suffix=suffix):
                    self.assert_refused(
                        tls, host, "GET",
                        "/acme/secret.git/info/refs" + suffix + "?service=git-upload-pack",
                        ("path_ambiguous", "git_repository_not_allowed"))
                    self.assert_refused(
                        tls, host, "POST", "/acme/secret.git/git-upload-pack" + suffix,
                        ("path_ambiguous", "git_repository_not_allowed"), body=b"0000")

    def test_dumb_protocol_and_archives_of_an_unlisted_repository_are_refused(self):
        for tls, host in ((True, "git.test"), (False, "gitplain.test")):
            for path in ("/acme/secret.git/HEAD", "/acme/secret.git/objects/info/packs",
                         "/acme/secret.git/info/packs", "/acme/secret.git/objects/ab/cdef",
                         "/acme/secret/archive/refs/heads/main.zip",
                         "/acme/secret/-/archive/main/secret-main.tar.gz"):
                with self.subTest(host=host, path=path):
                    self.assert_refused(tls, host, "GET", path, ("git_repository_not_allowed",))

    def test_the_listed_repository_and_ordinary_paths_still_pass(self):
        for tls, host in ((True, "git.test"), (False, "gitplain.test")):
            up = self.upstream(tls)
            for path in ("/acme/widgets.git/HEAD", "/echo/acme/widgets"):
                before = len(up.requests)
                status, head, _ = self.send(tls, host, "GET", path)
                self.assertIsNone(head.get("x-sandgate-reason"), (host, path, status))
                self.assertEqual(len(up.requests), before + 1, (host, path))

    # --- item 2: deny paths -----------------------------------------------------------------

    def test_spellings_of_a_denied_path_are_refused(self):
        for tls, host in ((True, "api.test"), (False, "plain.test")):
            for path, reason in ADMIN_SPELLINGS:
                with self.subTest(host=host, path=path):
                    self.assert_refused(tls, host, "GET", path, (reason,))

    def test_other_paths_get_the_key(self):
        for tls, host, secret in ((True, "api.test", SECRET), (False, "plain.test", PLAIN_SECRET)):
            up = self.upstream(tls)
            for path in ("/echo/administrator", "/echo/a%20b"):
                before = len(up.requests)
                status, head, _ = self.send(tls, host, "GET", path)
                self.assertEqual(status, 200, (host, path))
                got = dict((k.lower(), v) for k, v in up.requests[before]["headers"])
                self.assertEqual(got.get("x-api-key"), secret)

    def test_policy_check_agrees(self):
        for path, reason in ADMIN_SPELLINGS[:5]:
            with self.subTest(path=path):
                p = subprocess.run([binary(), "policy", "check", "--config", self.sg.config_path,
                                    "--task", "demo", "--json", "https://api.test" + path],
                                   capture_output=True, timeout=30)
                out = json.loads(p.stdout) if p.stdout else {}
                self.assertEqual((p.returncode, out.get("reason")), (1, reason),
                                 p.stderr.decode())

    # --- item 4: overrides ------------------------------------------------------------------

    def test_override_headers_and_parameters_are_refused(self):
        hosts = ((True, "api.test"), (False, "plain.test"), (True, "other.test"),
                 (False, "getplain.test"))
        for tls, host in hosts:
            for name, value in OVERRIDE_HEADERS:
                with self.subTest(host=host, header=name):
                    self.assert_refused(tls, host, "GET", "/echo/x", ("override_header",),
                                        [(name, value)])
            for query in OVERRIDE_QUERIES:
                with self.subTest(host=host, query=query):
                    self.assert_refused(tls, host, "GET", "/echo/x?" + query,
                                        ("override_header",))

    def test_method_override_in_a_form_body_is_refused(self):
        form = [("Content-Type", "application/x-www-form-urlencoded")]
        for tls, host in ((True, "api.test"), (False, "plain.test")):
            for body in (b"_method=DELETE", b"a=1&_method=DELETE", b"%5Fmethod=DELETE",
                         b"a=1;x_http_method_override=DELETE"):
                with self.subTest(host=host, body=body):
                    self.assert_refused(tls, host, "POST", "/echo/x", ("override_header",),
                                        form, body)
            with self.subTest(host=host, what="no Content-Type (Rack reads a form)"):
                self.assert_refused(tls, host, "POST", "/echo/x", ("override_header",), (),
                                    b"_method=DELETE")
            with self.subTest(host=host, what="100-continue"):
                self.assert_refused(tls, host, "POST", "/echo/x", ("override_header",),
                                    form + [("Expect", "100-continue")], b"_method=DELETE")
            with self.subTest(host=host, what="over the limit"):
                self.assert_refused(tls, host, "POST", "/echo/x", ("override_header",), form,
                                    b"a=" + b"x" * (70 << 10) + b"&_method=DELETE")
            # An ordinary form passes, body and all.
            up = self.upstream(tls)
            before = len(up.requests)
            status, _, _ = self.send(tls, host, "POST", "/echo/x", form, b"a=1&method=b")
            self.assertEqual(status, 200)
            self.assertEqual(up.requests[before]["body"], b"a=1&method=b")

    def test_a_host_without_restricting_rules_is_not_affected(self):
        before = len(self.http.requests)
        status, _, _ = self.send(False, "open.test", "GET", "/echo/x?_method=DELETE",
                                 [("X-HTTP-Method-Override", "DELETE")])
        self.assertEqual(status, 200)
        self.assertEqual(len(self.http.requests), before + 1)
        status, _, _ = self.send(False, "open.test", "POST", "/echo/x",
                                 [("Content-Type", "application/x-www-form-urlencoded")],
                                 b"_method=DELETE")
        self.assertEqual(status, 200)
        self.assertEqual(self.http.requests[before + 1]["body"], b"_method=DELETE")


if __name__ == "__main__":
    unittest.main()
