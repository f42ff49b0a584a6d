"""Helm and the Kubernetes schemas for the chart tests: where scripts/node_deps.sh put them,
rendering helm/sandgate/ into parsed manifests, and validating those with kubernetes-models.

A missing tool fails the test (scripts/deps.sh installs it), unless node_deps.sh recorded
that the npm registry could not be reached (.deps/unavailable): then the test skips and says
why.
"""

import json
import os
import subprocess
import tempfile
import unittest

import yaml

SOURCE = os.environ.get("SANDGATE_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(SOURCE, "helm", "sandgate")
DEPS = os.path.join(SOURCE, ".deps")
NODE_MODULES = os.path.join(DEPS, "node", "node_modules")
VALIDATOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "validate_manifests.mjs")


def require_tools():
    """The helm binary's path; else skip or fail as the module docstring says."""
    helm = os.environ.get("SANDGATE_HELM") or os.path.join(DEPS, "bin", "helm")
    missing = [p for p in (helm, os.path.join(NODE_MODULES, "kubernetes-models"),
                           os.path.join(NODE_MODULES, "@kubernetes-models", "prometheus-operator"))
               if not os.path.exists(p)]
    if not missing:
        return helm
    marker = os.path.join(DEPS, "unavailable")
    if os.path.exists(marker):
        with open(marker) as f:
            raise unittest.SkipTest("helm test tools could not be fetched: " + f.read().strip())
    raise AssertionError("missing %s: run scripts/deps.sh (it installs Helm and the schemas)" % ", ".join(missing))


def ci_values():
    d = os.path.join(CHART, "ci")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith("values-"))


class Chart:
    """Runs helm on the chart with values files and --set-style overrides (as a values file)."""

    def __init__(self, helm):
        self.helm = helm
        self.tmp = tempfile.TemporaryDirectory(prefix="sandgate-helm-")
        # Helm keeps caches and config under $HOME: point them at the temp dir.
        self.env = dict(os.environ, HELM_CACHE_HOME=self.tmp.name + "/cache",
                        HELM_CONFIG_HOME=self.tmp.name + "/config",
                        HELM_DATA_HOME=self.tmp.name + "/data")
        self.n = 0

    def close(self):
        self.tmp.cleanup()

    def _args(self, values_files, values):
        args = []
        for f in values_files:
            args += ["-f", f]
        if values is not None:
            self.n += 1
            path = os.path.join(self.tmp.name, "override-%d.yaml" % self.n)
            with open(path, "w") as f:
                yaml.safe_dump(values, f)
            args += ["-f", path]
        return args

    def run(self, *cmd, values_files=(), values=None):
        return subprocess.run([self.helm, *cmd, CHART, *self._args(values_files, values)],
                              capture_output=True, text=True, env=self.env, timeout=60)

    def lint(self, values_files=(), values=None):
        return self.run("lint", "--strict", values_files=values_files, values=values)

    def template_raw(self, values_files=(), values=None):
        return subprocess.run(
            [self.helm, "template", "rel", CHART, "--namespace", "egress",
             *self._args(values_files, values)],
            capture_output=True, text=True, env=self.env, timeout=60)

    def template(self, values_files=(), values=None):
        """The rendered manifests (hooks and the helm test included), parsed."""
        p = self.template_raw(values_files, values)
        if p.returncode != 0:
            raise AssertionError("helm template failed: " + p.stderr)
        return [d for d in yaml.safe_load_all(p.stdout) if d]


def validate(docs):
    """kubernetes-models' verdict on each manifest: a list of (kind/name, error or None)."""
    p = subprocess.run(["node", VALIDATOR, NODE_MODULES], input=json.dumps(docs),
                       capture_output=True, text=True, timeout=120)
    if p.returncode not in (0, 1):
        raise AssertionError("validator failed: " + p.stderr)
    return [(r["what"], r["error"]) for r in json.loads(p.stdout)]


def find(docs, kind, name=None, namespace=None):
    out = [d for d in docs if d["kind"] == kind
           and (name is None or d["metadata"]["name"] == name)
           and (namespace is None or d["metadata"].get("namespace") == namespace)]
    return out


def pod_specs(docs):
    """(what, pod spec) of every pod the manifests would create."""
    out = []
    for d in docs:
        if d["kind"] == "Pod":
            out.append(("Pod/" + d["metadata"]["name"], d["spec"]))
        elif d["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            out.append((d["kind"] + "/" + d["metadata"]["name"], d["spec"]["template"]["spec"]))
    return out
