"""What operators see of budgets and LLM calls (issue #41, metrics): the `sandgate_llm_*`
counters (tokens, spend and calls by task and model, refusals by reason) and the budget gauges
(`sandgate_budget_used` / `sandgate_budget_limit`), read from a real `serve`'s /metrics page
after real calls through it to the tests' own OpenAI-shaped upstream.

The client is the attacker for the labels: it names models of its own choosing (no metric may
carry them: a model is a label only when the config lists or prices it), and it cannot make
a budget's gauge say less than the counters hold. With `state.redis` (a real redis-server), a
replica's gauge is what that replica last saw: it lags what another replica used until its
own next request.
"""

import json
import re
import unittest

import artifacts
from llm_upstream import LlmUpstream
from redis_server import RedisServer, use_redis
from sandgate_fixture import Sandgate, read_response, wait_until
from upstreams import HttpUpstream

TOKEN = "metr1cs-tok"
PASSWORD = "redis-metrics-pass-2c9e71"
HOSTILE_MODEL = "evil-model-label-7d1f3a"


def samples(page, name):
    """{frozenset(labels): value} of the samples of `name` on a metrics page."""
    out = {}
    for line in page.splitlines():
        m = re.match(r"^%s\{(.*)\} (\S+)$" % re.escape(name), line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            out[labels] = float(m.group(2))
    return out


def value(page, name, **labels):
    """The value of the one sample of `name` whose labels are exactly `labels`, or None."""
    return samples(page, name).get(frozenset(labels.items()))


class LlmMetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = LlmUpstream()
        listed = {"host": "api.openai.test", "ports": [80], "cidrs": ["127.0.0.0/8"],
                  "llm": {"api": "openai", "models": ["gpt-mini"], "max_tokens": 4096}}
        # No model list: any model passes, and the client names it.
        unlisted = {"host": "open.openai.test", "ports": [80], "cidrs": ["127.0.0.0/8"],
                    "llm": {"api": "openai"}}
        policies = {
            # 0.001 per input token, 0.002 per output token.
            "spend": {"allow": [listed],
                      "budgets": [{"name": "daily-spend", "window": "day", "spend": "1.00"},
                                  {"name": "calls", "window": "run", "requests": 50}]},
            "open": {"allow": [unlisted]},
        }
        tasks = [{"name": n, "policy": p, "token": TOKEN}
                 for n, p in (("payer", "spend"), ("cutter", "spend"), ("wild", "open"))]
        prices = {"currency": "USD", "models": {"gpt-mini": {"input": "1000", "output": "2000"}}}
        resolve = {h: "127.0.0.1:%d" % cls.up.port for h in ("api.openai.test",
                                                              "open.openai.test")}
        cls.sg = Sandgate(policies, tasks, resolve=resolve,
                          extra={"llm": {"prices": prices}}).start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def call(self, task, path, body, host="api.openai.test"):
        payload = json.dumps(body).encode()
        s = self.sg.connect()
        try:
            s.sendall(("POST http://%s%s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: "
                       "application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
                           host, path, host, Sandgate.auth_header(task, TOKEN), len(payload)))
                      .encode() + payload)
            status, headers, _ = read_response(s)
        finally:
            s.close()
        return status, headers

    def settled(self, task, n):
        """Once `task` has `n` audit lines: each exchange is settled before its line."""
        wait_until(lambda: len([r for r in self.sg.audit() if r.get("task") == task]) >= n,
                   what="%d audit lines of %s" % (n, task))

    def test_tokens_spend_calls_and_refusals_of_one_task(self):
        self.up.usage = (100, 200)  # 0.1 + 0.4 = 0.50 a call
        ask = {"model": "gpt-mini", "max_tokens": 100, "messages": []}
        # Each call's audit line is waited for before the next: a call is settled (its reserve
        # replaced by its usage) just before its line, and a client may see the end of the
        # response first. Otherwise a reserve still held could refuse the next call.
        self.assertEqual(self.call("payer", "/v1/chat/completions", ask)[0], 200)
        self.settled("payer", 1)
        # Streamed, without include_usage: sandgate asks for it; its usage chunk is 11 + 7.
        self.assertEqual(self.call("payer", "/v1/chat/completions",
                                   dict(ask, stream=True))[0], 200)
        self.settled("payer", 2)
        # An upstream error: no usage, no cost; a call that was made all the same.
        self.assertEqual(self.call("payer", "/error", ask)[0], 500)
        self.settled("payer", 3)
        # Refused by sandgate: a model off the list, and the budget once it is spent.
        self.assertEqual(self.call("payer", "/v1/chat/completions",
                                   dict(ask, model=HOSTILE_MODEL))[0], 403)
        self.assertEqual(self.call("payer", "/v1/chat/completions", ask)[0], 200)
        self.settled("payer", 5)
        status, headers = self.call("payer", "/v1/chat/completions", ask)
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.settled("payer", 6)

        page = self.sg.metrics()
        tokens = lambda kind: value(page, "sandgate_llm_tokens_total", task="payer",
                                    model="gpt-mini", kind=kind)
        self.assertEqual(tokens("input"), 100 + 11 + 100)
        self.assertEqual(tokens("output"), 200 + 7 + 200)
        spend = value(page, "sandgate_llm_spend_total", task="payer", model="gpt-mini")
        self.assertAlmostEqual(spend, 0.5 + 0.025 + 0.5, places=6)
        calls = lambda outcome: value(page, "sandgate_llm_calls_total", task="payer",
                                      model="gpt-mini", outcome=outcome)
        self.assertEqual((calls("ok"), calls("upstream_error")), (3, 1))
        refusals = lambda reason: value(page, "sandgate_llm_refusals_total", task="payer",
                                        reason=reason)
        self.assertEqual((refusals("model_not_allowed"), refusals("budget_exceeded")), (1, 1))

        # The budget gauges: the in-process counters, exactly.
        used = lambda budget, metric: value(page, "sandgate_budget_used", task="payer",
                                            budget=budget, window="day" if budget ==
                                            "daily-spend" else "run", metric=metric)
        limit = lambda budget, metric: value(page, "sandgate_budget_limit", task="payer",
                                             budget=budget, window="day" if budget ==
                                             "daily-spend" else "run", metric=metric)
        self.assertAlmostEqual(used("daily-spend", "spend"), 1.025, places=6)
        self.assertEqual(limit("daily-spend", "spend"), 1.0)
        # Admitted requests only: the model refusal came before the budgets, the 429 took none.
        self.assertEqual(used("calls", "requests"), 4)
        self.assertEqual(limit("calls", "requests"), 50)
        # The other task has no budget: no gauge.
        self.assertEqual([k for k in samples(page, "sandgate_budget_limit")
                          if ("task", "wild") in k], [])

    def test_a_model_the_config_does_not_name_is_other(self):
        self.up.usage = (3, 4)
        for i in range(5):  # five names of the client's: still one series
            self.assertEqual(self.call("wild", "/v1/chat/completions",
                                       {"model": "%s-%d" % (HOSTILE_MODEL, i), "max_tokens": 9},
                                       host="open.openai.test")[0], 200)
        # A name the config prices is a label even where the rule lists no models.
        self.assertEqual(self.call("wild", "/v1/chat/completions",
                                   {"model": "gpt-mini", "max_tokens": 9},
                                   host="open.openai.test")[0], 200)
        self.settled("wild", 6)
        page = self.sg.metrics()
        self.assertNotIn(HOSTILE_MODEL, page)
        self.assertEqual(value(page, "sandgate_llm_tokens_total", task="wild", model="other",
                               kind="input"), 15)
        self.assertEqual(value(page, "sandgate_llm_calls_total", task="wild", model="other",
                               outcome="ok"), 5)
        self.assertEqual(value(page, "sandgate_llm_calls_total", task="wild", model="gpt-mini",
                               outcome="ok"), 1)

    def test_a_stream_cut_before_its_usage_is_a_call_without_usage(self):
        self.call("cutter", "/cut", {"model": "gpt-mini", "max_tokens": 30, "stream": True})
        rec = wait_until(lambda: next((r for r in self.sg.audit() if r.get("path") == "/cut"
                                       and r.get("llm")), None), what="the cut call's line")
        page = self.sg.metrics()
        self.assertEqual(value(page, "sandgate_llm_calls_total", task="cutter",
                                 model="gpt-mini", outcome="no_usage"), 1)
        # Charged at its reserve: the body's bytes as input tokens, the max tokens as output.
        self.assertEqual(value(page, "sandgate_llm_tokens_total", task="cutter",
                               model="gpt-mini", kind="output"), 30)
        self.assertEqual(rec["llm"]["usage"], "reserve")


