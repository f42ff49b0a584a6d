"""Git push policy (a rule's `git:` block) with real git clients through `sandgate serve`.

A loopback fake forge over TLS with the runtime test CA (tests/support/git_server.py: `git
http-backend` as CGI, real bare repositories acme/widgets and acme/secret) sits behind
git.test; git trusts sandgate's CA (GIT_SSL_CAINFO) and reaches sandgate through HTTPS_PROXY.
The rule allows acme/widgets only, and pushes to refs/heads/agent/* only. Every refused push
must leave the bare repository as it was (refs and objects) and never reach the forge.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import artifacts
import git_server
from clients import clean_env
from pki import test_pki
from sandgate_fixture import Sandgate, binary, read_response_head, wait_until

TOKEN = "g1tpush"
GIT_SECRET = "ghp-gitpushsecret-0123456789abcdef"
GIT_STANDIN = "not-the-real-password"
WIDGETS = "acme/widgets.git"
SECRET = "acme/secret.git"

RULE_GIT = {
    "repositories": ["acme/widgets"],
    "push": {"refs": ["refs/heads/agent/*"]},
}


@unittest.skipUnless(git_server.available(), "git or git-http-backend is not installed")
class GitPushTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.forge = git_server.GitHttpsServer(cls.pki, auth=("git", GIT_SECRET),
                                              repos=(WIDGETS, SECRET))
        cls.sg = Sandgate({}, [])
        d = cls.sg.dir
        key = os.path.join(d, "git.key")
        with open(key, "w") as f:
            f.write(GIT_SECRET + "\n")
        cls.ca_out = os.path.join(d, "sandgate-ca.pem")
        policies = {"agent": {"allow": [
            {"host": "git.test", "cidrs": ["127.0.0.0/8"], "credential": "git", "git": RULE_GIT},
        ]}}
        creds = {"git": {"source": {"file": key}, "hosts": ["git.test"],
                         "inject": {"basic": {"username": "git"}}}}
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN}],
            resolve={"git.test": "127.0.0.1:%d" % cls.forge.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("demo", TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.forge.close()

    def setUp(self):
        self.home = tempfile.mkdtemp(prefix="sandgate-gitpush-")
        self.env = clean_env(HTTPS_PROXY=self.proxy, GIT_SSL_CAINFO=self.ca_out,
                             GIT_TERMINAL_PROMPT="0", HOME=self.home, GIT_CONFIG_NOSYSTEM="1",
                             GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@a",
                             GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@a")

    def tearDown(self):
        shutil.rmtree(self.home, ignore_errors=True)

    def git(self, *args, cwd=None, check=True, timeout=60):
        p = subprocess.run(["git", *args], cwd=cwd, env=self.env, capture_output=True,
                           timeout=timeout)
        artifacts.record("log", "git-" + (args[0] if args else ""), p.stdout + p.stderr)
        if check:
            self.assertEqual(p.returncode, 0, "git %s: %s" % (args, p.stderr.decode()))
        return p

    def url(self, repo):
        return "https://git:%s@git.test/%s" % (GIT_STANDIN, repo)

    def clone(self, repo=WIDGETS, name="clone"):
        dest = os.path.join(self.home, name)
        self.git("clone", "-q", self.url(repo), dest)
        return dest

    def commit(self, work, name="f", data=b"change\n"):
        with open(os.path.join(work, name), "wb") as f:
            f.write(data)
        self.git("add", name, cwd=work)
        self.git("commit", "-q", "-m", "c " + name, cwd=work)
        return self.git("rev-parse", "HEAD", cwd=work).stdout.decode().strip()

    def receive_pack_posts(self, repo=WIDGETS):
        """receive-pack requests with commands that reached the forge (not git's probe, a
        flush-pkt alone, which a large push sends first)."""
        path = "/" + repo + "/git-receive-pack"
        return sum(1 for m, p, _, n in self.forge.requests if m == "POST" and p == path and n > 4)

    def audit_refs(self, reason, since):
        """The audit line (among those after the first `since`) of the push refused (or
        allowed) with `reason`, and its git refs."""
        def find():
            for rec in self.sg.audit()[since:]:
                if (rec.get("reason") == reason and rec.get("kind") == "intercept"
                        and rec.get("path") == "/acme/widgets.git/git-receive-pack"
                        and rec["git"] and rec["git"]["refs"]):
                    return rec
            return None
        rec = wait_until(find, 10, what="the push's audit line")
        self.assertEqual(rec["git"]["repository"], "acme/widgets")
        self.assertEqual(rec["git"]["service"], "receive-pack")
        return rec, rec["git"]["refs"]

    def assert_refused(self, work, refspecs, reason, lines):
        """Pushes `refspecs` from `work`: refused with `reason` shown by git, the forge's
        repository unchanged and its receive-pack never called."""
        before = self.forge.state(WIDGETS)
        posts = self.receive_pack_posts()
        since = len(self.sg.audit())
        p = self.git("push", "origin", *refspecs, cwd=work, check=False)
        err = p.stderr.decode()
        self.assertNotEqual(p.returncode, 0, err)
        for line in lines:
            self.assertIn(line, err)
        self.assertEqual(self.forge.state(WIDGETS), before, "refs and objects unchanged")
        self.assertEqual(self.receive_pack_posts(), posts, "nothing reached the forge")
        rec, refs = self.audit_refs(reason, since)
        self.assertEqual(rec["verdict"], "deny")
        self.assertEqual(rec["status"], 200)
        self.assertIsNone(rec["upstream"], "the upstream is never dialled")
        return err, refs

    # --- fetch ------------------------------------------------------------------------------

    def test_clone_and_fetch_of_an_allowed_repository_with_protocol_v2(self):
        self.env["GIT_CONFIG_COUNT"] = "1"
        self.env["GIT_CONFIG_KEY_0"] = "protocol.version"
        self.env["GIT_CONFIG_VALUE_0"] = "2"
        work = self.clone()
        with open(os.path.join(work, "README")) as f:
            self.assertEqual(f.read(), "hello\n")
        self.git("fetch", "-q", "origin", cwd=work)
        self.assertIn(("POST", "/acme/widgets.git/git-upload-pack", "version=2"),
                      [r[:3] for r in self.forge.requests])
        rec = self.sg.wait_audit(kind="intercept", host="git.test",
                                 path="/acme/widgets.git/git-upload-pack", status=200)
        self.assertEqual(rec["git"], {"repository": "acme/widgets", "service": "upload-pack",
                                      "refs": []})

    def test_a_repository_outside_repositories_is_refused_for_fetch_and_push(self):
        dest = os.path.join(self.home, "secret")
        before = len(self.forge.requests)
        p = self.git("clone", "-q", self.url(SECRET), dest, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("403", p.stderr.decode())
        rec = self.sg.wait_audit(kind="intercept", path="/acme/secret.git/info/refs")
        self.assertEqual(rec["reason"], "git_repository_not_allowed")
        self.assertEqual(rec["status"], 403)
        self.assertEqual(rec["git"]["repository"], "acme/secret")
        # A push to it: the allowed clone's commits, sent to the other repository.
        work = self.clone()
        self.commit(work)
        self.git("remote", "add", "secret", self.url(SECRET), cwd=work)
        state = self.forge.state(SECRET)
        p = self.git("push", "secret", "HEAD:refs/heads/agent/x", cwd=work, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("403", p.stderr.decode())
        self.assertEqual(self.forge.state(SECRET), state)
        secret_paths = [r for r in self.forge.requests[before:] if "/acme/secret" in r[1]]
        self.assertEqual(secret_paths, [], "no request for acme/secret reached the forge")

    # --- push -------------------------------------------------------------------------------

    def test_a_push_to_an_agent_branch_is_accepted(self):
        work = self.clone()
        head = self.commit(work)
        since = len(self.sg.audit())
        p = self.git("push", "origin", "HEAD:refs/heads/agent/accepted", cwd=work)
        refs, objects = self.forge.state(WIDGETS)
        self.assertEqual(refs.get("refs/heads/agent/accepted"), head)
        self.assertIn(head, objects)
        rec, audit = self.audit_refs("allowed", since)
        self.assertEqual(audit[0]["ref"], "refs/heads/agent/accepted")
        self.assertEqual(audit[0]["new"], head)
        self.assertEqual(audit[0]["old"], "0" * 40)
        self.assertEqual(rec["status"], 200)
        self.assertIsNotNone(rec["upstream"])
        self.assertNotIn(GIT_SECRET, p.stderr.decode() + json.dumps(rec))

    def test_a_push_to_main_is_refused_with_the_reason_shown(self):
        work = self.clone()
        head = self.commit(work)
        err, refs = self.assert_refused(
            work, ["HEAD:main"], "git_ref_not_allowed",
            ["[remote rejected] HEAD -> main (sandgate: git_ref_not_allowed",
             "remote: sandgate: push to acme/widgets refused"])
        self.assertEqual(refs, [{"ref": "refs/heads/main", "old": self.forge.head, "new": head,
                                 "reason": "git_ref_not_allowed"}])
        self.assertGreaterEqual(self.sg.metric("sandgate_git_push_refs_total", task="demo",
                                               reason="git_ref_not_allowed") or 0, 1)
        self.assertGreaterEqual(self.sg.metric("sandgate_requests_total", task="demo",
                                               reason="git_ref_not_allowed") or 0, 1)

    def test_a_delete_is_refused(self):
        work = self.clone()
        self.commit(work)
        self.git("push", "origin", "HEAD:refs/heads/agent/to-delete", cwd=work)
        err, refs = self.assert_refused(
            work, [":refs/heads/agent/to-delete"], "git_ref_delete_not_allowed",
            ["[remote rejected] agent/to-delete (sandgate: git_ref_delete_not_allowed"])
        self.assertEqual(refs[0]["new"], "0" * 40)

    def test_a_tag_is_refused(self):
        work = self.clone()
        self.commit(work)
        self.git("tag", "v1", cwd=work)
        self.assert_refused(work, ["refs/tags/v1"], "git_tag_not_allowed",
                            ["[remote rejected] v1 -> v1 (sandgate: git_tag_not_allowed"])

    def test_a_push_mixing_allowed_and_refused_refs_is_refused_as_a_whole(self):
        work = self.clone()
        self.commit(work)
        err, refs = self.assert_refused(
            work, ["HEAD:refs/heads/agent/mixed", "HEAD:main"], "git_ref_not_allowed",
            ["HEAD -> agent/mixed (sandgate: push refused as a whole (git_ref_not_allowed))",
             "HEAD -> main (sandgate: git_ref_not_allowed"])
        self.assertEqual(sorted((r["ref"], r["reason"]) for r in refs),
                         [("refs/heads/agent/mixed", "allowed"),
                          ("refs/heads/main", "git_ref_not_allowed")])

    def test_a_pack_larger_than_the_head_buffer(self):
        # 3 MiB that does not compress: more than the 64 KiB head limit and than git's 1 MiB
        # http.postBuffer, so git probes first and then sends the pack chunked.
        work = self.clone()
        head = self.commit(work, "big.bin", os.urandom(3 << 20))
        self.assert_refused(work, ["HEAD:main"], "git_ref_not_allowed",
                            ["HEAD -> main (sandgate: git_ref_not_allowed"])
        self.git("push", "origin", "HEAD:refs/heads/agent/big", cwd=work)
        refs, objects = self.forge.state(WIDGETS)
        self.assertEqual(refs.get("refs/heads/agent/big"), head)
        self.assertIn(head, objects)
        fsck = subprocess.run(["git", "-C", os.path.join(self.forge.dir, WIDGETS), "fsck",
                               "--no-dangling"], capture_output=True, timeout=60)
        self.assertEqual(fsck.returncode, 0, fsck.stderr.decode())

    # --- the attacker's side: requests git would not send ------------------------------------

    def raw_push(self, path, body, framing="content-length"):
        """A push request written by hand inside the intercepted tunnel: (status, headers, rest)."""
        s = self.sg.tls_tunnel("git.test", "demo", TOKEN, self.ca_out)
        try:
            if framing == "chunked":
                # One byte a chunk: the framing around the command list is five times its size.
                framed = b"".join(b"1\r\n" + body[i:i + 1] + b"\r\n" for i in range(len(body)))
                framed += b"0\r\n\r\n"
                length = b"Transfer-Encoding: chunked\r\n"
            else:
                framed = body
                length = b"Content-Length: %d\r\n" % len(body)
            s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: git.test\r\n"
                      b"Content-Type: application/x-git-receive-pack-request\r\n" + length +
                      b"\r\n" + framed)
            return read_response_head(s)
        finally:
            s.close()

    @staticmethod
    def pkt(payload):
        return b"%04x" % (len(payload) + 4) + payload

    def command_list(self, ref, caps=b"report-status"):
        return self.pkt(b"%s %s %s\0%s" % (self.forge.head.encode(), b"1" * 40, ref, caps)) + b"0000"

    def test_an_encoded_or_oddly_spelled_endpoint_is_judged_too(self):
        posts = self.receive_pack_posts()
        state = self.forge.state(WIDGETS)
        status, headers, _ = self.raw_push("/acme/widgets.git/git%2Dreceive-pack",
                                           self.command_list(b"refs/heads/main"))
        self.assertEqual((status, headers.get("x-sandgate-reason")),
                         (403, "git_repository_not_allowed"))
        # Another case only: still this repository, judged ref by ref.
        status, headers, rest = self.raw_push("/acme/widgets.git/Git-Receive-Pack",
                                              self.command_list(b"refs/heads/main"))
        self.assertEqual((status, headers.get("x-sandgate-reason")), (200, "git_ref_not_allowed"))
        self.assertIn(b"ng refs/heads/main sandgate: git_ref_not_allowed", rest)
        # Any other spelling (here a trailing slash) never matches a repository (#38 item 1;
        # test_path_spelling has the rest).
        status, headers, _ = self.raw_push("/acme/widgets.git/Git-Receive-Pack/",
                                           self.command_list(b"refs/heads/main"))
        self.assertEqual((status, headers.get("x-sandgate-reason")),
                         (403, "git_repository_not_allowed"))
        self.assertEqual(self.forge.state(WIDGETS), state)
        self.assertEqual(self.receive_pack_posts(), posts)

    def test_unreadable_command_lists_are_refused_never_forwarded(self):
        posts = self.receive_pack_posts()
        path = "/acme/widgets.git/git-receive-pack"
        cases = [
            ("not pkt-lines", b"hello, upstream", "content-length"),
            ("signed push", self.pkt(b"push-cert\0report-status\n") + b"0000", "content-length"),
            ("body ends early", self.command_list(b"refs/heads/agent/x")[:-4], "content-length"),
            # Longer than limits.max_header_bytes (64 KiB) before its flush-pkt.
            ("too long", b"".join(self.pkt(b"%s %s refs/heads/agent/b%05d" % (
                b"0" * 40, b"1" * 40, i)) for i in range(1200)) + b"0000", "content-length"),
            ("too long in tiny chunks", b"".join(self.pkt(b"%s %s refs/heads/agent/c%05d" % (
                b"0" * 40, b"1" * 40, i)) for i in range(400)) + b"0000", "chunked"),
        ]
        for name, body, framing in cases:
            status, headers, _ = self.raw_push(path, body, framing)
            self.assertEqual((status, headers.get("x-sandgate-reason")),
                             (400, "git_protocol_error"), name)
        self.assertEqual(self.receive_pack_posts(), posts, "nothing reached the forge")

    def test_a_second_content_encoding_field_is_refused(self):
        # A server reads every Content-Encoding field line as one list (RFC 9110, 5.3):
        # "identity" then "gzip" is a gzip body, whose commands the gate would not have read.
        # The command list itself is allowed, so only the coding can refuse it (issue #38).
        posts = self.receive_pack_posts()
        path = "/acme/widgets.git/git-receive-pack"
        body = self.command_list(b"refs/heads/agent/coded")
        for codings in ([b"identity", b"gzip"], [b"identity, gzip"], [b"identity", b"x-custom"]):
            s = self.sg.tls_tunnel("git.test", "demo", TOKEN, self.ca_out)
            try:
                s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: git.test\r\n"
                          b"Content-Type: application/x-git-receive-pack-request\r\n" +
                          b"".join(b"Content-Encoding: %s\r\n" % c for c in codings) +
                          b"Content-Length: %d\r\n\r\n" % len(body) + body)
                status, headers, _ = read_response_head(s)
            finally:
                s.close()
            self.assertEqual((status, headers.get("x-sandgate-reason")),
                             (400, "git_protocol_error"), codings)
        self.assertEqual(self.receive_pack_posts(), posts, "nothing reached the forge")

    # --- policy check / policy test ---------------------------------------------------------

    def check(self, *args):
        p = subprocess.run([binary(), "policy", "check", "--config", self.sg.config_path,
                            "--task", "demo", "--json", *args], capture_output=True, timeout=30)
        out = json.loads(p.stdout) if p.stdout else {}
        return p.returncode, out, p.stderr.decode()

    def test_policy_check_and_test_understand_git_pushes(self):
        url = "https://git.test/acme/widgets.git"
        rc, out, err = self.check("--git-push", "refs/heads/main", url)
        self.assertEqual((rc, out.get("reason")), (1, "git_ref_not_allowed"), err)
        self.assertEqual(out["git_push"], "refs/heads/main")
        rc, out, err = self.check("--git-push", "refs/heads/agent/x", url)
        self.assertEqual((rc, out.get("verdict")), (0, "allow"), err)
        rc, out, err = self.check("--git-push", ":refs/heads/agent/x", url)
        self.assertEqual((rc, out.get("reason")), (1, "git_ref_delete_not_allowed"), err)
        rc, out, err = self.check("--git-push", "refs/tags/v1", url)
        self.assertEqual((rc, out.get("reason")), (1, "git_tag_not_allowed"), err)
        rc, out, err = self.check("--git-push", "refs/heads/agent/x",
                                  "https://git.test/acme/secret")
        self.assertEqual((rc, out.get("reason")), (1, "git_repository_not_allowed"), err)
        rc, out, err = self.check("--git-push", "refs/heads/agent/x", "git.test:443")
        self.assertEqual(rc, 2, "a push needs the repository's URL")
        cases = os.path.join(self.home, "cases.yaml")
        with open(cases, "w") as f:
            json.dump({"config": self.sg.config_path, "cases": [
                {"task": "demo", "target": url, "git_push": "refs/heads/main", "expect": "deny",
                 "reason": "git_ref_not_allowed"},
                {"task": "demo", "target": url, "git_push": "refs/heads/agent/y",
                 "expect": "allow"},
                {"name": "wrong on purpose", "task": "demo", "target": url,
                 "git_push": "refs/heads/main", "expect": "allow"},
            ]}, f)
        p = subprocess.run([binary(), "policy", "test", cases], capture_output=True, timeout=30)
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 1, out)
        self.assertIn("2 passed, 1 failed", out)
        self.assertIn("wrong on purpose", out)
        self.assertIn("git push refs/heads/main", out)


if __name__ == "__main__":
    unittest.main()
