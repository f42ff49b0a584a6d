"""on_unknown: ask on a real `sandgate serve`, answered by `sandgate approve` from a second
process through the admin socket.

A request the task's policy refuses only for want of a rule is held until an operator answers:
allow (once, for the run, always), deny (approval_denied) or nobody (approval_timeout).
Identical requests wait on one question; a full queue refuses at once; held requests cost no
worker thread; an approved request never gets a credential; a guardrail (a deny rule, an address
literal in a denied range) is refused at once, never asked about. "always" writes a rule to the
approvals file, which a reload (SIGHUP) loads into the task's policy. A local user who is not
root cannot list or answer, even through a socket whose mode was loosened. Upstreams are loopback
stand-ins pinned by `resolve:`.
"""

import concurrent.futures
import os
import signal
import socket
import subprocess
import time
import unittest

from clients import curl
from run_support import TemporaryUser
from sandgate_fixture import Sandgate, binary, wait_until
from upstreams import HttpUpstream

TOKEN = "tok-asker"
SECRET = "sk-askmodesecret-0123456789abcdef"
NAMES = ["api.test", "new.test", "other.test", "blocked.test", "tunnel.test", "always.test",
         "flood.test", "allowed.test", "run.test", "pair.test", "full.test"]


def _header(request, name):
    return [v for k, v in request["headers"] if k.lower() == name]


class AskTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        cls.sg = Sandgate({}, [], threads=2)
        rule = {"ports": [80], "cidrs": ["127.0.0.0/8"]}
        creds = {"api": {"source": {"file": cls.sg.secret_file("api", SECRET)},
                         "hosts": ["api.test"], "allow_plaintext": True, "placeholder": "API_KEY",
                         "inject": {"header": "X-Api-Key", "value": "{secret}"}}}
        policies = {"agent": {
            "allow": [dict(rule, host="api.test", credential="api", methods=["GET"]),
                      dict(rule, host="allowed.test")],
            "deny": [{"host": "blocked.test"}],
        }}
        pinned = "127.0.0.1:%d" % cls.up.port
        cls.approvals = os.path.join(cls.sg.dir, "approvals-asker.yaml")
        cls.sg.config = cls.sg.make_config(
            policies,
            [{"name": "asker", "policy": "agent", "token": TOKEN, "on_unknown": "ask",
              "ask": {"timeout": "30s", "approvals": "approvals-asker.yaml", "max_pending": 64}},
             {"name": "quick", "policy": "agent", "token": TOKEN, "on_unknown": "ask",
              "ask": {"timeout": "1s"}},
             {"name": "small", "policy": "agent", "token": TOKEN, "on_unknown": "ask",
              "ask": {"timeout": "30s", "max_pending": 2}}],
            resolve={n: pinned for n in NAMES},
            extra={"credentials": creds})
        cls.sg.config["listen"]["admin"] = cls.sg.admin_path
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("asker", TOKEN)
        cls.pool = concurrent.futures.ThreadPoolExecutor(max_workers=8)

    @classmethod
    def tearDownClass(cls):
        # Deny whatever a failed test left waiting, so that serve stops without a grace wait.
        try:
            for q in cls.questions():
                cls.approve("deny", str(q["id"]))
        finally:
            cls.pool.shutdown(wait=True)
            cls.sg.cleanup()
            cls.up.close()

    # --- helpers -------------------------------------------------------------------------

    @classmethod
    def approve(cls, *args, user=None):
        """`sandgate approve --config C ARGS`; as `user`: with --socket (the config is in a
        directory only root may enter, and what is tested is the socket's peer check)."""
        kw = user.popen_args() if user else {}
        where = ["--socket", cls.sg.admin_path] if user else ["--config", cls.sg.config_path]
        return subprocess.run([binary(), "approve"] + where + list(args),
                              capture_output=True, text=True, timeout=30, **kw)

    @classmethod
    def questions(cls):
        p = cls.approve("list")
        assert p.returncode == 0, p.stderr
        out = []
        for line in p.stdout.splitlines():
            qid, task, request, reason, waiting = line.split("\t")
            out.append({"id": int(qid), "task": task, "request": request, "reason": reason,
                        "waiting": int(waiting.split()[1])})
        return out

    def question_for(self, request, waiting=1):
        """Waits until `approve list` shows the question about `request` ("GET host:80/path")
        with `waiting` requests held on it."""
        def find():
            for q in self.questions():
                if q["request"] == request and q["waiting"] >= waiting:
                    return q
            return None
        return wait_until(find, 10, interval=0.05, what="question %s" % request)

    def get(self, url, *args, proxy=None):
        return self.pool.submit(curl, url, *args, proxy=proxy or self.proxy, timeout=45)

    # --- tests ---------------------------------------------------------------------------

    def test_allow_once_lets_the_held_request_through_and_audits_who(self):
        held = self.get("http://new.test/echo/ask-once")
        q = self.question_for("GET new.test:80/echo/ask-once")
        self.assertEqual((q["task"], q["reason"]), ("asker", "no_matching_rule"))
        self.assertFalse(held.done())  # held, not refused
        p = self.approve("allow", str(q["id"]), "--once")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith("%d\t" % q["id"]), p.stdout)
        r = held.result()
        self.assertEqual(r.status, 200, r.stderr)
        self.assertEqual(len(self.up.requests_to("/echo/ask-once")), 1)
        rec = self.sg.wait_audit(path="/echo/ask-once")
        self.assertEqual((rec["verdict"], rec["reason"]), ("allow", "approved"))
        self.assertEqual(rec["approval"], {"id": q["id"], "answer": "once", "by_uid": 0,
                                           "by_user": "root"})
        self.assertFalse(rec["injected"])
        # Once: the same request again is asked about again.
        again = self.get("http://new.test/echo/ask-once")
        q2 = self.question_for("GET new.test:80/echo/ask-once")
        self.assertNotEqual(q2["id"], q["id"])
        self.assertEqual(self.approve("deny", str(q2["id"])).returncode, 0)
        self.assertEqual(again.result().status, 403)

    def test_deny_refuses_with_approval_denied(self):
        held = self.get("http://new.test/echo/ask-deny")
        q = self.question_for("GET new.test:80/echo/ask-deny")
        p = self.approve("deny", str(q["id"]))
        self.assertEqual(p.returncode, 0, p.stderr)
        r = held.result()
        self.assertEqual(r.status, 403, r.stderr)
        self.assertEqual(dict(r.headers).get("x-sandgate-reason"), "approval_denied")
        self.assertEqual(self.up.requests_to("/echo/ask-deny"), [])
        rec = self.sg.wait_audit(path="/echo/ask-deny")
        self.assertEqual((rec["verdict"], rec["reason"]), ("deny", "approval_denied"))
        self.assertEqual(rec["approval"]["answer"], "deny")
        self.assertEqual(rec["approval"]["by_uid"], 0)
        # An answered question is gone: answering it again is an error, not a second decision.
        again = self.approve("allow", str(q["id"]))
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("unknown_question", again.stderr)

    def test_nobody_answers_then_approval_timeout(self):
        start = time.monotonic()
        r = curl("http://new.test/echo/ask-timeout", proxy=self.sg.proxy_url("quick", TOKEN))
        took = time.monotonic() - start
        self.assertEqual(r.status, 403, r.stderr)
        self.assertEqual(dict(r.headers).get("x-sandgate-reason"), "approval_timeout")
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 10)
        self.assertEqual(self.up.requests_to("/echo/ask-timeout"), [])
        rec = self.sg.wait_audit(path="/echo/ask-timeout")
        self.assertEqual(rec["approval"]["answer"], "timeout")
        self.assertIsNone(rec["approval"]["by_uid"])
        # The question went with its last request.
        self.assertFalse([q for q in self.questions() if q["task"] == "quick"])

    def test_identical_concurrent_requests_wait_on_one_question(self):
        first = self.get("http://pair.test/echo/ask-pair")
        self.question_for("GET pair.test:80/echo/ask-pair")
        second = self.get("http://pair.test/echo/ask-pair")
        q = self.question_for("GET pair.test:80/echo/ask-pair", waiting=2)
        self.assertEqual(len([x for x in self.questions()
                              if x["request"] == "GET pair.test:80/echo/ask-pair"]), 1)
        self.assertEqual(self.approve("allow", str(q["id"])).returncode, 0)
        self.assertEqual((first.result().status, second.result().status), (200, 200))
        self.assertEqual(len(self.up.requests_to("/echo/ask-pair")), 2)

    def test_allow_run_remembers_the_request_for_the_process(self):
        held = self.get("http://run.test/echo/ask-run")
        q = self.question_for("GET run.test:80/echo/ask-run")
        self.assertEqual(self.approve("allow", str(q["id"]), "--run").returncode, 0)
        self.assertEqual(held.result().status, 200)
        r = curl("http://run.test/echo/ask-run", proxy=self.proxy)  # no question this time
        self.assertEqual(r.status, 200, r.stderr)
        recs = [x for x in self.sg.audit() if x.get("path") == "/echo/ask-run"]
        wait_until(lambda: len([x for x in self.sg.audit()
                                if x.get("path") == "/echo/ask-run"]) == 2, 10)
        recs = [x for x in self.sg.audit() if x.get("path") == "/echo/ask-run"]
        self.assertEqual([x["approval"]["answer"] for x in recs], ["run", "remembered"])
        # Only that request: another path is asked about.
        other = self.get("http://run.test/echo/ask-run-other")
        q2 = self.question_for("GET run.test:80/echo/ask-run-other")
        self.approve("deny", str(q2["id"]))
        self.assertEqual(other.result().status, 403)

    def test_an_approved_request_never_gets_a_credential(self):
        ph = self.sg.token_env("asker")["env"]["API_KEY"]
        # POST to the credential's host: its rule lists GET only (method_not_allowed: asked).
        held = self.get("http://api.test/echo/ask-post", "-X", "POST", "-d", "x=1",
                        "-H", "X-Api-Key: " + ph)
        q = self.question_for("POST api.test:80/echo/ask-post")
        self.assertEqual(q["reason"], "method_not_allowed")
        self.approve("allow", str(q["id"]))
        r = held.result()
        self.assertNotIn(SECRET.encode(), r.body)
        for req in self.up.requests_to("/echo/ask-post"):
            self.assertNotIn(SECRET, repr(req))
        rec = self.sg.wait_audit(path="/echo/ask-post")
        self.assertFalse(rec["injected"])
        # Without the placeholder it goes through, with no key at all.
        held = self.get("http://api.test/echo/ask-post2", "-X", "POST", "-d", "x=1")
        q = self.question_for("POST api.test:80/echo/ask-post2")
        self.approve("allow", str(q["id"]))
        self.assertEqual(held.result().status, 200)
        self.assertEqual([_header(x, "x-api-key") for x in self.up.requests_to("/echo/ask-post2")],
                         [[]])

    def test_guardrails_refuse_at_once_without_a_question(self):
        for url, why in [("http://blocked.test/echo/ask-blocked", "denied_by_rule"),
                         ("http://127.0.0.1:%d/echo/ask-literal" % self.up.port,
                          "address_denied")]:
            with self.subTest(url):
                start = time.monotonic()
                r = curl(url, proxy=self.proxy)
                self.assertLess(time.monotonic() - start, 5)
                self.assertEqual(r.status, 403, r.stderr)
                self.assertEqual(dict(r.headers).get("x-sandgate-reason"), why)
        self.assertFalse([q for q in self.questions() if "ask-blocked" in q["request"] or
                          "ask-literal" in q["request"]])

    def test_a_connect_tunnel_is_asked_about_then_spliced(self):
        # curl -p: CONNECT tunnel.test:80, then plain HTTP inside it.
        held = self.get("http://tunnel.test/echo/ask-tunnel", "-p")
        q = self.question_for("CONNECT tunnel.test:80")
        self.assertEqual(self.approve("allow", str(q["id"])).returncode, 0)
        r = held.result()
        self.assertEqual(r.status, 200, r.stderr)
        self.assertEqual(len(self.up.requests_to("/echo/ask-tunnel")), 1)
        rec = self.sg.wait_audit(host="tunnel.test", kind="tunnel")
        self.assertEqual(rec["reason"], "approved")
        # Denied: the CONNECT gets approval_denied and nothing reaches the upstream.
        held = self.get("http://tunnel.test/echo/ask-tunnel-denied", "-p")
        q = self.question_for("CONNECT tunnel.test:80")
        self.approve("deny", str(q["id"]))
        r = held.result()
        self.assertEqual(r.connect_status, 403)
        self.assertEqual(self.up.requests_to("/echo/ask-tunnel-denied"), [])

    def test_a_full_queue_refuses_at_once(self):
        small = self.sg.proxy_url("small", TOKEN)
        held = [self.get("http://full.test/echo/ask-full-%d" % i, proxy=small) for i in range(2)]
        for i in range(2):
            self.question_for("GET full.test:80/echo/ask-full-%d" % i)
        start = time.monotonic()
        r = curl("http://full.test/echo/ask-full-2", proxy=small)
        self.assertLess(time.monotonic() - start, 5)
        self.assertEqual(r.status, 429, r.stderr)
        self.assertEqual(dict(r.headers).get("x-sandgate-reason"), "approval_queue_full")
        for q in self.questions():
            if q["task"] == "small":
                self.approve("deny", str(q["id"]))
        self.assertEqual([h.result().status for h in held], [403, 403])

    def test_held_requests_hold_no_worker_thread(self):
        # 40 held requests on a serve with 2 worker threads; an allowed request still gets
        # through at once. Raw sockets: the held requests need no client thread each.
        socks = []
        try:
            for i in range(40):
                s = socket.create_connection(("127.0.0.1", self.sg.proxy_port), timeout=10)
                s.sendall(("GET http://flood.test/echo/ask-flood-%d HTTP/1.1\r\n"
                           "Host: flood.test\r\n%s\r\n"
                           % (i, self.sg.auth_header("asker", TOKEN))).encode())
                socks.append(s)
            wait_until(lambda: len([q for q in self.questions()
                                    if "ask-flood" in q["request"]]) == 40, 15,
                       interval=0.1, what="40 questions")
            start = time.monotonic()
            r = curl("http://allowed.test/echo/ask-allowed", proxy=self.proxy)
            self.assertEqual(r.status, 200, r.stderr)
            self.assertLess(time.monotonic() - start, 3)
        finally:
            for q in self.questions():
                if "ask-flood" in q["request"]:
                    self.approve("deny", str(q["id"]))
            for s in socks:
                s.close()

    def test_allow_always_writes_the_approvals_file_and_a_reload_loads_it(self):
        held = self.get("http://always.test/echo/ask-always")
        q = self.question_for("GET always.test:80/echo/ask-always")
        p = self.approve("allow", str(q["id"]), "--always")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(held.result().status, 200)
        with open(self.approvals) as f:
            text = f.read()
        self.assertIn("allow:", text)
        self.assertIn('host: "always.test"', text)
        self.assertIn('paths: ["/echo/ask-always"]', text)
        # The name is pinned by resolve: (to loopback): the rule carries exactly that address.
        self.assertIn('cidrs: ["127.0.0.1/32"]', text)
        self.assertIn("approved by root (uid 0)", text)
        # The file is a valid part of the config (policy lint reads it too).
        lint = subprocess.run([binary(), "policy", "lint", self.sg.config_path],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        # Until the reload it behaves like --run; after it, a rule of the policy admits it.
        os.kill(self.sg.proc.pid, signal.SIGHUP)
        wait_until(lambda: (self.sg.metric("sandgate_config_reloads_total", result="ok") or 0) >= 1,
                   10, interval=0.1, what="reload")
        r = curl("http://always.test/echo/ask-always", proxy=self.proxy)
        self.assertEqual(r.status, 200, r.stderr)
        wait_until(lambda: len([x for x in self.sg.audit()
                                if x.get("path") == "/echo/ask-always"]) == 2, 10)
        last = [x for x in self.sg.audit() if x.get("path") == "/echo/ask-always"][-1]
        self.assertEqual((last["verdict"], last["reason"]), ("allow", "allowed"))
        self.assertIsNone(last["approval"])
        self.assertIn("approvals-asker.yaml", last["rule"] or "")

    def test_a_bad_approvals_file_is_a_config_error_naming_its_file_and_line(self):
        d = os.path.join(self.sg.dir, "bad")
        os.mkdir(d)
        cfg = dict(self.sg.config)
        cfg["tasks"] = [dict(self.sg.config["tasks"][0], ask={"approvals": "approvals.yaml"})]
        cfg.pop("listen", None)
        with open(os.path.join(d, "sandgate.yaml"), "w") as f:
            f.write(__import__("json").dumps(cfg))
        cases = [
            ("deny:\n  - host: x.test\n", 1, "only `allow:`"),
            ("allow:\n  - host: x.test\n    credential: api\n", 2, "`credential`"),
            ("allow:\n  - host: x.test\n    ports: [80]\n    cidrs: [10.0.0.0/8]\n", 4,
             "cidrs"),
            ("allow:\n  - host: api.test\n    git: {repositories: [a/b]}\n", 2, "`git`"),
        ]
        for text, line, why in cases:
            with self.subTest(text=text):
                with open(os.path.join(d, "approvals.yaml"), "w") as f:
                    f.write(text)
                p = subprocess.run([binary(), "policy", "lint", os.path.join(d, "sandgate.yaml")],
                                   capture_output=True, text=True, timeout=30)
                out = p.stdout + p.stderr
                self.assertNotEqual(p.returncode, 0, out)
                self.assertIn(os.path.join(d, "approvals.yaml") + ":%d:" % line, out)
                self.assertIn(why, out)

    def test_a_local_user_who_is_not_root_cannot_list_or_answer(self):
        held = self.get("http://other.test/echo/ask-user")
        q = self.question_for("GET other.test:80/echo/ask-user")
        os.chmod(self.sg.config_path, 0o644)
        mode = os.stat(self.sg.admin_path).st_mode & 0o777
        with TemporaryUser() as user:
            for args in (["list"], ["allow", str(q["id"])], ["deny", str(q["id"])]):
                with self.subTest(args=args):
                    p = self.approve(*args, user=user)
                    self.assertNotEqual(p.returncode, 0, p.stdout)
                    self.assertNotIn("other.test", p.stdout)
            # A socket whose mode was loosened by hand grants nothing more: the peer check
            # (SO_PEERCRED at connect) still refuses.
            os.chmod(self.sg.admin_path, 0o666)
            try:
                for args in (["list"], ["allow", str(q["id"])]):
                    with self.subTest(args=args, loosened=True):
                        p = self.approve(*args, user=user)
                        self.assertNotEqual(p.returncode, 0, p.stdout)
                        self.assertIn("permission_denied", p.stderr)
                        self.assertNotIn("other.test", p.stdout)
            finally:
                os.chmod(self.sg.admin_path, mode)
        self.assertFalse(held.done())
        self.assertIn(q["id"], [x["id"] for x in self.questions()])
        self.approve("deny", str(q["id"]))
        self.assertEqual(held.result().status, 403)


if __name__ == "__main__":
    unittest.main()
