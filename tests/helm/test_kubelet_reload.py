"""The chart's hot reload, kubelet-faithful: the rendered ConfigMap, a credential Secret and the
CA Secret laid out as the kubelet lays out volumes (`..data` -> a timestamped directory), the
chart's own `sandgate serve` command line, then a `helm upgrade`-style edit delivered the way
the kubelet delivers it (a new directory and a rename of `..data`): a request goes from
allowed to denied, the rotated secret is injected, sandgate_config_info changes, and the
process is the same one throughout.
"""

import base64
import hashlib
import http.client
import json
import os
import re
import subprocess
import tempfile
import unittest

import artifacts
import chart_support as cs
import kubelet
from sandgate_fixture import binary, sha256, wait_until
from upstreams import HttpUpstream

TOKEN = "reload-test-token"


def values(allowed_hosts):
    rules = [{"host": h, "ports": [80], "cidrs": ["127.0.0.1/32"], "credential": "api"}
             for h in allowed_hosts]
    return {
        "replicaCount": 1,
        "ca": {"generate": False, "existingSecret": "sandgate-ca"},
        "networkPolicy": {"enabled": False},
        "drainDelay": "0s",
        "config": {
            "credentials": {"api": {
                "secret": {"name": "api-key", "key": "token"},
                "hosts": ["api.example.test", "other.example.test"],
                "inject": {"header": "X-Api-Key"},
                "allow_plaintext": True}},
            "policies": {"agent": {"allow": rules}},
            "tasks": [{"name": "agent", "policy": "agent", "token_sha256": sha256(TOKEN)}],
        },
    }


