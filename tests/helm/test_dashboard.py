"""The Grafana dashboard the chart ships (helm/sandgate/files/grafana-dashboard.json, rendered
into the chart's ConfigMap) against a real Prometheus scraping a real `sandgate serve` after
traffic of every kind the dashboard shows: forwarded and refused requests, an intercepted
request with an injected credential and a scrubbed echo, a placeholder sent where it does not go,
a spliced tunnel, a refused SSH command through the SSH broker, a reload, LLM calls to the tests' own OpenAI-shaped upstream (accounted, one
refused for its model, one over its task's budget), and, on a second `serve` whose Redis is
away (`fail: open`), a request admitted uncounted. Every panel's every query must return at
least one series.
"""

import json
import os
import signal
import subprocess
import unittest

import chart_support as cs
from clients import curl
from llm_upstream import LlmUpstream
from pki import test_pki
from prometheus_server import Prometheus
from sandgate_fixture import Sandgate, binary, wait_until
from upstreams import HttpUpstream, free_closed_port

TOKEN = "d4shb0ard"
SECRET = "sk-dashboardsecret-0123456789abcdef"

# What Grafana puts in for its variables, as the dashboard is used: every job and task.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "10m", "$task": ".*", "$job": ".*"}


def queries(dashboard):
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


def substituted(expr):
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


