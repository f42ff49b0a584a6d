"""Budgets (issue #41): a task's requests, request bytes and response bytes per window, counted
in-process by `sandgate serve`. The client is the attacker: it keeps sending once a budget is
used up, announces bodies larger than the budget, sends chunked bodies of unannounced size.
Each test asserts what the client got (429 budget_exceeded, Retry-After, the budget in the
body), what the audit line says (budget, window, used, limit) and what the upstream saw (a
refused request never reaches it).
"""

import base64
import concurrent.futures
import hashlib
import hmac
import json
import os
import signal
import time
import unittest

import artifacts
from sandgate_fixture import Sandgate, read_response, read_response_head, wait_until
from upstreams import HttpUpstream, TcpEcho

TOKEN = "bud-get"
HS_KEY = "budget-token-shared-key-0123456789abcdef"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256(claims):
    """A task token (JWT) signed here with the shared key: claims the CLI cannot write."""
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = b64url(json.dumps(claims).encode())
    sig = hmac.new(HS_KEY.encode(), ("%s.%s" % (head, body)).encode(), hashlib.sha256).digest()
    token = "%s.%s.%s" % (head, body, b64url(sig))
    artifacts.register_secret("token-%s" % hashlib.sha256(token.encode()).hexdigest()[:8], token)
    return token


def settled(sg, task, count):
    """Waits for `count` answered exchanges of `task` to be settled. Each is settled as it ends,
    just before its audit line is written; its client has the last byte a moment earlier, so a
    request sent at once could be admitted before the bytes are counted (README, Budgets)."""
    wait_until(lambda: len([r for r in sg.audit()
                            if r.get("task") == task and r.get("status") == 200]) >= count,
               what="%d exchanges of %s settled" % (count, task))


def budget_cfg(name, window, **limits):
    return dict({"name": name, "window": window}, **limits)


class BudgetsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        rule = {"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}
        policies = {
            "counted": {"allow": [rule],
                        "budgets": [budget_cfg("hourly", "hour", requests=3)]},
            "egress": {"allow": [rule],
                       "budgets": [budget_cfg("egress", "run", request_bytes=1000)]},
            "down": {"allow": [rule],
                     "budgets": [budget_cfg("down", "run", response_bytes=1000)]},
            "free": {"allow": [rule]},
        }
        tasks = [{"name": "a", "policy": "counted", "token": TOKEN},
                 {"name": "b", "policy": "counted", "token": TOKEN},
                 {"name": "race", "policy": "counted", "token": TOKEN},
                 {"name": "up", "policy": "egress", "token": TOKEN},
                 {"name": "dn", "policy": "down", "token": TOKEN},
                 # A task's own budget on top of its policy's (none here).
                 {"name": "own", "policy": "free", "token": TOKEN,
                  "budgets": [budget_cfg("own", "run", requests=1)]}]
        cls.sg = Sandgate(policies, tasks,
                          resolve={"api.test": "127.0.0.1:%d" % cls.up.port}).start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def send(self, task, method, path, body=None, chunked=False, announce=None, token=TOKEN):
        """One request on a connection of its own; (status, headers, body). `announce`: a
        Content-Length other than the body's (the body is then not sent: a refusal is expected
        before the upstream reads it)."""
        s = self.sg.connect()
        try:
            head = "%s http://api.test%s HTTP/1.1\r\nHost: api.test\r\n%s" % (
                method, path, Sandgate.auth_header(task, token))
            payload = b""
            if chunked:
                head += "Transfer-Encoding: chunked\r\n"
                payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
            elif announce is not None:
                head += "Content-Length: %d\r\n" % announce
            elif body is not None:
                head += "Content-Length: %d\r\n" % len(body)
                payload = body
            s.sendall((head + "Connection: close\r\n\r\n").encode() + payload)
            return read_response(s)
        finally:
            s.close()

    def seen(self, path):
        return len(self.up.requests_to(path))

