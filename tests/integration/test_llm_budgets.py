"""LLM accounting (issue #41 stage 2): calls under a rule's `llm:` are read before they go
upstream (model allowlist, max-tokens cap), reserved at their worst case on the task's token and
spend budgets, and settled with the `usage` the upstream reports (JSON, OpenAI and Anthropic
SSE). The upstream here is the test's own OpenAI- and Anthropic-shaped server; the client is
the attacker (lying JSON, compressed and huge bodies), and so, in one test, is the upstream
(usage -1, huge, NaN, a stream cut before its usage). Each test asserts what the client got,
what the upstream saw and what the audit line says.
"""

import gzip
import http.client
import json
import os
import unittest

from llm_upstream import OPENAI_CHUNKS, OPENAI_USAGE_CHUNK, LlmUpstream, sse
from pki import test_pki
from sandgate_fixture import Sandgate, dechunk, read_response, read_to_eof, wait_until

TOKEN = "llm-tok"
CAP = 4096


class LlmBudgetsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = LlmUpstream()
        openai = {"host": "api.openai.test", "ports": [80], "cidrs": ["127.0.0.0/8"],
                  "llm": {"api": "openai", "models": ["gpt-mini"], "max_tokens": CAP}}
        anthropic = {"host": "api.anthropic.test", "ports": [80], "cidrs": ["127.0.0.0/8"],
                     "llm": {"api": "anthropic", "models": ["claude-x"]}}
        policies = {
            # 0.001 per input token, 0.002 per output token.
            "spend": {"allow": [openai, anthropic],
                      "budgets": [{"name": "daily-spend", "window": "day", "spend": "1.00"}]},
            "free": {"allow": [openai, anthropic]},
        }
        tasks = [{"name": n, "policy": p, "token": TOKEN}
                 for n, p in (("payer", "spend"), ("free", "free"), ("cut", "spend"),
                              ("hostile", "spend"))]
        prices = {"currency": "USD", "models": {"gpt-mini": {"input": "1000", "output": "2000"},
                                                "claude-x": {"input": "1000", "output": "2000"}}}
        resolve = {h: "127.0.0.1:%d" % cls.up.port
                   for h in ("api.openai.test", "api.anthropic.test")}
        cls.sg = Sandgate(policies, tasks, resolve=resolve,
                          extra={"llm": {"prices": prices}}).start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def call(self, task, path, body, host="api.openai.test", headers="", raw=False):
        """One request on its own connection. `body`: a dict (sent as JSON) or bytes."""
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        s = self.sg.connect()
        try:
            head = ("POST http://%s%s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json"
                    "\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n" % (
                        host, path, host, Sandgate.auth_header(task, TOKEN), len(payload),
                        headers))
            s.sendall(head.encode() + payload)
            data, _ = read_to_eof(s)
        finally:
            s.close()
        if raw:
            return data
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip()
                   for k, v in (l.split(":", 1) for l in lines[1:])}
        if headers.get("transfer-encoding") == "chunked":
            body, complete = dechunk(body)
            self.assertTrue(complete)
        elif "content-length" in headers:
            self.assertEqual(len(body), int(headers["content-length"]))
        return int(lines[0].split(" ")[1]), headers, body

    def audit_of(self, task, n, path=None):
        """The audit lines of `task`'s LLM calls (to `path`), once there are `n`."""
        def lines():
            return [r for r in self.sg.audit() if r.get("task") == task and r.get("llm")
                    and (path is None or r.get("path") == path)]
        if n == 0:
            return lines()
        return wait_until(lambda: (lambda l: l if len(l) >= n else None)(lines()),
                          what="%d llm audit lines of %s" % (n, task))

    def test_spend_budget_refuses_once_the_real_usage_passes_it(self):
        self.up.usage = (100, 200)  # 0.1 + 0.4 = 0.50 a call; the reserve is below that
        ask = {"model": "gpt-mini", "max_tokens": 100, "messages": [{"role": "user",
                                                                      "content": "hi"}]}
        before = len(self.up.seen("/v1/chat/completions"))
        for _ in range(2):
            status, _, _ = self.call("payer", "/v1/chat/completions", ask)
            self.assertEqual(status, 200)
        lines = self.audit_of("payer", 2)
        self.assertEqual(lines[0]["llm"], {"model": "gpt-mini", "input_tokens": 100,
                                           "output_tokens": 200, "spend": "0.500000",
                                           "usage": "reported"})
        status, headers, body = self.call("payer", "/v1/chat/completions", ask)
        self.assertEqual(status, 429)
        self.assertEqual(headers.get("x-sandgate-reason"), "budget_exceeded")
        err = json.loads(body)["error"]  # OpenAI's shape, which its SDKs print
        self.assertEqual(err["code"], "budget_exceeded")
        self.assertIn("daily-spend", err["message"])
        self.assertIn("1.000000 spend of 1.000000", err["message"])
        self.assertEqual(len(self.up.seen("/v1/chat/completions")), before + 2)
        rec = self.sg.wait_audit(task="payer", reason="budget_exceeded")
        self.assertEqual(rec["budget"]["metric"], "spend")

    def test_model_allowlist_and_max_tokens_cap(self):
        before = len(self.up.requests)
        cases = [({"model": "gpt-big", "max_tokens": 10}, 403, "model_not_allowed"),
                 ({"model": "gpt-mini", "max_tokens": CAP + 1}, 403, "max_tokens_over_cap"),
                 ({"model": "gpt-mini", "max_completion_tokens": CAP + 1}, 403,
                  "max_tokens_over_cap"),
                 ({"model": "gpt-mini"}, 403, "max_tokens_over_cap")]
        for ask, want, reason in cases:
            with self.subTest(ask=ask):
                status, headers, body = self.call("free", "/v1/chat/completions", ask)
                self.assertEqual((status, headers.get("x-sandgate-reason")), (want, reason))
                self.assertEqual(json.loads(body)["error"]["code"], reason)
        status, headers, body = self.call("free", "/v1/messages",
                                          {"model": "claude-y", "max_tokens": 5},
                                          host="api.anthropic.test")
        self.assertEqual(status, 403)
        doc = json.loads(body)  # Anthropic's shape
        self.assertEqual(doc["type"], "error")
        self.assertEqual(doc["error"]["type"], "permission_error")
        self.assertEqual(len(self.up.requests), before)

    def test_include_usage_is_asked_for_and_its_chunk_hidden(self):
        self.up.usage = (0, 0)
        n = len(self.up.seen("/v1/chat/completions"))
        lines = len(self.audit_of("free", 0, "/v1/chat/completions"))
        status, headers, body = self.call(
            "free", "/v1/chat/completions",
            {"model": "gpt-mini", "max_tokens": 50, "stream": True, "messages": []})
        self.assertEqual(status, 200)
        sent = json.loads(self.up.seen("/v1/chat/completions")[n][2])
        self.assertEqual(sent["stream_options"], {"include_usage": True})
        # Byte for byte what a client that did not ask for usage gets, without the usage chunk.
        self.assertEqual(body, sse(OPENAI_CHUNKS + [b"[DONE]"]))
        rec = self.audit_of("free", lines + 1, "/v1/chat/completions")[lines]
        self.assertEqual((rec["llm"]["input_tokens"], rec["llm"]["output_tokens"],
                          rec["llm"]["usage"]), (11, 7, "reported"))
        # A client that asked for it gets it.
        status, headers, body = self.call(
            "free", "/v1/chat/completions",
            {"model": "gpt-mini", "max_tokens": 50, "stream": True,
             "stream_options": {"include_usage": True}})
        self.assertEqual(status, 200)
        self.assertEqual(body, sse(OPENAI_CHUNKS + [OPENAI_USAGE_CHUNK, b"[DONE]"]))

    def test_anthropic_usage_from_json_and_sse(self):
        self.up.usage = (30, 40)
        n = len(self.audit_of("free", 0, "/v1/messages"))
        for stream in (False, True):
            status, _, _ = self.call("free", "/v1/messages",
                                     {"model": "claude-x", "max_tokens": 64, "stream": stream},
                                     host="api.anthropic.test")
            self.assertEqual(status, 200)
        for rec in self.audit_of("free", n + 2, "/v1/messages")[n:]:
            self.assertEqual(rec["llm"], {"model": "claude-x", "input_tokens": 30,
                                          "output_tokens": 40, "spend": "0.110000",
                                          "usage": "reported"})

    def test_a_stream_cut_before_its_usage_is_settled_at_the_reserve(self):
        ask = {"model": "gpt-mini", "max_tokens": 300, "stream": True}
        self.call("cut", "/cut", ask, raw=True)
        rec = self.audit_of("cut", 1)[0]
        self.assertEqual(rec["llm"]["usage"], "reserve")
        self.assertEqual(rec["llm"]["output_tokens"], 300)
        sent = self.up.seen("/cut")[-1][2]
        self.assertEqual(rec["llm"]["input_tokens"], len(sent))

    def test_a_hostile_upstreams_usage_is_no_usage(self):
        ask = {"model": "gpt-mini", "max_tokens": 10}
        hostile = [b'{"prompt_tokens":-1,"completion_tokens":5}',
                   b'{"prompt_tokens":1e300,"completion_tokens":5}',
                   b'{"prompt_tokens":NaN,"completion_tokens":5}',
                   b'{"prompt_tokens":1152921504606846976,"completion_tokens":5}',
                   b'{"prompt_tokens":"5","completion_tokens":5}']
        for i, raw in enumerate(hostile):
            with self.subTest(usage=raw):
                self.up.raw_usage = raw
                status, _, _ = self.call("hostile", "/usage", ask)
                self.assertEqual(status, 200)
                rec = self.audit_of("hostile", i + 1)[i]
                self.assertEqual(rec["llm"]["usage"], "reserve")
                self.assertEqual(rec["llm"]["output_tokens"], 10)

    def test_a_lying_client_is_refused_before_the_upstream(self):
        before = len(self.up.requests)
        cases = [
            (b'{"model":"gpt-mini","model":"gpt-big","max_tokens":5}', "", 400,
             "llm_body_unreadable"),
            (b'{"model":"gpt-mini","max_tokens":5}{"model":"gpt-big"}', "", 400,
             "llm_body_unreadable"),
            (b'{"model":"gpt-mini","max_tokens":5,"max_tokens":99999}', "", 400,
             "llm_body_unreadable"),
            (b"model=gpt-big", "", 400, "llm_body_unreadable"),
            (gzip.compress(b'{"model":"gpt-big","max_tokens":5}'),
             "Content-Encoding: gzip\r\n", 415, "llm_body_encoded"),
        ]
        for body, extra, want, reason in cases:
            with self.subTest(body=body[:40]):
                status, headers, _ = self.call("free", "/v1/chat/completions", body,
                                               headers=extra)
                self.assertEqual((status, headers.get("x-sandgate-reason")), (want, reason))
        # A huge body is refused on its announced length, before it is read.
        s = self.sg.connect()
        try:
            s.sendall(("POST http://api.openai.test/v1/chat/completions HTTP/1.1\r\n"
                       "Host: api.openai.test\r\n%sContent-Length: %d\r\n\r\n" % (
                           Sandgate.auth_header("free", TOKEN), 9 << 20)).encode())
            status, headers, _ = read_response(s)
        finally:
            s.close()
        self.assertEqual((status, headers.get("x-sandgate-reason")), (413, "llm_body_too_large"))
        self.assertEqual(len(self.up.requests), before)


