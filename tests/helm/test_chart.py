"""helm/sandgate/ rendered and checked: helm lint --strict and helm template with the default
values and every ci/ values file, each manifest validated against the Kubernetes and
prometheus-operator schemas, then what the schemas cannot see (unknown keys, the chart's own
promises) asserted on the parsed manifests: stable selector labels, probes, hardening, no
subPath, no secret material in a ConfigMap, task token keys from mounted Secrets (a key added
to a mounted Secret needs no rollout), NetworkPolicies that allow exactly what the README
states, and a checksum annotation that moves for restart-only edits alone.
"""

import base64
import copy
import json
import os
import re
import subprocess
import tempfile
import unittest

import yaml

import chart_support as cs

SELECTOR = {"app.kubernetes.io/name": "sandgate", "app.kubernetes.io/instance": "rel"}
CHECKSUM = "checksum/restart-config"


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.helm = cs.require_tools()  # fails (or skips) before any test runs
        cls.chart = cs.Chart(cls.helm)
        cls.rendered = {"default": cls.chart.template()}
        for f in cs.ci_values():
            cls.rendered[os.path.basename(f)] = cls.chart.template([f])
        with open(os.path.join(cs.CHART, "ci", "values-shared.yaml")) as f:
            cls.shared_values = yaml.safe_load(f)

    @classmethod
    def tearDownClass(cls):
        cls.chart.close()

    def deployment(self, docs):
        (d,) = cs.find(docs, "Deployment", "rel-sandgate")  # not the in-chart Redis's
        return d

    # ---- helm itself ------------------------------------------------------------------

    def test_lint_strict_default_and_each_ci_values_file(self):
        for files in [[]] + [[f] for f in cs.ci_values()]:
            with self.subTest(values=files):
                p = self.chart.lint(files)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertGreaterEqual(len(cs.ci_values()), 3)

    def test_schema_violations_fail_lint_and_template(self):
        cases = {
            "unknown top-level key": {"replicas": 2},
            "tokens without keys": {"config": {"tokens": {"max_ttl": "2h"}}},
            "token key without its Secret": {"config": {"tokens": {"keys": [{"id": "k1"}]}}},
            "token key with a file": {"config": {"tokens": {"keys": [
                {"id": "k1", "file": "/k", "secret": {"name": "s", "key": "k"}}]}}},
            "unknown key the chart owns": {"networkPolicy": {"allowDns": True}},
            "unknown credential key": {"config": {"credentials": {"x": {
                "secret": {"name": "s", "key": "k"}, "hosts": ["a.example"],
                "inject": {"header": "A"}, "source": {"env": "X"}}}}},
            "credential without its Secret": {"config": {"credentials": {"x": {
                "hosts": ["a.example"], "inject": {"header": "A"}}}}},
            "several replicas, no shared CA": {"replicaCount": 3, "ca": {"generate": False}},
            "autoscaling, no shared CA": {"replicaCount": 1, "ca": {"generate": False},
                                          "autoscaling": {"enabled": True}},
            "two CA sources": {"ca": {"generate": True, "existingSecret": "mine"}},
            "port out of range": {"listen": {"proxyPort": 70000}},
            "bad token hash": {"config": {"tasks": [{"name": "t", "policy": "p",
                                                     "token_sha256": "abc"}]}},
            "audit outside its volume": {"audit": {"path": "/tmp/audit.log"}},
        }
        for name, values in cases.items():
            with self.subTest(name):
                lint = self.chart.lint(values=values)
                self.assertNotEqual(lint.returncode, 0, lint.stdout)
                self.assertIn("schema", lint.stdout + lint.stderr)
                tpl = self.chart.template_raw(values=values)
                self.assertNotEqual(tpl.returncode, 0, tpl.stdout[:400])
                self.assertIn("schema", tpl.stderr)
        # The same shapes made valid pass, so the refusals above are the schema's doing.
        ok = self.chart.template_raw(values={"replicaCount": 3, "ca": {"generate": True}})
        self.assertEqual(ok.returncode, 0, ok.stderr)

    def test_chart_metadata(self):
        with open(os.path.join(cs.CHART, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        with open(os.path.join(cs.SOURCE, "CMakeLists.txt")) as f:
            version = re.search(r"project\(sandgate\s+VERSION\s+([0-9.]+)", f.read()).group(1)
        self.assertEqual((chart["apiVersion"], chart["type"]), ("v2", "application"))
        self.assertEqual(chart["appVersion"], version)  # the image tag defaults to it
        self.assertIn("kubeVersion", chart)
        image = self.deployment(self.rendered["default"])["spec"]["template"]["spec"][
            "containers"][0]["image"]
        self.assertEqual(image, "sandgate:" + version)

    # ---- Kubernetes schemas ----------------------------------------------------------

    def test_every_manifest_valid_against_kubernetes_schemas(self):
        for variant, docs in self.rendered.items():
            with self.subTest(variant):
                results = cs.validate(docs)
                self.assertEqual(len(results), len(docs))
                bad = [(w, e) for w, e in results if e]
                self.assertEqual(bad, [])
        kinds = {d["kind"] for docs in self.rendered.values() for d in docs}
        for k in ("Deployment", "Service", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget",
                  "HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule", "Job", "Pod"):
            self.assertIn(k, kinds)

    def test_validator_rejects_what_is_wrong(self):
        # The validator must be able to fail: a wrong type, and a kind it has no schema for.
        dep = copy.deepcopy(self.deployment(self.rendered["default"]))
        dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "proxy"
        unknown = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}
        results = cs.validate([dep, unknown])
        self.assertIn("containerPort", results[0][1] or "")
        self.assertIn("no schema", results[1][1] or "")

    # ---- structure -------------------------------------------------------------------

    def test_selector_labels_stable_and_only_on_sandgate_pods(self):
        for variant, docs in self.rendered.items():
            with self.subTest(variant):
                dep = self.deployment(docs)
                self.assertEqual(dep["spec"]["selector"]["matchLabels"], SELECTOR)
                tmpl = dep["spec"]["template"]["metadata"]["labels"]
                self.assertLessEqual(SELECTOR.items(), tmpl.items())
                (svc,) = cs.find(docs, "Service", "rel-sandgate")
                self.assertEqual(svc["spec"]["selector"], SELECTOR)
                for pdb in cs.find(docs, "PodDisruptionBudget"):
                    self.assertEqual(pdb["spec"]["selector"]["matchLabels"], SELECTOR)
                for c in dep["spec"]["template"]["spec"].get("topologySpreadConstraints", []):
                    self.assertEqual(c["labelSelector"]["matchLabels"], SELECTOR)
                # The helm test pod, the CA Job and the in-chart Redis must not look like
                # replicas to the Service.
                for what, _ in cs.pod_specs(docs):
                    if what == "Deployment/rel-sandgate":
                        continue
                    doc = next(d for d in docs if what.endswith("/" + d["metadata"]["name"])
                               and what.startswith(d["kind"]))
                    labels = (doc["metadata"]["labels"] if doc["kind"] == "Pod"
                              else doc["spec"]["template"]["metadata"]["labels"])
                    self.assertFalse(SELECTOR.items() <= labels.items(), what)

    def test_probes(self):
        for variant, docs in self.rendered.items():
            with self.subTest(variant):
                (c,) = self.deployment(docs)["spec"]["template"]["spec"]["containers"]
                for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                                    ("readinessProbe", "/readyz")):
                    self.assertEqual(c[probe]["httpGet"], {"path": path, "port": "metrics"})
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                self.assertEqual(set(ports), {"proxy", "metrics"})

    def test_every_pod_hardened(self):
        for variant, docs in self.rendered.items():
            for what, spec in cs.pod_specs(docs):
                with self.subTest(variant=variant, pod=what):
                    self.assertIs(spec["automountServiceAccountToken"], False)
                    self.assertIs(spec["securityContext"]["runAsNonRoot"], True)
                    self.assertEqual(spec["securityContext"]["seccompProfile"],
                                     {"type": "RuntimeDefault"})
                    for c in spec.get("initContainers", []) + spec["containers"]:
                        sc = c["securityContext"]
                        self.assertIs(sc["allowPrivilegeEscalation"], False, c["name"])
                        self.assertIs(sc["readOnlyRootFilesystem"], True, c["name"])
                        self.assertEqual(sc["capabilities"]["drop"], ["ALL"], c["name"])
                        self.assertNotIn("add", sc["capabilities"])
                        self.assertNotIn(sc.get("privileged"), (True,))
        dep = self.deployment(self.rendered["default"])
        c = dep["spec"]["template"]["spec"]["containers"][0]
        self.assertIn("limits", c["resources"])
        self.assertIn("requests", c["resources"])

    def test_no_subpath_anywhere(self):
        for variant, docs in self.rendered.items():
            with self.subTest(variant):
                self.assertNotIn("subPath", yaml.safe_dump_all(docs))

    def test_config_mounted_as_directory_and_secrets_as_0440_files(self):
        docs = self.rendered["values-shared.yaml"]
        spec = self.deployment(docs)["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        config_arg = c["args"][c["args"].index("--config") + 1]
        self.assertEqual(os.path.dirname(config_arg), mounts["config"]["mountPath"])
        self.assertEqual(volumes["config"]["configMap"]["name"], "rel-sandgate")
        self.assertEqual(volumes["ca"]["secret"]["secretName"], "sandgate-ca")
        self.assertEqual(volumes["ca"]["secret"]["defaultMode"], 0o440)
        secrets = {v["secret"]["secretName"]: v for v in spec["volumes"] if "secret" in v}
        self.assertEqual(set(secrets), {"sandgate-ca", "openai-api-key", "github-token"})
        for v in secrets.values():
            self.assertEqual(v["secret"]["defaultMode"], 0o440)
        # The rendered config names each credential by the file its Secret is mounted as.
        (cm,) = cs.find(docs, "ConfigMap", "rel-sandgate")
        cfg = yaml.safe_load(cm["data"]["config.yaml"])
        for name, secret in (("openai", "openai-api-key"), ("github", "github-token")):
            (vol,) = [n for n, v in volumes.items()
                      if v.get("secret", {}).get("secretName") == secret]
            path = cfg["credentials"][name]["source"]["file"]
            self.assertEqual(os.path.dirname(path), mounts[vol]["mountPath"])
            self.assertEqual(os.path.basename(path),
                             volumes[vol]["secret"]["items"][0]["path"])
        self.assertEqual(cfg["ca"], {"cert": "/etc/sandgate/ca/ca.pem",
                                     "key": "/etc/sandgate/ca/ca.key"})
        self.assertEqual(mounts["ca"]["mountPath"], "/etc/sandgate/ca")
        self.assertEqual(cfg["listen"], {"proxy": "0.0.0.0:3128", "metrics": "0.0.0.0:9464"})
        self.assertEqual(cfg["limits"]["max_header_bytes"], 1048576)

    def test_token_keys_come_from_mounted_secrets(self):
        docs = self.rendered["values-tokens.yaml"]
        spec = self.deployment(docs)["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        (cm,) = cs.find(docs, "ConfigMap", "rel-sandgate")
        tokens = yaml.safe_load(cm["data"]["config.yaml"])["tokens"]
        with open(os.path.join(cs.CHART, "ci", "values-tokens.yaml")) as f:
            wanted = yaml.safe_load(f)["config"]["tokens"]
        self.assertEqual([k["id"] for k in tokens["keys"]], [k["id"] for k in wanted["keys"]])
        for key, asked in zip(tokens["keys"], wanted["keys"]):
            # The file is the Secret's key, in the directory that Secret is mounted at, whole
            # (no items) and 0440, read-only.
            (vol,) = [n for n, v in volumes.items()
                      if v.get("secret", {}).get("secretName") == asked["secret"]["name"]]
            self.assertEqual(key["file"], "%s/%s" % (mounts[vol]["mountPath"],
                                                     asked["secret"]["key"]))
            self.assertTrue(mounts[vol]["readOnly"])
            self.assertEqual(volumes[vol]["secret"]["defaultMode"], 0o440)
            self.assertNotIn("items", volumes[vol]["secret"])
            self.assertNotIn("secret", key)
            for field in ("algorithm", "revoked_before"):
                self.assertEqual(key.get(field), asked.get(field))
        # Two keys share one Secret: one volume each Secret, not each key.
        self.assertEqual(len([n for n in volumes if n.startswith("token-keys-")]), 2)
        self.assertEqual({k: tokens[k] for k in ("max_ttl", "leeway", "revoked")},
                         {k: wanted[k] for k in ("max_ttl", "leeway", "revoked")})
        # Without config.tokens: no tokens section, no token volume.
        default = self.rendered["default"]
        (cm,) = cs.find(default, "ConfigMap", "rel-sandgate")
        self.assertNotIn("tokens", yaml.safe_load(cm["data"]["config.yaml"]))
        self.assertFalse([v for v in self.deployment(default)["spec"]["template"]["spec"]
                          ["volumes"] if v["name"].startswith("token-keys-")])

    def test_a_key_added_to_a_mounted_token_secret_needs_no_rollout(self):
        with open(os.path.join(cs.CHART, "ci", "values-tokens.yaml")) as f:
            base = yaml.safe_load(f)

        def render(edit):
            values = copy.deepcopy(base)
            edit(values)
            docs = self.chart.template(values=values)
            (cm,) = cs.find(docs, "ConfigMap", "rel-sandgate")
            return self.deployment(docs)["spec"]["template"], cm["data"]["config.yaml"]

        pod, config = render(lambda v: None)
        rotated_pod, rotated_config = render(lambda v: v["config"]["tokens"]["keys"].append(
            {"id": "k2027a", "secret": {"name": "sandgate-token-keys", "key": "hs-2027a"}}))
        self.assertNotEqual(rotated_config, config)  # reloaded from the ConfigMap...
        self.assertEqual(rotated_pod, pod)            # ...with the same pods
        new_secret_pod, _ = render(lambda v: v["config"]["tokens"]["keys"].append(
            {"id": "k2027b", "secret": {"name": "another-token-key", "key": "hs"}}))
        self.assertNotEqual(new_secret_pod, pod)  # a new volume: a rollout

    def test_rendered_config_loads_in_sandgate(self):
        binary = os.environ.get("SANDGATE_BINARY")
        if not binary:
            self.fail("SANDGATE_BINARY is not set (CTest sets it)")
        for variant, docs in self.rendered.items():
            (cm,) = cs.find(docs, "ConfigMap", "rel-sandgate")
            cfg = yaml.safe_load(cm["data"]["config.yaml"])
            task = cfg["tasks"][0]["name"] if cfg.get("tasks") else None
            if not task:
                continue
            with self.subTest(variant), tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "config.yaml")
                with open(path, "w") as f:
                    f.write(cm["data"]["config.yaml"])
                p = subprocess.run([binary, "policy", "check", "--config", path, "--task", task,
                                    "http://off-policy.invalid/"],
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(p.returncode, 1, p.stdout + p.stderr)  # 1: deny, 2: bad config
                self.assertIn("no_matching_rule", p.stdout)

    def test_no_secret_material_in_configmaps(self):
        # The chart never carries a secret: no Secret object, no key in any ConfigMap, and
        # credentials only as file paths of mounted Secrets.
        for variant, docs in self.rendered.items():
            with self.subTest(variant):
                self.assertEqual(cs.find(docs, "Secret"), [])
                for cm in cs.find(docs, "ConfigMap"):
                    text = yaml.safe_dump(cm)
                    self.assertNotIn("PRIVATE KEY", text)
                    for key, value in cm.get("data", {}).items():
                        if key != "config.yaml":
                            continue
                        cfg = yaml.safe_load(value)
                        for cred in (cfg.get("credentials") or {}).values():
                            self.assertEqual(list(cred["source"]), ["file"])
                            self.assertTrue(cred["source"]["file"].startswith(
                                "/var/run/secrets/sandgate/"))
        # A private key given as the CA certificate is refused, not published.
        key = subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt",
                              "ec_paramgen_curve:P-256"], capture_output=True, text=True,
                             check=True).stdout
        values = copy.deepcopy(self.shared_values)
        values["ca"]["certificate"] = values["ca"]["certificate"] + key
        p = self.chart.template_raw(values=values)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("private key", p.stderr)
        self.assertNotIn("PRIVATE KEY", p.stdout)

    def test_ca_configmap_in_each_sandbox_namespace(self):
        docs = self.rendered["values-shared.yaml"]
        cms = {cm["metadata"]["namespace"]: cm for cm in cs.find(docs, "ConfigMap", "sandgate-ca")}
        self.assertEqual(set(cms), {"agents-a", "agents-b"})
        for cm in cms.values():
            self.assertEqual(list(cm["data"]), ["ca.pem"])
            self.assertEqual(cm["data"]["ca.pem"].strip(),
                             self.shared_values["ca"]["certificate"].strip())
        # The generated CA: a hook Job creates the Secret and the ConfigMaps, Helm renders none.
        gen = self.rendered["values-generated-ca.yaml"]
        self.assertEqual(cs.find(gen, "ConfigMap", "sandgate-ca"), [])
        (job,) = cs.find(gen, "Job")
        self.assertIn("pre-install", job["metadata"]["annotations"]["helm.sh/hook"])
        script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
        self.assertIn("get secret", script)  # an existing Secret is kept (idempotent)
        self.assertIn("sandboxes", script)
        init = job["spec"]["template"]["spec"]["initContainers"][0]
        self.assertEqual(init["args"][:2], ["ca", "init"])
        dep = self.deployment(gen)
        vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
        self.assertEqual(vols["ca"]["secret"]["secretName"], "rel-sandgate-ca")

    def test_ca_job_is_idempotent_and_publishes_only_the_certificate(self):
        # The Job's two steps run here as rendered: `sandgate ca init` into its emptyDir, then
        # the store script against a stand-in kubectl (fake_kubectl.py) over a temp "cluster".
        binary = os.environ.get("SANDGATE_BINARY")
        if not binary:
            self.fail("SANDGATE_BINARY is not set (CTest sets it)")
        (job,) = cs.find(self.rendered["values-generated-ca.yaml"], "Job")
        spec = job["spec"]["template"]["spec"]
        (init,), (store,) = spec["initContainers"], spec["containers"]
        self.assertEqual(store["command"], ["/bin/sh", "-ec"])
        with tempfile.TemporaryDirectory() as d:
            cluster, bindir = os.path.join(d, "cluster"), os.path.join(d, "bin")
            os.makedirs(cluster)
            os.makedirs(bindir)
            os.symlink(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "fake_kubectl.py"), os.path.join(bindir, "kubectl"))
            env = dict(os.environ, FAKE_CLUSTER=cluster,
                       PATH=bindir + os.pathsep + os.environ["PATH"])

            def run_job(n):
                work = os.path.join(d, "work-%d" % n)  # a fresh emptyDir per run
                os.makedirs(work)
                args = [a.replace("/work", work) for a in init["args"]]
                subprocess.run([binary] + args, check=True, capture_output=True, timeout=30)
                p = subprocess.run(["/bin/sh", "-ec", store["args"][0].replace("/work", work)],
                                   env=env, capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                with open(os.path.join(work, "ca", "ca.key")) as f:
                    return p.stdout, f.read()

            def read(ns, kind, name):
                with open(os.path.join(cluster, ns, kind, name + ".json")) as f:
                    return json.load(f)

            out1, key1 = run_job(1)
            self.assertIn("created", out1)
            secret = read("egress", "secret", "rel-sandgate-ca")
            self.assertEqual(base64.b64decode(secret["data"]["ca.key"]).decode(), key1)
            cert = base64.b64decode(secret["data"]["ca.pem"]).decode()
            out2, key2 = run_job(2)  # the upgrade: a new key is made and thrown away
            self.assertNotEqual(key1, key2)
            self.assertIn("keeping it", out2)
            self.assertEqual(read("egress", "secret", "rel-sandgate-ca"), secret)
            cm = read("sandboxes", "configmap", "sandgate-ca")
            self.assertEqual(cm["data"], {"ca.pem": cert})
            self.assertNotIn("PRIVATE KEY", json.dumps(cm))

    def test_network_policies_allow_exactly_what_is_stated(self):
        docs = self.rendered["values-shared.yaml"]
        own = cs.find(docs, "NetworkPolicy", "rel-sandgate", "egress")[0]
        self.assertEqual(own["spec"]["podSelector"], {"matchLabels": SELECTOR})
        self.assertEqual(own["spec"]["policyTypes"], ["Ingress"])
        test_pod = {"matchLabels": {"app.kubernetes.io/name": "sandgate-test",
                                    "app.kubernetes.io/instance": "rel",
                                    "app.kubernetes.io/component": "test"}}
        proxy_rule, metrics_rule = own["spec"]["ingress"]
        self.assertEqual(proxy_rule["ports"], [{"port": "proxy", "protocol": "TCP"}])
        self.assertEqual(proxy_rule["from"], [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agents-a"}}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agents-b"}}},
            {"podSelector": test_pod}])
        self.assertEqual(metrics_rule["ports"], [{"port": "metrics", "protocol": "TCP"}])
        self.assertEqual(metrics_rule["from"], [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
            {"podSelector": test_pod}])

        to_sandgate = {"to": [{"namespaceSelector": {"matchLabels": {
                           "kubernetes.io/metadata.name": "egress"}},
                               "podSelector": {"matchLabels": SELECTOR}}],
                       "ports": [{"port": 3128, "protocol": "TCP"}]}
        sandbox = [n for n in cs.find(docs, "NetworkPolicy") if n["metadata"]["namespace"] != "egress"]
        self.assertEqual(sorted(n["metadata"]["namespace"] for n in sandbox), ["agents-a", "agents-b"])
        for n in sandbox:
            self.assertEqual(n["spec"]["podSelector"], {})  # every pod of the namespace
            self.assertEqual(n["spec"]["policyTypes"], ["Egress"])  # default-deny egress
            self.assertEqual(n["spec"]["egress"], [to_sandgate])  # no DNS without allowDNS
            self.assertNotIn("ingress", n["spec"])

        # allowDNS adds exactly the cluster DNS on port 53, UDP and TCP.
        gen = self.rendered["values-generated-ca.yaml"]
        (n,) = [n for n in cs.find(gen, "NetworkPolicy") if n["metadata"]["namespace"] == "sandboxes"]
        self.assertEqual(n["spec"]["podSelector"], {"matchLabels": {"sandgate.dev/sandbox": "true"}})
        self.assertEqual(n["spec"]["egress"], [to_sandgate, {
            "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
            "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}])

        # Off: no NetworkPolicy at all.
        self.assertEqual(cs.find(self.rendered["values-minimal.yaml"], "NetworkPolicy"), [])

    def test_checksum_moves_for_restart_edits_only(self):
        base = copy.deepcopy(self.shared_values)
        base_file = os.path.join(self.chart.tmp.name, "checksum-base.yaml")

        def render(edit):
            values = copy.deepcopy(base)
            edit(values)
            docs = self.chart.template(values=values)
            dep = self.deployment(docs)
            (cm,) = cs.find(docs, "ConfigMap", "rel-sandgate")
            return (dep["spec"]["template"]["metadata"]["annotations"][CHECKSUM],
                    cm["data"]["config.yaml"])

        checksum, config = render(lambda v: None)
        reload_edits = {
            "policy rule": lambda v: v["config"]["policies"]["agent"]["allow"].append(
                {"host": "example.org"}),
            "new task": lambda v: v["config"]["tasks"].append(
                {"name": "agent-c", "policy": "registry"}),
            "credential hosts": lambda v: v["config"]["credentials"]["openai"]["hosts"].append(
                "api2.openai.com"),
            "global deny": lambda v: v["config"]["global"]["deny"].append({"host": "x.example"}),
            "limits": lambda v: v["config"]["limits"].update({"idle_timeout": "60s"}),
        }
        restart_edits = {
            "listen proxy port": lambda v: v.setdefault("listen", {}).update(
                {"proxyPort": 3129, "metricsPort": 9464}),
            "listen metrics port": lambda v: v.setdefault("listen", {}).update(
                {"proxyPort": 3128, "metricsPort": 9465}),
            "audit path": lambda v: v.setdefault("audit", {}).update(
                {"path": "/var/log/sandgate/audit.jsonl"}),
            "CA Secret": lambda v: v["ca"].update({"existingSecret": "other-ca"}),
        }
        for name, edit in reload_edits.items():
            with self.subTest(reload=name):
                c, cfg = render(edit)
                self.assertNotEqual(cfg, config)  # the ConfigMap changes...
                self.assertEqual(c, checksum)     # ...and the pods stay
        for name, edit in restart_edits.items():
            with self.subTest(restart=name):
                c, cfg = render(edit)
                self.assertNotEqual(c, checksum)

    def test_service_and_sandgate_args(self):
        docs = self.rendered["values-shared.yaml"]
        (svc,) = cs.find(docs, "Service", "rel-sandgate")
        self.assertEqual(svc["spec"]["type"], "ClusterIP")
        self.assertEqual(svc["spec"]["clusterIP"], "10.96.31.28")
        self.assertEqual({p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]},
                         {"proxy": (3128, "proxy"), "metrics": (9464, "metrics")})
        self.assertNotIn("clusterIP", cs.find(self.rendered["default"], "Service")[0]["spec"])
        dep = self.deployment(docs)
        self.assertEqual(dep["spec"]["replicas"], 3)
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertEqual(args, ["serve", "--config", "/etc/sandgate/config/config.yaml",
                                "--drain-delay", "8s", "--threads", "2"])
        # The pod gets the time to drain: the delay, then shutdown_grace.
        self.assertGreaterEqual(dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
                                8 + 20)
        # The HPA owns the count when enabled.
        gen = self.rendered["values-generated-ca.yaml"]
        self.assertNotIn("replicas", self.deployment(gen)["spec"])
        (hpa,) = cs.find(gen, "HorizontalPodAutoscaler")
        self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
        self.assertEqual(hpa["spec"]["metrics"][0]["resource"]["name"], "cpu")

    def test_monitoring_objects_off_by_default_and_rules_match_the_plain_file(self):
        default = self.rendered["default"]
        self.assertEqual(cs.find(default, "ServiceMonitor"), [])
        self.assertEqual(cs.find(default, "PrometheusRule"), [])
        docs = self.rendered["values-shared.yaml"]
        (rule,) = cs.find(docs, "PrometheusRule")
        with open(os.path.join(cs.CHART, "files", "prometheus-rules.yaml")) as f:
            plain = yaml.safe_load(f)
        self.assertEqual(rule["spec"], plain)
        alerts = {r["alert"] for g in plain["groups"] for r in g["rules"]}
        self.assertEqual(alerts, {"SandgateConfigReloadFailed", "SandgatePlaceholderExfiltration",
                                  "SandgateCredentialUnavailable", "SandgateConfigDrift",
                                  "SandgateTargetDown", "SandgateDenialSpike",
                                  "SandgateBudgetNearlySpent", "SandgateBudgetExhausted",
                                  "SandgateBudgetFailOpen", "SandgateLlmSpendRate"})
        (sm,) = cs.find(docs, "ServiceMonitor")
        self.assertEqual(sm["spec"]["selector"]["matchLabels"], SELECTOR)
        self.assertEqual(sm["spec"]["endpoints"][0]["port"], "metrics")

    def test_grafana_dashboard_off_by_default_and_the_plain_file_when_on(self):
        def dashboards(docs):
            return [d for d in cs.find(docs, "ConfigMap")
                    if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
        self.assertEqual(dashboards(self.rendered["default"]), [])
        (cm,) = dashboards(self.rendered["values-shared.yaml"])
        self.assertEqual(cm["metadata"]["annotations"], {"grafana_folder": "Egress"})
        with open(os.path.join(cs.CHART, "files", "grafana-dashboard.json")) as f:
            plain = json.load(f)
        self.assertEqual(json.loads(cm["data"]["sandgate.json"]), plain)
        self.assertEqual(plain["uid"], "sandgate-overview")

    def test_helm_test_pod_checks_readyz_and_a_refusal(self):
        docs = self.rendered["values-shared.yaml"]
        (pod,) = cs.find(docs, "Pod", "rel-sandgate-test")
        self.assertEqual(pod["metadata"]["annotations"]["helm.sh/hook"], "test")
        script = pod["spec"]["containers"][0]["args"][0]
        self.assertIn("/readyz", script)
        self.assertIn("want=403", script)
        self.assertIn("agent-a:", script)
        (default_pod,) = cs.find(self.rendered["default"], "Pod", "rel-sandgate-test")
        self.assertIn("want=407", default_pod["spec"]["containers"][0]["args"][0])

    def test_notes_render(self):
        p = subprocess.run([self.helm, "install", "rel", cs.CHART, "--dry-run=client",
                            "--namespace", "egress", "-f",
                            os.path.join(cs.CHART, "ci", "values-shared.yaml")],
                           capture_output=True, text=True, env=self.chart.env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("HTTPS_PROXY", p.stdout)
        self.assertIn("http://TASK:TOKEN@10.96.31.28:3128", p.stdout)
        self.assertIn("agents-a", p.stdout)


if __name__ == "__main__":
    unittest.main()
