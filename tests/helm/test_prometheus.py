"""The chart's monitoring with Debian's Prometheus: the alert rules pass `promtool check rules`
and `promtool test rules` (prometheus-rules.test.yaml fires every alert), a real Prometheus on
loopback scrapes a real `sandgate serve` with the rules loaded, and the page it scraped passes
`promtool check metrics`.
"""

import os
import subprocess
import unittest

import yaml

import chart_support as cs
from clients import curl
from prometheus_server import Prometheus, tool
from sandgate_fixture import Sandgate, wait_until
from upstreams import HttpUpstream

RULES = os.path.join(cs.CHART, "files", "prometheus-rules.yaml")
RULE_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "prometheus-rules.test.yaml")
TOKEN = "pr0m"


class RulesTest(unittest.TestCase):
    def test_check_rules(self):
        p = subprocess.run([tool("promtool"), "check", "rules", RULES], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("SUCCESS: 10 rules found", p.stdout)

    def test_rule_unit_tests_fire_each_alert(self):
        with open(RULE_TESTS) as f:
            tests = yaml.safe_load(f)
        fired = {a["alertname"] for t in tests["tests"] for a in t["alert_rule_test"]
                 if a["exp_alerts"]}
        with open(RULES) as f:
            alerts = {r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]}
        self.assertEqual(fired, alerts, "every alert needs a test that fires it")
        p = subprocess.run([tool("promtool"), "test", "rules", RULE_TESTS], capture_output=True,
                           text=True, timeout=120, cwd=os.path.dirname(RULE_TESTS))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("SUCCESS", p.stdout)


class ScrapeTest(unittest.TestCase):
    def setUp(self):
        self.up = HttpUpstream()
        self.addCleanup(self.up.close)
        policies = {"p": {"allow": [{"host": "ok.test", "ports": [80], "cidrs": ["127.0.0.1/32"]}]}}
        self.sg = Sandgate(policies, [{"name": "agent", "policy": "p", "token": TOKEN}],
                           resolve={"ok.test": "127.0.0.1:%d" % self.up.port}).start()
        self.addCleanup(self.sg.cleanup)
        proxy = self.sg.proxy_url("agent", TOKEN)
        # Traffic, so the page has per-task series: one allowed, one refused by policy.
        self.assertEqual(curl("http://ok.test/echo", proxy=proxy).status, 200)
        self.assertEqual(curl("http://denied.test/", proxy=proxy).status, 403)

    def test_promtool_check_metrics_on_a_real_scrape(self):
        page = self.sg.metrics()
        self.assertIn("sandgate_config_info{", page)
        self.assertIn('verdict="deny"', page)
        p = subprocess.run([tool("promtool"), "check", "metrics"], input=page,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout + p.stderr), (0, ""))

    def test_prometheus_scrapes_sandgate_with_the_rules_loaded(self):
        prom = Prometheus(self, ["127.0.0.1:%d" % self.sg.metrics_port], rule_files=[RULES],
                          labels={"namespace": "egress"})
        api = prom.api
        prom.wait_scraped()

        info = api("query", query="sandgate_config_info")["result"]
        self.assertEqual(len(info), 1)
        self.assertRegex(info[0]["metric"]["sha256"], "^[0-9a-f]{64}$")
        self.assertEqual(info[0]["metric"]["namespace"], "egress")
        denied = api("query", query='sandgate_requests_total{verdict="deny",task="agent"}')
        self.assertEqual(float(denied["result"][0]["value"][1]), 1.0)

        (target,) = api("targets")["activeTargets"]
        self.assertEqual((target["health"], target["lastError"]), ("up", ""))
        groups = wait_until(lambda: (api("rules") or {}).get("groups"), timeout=30,
                            what="the rule groups to load")
        rules = [r for g in groups for r in g["rules"]]
        self.assertEqual(len(rules), 10)
        # Evaluated against the live series without error; nothing fires on a healthy proxy.
        wait_until(lambda: all(r.get("lastEvaluation", "").startswith("2") and
                               not r["lastEvaluation"].startswith("0001")
                               for g in api("rules")["groups"] for r in g["rules"]),
                   timeout=30, interval=0.5, what="every rule to be evaluated")
        for r in [r for g in api("rules")["groups"] for r in g["rules"]]:
            self.assertEqual(r["health"], "ok", r)
            self.assertEqual(r["state"], "inactive", r)


if __name__ == "__main__":
    unittest.main()
