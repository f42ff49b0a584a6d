"""Issue #41's "done when", on two replicas: a task with a $1 spend budget and gpt-mini at a
known price is refused once its calls' real usage passes $1, on whichever replica it lands.

A real redis-server (a password, no persistence), two `sandgate serve` replicas sharing it, and
the tests' own OpenAI-shaped upstream reporting a usage of 100 input and 200 output tokens a
call: at 1000 and 2000 per million tokens, $0.50 a call. The client is the attacker: it spreads
its calls over the replicas to get more than its budget.
"""

import json
import time
import unittest

import artifacts
from llm_upstream import LlmUpstream
from redis_server import RedisServer, use_redis
from sandgate_fixture import Sandgate, read_to_eof, wait_until

TOKEN = "llm-redis-tok"
PASSWORD = "llm-redis-pass-8d21f0c4"
ASK = {"model": "gpt-mini", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


class LlmSpendAcrossReplicasTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        artifacts.register_secret("llm-redis-password", PASSWORD)
        cls.redis = RedisServer(PASSWORD).start()
        cls.up = LlmUpstream()
        cls.replicas = []
        for name in ("a", "b"):
            cls.replicas.append(cls.replica(name))

    @classmethod
    def tearDownClass(cls):
        for sg in cls.replicas:
            sg.cleanup()
        cls.redis.cleanup()
        cls.up.close()

    @classmethod
    def replica(cls, name):
        rule = {"host": "api.openai.test", "ports": [80], "cidrs": ["127.0.0.0/8"],
                "llm": {"api": "openai", "models": ["gpt-mini"], "max_tokens": 4096}}
        policies = {"agent": {"allow": [rule], "budgets": [
            {"name": "daily-spend", "window": "day", "spend": "1.00"}]}}
        prices = {"currency": "USD", "models": {"gpt-mini": {"input": "1000", "output": "2000"}}}
        sg = Sandgate(policies, [{"name": "payer", "policy": "agent", "token": TOKEN}],
                      resolve={"api.openai.test": "127.0.0.1:%d" % cls.up.port},
                      extra={"llm": {"prices": prices}})
        return use_redis(sg, cls.redis, "llm-redis-" + name, "llm:").start()

    def call(self, sg):
        payload = json.dumps(ASK).encode()
        s = sg.connect()
        try:
            s.sendall(("POST http://api.openai.test/v1/chat/completions HTTP/1.1\r\n"
                       "Host: api.openai.test\r\n%sContent-Type: application/json\r\n"
                       "Content-Length: %d\r\nConnection: close\r\n\r\n" % (
                           Sandgate.auth_header("payer", TOKEN), len(payload))).encode()
                      + payload)
            data, _ = read_to_eof(s)
        finally:
            s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        return int(lines[0].split(" ")[1]), headers, body

    def spent(self):
        """The day's spend in Redis, in millionths of a dollar (0 when not counted yet)."""
        day = int(time.time()) // 86400
        v = self.redis.command("GET", "llm:sandgate:budget:payer:daily-spend:day:%d:spend" % day)
        return 0 if v == b"$-1" else int(v)

    def test_a_dollar_across_two_replicas(self):
        a, b = self.replicas
        self.assertEqual(self.call(a)[0], 200)
        # The usage is settled before the call's audit line and reaches Redis in the replica's
        # next batch (README: at most 50 ms later).
        wait_until(lambda: self.spent() == 500000, what="a's $0.50 in Redis")
        self.assertEqual(self.call(b)[0], 200)
        wait_until(lambda: self.spent() == 1000000, what="b's $0.50 in Redis")
        for sg in (a, b):  # wherever the next call lands, the budget is used up
            status, headers, body = self.call(sg)
            self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
            err = json.loads(body)["error"]  # OpenAI's shape, which its SDKs print
            self.assertIn("1.000000 spend of 1.000000", err["message"])
            rec = sg.wait_audit(task="payer", reason="budget_exceeded")
            self.assertEqual((rec["budget"]["name"], rec["budget"]["metric"]),
                             ("daily-spend", "spend"))
        self.assertEqual(len(self.up.seen("/v1/chat/completions")), 2)


if __name__ == "__main__":
    unittest.main()