class DashboardTest(unittest.TestCase):
    def setUp(self):
        helm = cs.require_tools()
        chart = cs.Chart(helm)
        self.addCleanup(chart.close)
        docs = chart.template([os.path.join(cs.CHART, "ci", "values-shared.yaml")])
        (cm,) = [d for d in cs.find(docs, "ConfigMap")
                 if d["metadata"]["name"].endswith("-dashboard")]
        self.dashboard = json.loads(cm["data"]["sandgate.json"])

        pki = test_pki()
        self.plain = HttpUpstream()
        self.addCleanup(self.plain.close)
        self.https = HttpUpstream(pki)
        self.addCleanup(self.https.close)
        self.sg = Sandgate({}, [])
        self.addCleanup(self.sg.cleanup)
        self.ca_out = os.path.join(self.sg.dir, "sandgate-ca.pem")
        rule = {"cidrs": ["127.0.0.0/8"]}
        creds = {"api": {"source": {"file": self.sg.secret_file("dash-api", SECRET)},
                         "hosts": ["api.test"], "placeholder": "API_KEY",
                         "inject": {"header": "Authorization", "value": "Bearer {secret}"}}}
        self.llm = LlmUpstream()
        self.addCleanup(self.llm.close)
        # git over SSH (the sandgate_ssh_* panels): a refused command is enough for every series;
        # the upstream is any listener, since the broker refuses before it speaks SSH to it.
        key = os.path.join(self.sg.dir, "ssh_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", key],
                       check=True, timeout=30)
        with open(key + ".pub") as f:
            pub = " ".join(f.read().split()[:2])
        with open(os.path.join(self.sg.dir, "ssh_pins"), "w") as f:
            f.write(f"git.test {pub}\n")
        creds["gitkey"] = {"source": {"file": key}, "hosts": ["git.test"],
                           "ssh": {"user": "git",
                                   "known_hosts": os.path.join(self.sg.dir, "ssh_pins")}}
        policies = {"agent": {"allow": [
            dict(rule, host="git.test", ports=[22], credential="gitkey"),
            dict(rule, host="api.test", credential="api"),
            dict(rule, host="other.test"),  # spliced: no credential, no method or path rule
            dict(rule, host="ok.test", ports=[80]),
        ]}, "llm": {
            "allow": [dict(rule, host="llm.test", ports=[80],
                           llm={"api": "openai", "models": ["gpt-mini"], "max_tokens": 100})],
            "budgets": [{"name": "daily-spend", "window": "day", "spend": "5.00"},
                        {"name": "calls", "window": "run", "requests": 2}]}}
        prices = {"currency": "USD", "models": {"gpt-mini": {"input": "1000", "output": "2000"}}}
        cfg = self.sg.make_config(
            policies, [{"name": "agent", "policy": "agent", "token": TOKEN},
                       {"name": "llm-agent", "policy": "llm", "token": TOKEN}],
            resolve={"api.test": "127.0.0.1:%d" % self.https.port,
                     "other.test": "127.0.0.1:%d" % self.https.port,
                     "ok.test": "127.0.0.1:%d" % self.plain.port,
                     "llm.test": "127.0.0.1:%d" % self.llm.port,
                     "git.test": "127.0.0.1:%d" % self.plain.port},
            extra={"credentials": creds, "ca_cert_out": self.ca_out,
                   "tls": {"upstream_ca": pki.ca_cert}, "llm": {"prices": prices}})
        cfg["listen"]["admin"] = self.sg.admin_path
        self.sg.config = cfg
        self.sg.write_config(cfg)
        self.sg.start()
        self.pki = pki
        # A replica whose Redis does not answer (a closed loopback port), failing open.
        budgeted = {"p": {"allow": [dict(rule, host="ok.test", ports=[80])],
                          "budgets": [{"name": "calls", "window": "minute", "requests": 100}]}}
        self.open = Sandgate(budgeted, [{"name": "open-agent", "policy": "p", "token": TOKEN}],
                             resolve={"ok.test": "127.0.0.1:%d" % self.plain.port},
                             extra={"state": {"redis": {
                                 "url": "redis://127.0.0.1:%d/0" % free_closed_port(),
                                 "fail": "open"}}})
        self.addCleanup(self.open.cleanup)
        self.open.start()

    def llm_call(self, model):
        body = json.dumps({"model": model, "max_tokens": 50, "messages": []})
        return curl("http://llm.test/v1/chat/completions", "-H", "Content-Type: application/json",
                    "--data-binary", body, proxy=self.sg.proxy_url("llm-agent", TOKEN))

    def traffic(self):
        proxy = self.sg.proxy_url("agent", TOKEN)
        placeholder = self.sg.token_env("agent")["env"]["API_KEY"]
        self.assertEqual(curl("http://ok.test/echo", proxy=proxy).status, 200)
        self.assertEqual(curl("http://denied.test/", proxy=proxy).status, 403)
        # Intercepted, the key injected; the echo of the request carries it back, scrubbed.
        r = curl("https://api.test/echo/dash", "--cacert", self.ca_out, proxy=proxy)
        self.assertEqual(r.status, 200, r)
        self.assertNotIn(SECRET.encode(), r.body)
        r = curl("https://api.test/echo/exfil", "--cacert", self.ca_out,
                 "-H", "User-Agent: agent/" + placeholder, proxy=proxy)
        self.assertEqual(r.header("x-sandgate-reason"), "placeholder_misplaced", r)
        r = curl("https://other.test/echo/spliced", "--cacert", self.pki.ca_cert, proxy=proxy)
        self.assertEqual(r.status, 200, r)
        # LLM calls: two accounted, one refused for its model, one over the task's budget.
        self.assertEqual(self.llm_call("gpt-mini").status, 200)
        self.assertEqual(self.llm_call("gpt-huge").header("x-sandgate-reason"),
                         "model_not_allowed")
        self.assertEqual(self.llm_call("gpt-mini").status, 200)
        self.assertEqual(self.llm_call("gpt-mini").header("x-sandgate-reason"), "budget_exceeded")
        r = curl("http://ok.test/echo", proxy=self.open.proxy_url("open-agent", TOKEN))
        self.assertEqual(r.status, 200, r)
        self.open.wait_audit(task="open-agent", budget_fail_open=True)
        r = subprocess.run(
            ["ssh", "-F", "/dev/null", "-o", f"ProxyCommand={binary()} connect %h %p",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "git@git.test", "id"],
            env=dict(os.environ, HTTPS_PROXY=proxy), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=30)
        self.assertIn("ssh_command_refused", r.stderr)
        os.kill(self.sg.proc.pid, signal.SIGHUP)
        wait_until(lambda: (self.sg.metric("sandgate_config_reloads_total", result="ok")
                            or 0) >= 1, what="the reload to be counted")

    def test_every_panel_query_returns_a_series(self):
        prom = Prometheus(self, ["127.0.0.1:%d" % self.sg.metrics_port,
                                 "127.0.0.1:%d" % self.open.metrics_port])
        prom.wait_scraped()
        self.traffic()
        wanted = list(queries(self.dashboard))
        self.assertGreaterEqual(len(wanted), 25)
        empty = {}

        def all_answer():
            empty.clear()
            for title, expr in wanted:
                if not prom.query(substituted(expr)):
                    empty[title] = expr
            return not empty
        # Rates need two scrapes after the traffic (one a second): bounded, then say which.
        try:
            wait_until(all_answer, timeout=45, interval=1, what="every panel query to answer")
        except AssertionError:
            self.fail("panels whose query returned no series: %s" % json.dumps(empty, indent=1))
        # The template variables' own queries find the job and the task.
        self.assertTrue(prom.query("sandgate_build_info"))
        tasks = {r["metric"]["task"] for r in prom.query("sandgate_requests_total")}
        self.assertIn("agent", tasks)
        # Not every query answers anything: one that names a series sandgate does not have stays
        # empty (the check above can fail).
        self.assertEqual(prom.query('sandgate_requests_total{task="no-such-task"}'), [])


if __name__ == "__main__":
    unittest.main()
