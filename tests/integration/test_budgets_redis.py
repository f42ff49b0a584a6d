"""Budgets shared across replicas through a real Redis (issue #41 stage 3: `state.redis`).

A redis-server of the test's own (127.0.0.1, a free port, no persistence, a password) and
several `sandgate serve` replicas pointed at it. The client is the attacker: it spreads its
requests over the replicas to get more than its budget, and keeps sending while Redis is away.
Each test asserts what the client got, what the upstream saw and what the audit says; the
Redis password is registered for the suite's leak check (logs, audit lines, metrics).
"""

import json
import os
import statistics
import threading
import time
import unittest

import artifacts
from redis_server import RedisServer
from sandgate_fixture import Sandgate, read_response, read_response_head, wait_until
from slow_relay import SlowRelay
from upstreams import HttpUpstream

TOKEN = "redis-bud-get"
PASSWORD = "redis-pass-7f3a9c21e4b8"
WRONG = "wrong-redis-pass-55d0e6"
RATE = 2  # new connections per second (a burst of 2) for task `rated`
LEASED = 320  # task `leased`: a replica leases blocks of LEASED / 32 = 10 requests


class RedisBudgetsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        artifacts.register_secret("redis-password", PASSWORD)
        artifacts.register_secret("redis-wrong-password", WRONG)
        cls.redis = RedisServer(PASSWORD).start()
        cls.up = HttpUpstream()
        cls.replicas = {}

    @classmethod
    def tearDownClass(cls):
        for sg in cls.replicas.values():
            sg.cleanup()
        cls.redis.cleanup()
        cls.up.close()

    @classmethod
    def replica(cls, name, fail="closed", password=PASSWORD, prefix="it:"):
        """A serve replica sharing the test's Redis; one budget per task, all `run` windows."""
        rule = {"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}
        policies = {"shared": {"allow": [rule],
                               "budgets": [{"name": "calls", "window": "run", "requests": 5}]},
                    "free": {"allow": [rule]},
                    "small": {"allow": [rule],
                              "budgets": [{"name": "calls", "window": "run", "requests": 3}]},
                    "wide": {"allow": [rule],
                             "budgets": [{"name": "calls", "window": "run",
                                          "requests": LEASED}]}}
        tasks = [{"name": "pair", "policy": "shared", "token": TOKEN},
                 {"name": "rated", "policy": "free", "token": TOKEN,
                  "limits": {"new_connections_per_second": RATE}},
                 {"name": "outage", "policy": "small", "token": TOKEN},
                 {"name": "open", "policy": "small", "token": TOKEN},
                 {"name": "wrong", "policy": "small", "token": TOKEN},
                 {"name": "leased", "policy": "wide", "token": TOKEN}]
        sg = Sandgate(policies, tasks, resolve={"api.test": "127.0.0.1:%d" % cls.up.port})
        pw_file = sg.secret_file("redis-" + name, password)
        sg.config["credentials"] = {"redis": {"source": {"file": pw_file}}}
        sg.config["state"] = {"redis": {"url": "redis://127.0.0.1:%d/0" % cls.redis.port,
                                        "password": "redis", "fail": fail,
                                        "key_prefix": prefix}}
        sg.write_config(sg.config)
        cls.replicas[name] = sg.start()
        return sg

    def send(self, sg, task, path):
        s = sg.connect()
        try:
            s.sendall(("GET http://api.test%s HTTP/1.1\r\nHost: api.test\r\n%s"
                       "Connection: close\r\n\r\n" % (path, Sandgate.auth_header(task, TOKEN)))
                      .encode())
            return read_response(s)
        finally:
            s.close()

    def wait_relinked(self, marks):
        """Until every replica that was linked to Redis when it stopped (`marks`: the length of
        its log then) has seen the link go and come back: each notices on its next use or idle
        PING, and retries with a backoff of up to 2 s. The tests after this one then find them
        counting."""
        for name, mark in marks.items():
            sg = self.replicas[name]
            def relinked():
                lines = [l for l in sg.stderr()[mark:].splitlines() if "state.redis 127.0.0.1" in l]
                return len(lines) >= 2 and lines[-1].endswith(": connected")
            wait_until(relinked, timeout=20, what="replica %s linked to Redis again" % name)

    def seen(self, path):
        return len(self.up.requests_to(path))

    def wait_counting(self, sg, task, path):
        """Until `sg` reaches Redis again (its link reconnects with backoff): a request admitted
        and counted. Bounded by wait_until's timeout."""
        def ok():
            status, _, _ = self.send(sg, task, path)
            return status == 200
        wait_until(ok, timeout=15, interval=0.1, what="%s counting through Redis again" % task)

    def test_two_replicas_share_one_budget(self):
        a = self.replicas.get("a") or self.replica("a")
        b = self.replicas.get("b") or self.replica("b")
        got = []
        for i in range(12):  # alternating: each replica alone would admit 5
            status, headers, body = self.send(a if i % 2 == 0 else b, "pair", "/echo/pair")
            got.append(status)
            if status == 429:
                self.assertEqual(headers.get("x-sandgate-reason"), "budget_exceeded")
                self.assertEqual(json.loads(body)["budget"]["used"], 5)
        self.assertEqual(got.count(200), 5, got)
        self.assertEqual(got[:5], [200] * 5, got)
        self.assertEqual(self.seen("/echo/pair"), 5)
        self.assertEqual(self.redis.command("GET", "it:sandgate:budget:pair:calls:run:0:requests"),
                         b"5")

    def evalsha_calls(self):
        stats = self.redis.info("commandstats")
        for line in stats.splitlines():
            if line.startswith("cmdstat_evalsha:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def test_leases_save_round_trips_and_never_pass_the_budget(self):
        """Issue #41's "batched locally": a replica takes a block of the budget in one round trip
        and admits from it; two replicas together still admit exactly the budget."""
        a = self.replicas.get("a") or self.replica("a")
        b = self.replicas.get("b") or self.replica("b")
        before = self.evalsha_calls()
        got = []
        # One kept-alive connection per replica (the task's default connection rate would
        # refuse hundreds of new ones).
        conns = [a.connect(), b.connect()]
        try:
            for i in range(LEASED + 40):  # alternating, past the budget
                s = conns[i % 2]
                s.sendall(("GET http://api.test/echo/leased HTTP/1.1\r\nHost: api.test\r\n%s"
                           "\r\n" % Sandgate.auth_header("leased", TOKEN)).encode())
                status, headers, body = read_response(s)
                got.append(status)
                if status != 200:
                    self.assertEqual((status, headers.get("x-sandgate-reason")),
                                     (429, "budget_exceeded"), body)
                    s.close()  # a refusal ends its connection
                    conns[i % 2] = (a, b)[i % 2].connect()
        finally:
            for s in conns:
                s.close()
        # Exactly the budget; the only refusals before it was used up are those a block held
        # by the other replica caused (at most one lease, 10).
        self.assertEqual(got.count(200), LEASED, got)
        self.assertEqual(got[:LEASED - 10], [200] * (LEASED - 10), got)
        self.assertEqual(self.seen("/echo/leased"), LEASED)
        self.assertEqual(self.redis.command(
            "GET", "it:sandgate:budget:leased:calls:run:0:requests"), str(LEASED).encode())
        # A round trip per request would be LEASED + 40; with leases, one per block of 10, a few
        # exact takes near the end, and one per refusal.
        trips = self.evalsha_calls() - before
        self.assertLess(trips, LEASED // 2, trips)

    def test_a_stopping_replica_gives_its_unused_lease_back(self):
        """A lease a replica holds is not lost with it: on a graceful stop what it did not use
        goes back to Redis, for the other replicas."""
        sg = self.replica("stop", prefix="stop:")
        key = "stop:sandgate:budget:leased:calls:run:0:requests"
        self.assertEqual(self.send(sg, "leased", "/echo/stop")[0], 200)
        # One block of LEASED / 32 (or already 1 if this test stalled past the 1 s idle sweep,
        # which gives the lease back too: then the stop has nothing left to give).
        self.assertIn(self.redis.command("GET", key), (b"10", b"1"))
        self.assertEqual(sg.stop(timeout=15), 0, sg.stderr())
        self.replicas.pop("stop").cleanup()  # the tests after this one see running replicas only
        wait_until(lambda: self.redis.command("GET", key) == b"1",
                   what="the unused 9 given back at the stop")

    def test_redis_stopped_closed_refuses_open_admits_and_audits_then_resumes(self):
        closed = self.replicas.get("a") or self.replica("a")
        opened = self.replicas.get("o") or self.replica("o", fail="open", prefix="open:")
        self.assertEqual(self.send(closed, "outage", "/echo/outage")[0], 200)
        self.assertEqual(self.send(opened, "open", "/echo/open")[0], 200)
        # Admitted (its connection rate counted) while Redis was up: its next request meets the
        # budget, which cannot be counted once Redis is gone.
        kept = closed.connect()
        kept.sendall(("GET http://api.test/echo/kept HTTP/1.1\r\nHost: api.test\r\n%s\r\n" %
                      Sandgate.auth_header("outage", TOKEN)).encode())
        self.assertEqual(read_response(kept)[0], 200)
        marks = {name: len(sg.stderr()) for name, sg in self.replicas.items() if name != "w"}
        self.redis.stop()
        try:
            # Closed: nothing reaches the upstream while the budget cannot be counted, nor a new
            # connection while the task's shared rate cannot.
            for _ in range(3):
                status, headers, body = self.send(closed, "outage", "/echo/outage")
                self.assertEqual(status, 503, body)
                self.assertEqual(headers.get("x-sandgate-reason"), "rate_limit_unavailable")
            kept.sendall(("GET http://api.test/echo/kept HTTP/1.1\r\nHost: api.test\r\n%s"
                          "Connection: close\r\n\r\n" % Sandgate.auth_header("outage", TOKEN))
                         .encode())
            status, headers, body = read_response(kept)
            self.assertEqual((status, headers.get("x-sandgate-reason")),
                             (503, "budget_unavailable"), body)
            kept.close()
            self.assertEqual(self.seen("/echo/outage"), 1)
            self.assertEqual(self.seen("/echo/kept"), 1)
            rec = closed.wait_audit(task="outage", reason="budget_unavailable")
            self.assertEqual(rec["status"], 503)
            self.assertFalse(rec["budget_fail_open"])
            # Open: admitted past the budget of 3 (nothing counts), and every one audited so.
            for _ in range(4):
                self.assertEqual(self.send(opened, "open", "/echo/open")[0], 200)
            self.assertEqual(self.seen("/echo/open"), 5)
            wait_until(lambda: len([r for r in opened.audit() if r.get("task") == "open" and
                                    r.get("budget_fail_open")]) == 4,
                       what="four fail-open audit lines")
            wait_until(lambda: (opened.metric("sandgate_budget_fail_open_total") or 0) >= 4,
                       what="fail-open answers counted in the metric")
        finally:
            self.redis.start()
            self.wait_relinked(marks)
        # Restarted without its data: counting resumes from what Redis now holds (nothing).
        self.wait_counting(closed, "outage", "/echo/outage")
        self.assertEqual(self.send(closed, "outage", "/echo/outage")[0], 200)
        self.assertEqual(self.send(closed, "outage", "/echo/outage")[0], 200)
        status, headers, _ = self.send(closed, "outage", "/echo/outage")
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertEqual(self.redis.command("GET",
                                            "it:sandgate:budget:outage:calls:run:0:requests"),
                         b"3")

    def test_wrong_password_refuses_closed_and_says_why_without_the_password(self):
        sg = self.replica("w", password=WRONG, prefix="wrong:")
        wait_until(lambda: "WRONGPASS" in sg.stderr(), what="the AUTH refusal logged")
        status, headers, _ = self.send(sg, "wrong", "/echo/wrong")
        self.assertEqual((status, headers.get("x-sandgate-reason")),
                         (503, "rate_limit_unavailable"))
        self.assertEqual(self.seen("/echo/wrong"), 0)
        self.assertNotIn(WRONG, sg.stderr())
        self.assertNotIn(PASSWORD, sg.stderr())
        for replica in self.replicas.values():
            replica.metrics()  # recorded for the leak check

    def test_two_replicas_share_one_connection_rate(self):
        """The attacker opens new connections as fast as it can, alternating between two
        replicas: together they admit the task's rate (a burst of RATE, then RATE a second),
        not RATE per replica."""
        a = self.replicas.get("a") or self.replica("a")
        b = self.replicas.get("b") or self.replica("b")
        got = []
        start = time.monotonic()
        for i in range(4 * RATE):  # bounded
            status, headers, _ = self.send(a if i % 2 == 0 else b, "rated", "/echo/rated")
            got.append((status, headers.get("x-sandgate-reason")))
        elapsed = time.monotonic() - start
        admitted = [g for g in got if g[0] == 200]
        self.assertTrue(all(g == (429, "rate_limited") for g in got if g[0] != 200), got)
        # The burst, and what the rate refilled meanwhile: each replica alone would admit the
        # burst, twice it together.
        self.assertGreaterEqual(len(admitted), RATE, got)
        self.assertLessEqual(len(admitted), RATE + int(elapsed * RATE), (got, elapsed))
        self.assertEqual(self.seen("/echo/rated"), len(admitted))

    def test_the_url_may_not_carry_the_password(self):
        sg = Sandgate({"p": {"allow": [{"host": "api.test"}]}}, [])
        try:
            sg.config["state"] = {"redis": {"url": "redis://:%s@127.0.0.1:%d/0" %
                                            (PASSWORD, self.redis.port)}}
            sg.write_config(sg.config)
            with self.assertRaises(AssertionError) as err:
                sg.start(timeout=10)
            self.assertIn("state.redis.url", str(err.exception))
            self.assertNotIn(PASSWORD, sg.stderr())
        finally:
            sg.cleanup()


class SlowRedisTest(unittest.TestCase):
    """Redis answering late (a relay that holds its replies DELAY seconds) and one worker
    thread: a task whose requests wait on a budget admission must not make another task's
    requests, which count no budget, wait behind them (on a connection already admitted: a new
    connection's shared rate waits on Redis too). On the code before asynchronous
    admission the worker itself waited each round trip, and the free task's request with it."""

    DELAY = 0.2  # under the link's 250 ms reply timeout: the budgeted requests are admitted

    @classmethod
    def setUpClass(cls):
        artifacts.register_secret("redis-password", PASSWORD)
        cls.redis = RedisServer(PASSWORD).start()
        cls.relay = SlowRelay(cls.redis.port, cls.DELAY)
        cls.up = HttpUpstream()
        rule = {"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}
        policies = {"metered": {"allow": [rule], "budgets": [
                        {"name": "calls", "window": "run", "requests": 1000}]},
                    "free": {"allow": [rule]}}
        tasks = [{"name": "metered", "policy": "metered", "token": TOKEN},
                 {"name": "free", "policy": "free", "token": TOKEN}]
        cls.sg = Sandgate(policies, tasks, resolve={"api.test": "127.0.0.1:%d" % cls.up.port},
                          threads=1)
        pw_file = cls.sg.secret_file("redis-slow", PASSWORD)
        cls.sg.config["credentials"] = {"redis": {"source": {"file": pw_file}}}
        cls.sg.config["state"] = {"redis": {"url": "redis://127.0.0.1:%d/0" % cls.relay.port,
                                            "password": "redis", "key_prefix": "slow:"}}
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.relay.close()
        cls.redis.cleanup()
        cls.up.close()

    def timed(self, task, path):
        """(status, seconds) of one request on a new connection."""
        start = time.monotonic()
        s = self.sg.connect()
        try:
            s.sendall(("GET http://api.test%s HTTP/1.1\r\nHost: api.test\r\n%s"
                       "Connection: close\r\n\r\n" % (path, Sandgate.auth_header(task, TOKEN)))
                      .encode())
            status = read_response(s)[0]
        finally:
            s.close()
        return status, time.monotonic() - start

    def timed_on(self, s, task, path):
        """(status, seconds) of one request on the open connection `s`."""
        start = time.monotonic()
        s.sendall(("GET http://api.test%s HTTP/1.1\r\nHost: api.test\r\n%s\r\n" %
                   (path, Sandgate.auth_header(task, TOKEN))).encode())
        status, headers, rest = read_response_head(s)
        self.assertEqual(headers.get("transfer-encoding"), "chunked")  # relayed chunked
        while not rest.endswith(b"0\r\n\r\n"):  # a short body: its last chunk ends it
            data = s.recv(65536)
            if not data:
                break
            rest += data
        return status, time.monotonic() - start

    def test_a_request_without_a_budget_does_not_wait_behind_admissions(self):
        # The link is up and the script loaded before timing anything.
        wait_until(lambda: self.timed("metered", "/echo/warm")[0] == 200, timeout=15,
                   what="a metered request admitted through the slow Redis")
        # The free task's connection is admitted before (its new-connection rate is shared
        # through Redis too): its requests then need nothing from Redis.
        free_conn = self.sg.connect()
        self.assertEqual(self.timed_on(free_conn, "free", "/bytes?n=10")[0], 200)
        metered = []
        stop = threading.Event()

        def client():
            for _ in range(8):  # bounded: at most 8 requests per client
                if stop.is_set():
                    break
                metered.append(self.timed("metered", "/echo/metered"))

        clients = [threading.Thread(target=client) for _ in range(4)]
        for t in clients:
            t.start()
        try:
            free = []
            while len(metered) < 2:  # admissions are under way
                time.sleep(0.01)
            for _ in range(6):
                free.append(self.timed_on(free_conn, "free", "/bytes?n=10"))
        finally:
            free_conn.close()
            stop.set()
            for t in clients:
                t.join(timeout=30)
        self.assertTrue(all(st == 200 for st, _ in metered + free), (metered, free))
        # The budgeted requests did wait on Redis (each at least one round trip) ...
        self.assertGreaterEqual(min(d for _, d in metered), self.DELAY * 0.9, metered)
        # ... and the free task's did not wait behind them on the one worker.
        self.assertLess(statistics.median(d for _, d in free), self.DELAY / 2, free)


if __name__ == "__main__":
    unittest.main()
