"""The chart's shared budget counters (`state.redis`, issue #41), rendered with the real Helm:
the values become sandgate's `state.redis` (the password a credential read from a mounted
Secret, never a value in the ConfigMap), the Secret is mounted 0440 like a credential's, an
egress NetworkPolicy reaches Redis on the URL's port, and the schema refuses what sandgate
would (a password in the URL, an unknown fail mode, a password without a URL, the chart's own
credential name taken). Then the rendered config is served by a real `sandgate serve` against a
real redis-server with a password: two requests against a budget of one, the second refused,
and the count in Redis under the chart's key prefix.
"""

import copy
import os
import unittest

import yaml

import artifacts
import chart_support as cs
from redis_server import RedisServer
from sandgate_fixture import Sandgate, read_response
from upstreams import HttpUpstream

REDIS_VALUES = os.path.join(cs.CHART, "ci", "values-redis.yaml")
SELECTOR = {"app.kubernetes.io/name": "sandgate", "app.kubernetes.io/instance": "rel"}
PASSWORD = "chart-redis-pass-91b4e0c7"
TOKEN = "chart-red1s"


def config_of(docs):
    (cm,) = cs.find(docs, "ConfigMap", "rel-sandgate")
    return yaml.safe_load(cm["data"]["config.yaml"])


def pod_spec(docs):
    (dep,) = cs.find(docs, "Deployment")
    return dep["spec"]["template"]["spec"]


class ChartRedisTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.helm = cs.require_tools()
        cls.chart = cs.Chart(cls.helm)
        with open(REDIS_VALUES) as f:
            cls.values = yaml.safe_load(f)

    @classmethod
    def tearDownClass(cls):
        cls.chart.close()

    def test_off_by_default(self):
        docs = self.chart.template()
        self.assertNotIn("state", config_of(docs))
        self.assertNotIn("redis-password", [v["name"] for v in pod_spec(docs)["volumes"]])
        self.assertEqual(cs.find(docs, "NetworkPolicy", "rel-sandgate-redis"), [])

    def test_values_render_state_redis_with_the_password_from_a_mounted_secret(self):
        docs = self.chart.template([REDIS_VALUES])
        cfg = config_of(docs)
        self.assertEqual(cfg["state"], {"redis": {
            "url": "rediss://redis.budgets.svc.cluster.local:6380/2",
            "password": "sandgate-redis", "fail": "closed", "key_prefix": "egress-a:"}})
        # The password is a credential with a file source: the Secret's key where it is mounted.
        self.assertEqual(cfg["credentials"]["sandgate-redis"],
                         {"source": {"file": "/var/run/secrets/sandgate/sandgate-redis/password"}})
        self.assertIn("openai", cfg["credentials"])  # the configured ones stay
        self.assertEqual(cfg["llm"]["prices"]["currency"], "USD")
        spec = pod_spec(docs)
        vols = {v["name"]: v for v in spec["volumes"]}
        self.assertEqual(vols["redis-password"]["secret"], {
            "secretName": "sandgate-redis", "defaultMode": 0o440,
            "items": [{"key": "password", "path": "password"}]})
        (container,) = spec["containers"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        self.assertEqual(mounts["redis-password"], {
            "name": "redis-password", "readOnly": True,
            "mountPath": "/var/run/secrets/sandgate/sandgate-redis"})
        # Valid manifests, as the cluster's API would judge them.
        self.assertEqual([e for e in cs.validate(docs) if e[1]], [])

    def test_egress_network_policy_to_the_redis_port(self):
        docs = self.chart.template([REDIS_VALUES])
        (np,) = cs.find(docs, "NetworkPolicy", "rel-sandgate-redis", "egress")
        self.assertEqual(np["spec"]["podSelector"], {"matchLabels": SELECTOR})
        self.assertEqual(np["spec"]["policyTypes"], ["Egress"])
        self.assertEqual(np["spec"]["egress"], [{
            "to": self.values["state"]["redis"]["networkPolicy"]["to"],
            "ports": [{"port": 6380, "protocol": "TCP"}]}])
        # A URL without a port: Redis's own, 6379; an address as an ipBlock.
        values = copy.deepcopy(self.values)
        values["state"]["redis"]["url"] = "redis://10.20.30.40/0"
        values["state"]["redis"]["networkPolicy"]["to"] = [{"ipBlock": {"cidr": "10.20.30.40/32"}}]
        (np,) = cs.find(self.chart.template(values=values), "NetworkPolicy", "rel-sandgate-redis")
        self.assertEqual(np["spec"]["egress"], [{"to": [{"ipBlock": {"cidr": "10.20.30.40/32"}}],
                                                 "ports": [{"port": 6379, "protocol": "TCP"}]}])
        # networkPolicy.enabled: false turns it off with the others.
        values["networkPolicy"] = {"enabled": False}
        self.assertEqual(cs.find(self.chart.template(values=values), "NetworkPolicy"), [])

    def test_schema_refuses_what_sandgate_would(self):
        def redis(**changes):
            values = copy.deepcopy(self.values)
            values["state"]["redis"].update(changes)
            return values
        no_url = copy.deepcopy(self.values)
        del no_url["state"]["redis"]["url"]
        taken = copy.deepcopy(self.values)
        taken["config"]["credentials"]["sandgate-redis"] = copy.deepcopy(
            taken["config"]["credentials"]["openai"])
        cases = {
            "a password in the URL": redis(url="redis://:hunter2@redis.test:6379/0"),
            "not a Redis URL": redis(url="http://redis.test/"),
            "an unknown fail mode": redis(fail="sometimes"),
            "a key prefix with a space": redis(key_prefix="team a:"),
            "a password Secret without a URL": no_url,
            "the chart's credential name": taken,
            "an unknown key": redis(database=2),
        }
        for what, values in cases.items():
            with self.subTest(what):
                p = self.chart.template_raw(values=values)
                self.assertNotEqual(p.returncode, 0, p.stdout[:300])
                self.assertIn("values don't meet the specifications of the schema", p.stderr)
        self.assertNotIn("hunter2", self.chart.template_raw(
            values=cases["a password in the URL"]).stdout)


class ChartRedisServedTest(unittest.TestCase):
    """The rendered config, served: the Secret's file stands where the chart mounts it."""

    def setUp(self):
        helm = cs.require_tools()
        chart = cs.Chart(helm)
        self.addCleanup(chart.close)
        artifacts.register_secret("chart-redis-password", PASSWORD)
        self.redis = RedisServer(PASSWORD).start()
        self.addCleanup(self.redis.cleanup)
        self.up = HttpUpstream()
        self.addCleanup(self.up.close)
        values = {
            "replicaCount": 1,
            "ca": {"generate": False},  # nothing intercepted: no CA to provide here
            "state": {"redis": {"url": "redis://127.0.0.1:%d/0" % self.redis.port,
                                "passwordSecret": {"name": "budget-redis", "key": "auth"},
                                "key_prefix": "chart:"}},
            "config": {
                "policies": {"p": {
                    "allow": [{"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}],
                    "budgets": [{"name": "one", "window": "run", "requests": 1}]}},
                "tasks": [{"name": "agent", "policy": "p"}],
            }}
        cfg = config_of(chart.template(values=values))
        self.sg = Sandgate({}, [])
        self.addCleanup(self.sg.cleanup)
        # What the cluster provides: the Secret's key as a file, and the tests' own listeners.
        source = cfg["credentials"]["sandgate-redis"]["source"]
        self.assertEqual(source["file"], "/var/run/secrets/sandgate/sandgate-redis/auth")
        source["file"] = self.sg.secret_file("chart-redis", PASSWORD)
        base = self.sg.make_config({}, [{"name": "agent", "policy": "p", "token": TOKEN}],
                                   resolve={"api.test": "127.0.0.1:%d" % self.up.port})
        cfg["listen"], cfg["audit"], cfg["tasks"] = base["listen"], base["audit"], base["tasks"]
        cfg["resolve"] = base["resolve"]
        self.sg.config = cfg
        self.sg.write_config(cfg)
        self.sg.start()

    def send(self):
        s = self.sg.connect()
        try:
            s.sendall(("GET http://api.test/echo/c HTTP/1.1\r\nHost: api.test\r\n%s"
                       "Connection: close\r\n\r\n" % Sandgate.auth_header("agent", TOKEN))
                      .encode())
            return read_response(s)
        finally:
            s.close()

    def test_the_rendered_config_counts_in_redis(self):
        self.assertEqual(self.send()[0], 200)
        status, headers, _ = self.send()
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertEqual(self.redis.command("GET", "chart:sandgate:budget:agent:one:run:0:requests"),
                         b"1")
        self.assertEqual(len(self.up.requests_to("/echo/c")), 1)
        self.assertNotIn(PASSWORD, self.sg.stderr())
        self.sg.metrics()  # recorded for the leak check


if __name__ == "__main__":
    unittest.main()
