"""A name that does not resolve gives 502 dns_failed.

sandgate resolves with the system resolver, and asking it about a name would send a DNS
query off this machine. So the test re-runs itself inside a network namespace it creates
(`unshare -n`, only `lo`, brought up): there the resolver fails at once with nothing sent
anywhere. Where namespaces are refused, the test says so and skips.
"""

import json
import os
import subprocess
import sys
import unittest

from clients import curl
from sandgate_fixture import Sandgate

INSIDE = "SANDGATE_TEST_IN_NETNS"


class DnsFailureTest(unittest.TestCase):
    def test_in_private_network_namespace(self):
        if os.environ.get(INSIDE):
            self.inside()
            return
        probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=20)
        if probe.returncode != 0:
            self.skipTest("cannot create a network namespace here (unshare -n: %s)" %
                          probe.stderr.decode().strip())
        env = dict(os.environ, **{INSIDE: "1"})
        p = subprocess.run(
            ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" -m unittest -v '
             'test_dns.DnsFailureTest', sys.executable],
            env=env, cwd=os.path.dirname(os.path.abspath(__file__)), capture_output=True,
            timeout=120)
        out = p.stdout.decode() + p.stderr.decode()
        self.assertEqual(p.returncode, 0, out)
        self.assertRegex(out, r"Ran 1 test in [0-9.]+s\s+OK\s*$")
        self.assertNotIn("skipped", out)  # it ran inside, it did not skip there

    def inside(self):
        sg = Sandgate({"p": {"allow": [{"host": "nowhere.test", "ports": [80, 443]}]}},
                      [{"name": "t", "policy": "p", "token": "d"}])
        try:
            sg.start()
            r = curl("http://nowhere.test/", proxy=sg.proxy_url("t", "d"))
            self.assertEqual((r.status, r.header("x-sandgate-reason")), (502, "dns_failed"),
                             r.stderr)
            self.assertEqual(json.loads(r.body)["host"], "nowhere.test")
            r = curl("https://nowhere.test/", proxy=sg.proxy_url("t", "d"))
            self.assertEqual(r.connect_status, 502)
            self.assertEqual(r.header("x-sandgate-reason"), "dns_failed")
            rec = sg.wait_audit(host="nowhere.test", reason="dns_failed")
            self.assertEqual(rec["status"], 502)
        finally:
            sg.cleanup()


if __name__ == "__main__":
    unittest.main()
