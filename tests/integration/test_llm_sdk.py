"""The official OpenAI SDK through sandgate (issue #41: "the SDK prints sandgate's message").

`openai` from npm (the version and sha512 pinned in scripts/node/package.json and its lock file,
installed into .deps/ by scripts/node_deps.sh) runs in Node with its defaults, retries
included, against the tests' own OpenAI-shaped upstream behind an `llm:` rule with a spend
budget: an unstreamed and a streamed chat completion are accounted (the audit lines' tokens and
spend), and the call over the budget raises the SDK's own APIError (RateLimitError, 429) whose
message is sandgate's, at once: the refusal tells the SDK not to wait out a day's Retry-After.
When npm could not reach the registry (.deps/unavailable), the test skips and says why.
"""

import json
import os
import shutil
import subprocess
import time
import unittest

from llm_upstream import LlmUpstream
from sandgate_fixture import Sandgate, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
DEPS = os.path.join(SOURCE, ".deps")
NODE_MODULES = os.path.join(DEPS, "node", "node_modules")
CLIENT = os.path.join(HERE, "llm_sdk_client.mjs")
TOKEN = "sdk-tok"


def require_sdk():
    """The node binary; the test skips when the registry could not be reached, else a missing
    SDK fails it (scripts/deps.sh installs it)."""
    node = shutil.which("node")
    if not node:
        raise AssertionError("node is missing: scripts/deps.sh installs nodejs")
    if os.path.isfile(os.path.join(NODE_MODULES, "openai", "package.json")):
        return node
    marker = os.path.join(DEPS, "unavailable")
    if os.path.exists(marker):
        with open(marker) as f:
            raise unittest.SkipTest("the openai SDK could not be fetched from npm: " +
                                    f.read().strip())
    raise AssertionError("the openai SDK is missing from %s: run scripts/node_deps.sh (the "
                         "version and sha512 are in scripts/node/)" % NODE_MODULES)


class OpenAiSdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = require_sdk()
        with open(os.path.join(NODE_MODULES, "openai", "package.json")) as f:
            cls.sdk_version = json.load(f)["version"]
        with open(os.path.join(SOURCE, "scripts", "node", "package.json")) as f:
            pinned = json.load(f)["dependencies"]["openai"]
        if cls.sdk_version != pinned:
            raise AssertionError("installed openai %s, pinned %s: run scripts/node_deps.sh" %
                                 (cls.sdk_version, pinned))
        cls.up = LlmUpstream()
        rule = {"host": "api.openai.test", "ports": [80], "cidrs": ["127.0.0.0/8"],
                "llm": {"api": "openai", "models": ["gpt-mini"], "max_tokens": 1000}}
        policies = {"agent": {"allow": [rule], "budgets": [
            {"name": "daily-spend", "window": "day", "spend": "1.00"}]}}
        # 0.001 per input token, 0.002 per output token: a call of 100 + 200 tokens is 0.50.
        prices = {"currency": "USD", "models": {"gpt-mini": {"input": "1000", "output": "2000"}}}
        cls.sg = Sandgate(policies, [{"name": "agent", "policy": "agent", "token": TOKEN}],
                          resolve={"api.openai.test": "127.0.0.1:%d" % cls.up.port},
                          extra={"llm": {"prices": prices}}).start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def sdk(self, calls, timeout=60):
        """Runs the SDK client for `calls`; its result lines, and how long it took."""
        start = time.monotonic()
        try:
            p = subprocess.run(
                [self.node, CLIENT, NODE_MODULES, "127.0.0.1:%d" % self.sg.proxy_port,
                 Sandgate.auth_header("agent", TOKEN).split(":", 1)[1].strip(),
                 "http://api.openai.test/v1", json.dumps(calls)],
                capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:  # run() has killed it
            self.fail("the SDK did not finish within %d s (waiting out a Retry-After?): %s" %
                      (timeout, e.stdout))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return [json.loads(l) for l in p.stdout.splitlines()], time.monotonic() - start

    def llm_lines(self, n):
        return wait_until(lambda: (lambda l: l if len(l) >= n else None)(
            [r for r in self.sg.audit() if r.get("task") == "agent" and r.get("llm")]),
            what="%d accounted calls" % n)

    def test_calls_are_accounted_and_the_one_over_budget_raises_sandgates_message(self):
        self.up.usage = (100, 200)
        ask = {"model": "gpt-mini", "max_tokens": 100}
        (plain, streamed), _ = self.sdk([ask, dict(ask, stream=True)])
        self.assertEqual((plain["ok"], plain["content"]), (True, "hi"))
        self.assertEqual(plain["usage"]["prompt_tokens"], 100)
        # The stream the SDK did not ask usage for: sandgate asked, read it and kept its chunk
        # from the SDK, which sees the stream it asked for.
        self.assertEqual((streamed["ok"], streamed["content"], streamed["chunks"],
                          streamed["usage"]), (True, "Hello", 2, None))
        first, second = self.llm_lines(2)[:2]
        self.assertEqual(first["llm"], {"model": "gpt-mini", "input_tokens": 100,
                                        "output_tokens": 200, "spend": "0.500000",
                                        "usage": "reported"})
        self.assertEqual(second["llm"], {"model": "gpt-mini", "input_tokens": 11,
                                         "output_tokens": 7, "spend": "0.025000",
                                         "usage": "reported"})
        sent = json.loads(self.up.seen("/v1/chat/completions")[-1][2])
        self.assertEqual(sent["stream_options"], {"include_usage": True})

        # 0.525 spent: one more call passes the dollar, and the next is refused.
        (third, over), took = self.sdk([ask, ask])
        self.assertTrue(third["ok"], third)
        self.assertEqual(self.llm_lines(3)[2]["llm"]["spend"], "0.500000")
        self.assertEqual((over["ok"], over["class"], over["status"], over["code"]),
                         (False, "RateLimitError", 429, "budget_exceeded"))
        self.assertIn("budget `daily-spend` of task agent is used up", over["message"])
        self.assertIn("1.025000 spend of 1.000000 this day", over["message"])
        # The SDK's default is to retry a 429 after its Retry-After (hours, for a day budget):
        # sandgate says not to, so the agent hears of it now.
        self.assertLess(took, 20)
        refusals = [r for r in self.sg.audit() if r.get("reason") == "budget_exceeded"]
        self.assertEqual(len(refusals), 1)  # one call, not retried
        self.assertEqual(len(self.up.seen("/v1/chat/completions")), 3)


if __name__ == "__main__":
    unittest.main()
