"""The config the chart renders passes `sandgate policy lint`: helm template with the default
values and with each ci/ values file, the ConfigMap's config.yaml taken out of the manifests and
linted by the built binary (as the chart's `helm test` hook does in the cluster). A value that
renders but that sandgate refuses (a host pattern over a public suffix: the chart's schema
cannot know) makes lint fail, so the test can fail. The hook Pod itself is checked too: it runs
`sandgate policy lint` on the config mounted as the Deployment mounts it.
"""

import os
import subprocess
import tempfile
import unittest

import yaml

import chart_support as cs


class ChartConfigLintTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.helm = cs.require_tools()
        cls.chart = cs.Chart(cls.helm)
        cls.binary = os.environ.get("SANDGATE_BINARY")
        if not cls.binary:
            raise RuntimeError("SANDGATE_BINARY must point at the built sandgate binary")
        cls.tmp = tempfile.TemporaryDirectory(prefix="sandgate-chart-lint-")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        cls.chart.close()

    def lint(self, docs, name):
        """`sandgate policy lint` on the rendered ConfigMap's config.yaml."""
        (cm,) = cs.find(docs, "ConfigMap", "rel-sandgate")
        path = os.path.join(self.tmp.name, name + ".yaml")
        with open(path, "w") as f:
            f.write(cm["data"]["config.yaml"])
        return subprocess.run([self.binary, "policy", "lint", path], capture_output=True,
                              text=True, timeout=30), path

    def test_default_and_every_ci_values_file_render_a_config_that_lints(self):
        variants = [("default", [])] + [(os.path.basename(f), [f]) for f in cs.ci_values()]
        self.assertGreaterEqual(len(variants), 4)
        for name, files in variants:
            with self.subTest(values=name):
                p, path = self.lint(self.chart.template(files), name)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertIn(path + ": ok", p.stdout)

    def test_a_value_sandgate_refuses_fails_lint(self):
        shared = os.path.join(cs.CHART, "ci", "values-shared.yaml")
        with open(shared) as f:
            values = yaml.safe_load(f)
        # helm renders it (the chart's schema sees a string), sandgate refuses it.
        policy = sorted(values["config"]["policies"])[0]
        values["config"]["policies"][policy].setdefault("allow", []).append({"host": "*.com"})
        p, path = self.lint(self.chart.template(values=values), "broken")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("*.com", p.stderr)
        self.assertIn(path + ": invalid", p.stderr)

    def test_helm_test_hook_lints_the_mounted_config(self):
        for name, files in [("default", [])] + [(os.path.basename(f), [f])
                                                 for f in cs.ci_values()]:
            with self.subTest(values=name):
                docs = self.chart.template(files)
                (pod,) = cs.find(docs, "Pod", "rel-sandgate-test-config")
                self.assertEqual(pod["metadata"]["annotations"]["helm.sh/hook"], "test")
                (c,) = pod["spec"]["containers"]
                (dep,) = cs.find(docs, "Deployment", "rel-sandgate")
                (served,) = dep["spec"]["template"]["spec"]["containers"]
                # The image that serves the config is the one that lints it.
                self.assertEqual(c["image"], served["image"])
                config = served["args"][served["args"].index("--config") + 1]
                self.assertEqual(c["args"], ["policy", "lint", config])
                mount = {m["name"]: m for m in c["volumeMounts"]}["config"]
                self.assertEqual(mount["mountPath"], os.path.dirname(config))
                self.assertIs(mount["readOnly"], True)
                volume = {v["name"]: v for v in pod["spec"]["volumes"]}["config"]
                self.assertEqual(volume["configMap"]["name"], "rel-sandgate")


if __name__ == "__main__":
    unittest.main()
