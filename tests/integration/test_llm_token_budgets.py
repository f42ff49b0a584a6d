"""Task token claims of LLM budgets (issue #41): a token's `budgets` claim may name
`input_tokens`, `output_tokens` and `spend` (an exact decimal string, as in the config), and
may only narrow the task's budgets. The attacker holds a token signed with the tasks' key but
chooses its claims: one asking for more spend than the config is refused (token_widens); one
adding a larger spend budget under a new name still meets the config's; a malformed one is
token_malformed. The upstream is test_llm_budgets' OpenAI-shaped server.
"""

import json
import time
import unittest

from sandgate_fixture import Sandgate, read_to_eof
from test_budgets import HS_KEY, hs256, settled
from test_llm_budgets import LlmUpstream

ASK = {"model": "gpt-mini", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


class LlmTokenBudgetsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = LlmUpstream()
        cls.up.usage = (100, 200)  # 0.1 + 0.4 = 0.50 a call at the prices below
        rule = {"host": "api.openai.test", "ports": [80], "cidrs": ["127.0.0.0/8"],
                "llm": {"api": "openai", "models": ["gpt-mini"], "max_tokens": 4096}}
        policies = {"spend": {"allow": [rule], "budgets": [
            {"name": "daily-spend", "window": "day", "spend": "1.00"}]}}
        tasks = [{"name": n, "policy": "spend"}
                 for n in ("wide", "added", "narrow", "outputs", "bad")]
        prices = {"currency": "USD", "models": {"gpt-mini": {"input": "1000", "output": "2000"}}}
        cls.sg = Sandgate({}, [])
        key = cls.sg.secret_file("hs-key", HS_KEY)
        cls.sg.config = cls.sg.make_config(
            policies, tasks, resolve={"api.openai.test": "127.0.0.1:%d" % cls.up.port},
            extra={"llm": {"prices": prices}, "tokens": {"keys": [{"id": "k1", "file": key}]}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def token(self, task, budgets):
        now = int(time.time())
        return hs256({"sub": task, "iat": now, "exp": now + 600, "budgets": budgets})

    def call(self, task, token):
        payload = json.dumps(ASK).encode()
        s = self.sg.connect()
        try:
            head = ("POST http://api.openai.test/v1/chat/completions HTTP/1.1\r\n"
                    "Host: api.openai.test\r\n%sContent-Type: application/json\r\n"
                    "Content-Length: %d\r\nConnection: close\r\n\r\n" % (
                        Sandgate.auth_header(task, token), len(payload)))
            s.sendall(head.encode() + payload)
            data, _ = read_to_eof(s)
        finally:
            s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip()
                   for k, v in (l.split(":", 1) for l in lines[1:])}
        return int(lines[0].split(" ")[1]), headers, body

    def upstream_calls(self):
        return len(self.up.seen("/v1/chat/completions"))

    def test_a_token_asking_for_more_spend_than_the_config_is_refused(self):
        before = self.upstream_calls()
        token = self.token("wide", [{"name": "daily-spend", "window": "day", "spend": "100.00"}])
        status, headers, _ = self.call("wide", token)
        self.assertEqual((status, headers.get("x-sandgate-reason")), (407, "token_widens"))
        self.assertEqual(self.upstream_calls(), before)

    def test_a_larger_spend_under_a_new_name_still_meets_the_configs(self):
        token = self.token("added", [{"name": "mine", "window": "day", "spend": "100.00"}])
        for _ in range(2):
            self.assertEqual(self.call("added", token)[0], 200)
        settled(self.sg, "added", 2)
        status, headers, body = self.call("added", token)
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertIn("daily-spend", json.loads(body)["error"]["message"])

    def test_a_token_narrows_spend_and_output_tokens(self):
        token = self.token("narrow", [{"name": "daily-spend", "window": "day", "spend": "0.5"}])
        self.assertEqual(self.call("narrow", token)[0], 200)
        settled(self.sg, "narrow", 1)
        status, headers, body = self.call("narrow", token)
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertIn("0.500000 spend of 0.500000", json.loads(body)["error"]["message"])
        # A new output-token budget: 100 reserved fits 150; the 200 used then leaves no room.
        token = self.token("outputs", [{"name": "out", "window": "run", "output_tokens": 150}])
        self.assertEqual(self.call("outputs", token)[0], 200)
        settled(self.sg, "outputs", 1)
        status, headers, body = self.call("outputs", token)
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        rec = self.sg.wait_audit(task="outputs", reason="budget_exceeded")
        self.assertEqual((rec["budget"]["name"], rec["budget"]["metric"]), ("out", "output_tokens"))

    def test_malformed_llm_claims_are_refused(self):
        before = self.upstream_calls()
        cases = [("spend as a number", {"spend": 1.0}), ("spend negative", {"spend": "-1"}),
                 ("spend zero", {"spend": "0.00"}), ("seven decimals", {"spend": "0.0000001"}),
                 ("exponent", {"spend": "1e2"}), ("tokens zero", {"input_tokens": 0}),
                 ("tokens fraction", {"output_tokens": 1.5}),
                 ("tokens as text", {"input_tokens": "10"})]
        for name, limit in cases:
            with self.subTest(name):
                token = self.token("bad", [dict({"name": "x", "window": "day"}, **limit)])
                status, headers, _ = self.call("bad", token)
                self.assertEqual((status, headers.get("x-sandgate-reason")),
                                 (407, "token_malformed"))
        self.assertEqual(self.upstream_calls(), before)


if __name__ == "__main__":
    unittest.main()