    def test_requests_over_the_budget_get_429_and_never_reach_the_upstream(self):
        for i in range(3):
            status, _, _ = self.send("a", "GET", "/echo/a")
            self.assertEqual(status, 200, i)
        refused = []
        for _ in range(3):  # the client keeps trying: every one is refused
            refused.append(self.send("a", "GET", "/echo/a"))
        self.assertEqual(self.seen("/echo/a"), 3)
        for status, headers, body in refused:
            self.assertEqual(status, 429)
            self.assertEqual(headers.get("x-sandgate-reason"), "budget_exceeded")
            self.assertTrue(1 <= int(headers["retry-after"]) <= 3600, headers)
            doc = json.loads(body)
            self.assertEqual(doc["reason"], "budget_exceeded")
            self.assertEqual(doc["budget"], {"name": "hourly", "window": "hour",
                                             "metric": "requests", "used": 3, "limit": 3})
        rec = self.sg.wait_audit(task="a", reason="budget_exceeded")
        self.assertEqual(rec["status"], 429)
        self.assertEqual(rec["budget"], {"name": "hourly", "window": "hour",
                                         "metric": "requests", "used": 3, "limit": 3})
        # Counted when the request is finished, just after its answer is sent.
        wait_until(lambda: (self.sg.metric("sandgate_requests_total", task="a",
                                           reason="budget_exceeded") or 0) >= 3,
                   what="three budget_exceeded requests counted")
        # Another task under the same policy has a budget of its own.
        status, _, _ = self.send("b", "GET", "/echo/b")
        self.assertEqual(status, 200)

    def test_concurrent_requests_race_for_the_last_ones_and_only_the_budget_gets_through(self):
        # 12 connections at once against a budget of 3: exactly 3 reach the upstream, whatever
        # the order in which sandgate's workers admit them.
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            results = list(pool.map(lambda _: self.send("race", "GET", "/echo/race")[0],
                                    range(12)))
        self.assertEqual(sorted(results), [200] * 3 + [429] * 9)
        self.assertEqual(self.seen("/echo/race"), 3)

    def test_an_announced_body_larger_than_the_budget_is_refused_before_it_goes(self):
        status, headers, body = self.send("up", "POST", "/echo/big", announce=5000)
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertNotIn("retry-after", headers)  # a run budget does not refill
        self.assertEqual(json.loads(body)["budget"]["metric"], "request_bytes")
        self.assertEqual(self.seen("/echo/big"), 0)

    def test_unannounced_bodies_count_as_they_go_and_the_next_request_is_refused(self):
        status, _, _ = self.send("up", "POST", "/echo/up1", body=b"u" * 900, chunked=True)
        self.assertEqual(status, 200)
        # 900 used of 1000: admitted (its size is not known before it goes), then counted.
        status, _, _ = self.send("up", "POST", "/echo/up2", body=b"v" * 200, chunked=True)
        self.assertEqual(status, 200)
        settled(self.sg, "up", 2)
        status, headers, body = self.send("up", "POST", "/echo/up3", body=b"w" * 10)
        self.assertEqual(status, 429)
        doc = json.loads(body)
        self.assertEqual(doc["budget"]["metric"], "request_bytes")
        self.assertGreaterEqual(doc["budget"]["used"], 1100)
        self.assertEqual(self.seen("/echo/up3"), 0)

    def test_response_bytes(self):
        for n in (800, 300):
            status, _, body = self.send("dn", "GET", "/bytes?n=%d" % n)
            self.assertEqual((status, len(body)), (200, n))
        settled(self.sg, "dn", 2)
        status, headers, body = self.send("dn", "GET", "/bytes?n=1")
        self.assertEqual(status, 429)
        self.assertEqual(json.loads(body)["budget"],
                         {"name": "down", "window": "run", "metric": "response_bytes",
                          "used": 1100, "limit": 1000})