class RedisBudgetGaugesTest(unittest.TestCase):
    """Two replicas on one real Redis: each one's gauge is what it last saw."""

    @classmethod
    def setUpClass(cls):
        artifacts.register_secret("redis-metrics-password", PASSWORD)
        cls.redis = RedisServer(PASSWORD).start()
        cls.up = HttpUpstream()
        cls.replicas = [cls.replica(n) for n in ("a", "b")]

    @classmethod
    def tearDownClass(cls):
        for sg in cls.replicas:
            sg.cleanup()
        cls.redis.cleanup()
        cls.up.close()

    @classmethod
    def replica(cls, name):
        rule = {"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}
        policies = {"p": {"allow": [rule],
                          "budgets": [{"name": "calls", "window": "run", "requests": 10}]}}
        sg = Sandgate(policies, [{"name": "shared", "policy": "p", "token": TOKEN}],
                      resolve={"api.test": "127.0.0.1:%d" % cls.up.port})
        return use_redis(sg, cls.redis, "redis-metrics-" + name, "gauge:").start()

    def send(self, sg):
        s = sg.connect()
        try:
            s.sendall(("GET http://api.test/echo/g HTTP/1.1\r\nHost: api.test\r\n%s"
                       "Connection: close\r\n\r\n" % Sandgate.auth_header("shared", TOKEN))
                      .encode())
            return read_response(s)[0]
        finally:
            s.close()

    def used(self, sg):
        return sg.metric("sandgate_budget_used", task="shared", budget="calls", metric="requests")

    def test_each_replica_shows_what_it_last_saw(self):
        a, b = self.replicas
        # Before any request of this window, neither has seen anything: 0, with the limit.
        self.assertEqual(self.used(a), 0)
        self.assertEqual(a.metric("sandgate_budget_limit", task="shared", budget="calls",
                                  metric="requests"), 10)
        for _ in range(2):
            self.assertEqual(self.send(a), 200)
        self.assertEqual(self.send(b), 200)
        wait_until(lambda: len(a.audit()) >= 2 and len(b.audit()) >= 1, what="audit lines")
        self.assertEqual((self.used(a), self.used(b)), (2, 3))
        # a learns of b's request with its own next one (Redis answers with the sum).
        self.assertEqual(self.send(a), 200)
        wait_until(lambda: len(a.audit()) >= 3, what="a's third line")
        self.assertEqual(self.used(a), 4)
        # A scrape asks Redis nothing (it would wait on a worker thread): a stopped Redis leaves
        # the gauge as it was.
        self.redis.stop()
        try:
            self.assertEqual(self.used(a), 4)
        finally:
            self.redis.start()


if __name__ == "__main__":
    unittest.main()