class KubeletReloadTest(unittest.TestCase):
    def setUp(self):
        self.chart = cs.Chart(cs.require_tools())
        self.addCleanup(self.chart.close)
        self.upstream = HttpUpstream()
        self.addCleanup(self.upstream.close)
        self.tmp = tempfile.TemporaryDirectory(prefix="sandgate-kubelet-")
        self.addCleanup(self.tmp.cleanup)
        self.layout = kubelet.PodLayout(os.path.join(self.tmp.name, "pod"))

    def render(self, v):
        v["config"]["resolve"] = {h: "127.0.0.1:%d" % self.upstream.port
                                  for h in ("api.example.test", "other.example.test")}
        return kubelet.deployment_and_config(self.chart.template(values=v))

    def volumes(self, dep):
        """The kubelet volume of each mount of the sandgate container, by volume name."""
        spec = dep["spec"]["template"]["spec"]
        mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        out = {}
        for v in spec["volumes"]:
            if "secret" in v or "configMap" in v:
                mode = v.get("secret", {}).get("defaultMode", 0o644)
                out[v["name"]] = kubelet.KubeletVolume(
                    self.layout.host_path(mounts[v["name"]]), mode)
        return out

    def write_ca(self, volume):
        """A CA from `sandgate ca init` (what the chart's hook Job runs) as the CA Secret."""
        ca_dir = os.path.join(self.tmp.name, "ca-init")
        subprocess.run([binary(), "ca", "init", "--out", ca_dir], check=True,
                       capture_output=True, timeout=30)
        with open(os.path.join(ca_dir, "ca.pem")) as f, open(os.path.join(ca_dir, "ca.key")) as k:
            volume.write({"ca.pem": f.read(), "ca.key": k.read()})

    def request(self, port, host):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        auth = base64.b64encode(("agent:" + TOKEN).encode()).decode()
        c.request("GET", "http://%s/echo" % host,
                  headers={"Proxy-Authorization": "Basic " + auth, "Host": host})
        r = c.getresponse()
        body = r.read()
        c.close()
        artifacts.record_response(host, r.status, r.getheaders(), body)
        return r.status, body

    def received_key(self):
        """The X-Api-Key the upstream saw on the last request (the echo the client gets has it
        scrubbed, as it should)."""
        (key,) = [v for k, v in self.upstream.requests[-1]["headers"] if k == "X-Api-Key"]
        return key

    def metrics(self, port):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        artifacts.record("metrics", "metrics", text)
        return text

    def config_digests(self, port):
        return re.findall(r'^sandgate_config_info\{sha256="([0-9a-f]{64})"\} 1$',
                          self.metrics(port), re.M)

    def config_digest(self, port):
        m = self.config_digests(port)
        self.assertEqual(len(m), 1, "exactly one sandgate_config_info series")
        return m[0]

    def test_configmap_and_secret_swap_reload_without_restart(self):
        dep, config1 = self.render(values(["api.example.test", "other.example.test"]))
        _, config2 = self.render(values(["other.example.test"]))
        vols = self.volumes(dep)
        self.assertEqual(set(vols), {"config", "ca", "credential-0"})
        self.assertEqual(vols["credential-0"].mode, 0o440)

        self.write_ca(vols["ca"])
        for secret in ("first-secret-value", "second-secret-value"):
            artifacts.register_secret("api", secret)  # the suite's leak check looks for them
        vols["credential-0"].write({"token": "first-secret-value"})
        vols["config"].write({"config.yaml": self.layout.localise(config1)})

        ready = os.path.join(self.tmp.name, "ready.json")
        cmd = kubelet.serve_command(dep, self.layout, ready)
        self.assertIn("--drain-delay", cmd)
        stderr = os.path.join(self.tmp.name, "stderr")
        proc, info = kubelet.start(cmd, ready, stderr)
        self.addCleanup(artifacts.record_file, "log", "stderr", stderr)
        self.addCleanup(kubelet.stop, proc)
        proxy, metrics = kubelet.port_of(info["proxy"]), kubelet.port_of(info["metrics"])

        status, body = self.request(proxy, "api.example.test")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.received_key(), "first-secret-value")
        digest1 = self.config_digest(metrics)

        # helm upgrade: the kubelet swaps both volumes (each on its own, as it does).
        vols["credential-0"].write({"token": "second-secret-value"})
        vols["config"].write({"config.yaml": self.layout.localise(config2)})

        # A scrape during the reload may see both digests for an instant: waited past.
        def changed():
            m = self.config_digests(metrics)
            return len(m) == 1 and m[0] != digest1
        wait_until(changed, timeout=15, what="sandgate_config_info to change after the ..data swap")
        self.assertNotEqual(self.config_digest(metrics), digest1)
        status, body = self.request(proxy, "api.example.test")
        self.assertEqual(status, 403, body)
        self.assertEqual(json.loads(body)["reason"], "no_matching_rule")

        def rotated():
            s, b = self.request(proxy, "other.example.test")
            self.assertEqual(s, 200, b)
            return self.received_key() == "second-secret-value"
        wait_until(rotated, timeout=10, interval=0.1, what="the rotated secret to be injected")

        self.assertIsNone(proc.poll(), "sandgate restarted or died")
        text = self.metrics(metrics)
        self.assertIn('sandgate_config_reloads_total{result="ok"} 1', text)
        self.assertIn('sandgate_config_reloads_total{result="error"} 0', text)
        self.assertEqual(kubelet.stop(proc), 0)

    def test_config_info_digest_is_of_the_config_text(self):
        # Two replicas reading the same ConfigMap report the same digest; the digest is the
        # SHA-256 of the file (which holds no secret), so an operator can compare it by hand.
        dep, config = self.render(values(["api.example.test"]))
        vols = self.volumes(dep)
        self.write_ca(vols["ca"])
        artifacts.register_secret("api", "some-secret-for-the-digest-test")
        vols["credential-0"].write({"token": "some-secret-for-the-digest-test"})
        text = self.layout.localise(config)
        vols["config"].write({"config.yaml": text})
        digests = []
        for i in range(2):
            ready = os.path.join(self.tmp.name, "ready-%d.json" % i)
            stderr = os.path.join(self.tmp.name, "stderr-%d" % i)
            proc, info = kubelet.start(kubelet.serve_command(dep, self.layout, ready), ready,
                                       stderr)
            self.addCleanup(artifacts.record_file, "log", "stderr", stderr)
            self.addCleanup(kubelet.stop, proc)
            digests.append(self.config_digest(kubelet.port_of(info["metrics"])))
            self.assertEqual(kubelet.stop(proc), 0)
        self.assertEqual(digests, [hashlib.sha256(text.encode()).hexdigest()] * 2)


if __name__ == "__main__":
    unittest.main()
