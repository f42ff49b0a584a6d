"""The chart's shared budget counters (`state.redis`, issue #41), rendered with the real Helm:
the values become sandgate's `state.redis` (the password a credential read from a mounted
Secret, never a value in the ConfigMap), the Secret is mounted 0440 like a credential's, an
egress NetworkPolicy reaches Redis on the URL's port, and the schema refuses what sandgate
would (a password in the URL, an unknown fail mode, a password without a URL, the chart's own
credential name taken). The in-chart trial Redis (`state.redis.deploy`): its Deployment,
Service and ingress policy, labels no sandgate selector matches, sandgate pointed at its
Service, and the schema's refusals (with a URL, without a password Secret). Then the rendered
config is served by a real `sandgate serve` against a real redis-server with a password (for
the in-chart Redis, one started with the rendered Deployment's own arguments): two requests
against a budget of one, the second refused, and the count in Redis under the chart's prefix;
and the in-chart Redis made full: sandgate refuses closed and the count survives (not evicted).
"""

import copy
import os
import socket
import unittest

import yaml

import artifacts
import chart_support as cs
from redis_server import RedisServer
from sandgate_fixture import Sandgate, read_response
from upstreams import HttpUpstream

REDIS_VALUES = os.path.join(cs.CHART, "ci", "values-redis.yaml")
DEPLOY_VALUES = os.path.join(cs.CHART, "ci", "values-redis-deploy.yaml")
SELECTOR = {"app.kubernetes.io/name": "sandgate", "app.kubernetes.io/instance": "rel"}
REDIS_LABELS = {"app.kubernetes.io/name": "sandgate-redis", "app.kubernetes.io/instance": "rel",
                "app.kubernetes.io/component": "redis"}
# What the in-chart Redis runs: AUTH from the Secret (Kubernetes expands $(VAR) in args), no
# persistence (a trial store), and a full Redis refusing writes instead of evicting a budget.
REDIS_ARGS = ["--requirepass", "$(REDIS_PASSWORD)", "--save", "", "--appendonly", "no",
              "--maxmemory", "64mb", "--maxmemory-policy", "noeviction"]
PASSWORD = "chart-redis-pass-91b4e0c7"
TOKEN = "chart-red1s"
KEY = "chart:sandgate:budget:agent:one:run:0:requests"  # the prefix, then sandgate's own key


def config_of(docs):
    (cm,) = cs.find(docs, "ConfigMap", "rel-sandgate")
    return yaml.safe_load(cm["data"]["config.yaml"])


def pod_spec(docs):
    (dep,) = cs.find(docs, "Deployment", "rel-sandgate")
    return dep["spec"]["template"]["spec"]


def matches(selector, labels):
    return selector.items() <= labels.items()


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


