"""A real Prometheus (Debian's) on loopback for the monitoring tests: it scrapes the targets it is
given every second, loads rule files, and answers the HTTP API. Stopped by the test's cleanup."""

import json
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request

import yaml

from sandgate_fixture import wait_until
from upstreams import free_closed_port


def tool(name):
    path = shutil.which(name)
    if not path:
        raise AssertionError("%s is missing: scripts/deps.sh installs Debian's prometheus" % name)
    return path


class Prometheus:
    def __init__(self, test, targets, rule_files=(), labels=None):
        self.tmp = tempfile.TemporaryDirectory(prefix="sandgate-prom-")
        test.addCleanup(self.tmp.cleanup)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": list(rule_files),
            "scrape_configs": [{"job_name": "sandgate", "static_configs": [
                {"targets": list(targets), "labels": dict(labels or {})}]}],
        }
        path = os.path.join(self.tmp.name, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self.port = free_closed_port()
        self.log = os.path.join(self.tmp.name, "prometheus.log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [tool("prometheus"), "--config.file", path,
                 "--storage.tsdb.path", os.path.join(self.tmp.name, "data"),
                 "--web.listen-address", "127.0.0.1:%d" % self.port, "--log.level", "warn"],
                stdout=log, stderr=log)
        test.addCleanup(self.stop)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def api(self, endpoint, **query):
        """The `data` of an API answer, or None while Prometheus is not answering yet."""
        if self.proc.poll() is not None:
            with open(self.log) as f:
                raise AssertionError("prometheus exited:\n" + f.read())
        url = "http://127.0.0.1:%d/api/v1/%s" % (self.port, endpoint)
        if query:
            url += "?" + urllib.parse.urlencode(query)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)["data"]
        except OSError:
            return None

    def query(self, expr):
        """The result vector of an instant query (raises on a query Prometheus refuses)."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (
            self.port, urllib.parse.urlencode({"query": expr}))
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)["data"]["result"]
        except urllib.error.HTTPError as e:
            raise AssertionError("prometheus refused %r: %s" % (expr, e.read().decode()))

    def wait_scraped(self):
        def scraped():
            data = self.api("query", query='up{job="sandgate"}')
            return data and data["result"] and data["result"][0]["value"][1] == "1"
        wait_until(scraped, timeout=60, interval=0.5, what="prometheus to scrape sandgate")