class InterceptedLlmTest(unittest.TestCase):
    """The same accounting inside intercepted TLS, with the credential marking its host as an
    LLM API (`llm: openai` on the credential, no block on the rule) and injecting the key."""

    SECRET = "sk-llm-intercepted-secret-0123456789"

    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.up = LlmUpstream(tls=cls.pki.other_leaf("api.openai.test"))
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        creds = {"openai": {"source": {"file": cls.sg.secret_file("openai", cls.SECRET)},
                            "hosts": ["api.openai.test"], "llm": "openai",
                            "inject": {"header": "Authorization", "value": "Bearer {secret}"}}}
        policies = {"agent": {"allow": [{"host": "api.openai.test", "cidrs": ["127.0.0.0/8"],
                                         "credential": "openai"}]}}
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "agent", "policy": "agent", "token": TOKEN}],
            resolve={"api.openai.test": "127.0.0.1:%d" % cls.up.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def post(self, body):
        conn = http.client.HTTPSConnection("api.openai.test", 443)
        conn.sock = self.sg.tls_tunnel("api.openai.test", "agent", TOKEN, self.ca_out)
        try:
            conn.request("POST", "/v1/chat/completions", body=body,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, r.getheader("x-sandgate-reason"), r.read()
        finally:
            conn.close()

    def test_calls_are_accounted_inside_tls(self):
        self.up.usage = (5, 6)
        status, _, _ = self.post(json.dumps({"model": "any-model", "max_tokens": 9}))
        self.assertEqual(status, 200)
        path, headers, _ = self.up.seen("/v1/chat/completions")[-1]
        self.assertEqual(headers["authorization"], "Bearer " + self.SECRET)
        self.assertEqual(headers["accept-encoding"], "identity")
        rec = self.sg.wait_audit(task="agent", kind="intercept", status=200)
        self.assertEqual((rec["llm"]["input_tokens"], rec["llm"]["output_tokens"],
                          rec["llm"]["usage"]), (5, 6, "reported"))
        # The stream the client did not ask usage for: asked upstream, hidden here.
        status, _, body = self.post(json.dumps({"model": "m", "max_tokens": 9, "stream": True}))
        self.assertEqual(status, 200)
        self.assertEqual(body, sse(OPENAI_CHUNKS + [b"[DONE]"]))
        sent = json.loads(self.up.seen("/v1/chat/completions")[-1][2])
        self.assertEqual(sent["stream_options"], {"include_usage": True})

    def test_a_lying_body_is_refused_inside_tls(self):
        n = len(self.up.requests)
        status, reason, body = self.post(b'{"model":"a","model":"b","max_tokens":1}')
        self.assertEqual((status, reason), (400, "llm_body_unreadable"))
        self.assertEqual(json.loads(body)["error"]["code"], "llm_body_unreadable")
        self.assertEqual(len(self.up.requests), n)


if __name__ == "__main__":
    unittest.main()