    def test_a_tasks_own_budget_applies(self):
        self.assertEqual(self.send("own", "GET", "/echo/own")[0], 200)
        status, headers, _ = self.send("own", "GET", "/echo/own")
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertEqual(self.seen("/echo/own"), 1)


class ReloadTest(unittest.TestCase):
    """A reload does not give a task its budget back: the counts live with the server, not
    with the config snapshot (a client cannot wait for the next config push to start over)."""

    def test_counts_survive_a_reload(self):
        up = HttpUpstream()
        rule = {"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}
        policies = {"p": {"allow": [rule], "budgets": [budget_cfg("two", "run", requests=2)]}}
        tasks = [{"name": "t", "policy": "p", "token": TOKEN}]
        resolve = {"api.test": "127.0.0.1:%d" % up.port}
        sg = Sandgate(policies, tasks, resolve=resolve).start()
        try:
            self.sg = sg
            for _ in range(2):
                self.assertEqual(BudgetsTest.send(self, "t", "GET", "/echo/r")[0], 200)
            sg.write_config(sg.make_config(
                policies, tasks + [{"name": "u", "policy": "p", "token": TOKEN}],
                resolve=resolve))
            os.kill(sg.proc.pid, signal.SIGHUP)
            wait_until(lambda: BudgetsTest.send(self, "u", "GET", "/echo/u")[0] == 200, 10,
                       interval=0.1, what="the reload applied")
            status, headers, _ = BudgetsTest.send(self, "t", "GET", "/echo/r")
            self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
            self.assertEqual(len(up.requests_to("/echo/r")), 2)
        finally:
            sg.cleanup()
            up.close()


class TunnelBudgetsTest(unittest.TestCase):
    """A spliced CONNECT tunnel (no interception) is measured like a request: counted as one,
    its bytes each way settled when it ends. Without that, a byte budget would hold for the
    intercepted hosts and not for a tunnel to an allowed host that carries the same bytes."""

    @classmethod
    def setUpClass(cls):
        cls.echo = TcpEcho()
        rule = {"host": "echo.test", "ports": [cls.echo.port], "cidrs": ["127.0.0.0/8"]}
        cls.sg = Sandgate(
            {"one": {"allow": [rule], "budgets": [budget_cfg("one", "run", requests=1)]},
             "bytes": {"allow": [rule],
                       "budgets": [budget_cfg("out", "run", request_bytes=1000)]}},
            [{"name": "one", "policy": "one", "token": TOKEN},
             {"name": "bytes", "policy": "bytes", "token": TOKEN}],
            resolve={"echo.test": "127.0.0.1:%d" % cls.echo.port}).start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.echo.close()

    def tunnel(self, task, payload=b""):
        """A CONNECT; with a 200, sends `payload` and reads its echo back, then closes.
        Returns (status, headers, body of a refusal)."""
        s = self.sg.connect()
        try:
            s.sendall(("CONNECT echo.test:%d HTTP/1.1\r\nHost: echo.test:%d\r\n%s\r\n" % (
                self.echo.port, self.echo.port, Sandgate.auth_header(task, TOKEN))).encode())
            status, headers, rest = read_response_head(s)
            if status != 200:
                n = int(headers.get("content-length", "0"))
                while len(rest) < n:
                    more = s.recv(65536)
                    if not more:
                        break
                    rest += more
                return status, headers, rest
            got = b""
            if payload:
                s.sendall(payload)
                while len(got) < len(payload):
                    more = s.recv(65536)
                    if not more:
                        break
                    got += more
            self.assertEqual(got, payload)
            return status, headers, b""
        finally:
            s.close()

    def test_a_tunnel_counts_as_a_request(self):
        self.assertEqual(self.tunnel("one")[0], 200)
        status, headers, body = self.tunnel("one")
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertEqual(json.loads(body)["budget"]["metric"], "requests")

    def test_a_tunnels_bytes_count_when_it_ends(self):
        self.assertEqual(self.tunnel("bytes", b"z" * 1500)[0], 200)
        # Settled when the tunnel's audit line is written (its end, seen by sandgate).
        self.sg.wait_audit(task="bytes", kind="tunnel")

        def refused():
            status, headers, body = self.tunnel("bytes")
            return status == 429 and json.loads(body)["budget"]["used"] >= 1500
        wait_until(refused, 10, interval=0.1, what="the tunnel's bytes counted")


class TokenBudgetsTest(unittest.TestCase):
    """A task token's `budgets` claim narrows the task's: the same budget with a lower limit
    (one counter), or another budget on top. A token asking for more is token_widens; a claim
    of the wrong shape is token_malformed (never read as "no budget")."""

    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        rule = {"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}
        cls.sg = Sandgate({}, [])
        key = cls.sg.secret_file("hs-key", HS_KEY)
        cls.sg.config = cls.sg.make_config(
            {"p": {"allow": [rule], "budgets": [budget_cfg("hourly", "hour", requests=5)]}},
            [{"name": "t", "policy": "p"}, {"name": "t2", "policy": "p"}],
            resolve={"api.test": "127.0.0.1:%d" % cls.up.port},
            extra={"tokens": {"keys": [{"id": "k1", "file": key}]}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    send = BudgetsTest.send

    def token(self, task, budgets):
        now = int(time.time())
        return hs256({"sub": task, "iat": now, "exp": now + 600, "budgets": budgets})

    def test_a_token_lowers_a_budget_of_the_task(self):
        token = self.token("t", [budget_cfg("hourly", "hour", requests=1)])
        self.assertEqual(self.send("t", "GET", "/echo/t1", token=token)[0], 200)
        status, headers, body = self.send("t", "GET", "/echo/t1", token=token)
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertEqual(json.loads(body)["budget"]["limit"], 1)
        self.assertEqual(len(self.up.requests_to("/echo/t1")), 1)

    def test_a_token_adds_a_budget(self):
        token = self.token("t2", [budget_cfg("mine", "run", response_bytes=10)])
        self.assertEqual(self.send("t2", "GET", "/bytes?n=20", token=token)[0], 200)
        settled(self.sg, "t2", 1)
        status, _, body = self.send("t2", "GET", "/bytes?n=20", token=token)
        self.assertEqual(status, 429)
        self.assertEqual(json.loads(body)["budget"]["name"], "mine")

    def test_a_token_cannot_widen_or_mislead(self):
        cases = [
            ("higher limit", [budget_cfg("hourly", "hour", requests=50)], "token_widens"),
            ("another window", [budget_cfg("hourly", "run", requests=1)], "token_widens"),
            ("not a list", {"name": "x"}, "token_malformed"),
            ("no limit", [{"name": "x", "window": "day"}], "token_malformed"),
            ("zero", [budget_cfg("x", "day", requests=0)], "token_malformed"),
            ("negative", [budget_cfg("x", "day", request_bytes=-1)], "token_malformed"),
            ("huge", [budget_cfg("x", "day", requests=2 ** 70)], "token_malformed"),
            ("fraction", [budget_cfg("x", "day", requests=1.5)], "token_malformed"),
            ("unknown key", [budget_cfg("x", "day", requests=1, spend_all=1)], "token_malformed"),
            ("odd name", [budget_cfg("x\x1b[31m", "day", requests=1)], "token_malformed"),
            ("twice", [budget_cfg("x", "day", requests=1)] * 2, "token_malformed"),
            ("too many", [budget_cfg("x%d" % i, "day", requests=1) for i in range(17)],
             "token_malformed"),
        ]
        for name, budgets, reason in cases:
            with self.subTest(name):
                status, headers, _ = self.send("t", "GET", "/echo/w",
                                               token=self.token("t", budgets))
                self.assertEqual((status, headers.get("x-sandgate-reason")), (407, reason))
        self.assertEqual(self.up.requests_to("/echo/w"), [])


if __name__ == "__main__":
    unittest.main()