class ChartRedisDeployTest(unittest.TestCase):
    """state.redis.deploy: the small in-chart Redis for trials."""

    @classmethod
    def setUpClass(cls):
        cls.helm = cs.require_tools()
        cls.chart = cs.Chart(cls.helm)
        with open(DEPLOY_VALUES) as f:
            cls.values = yaml.safe_load(f)
        cls.docs = cls.chart.template([DEPLOY_VALUES])

    @classmethod
    def tearDownClass(cls):
        cls.chart.close()

    def redis_objects(self, docs):
        ours = {("Deployment", "rel-sandgate-redis"), ("Service", "rel-sandgate-redis"),
                ("NetworkPolicy", "rel-sandgate-redis-ingress")}
        return [d for d in docs if (d["kind"], d["metadata"]["name"]) in ours
                or matches(REDIS_LABELS, d["metadata"].get("labels", {}))]

    def test_off_by_default_and_with_an_external_redis(self):
        for what, docs in (("default", self.chart.template()),
                           ("external", self.chart.template([REDIS_VALUES]))):
            with self.subTest(what):
                self.assertEqual(self.redis_objects(docs), [])
                self.assertEqual(len(cs.find(docs, "Deployment")), 1)

    def test_deployment_runs_a_password_protected_store_that_never_evicts(self):
        (dep,) = cs.find(self.docs, "Deployment", "rel-sandgate-redis")
        self.assertEqual(dep["metadata"]["namespace"], "egress")
        self.assertEqual(dep["spec"]["replicas"], 1)
        self.assertEqual(dep["spec"]["selector"], {"matchLabels": REDIS_LABELS})
        tmpl = dep["spec"]["template"]
        self.assertEqual(tmpl["metadata"]["labels"], REDIS_LABELS)
        # Never sandgate's selector: its Service, PDB and spread must not count Redis as a replica.
        self.assertFalse(matches(SELECTOR, tmpl["metadata"]["labels"]))
        spec = tmpl["spec"]
        self.assertIs(spec["automountServiceAccountToken"], False)
        self.assertEqual(spec["securityContext"], {
            "runAsNonRoot": True, "runAsUser": 999, "seccompProfile": {"type": "RuntimeDefault"}})
        (c,) = spec["containers"]
        self.assertEqual(c["image"], "redis:7.2.11-alpine")
        self.assertEqual(c["imagePullPolicy"], "IfNotPresent")
        self.assertEqual(c["command"], ["redis-server"])
        self.assertEqual(c["args"], REDIS_ARGS)
        self.assertEqual(c["env"], [{"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {
            "name": "sandgate-redis", "key": "password"}}}])
        self.assertEqual(c["securityContext"], {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "privileged": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}})
        self.assertEqual(c["ports"], [{"name": "redis", "containerPort": 6379, "protocol": "TCP"}])
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertEqual(c[probe]["tcpSocket"], {"port": "redis"}, probe)
        self.assertEqual(set(c["resources"]), {"requests", "limits"})
        self.assertEqual(c["volumeMounts"], [{"name": "data", "mountPath": "/data"}])
        self.assertEqual(spec["volumes"][0]["name"], "data")
        self.assertIn("emptyDir", spec["volumes"][0])
        # Its own values: another tag and size reach the pod.
        values = copy.deepcopy(self.values)
        values["state"]["redis"]["deploy"].update(
            {"image": {"repository": "mirror.local/redis", "tag": "7.2.11"}, "maxmemory": "32mb"})
        (dep,) = cs.find(self.chart.template(values=values), "Deployment", "rel-sandgate-redis")
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        self.assertEqual(c["image"], "mirror.local/redis:7.2.11")
        self.assertEqual(c["args"][c["args"].index("--maxmemory") + 1], "32mb")

    def test_service_selects_the_redis_pods_only(self):
        (svc,) = cs.find(self.docs, "Service", "rel-sandgate-redis")
        self.assertEqual(svc["spec"]["type"], "ClusterIP")
        self.assertEqual(svc["spec"]["selector"], REDIS_LABELS)
        self.assertEqual(svc["spec"]["ports"], [
            {"name": "redis", "port": 6379, "targetPort": "redis", "protocol": "TCP"}])
        (sandgate,) = cs.find(self.docs, "Deployment", "rel-sandgate")
        sandgate_pod = sandgate["spec"]["template"]["metadata"]["labels"]
        self.assertFalse(matches(svc["spec"]["selector"], sandgate_pod))
        (own,) = cs.find(self.docs, "Service", "rel-sandgate")
        self.assertFalse(matches(own["spec"]["selector"], REDIS_LABELS))
        for pdb in cs.find(self.docs, "PodDisruptionBudget"):
            self.assertFalse(matches(pdb["spec"]["selector"]["matchLabels"], REDIS_LABELS))

    def test_ingress_policy_admits_sandgate_alone_even_without_network_policies(self):
        expected = {"podSelector": {"matchLabels": REDIS_LABELS}, "policyTypes": ["Ingress"],
                    "ingress": [{"from": [{"podSelector": {"matchLabels": SELECTOR}}],
                                 "ports": [{"port": 6379, "protocol": "TCP"}]}]}
        (np,) = cs.find(self.docs, "NetworkPolicy", "rel-sandgate-redis-ingress", "egress")
        self.assertEqual(np["spec"], expected)
        values = copy.deepcopy(self.values)
        values["networkPolicy"] = {"enabled": False}
        docs = self.chart.template(values=values)
        (np,) = cs.find(docs, "NetworkPolicy")  # the store's own protection stays
        self.assertEqual((np["metadata"]["name"], np["spec"]),
                         ("rel-sandgate-redis-ingress", expected))

    def test_sandgate_counts_in_the_service_with_the_password_credential(self):
        cfg = config_of(self.docs)
        self.assertEqual(cfg["state"], {"redis": {
            "url": "redis://rel-sandgate-redis:6379/0", "password": "sandgate-redis",
            "fail": "closed", "key_prefix": "trial:"}})
        self.assertEqual(cfg["credentials"]["sandgate-redis"],
                         {"source": {"file": "/var/run/secrets/sandgate/sandgate-redis/password"}})
        spec = pod_spec(self.docs)
        vols = {v["name"]: v for v in spec["volumes"]}
        self.assertEqual(vols["redis-password"]["secret"]["secretName"], "sandgate-redis")
        mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
        self.assertEqual(mounts["redis-password"]["mountPath"],
                         "/var/run/secrets/sandgate/sandgate-redis")
        self.assertEqual([e for e in cs.validate(self.docs) if e[1]], [])

    def test_sandgate_egress_policy_to_the_redis_pods_only_when_asked(self):
        # Not by default: an egress policy selecting sandgate's pods would leave them nothing
        # but Redis (no upstream, no DNS) in a namespace that does not deny egress already.
        self.assertEqual(cs.find(self.docs, "NetworkPolicy", "rel-sandgate-redis"), [])
        values = copy.deepcopy(self.values)
        values["state"]["redis"]["deploy"]["egressPolicy"] = True
        docs = self.chart.template(values=values)
        (np,) = cs.find(docs, "NetworkPolicy", "rel-sandgate-redis", "egress")
        self.assertEqual(np["spec"]["podSelector"], {"matchLabels": SELECTOR})
        self.assertEqual(np["spec"]["policyTypes"], ["Egress"])
        to_redis = {"podSelector": {"matchLabels": REDIS_LABELS}}
        self.assertEqual(np["spec"]["egress"], [{"to": [to_redis],
                                                 "ports": [{"port": 6379, "protocol": "TCP"}]}])
        self.assertEqual([e for e in cs.validate(docs) if e[1]], [])
        # With networkPolicy.to peers (which by themselves render the policy) the Redis pods
        # come first: the policy must never cut sandgate off its own store.
        peer = {"ipBlock": {"cidr": "10.9.0.0/16"}}
        values["state"]["redis"]["deploy"]["egressPolicy"] = False
        values["state"]["redis"]["networkPolicy"] = {"to": [peer]}
        (np,) = cs.find(self.chart.template(values=values), "NetworkPolicy", "rel-sandgate-redis")
        self.assertEqual(np["spec"]["egress"][0]["to"], [to_redis, peer])

    def test_schema_refuses_a_url_or_no_password_secret(self):
        def redis(**changes):
            values = copy.deepcopy(self.values)
            values["state"]["redis"].update(changes)
            return values
        def deploy(**changes):
            values = copy.deepcopy(self.values)
            values["state"]["redis"]["deploy"].update(changes)
            return values
        cases = {
            "deploy and a url": redis(url="redis://redis.test:6379/0"),
            "deploy without a password Secret": redis(passwordSecret={"name": "", "key": "p"}),
            "an unknown deploy key": deploy(replicas=2),
            "a maxmemory Redis cannot read": deploy(maxmemory="64 MiB"),
            "an image without a tag": deploy(image={"repository": "redis", "tag": ""}),
        }
        for what, values in cases.items():
            with self.subTest(what):
                p = self.chart.template_raw(values=values)
                self.assertNotEqual(p.returncode, 0, p.stdout[:300])
                self.assertIn("values don't meet the specifications of the schema", p.stderr)
        # What it accepts: the file itself, and deploy with networkPolicy.to peers (no url).
        self.assertEqual(self.chart.template_raw([DEPLOY_VALUES]).returncode, 0)
        ok = redis(networkPolicy={"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]})
        p = self.chart.template_raw(values=ok)
        self.assertEqual(p.returncode, 0, p.stderr)


class ChartRedisServedTest(unittest.TestCase):
    """The rendered config, served: the Secret's file stands where the chart mounts it."""

    POLICY = {"policies": {"p": {
        "allow": [{"host": "api.test", "ports": [80], "cidrs": ["127.0.0.0/8"]}],
        "budgets": [{"name": "one", "window": "run", "requests": 1}]}},
        "tasks": [{"name": "agent", "policy": "p"}]}

    def setUp(self):
        helm = cs.require_tools()
        self.chart = cs.Chart(helm)
        self.addCleanup(self.chart.close)
        artifacts.register_secret("chart-redis-password", PASSWORD)
        self.up = HttpUpstream()
        self.addCleanup(self.up.close)

    def start_redis(self, args=None):
        self.redis = RedisServer(PASSWORD, args=args).start()
        self.addCleanup(self.redis.cleanup)

    def serve(self, cfg, secret_key):
        self.sg = Sandgate({}, [])
        self.addCleanup(self.sg.cleanup)
        # What the cluster provides: the Secret's key as a file, and the tests' own listeners.
        source = cfg["credentials"]["sandgate-redis"]["source"]
        self.assertEqual(source["file"], "/var/run/secrets/sandgate/sandgate-redis/" + secret_key)
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
        self.start_redis()
        values = {
            "replicaCount": 1,
            "ca": {"generate": False},  # nothing intercepted: no CA to provide here
            "state": {"redis": {"url": "redis://127.0.0.1:%d/0" % self.redis.port,
                                "passwordSecret": {"name": "budget-redis", "key": "auth"},
                                "key_prefix": "chart:"}},
            "config": self.POLICY}
        self.serve(config_of(self.chart.template(values=values)), "auth")
        self.assert_counts_once()

    def serve_in_chart(self):
        """The in-chart Redis started with the rendered Deployment's arguments, and sandgate
        serving the rendered config against it."""
        values = {
            "replicaCount": 1,
            "ca": {"generate": False},
            "state": {"redis": {"deploy": {"enabled": True},
                                "passwordSecret": {"name": "budget-redis", "key": "auth"},
                                "key_prefix": "chart:"}},
            "config": self.POLICY}
        docs = self.chart.template(values=values)
        (dep,) = cs.find(docs, "Deployment", "rel-sandgate-redis")
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        self.assertEqual(c["command"], ["redis-server"])
        # The kubelet's $(VAR) expansion, with the Secret's value; nothing else changed.
        (env,) = c["env"]
        self.assertEqual(env["valueFrom"]["secretKeyRef"], {"name": "budget-redis", "key": "auth"})
        args = [a.replace("$(%s)" % env["name"], PASSWORD) for a in c["args"]]
        self.assertEqual(args.count(PASSWORD), 1)
        self.start_redis(args)
        # The Service's name, as sandgate would resolve it in the cluster; only the host changes.
        cfg = config_of(docs)
        self.assertEqual(cfg["state"]["redis"]["url"], "redis://rel-sandgate-redis:6379/0")
        cfg["state"]["redis"]["url"] = "redis://127.0.0.1:%d/0" % self.redis.port
        self.serve(cfg, "auth")

    def test_the_in_chart_redis_as_rendered_counts_and_refuses_strangers(self):
        self.serve_in_chart()
        # Without the password Redis answers nothing but NOAUTH (it is reachable cluster-wide
        # where NetworkPolicies are not enforced).
        with socket.create_connection(("127.0.0.1", self.redis.port), timeout=2) as s:
            s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n0\r\n")
            self.assertTrue(s.recv(256).startswith(b"-NOAUTH"))
        for key, value in (("maxmemory-policy", b"noeviction"), ("save", b""),
                           ("appendonly", b"no"), ("maxmemory", b"67108864")):
            self.assertEqual(self.redis.config_get(key), value, key)
        self.assert_counts_once()

    def test_the_in_chart_redis_when_full_keeps_the_count_and_sandgate_refuses(self):
        # A full Redis (maxmemory below what it holds): with noeviction it refuses sandgate's
        # scripts (the connection's shared rate is the first), so sandgate refuses closed, and
        # the count is still there when room comes back. Evicting instead would drop the key:
        # the budget reset, and the next request admitted.
        self.serve_in_chart()
        self.assertEqual(self.send()[0], 200)
        self.assertEqual(self.redis.command("CONFIG", "SET", "maxmemory", "1"), b"+OK")
        status, headers, _ = self.send()
        self.assertEqual((status, headers.get("x-sandgate-reason")),
                         (503, "rate_limit_unavailable"))
        self.assertEqual(self.redis.command("CONFIG", "SET", "maxmemory", "64mb"), b"+OK")
        self.assertEqual(self.redis.command("GET", KEY), b"1")
        status, headers, _ = self.send()
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertEqual(len(self.up.requests_to("/echo/c")), 1)

    def assert_counts_once(self):
        self.assertEqual(self.send()[0], 200)
        status, headers, _ = self.send()
        self.assertEqual((status, headers.get("x-sandgate-reason")), (429, "budget_exceeded"))
        self.assertEqual(self.redis.command("GET", KEY), b"1")
        self.assertEqual(len(self.up.requests_to("/echo/c")), 1)
        self.assertNotIn(PASSWORD, self.sg.stderr())
        self.sg.metrics()  # recorded for the leak check


if __name__ == "__main__":
    unittest.main()
