"""Names and DNS, from the workload's side: a name that does not resolve gives 502 dns_failed,
and a name is resolved as given, never with the host's search domains.

sandgate resolves with the system resolver, and asking it about a name would send a DNS
query off this machine. So each test re-runs itself inside a network namespace it creates
(`unshare -n`, only `lo`, brought up): there the resolver fails at once with nothing sent
anywhere, or asks the DNS server the test runs on that namespace's loopback. Where namespaces
are refused, the test says so and skips.
"""

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

from clients import curl
from sandgate_fixture import Sandgate
from upstreams import HttpUpstream

INSIDE = "SANDGATE_TEST_IN_NETNS"
RESOLV_CONF = "SANDGATE_TEST_RESOLV_CONF"
SKIP = 77


def rerun_inside(test, test_id, setup="", mount=False):
    """Runs `test_id` of this file again in a new network namespace (and, with `mount`, a new
    mount namespace), after the shell commands `setup`; fails with its output unless it passed
    there without skipping."""
    args = ["unshare", "-n"] + (["-m"] if mount else [])
    probe = subprocess.run(args + ["true"], capture_output=True, timeout=20)
    if probe.returncode != 0:
        test.skipTest("cannot create a network%s namespace here (%s: %s)" % (
            " and mount" if mount else "", " ".join(args), probe.stderr.decode().strip()))
    env = dict(os.environ, **{INSIDE: "1"})
    p = subprocess.run(
        args + ["sh", "-c", 'ip link set lo up && %s exec "$0" -m unittest -v %s'
                % (setup, test_id), sys.executable],
        env=env, cwd=os.path.dirname(os.path.abspath(__file__)), capture_output=True,
        timeout=120)
    out = p.stdout.decode() + p.stderr.decode()
    if p.returncode == SKIP:
        test.skipTest(out.strip().splitlines()[-1])
    test.assertEqual(p.returncode, 0, out)
    test.assertRegex(out, r"Ran 1 test in [0-9.]+s\s+OK\s*$")
    test.assertNotIn("skipped", out)  # it ran inside, it did not skip there


class DnsFailureTest(unittest.TestCase):
    def test_in_private_network_namespace(self):
        if not os.environ.get(INSIDE):
            rerun_inside(self, "test_dns.DnsFailureTest")
            return
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


class DnsServer:
    """A UDP DNS server on 127.0.0.1:53 of the test's own namespace. It answers A queries for
    `answered` names with 127.0.0.1, says NXDOMAIN for every other name (NOERROR with no answer
    for other types of an answered name), and keeps every name it was asked."""

    def __init__(self, answered):
        self.answered = {n.lower() for n in answered}
        self.asked = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 53))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @staticmethod
    def question(q):
        labels, o = [], 12
        while q[o]:
            labels.append(q[o + 1:o + 1 + q[o]].decode("ascii", "replace"))
            o += 1 + q[o]
        qtype = struct.unpack("!H", q[o + 1:o + 3])[0]
        return ".".join(labels).lower(), qtype, q[12:o + 5]

    def serve(self):
        while not self.stop.is_set():
            try:
                q, peer = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            name, qtype, question = self.question(q)
            self.asked.append(name)
            flags = 0x8180 if name in self.answered else 0x8183  # NOERROR / NXDOMAIN
            answer = b""
            if name in self.answered and qtype == 1:
                answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(
                    "127.0.0.1")
            head = q[:2] + struct.pack("!HHHHH", flags, 1, 1 if answer else 0, 0, 0)
            self.sock.sendto(head + question + answer, peer)

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


class SearchListTest(unittest.TestCase):
    """The attack: the policy allows `name.test`, which does not exist, and the host's resolv.conf
    searches `corp.example` with ndots:5 (so glibc tries the searched name first), where
    `name.test.corp.example` does exist. A resolver that searches dials an address vetted for a
    name the policy never allowed."""

    def test_names_are_resolved_as_given(self):
        if not os.environ.get(INSIDE):
            with tempfile.TemporaryDirectory() as d:
                conf = os.path.join(d, "resolv.conf")
                with open(conf, "w") as f:
                    f.write("nameserver 127.0.0.1\nsearch corp.example\n"
                            "options ndots:5 timeout:1 attempts:1\n")
                os.environ[RESOLV_CONF] = conf
                try:
                    # A resolv.conf that cannot be mounted over (a dangling link) is a skip.
                    rerun_inside(self, "test_dns.SearchListTest",
                                 setup='{ mount --bind "$%s" /etc/resolv.conf || { echo '
                                       '"skipped: cannot mount over /etc/resolv.conf"; exit %d; }'
                                       '; } &&' % (RESOLV_CONF, SKIP), mount=True)
                finally:
                    del os.environ[RESOLV_CONF]
            return
        dns = DnsServer(["direct.test", "name.test.corp.example", "single.corp.example"])
        upstream = HttpUpstream()
        port = upstream.port
        hosts = ["direct.test", "name.test", "single"]
        sg = Sandgate({"p": {"allow": [{"host": h, "ports": [port], "cidrs": ["127.0.0.0/8"]}
                                       for h in hosts]}},
                      [{"name": "t", "policy": "p", "token": "d"}])
        try:
            sg.start()
            proxy = sg.proxy_url("t", "d")
            # The control: a name the server answers is dialled, so the refusals below are the
            # resolver's doing.
            r = curl("http://direct.test:%d/echo/control" % port, proxy=proxy)
            self.assertEqual(r.status, 200, (r.stderr, r.body))
            for name in ("name.test", "single"):
                r = curl("http://%s:%d/plain" % (name, port), proxy=proxy)
                self.assertEqual((r.status, r.header("x-sandgate-reason")), (502, "dns_failed"),
                                 r.body)
                r = curl("https://%s:%d/tunnel" % (name, port), proxy=proxy)
                self.assertEqual((r.connect_status, r.header("x-sandgate-reason")),
                                 (502, "dns_failed"), r.stderr)
            self.assertEqual([q["path"] for q in upstream.requests], ["/echo/control"])
            self.assertIn("name.test", dns.asked)
            self.assertIn("single", dns.asked)
            searched = [n for n in dns.asked if n.endswith("corp.example")]
            self.assertEqual(searched, [], "sandgate asked for a searched name")
        finally:
            sg.cleanup()
            upstream.close()
            dns.close()


if __name__ == "__main__":
    unittest.main()
