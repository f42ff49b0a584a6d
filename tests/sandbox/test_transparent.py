"""Transparent capture in `sandgate run` (issue #6): programs that ignore HTTP_PROXY still go
through sandgate. Inside the sandbox a DNS stub at 127.0.0.53 answers names the task's policy
could allow with synthetic addresses (198.18.0.0/15) and everything else with NXDOMAIN;
connections to those addresses on the capture ports are the CONNECT / forward paths.

Upstreams listen on 127.0.0.1:<ephemeral> on the host and are reached through `resolve:`.
Every connection a test makes is to loopback or inside the sandbox's own network namespace."""

import json
import os
import re
import shutil
import tempfile
import textwrap
import unittest

import artifacts
from pki import test_pki
from run_support import NO_PROXY_ENV, namespaces_refused, run_bounded
from sandgate_fixture import binary
from upstreams import HttpUpstream

SECRET = "sk-transparent-secret-0123456789"
PY = "/usr/bin/python3"  # the host's interpreter; /root (pyenv shims) is hidden in the sandbox


def run_recorded(cmd, timeout=90):
    """Runs `sandgate run ...`; its output (audit lines on stderr with --audit-stderr) goes to
    the leak check."""
    r = run_bounded(cmd, timeout)
    artifacts.record("run", "transparent-stdout", r.stdout)
    artifacts.record("log", "transparent-stderr", r.stderr)
    return r


# Helpers run inside the sandbox (written to the workspace: /tmp is private there).
DNS_TOOL = textwrap.dedent(r'''
    import socket, struct, sys

    def query(name, qtype=1, qid=0x4242):
        q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
        for label in name.split("."):
            q += bytes([len(label)]) + label.encode()
        return q + b"\0" + struct.pack(">HH", qtype, 1)

    def udp(payload, wait=2.0):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(wait)
        s.sendto(payload, ("127.0.0.53", 53))
        try:
            return s.recv(4096)
        except socket.timeout:
            return None

    def tcp(payload):
        s = socket.create_connection(("127.0.0.53", 53), timeout=5)
        s.sendall(struct.pack(">H", len(payload)) + payload)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return data or None
            data += chunk
            if len(data) >= 2 and len(data) >= 2 + struct.unpack(">H", data[:2])[0]:
                return data[2:]

    def rcode(reply):
        return None if reply is None else reply[3] & 0x0F

    cmd = sys.argv[1]
    if cmd == "rcode":
        print(rcode(udp(query(sys.argv[2]))))
    elif cmd == "malformed":
        header = lambda qd, an, ns, ar: struct.pack(">HHHHHH", 7, 0x0100, qd, an, ns, ar)
        bad = [
            b"\x01\x02\x03",                                         # truncated header
            header(1, 0, 0, 0) + b"\x03ap",                          # truncated name
            header(1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",        # pointer to itself
            header(1, 0, 0, 0) + b"\x01a\xc0\x0c\x00\x01\x00\x01",   # pointer loop via a label
            header(65535, 65535, 65535, 65535),                      # huge counts
            query("api.test")[:-1],                                  # one byte short
            bytes(range(256)) * 20,                                  # oversized garbage
        ]
        answered = sum(udp(b, wait=0.3) is not None for b in bad)
        answered += tcp(header(65535, 0, 0, 0)) is not None
        # Still alive and still answering:
        print(answered, rcode(udp(query("api.test"))), rcode(tcp(query("api.test"))))
''')

CONNECT_TOOL = textwrap.dedent(r'''
    import socket, ssl, sys, errno, time
    cmd = sys.argv[1]
    if cmd == "connect":
        host, port = sys.argv[2], int(sys.argv[3])
        start = time.monotonic()
        try:
            socket.create_connection((host, port), timeout=5).close()
            print("connected")
        except OSError as e:
            print(errno.errorcode.get(e.errno, str(e)), round(time.monotonic() - start, 2))
    elif cmd == "sni":
        # TLS to the synthetic address of argv[2] with server_hostname argv[3] (port argv[4]).
        addr = socket.gethostbyname(sys.argv[2])
        port = int(sys.argv[4]) if len(sys.argv) > 4 else 443
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        s = socket.create_connection((addr, port), timeout=10)
        try:
            t = ctx.wrap_socket(s, server_hostname=sys.argv[3])
            t.sendall(b"GET /echo HTTP/1.1\r\nHost: %s\r\n\r\n" % sys.argv[3].encode())
            print("reply" if t.recv(100) else "closed")
        except (ssl.SSLError, OSError) as e:
            print("refused", type(e).__name__)
''')


class TransparentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.http = HttpUpstream()
        cls.dir = tempfile.mkdtemp(prefix="sandgate-transparent-")
        cls.workspace = os.path.join(cls.dir, "ws")
        os.mkdir(cls.workspace)
        os.chmod(cls.dir, 0o755)
        os.chmod(cls.workspace, 0o777)  # the command runs as an unprivileged uid
        for name, text in (("dns_tool.py", DNS_TOOL), ("connect_tool.py", CONNECT_TOOL)):
            with open(os.path.join(cls.workspace, name), "w") as f:
                f.write(text)
        cls.secret_file = os.path.join(cls.dir, "api.key")
        with open(cls.secret_file, "w") as f:
            f.write(SECRET + "\n")
        artifacts.register_secret("transparent-api", SECRET)
        cls.ca_out = os.path.join(cls.workspace, "sandgate-ca.pem")
        lo = {"cidrs": ["127.0.0.0/8"]}
        cfg = {
            "credentials": {"api": {"source": {"file": cls.secret_file}, "hosts": ["api.test"],
                                    "inject": {"header": "Authorization",
                                               "value": "Bearer {secret}"}}},
            "policies": {"p": {"allow": [
                dict(lo, host="api.test", credential="api"),       # intercepted
                dict(lo, host="other.test", ports=[443, 8443]),     # tunnelled
                dict(lo, host="web.test", ports=[80]),              # plain HTTP
                dict(lo, host="*.many.test"),
            ], "deny": [{"host": "bad.many.test"}]}},
            "tasks": [{"name": "t", "policy": "p"}],
            "resolve": {"api.test": "127.0.0.1:%d" % cls.https.port,
                        "other.test": "127.0.0.1:%d" % cls.https.port,
                        "web.test": "127.0.0.1:%d" % cls.http.port},
            "tls": {"upstream_ca": cls.pki.ca_cert},
            "ca_cert_out": cls.ca_out,
            "transparent": {"ports": [8443]},
        }
        cls.config = os.path.join(cls.dir, "sandgate.yaml")
        with open(cls.config, "w") as f:
            json.dump(cfg, f)
        probe = cls.sandgate("--", "true")
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            cls.close()
            raise unittest.SkipTest("this host refuses namespaces or routes: " +
                                    probe.stderr.strip())
        assert probe.returncode == 0, probe.stderr

    @classmethod
    def close(cls):
        cls.https.close()
        cls.http.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls.close()

    @classmethod
    def sandgate(cls, *args, timeout=90):
        cmd = [binary(), "run", "--config", cls.config, "--workspace", cls.workspace,
               "--audit-stderr", *args]
        return run_recorded(cmd, timeout=timeout)

    def sh(self, script, *flags):
        r = self.sandgate(*flags, "--", "sh", "-c", script)
        audit = []
        for line in r.stderr.splitlines():  # audit lines on stderr (--audit-stderr)
            if line.startswith("{"):
                audit.append(json.loads(line))
        return r, audit

    def test_getent_allowed_gets_synthetic_denied_fails(self):
        r, audit = self.sh("getent hosts api.test; echo rc=$?; getent hosts evil.test; echo rc=$?")
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^(198\.1[89]\.\d+\.\d+|fd53:4744:4e53::[0-9a-f]+)\s+api\.test")
        self.assertEqual(lines[1], "rc=0")
        self.assertEqual(lines[2], "rc=2", r.stdout)  # getent: key not found
        dns = [a for a in audit if a["kind"] == "dns"]
        self.assertTrue(any(a["host"] == "evil.test" and a["reason"] == "nxdomain" and
                            a["verdict"] == "deny" for a in dns), dns)
        self.assertTrue(all(a["mode"] == "transparent" for a in dns))
        self.assertIn("sandgate run: dns:", r.stderr)

    def test_configured_ranges_replace_the_default_pools(self):
        with open(self.config) as f:
            cfg = json.load(f)
        cfg["transparent"] = {"ipv4_range": "10.99.0.0/16",
                              "ipv6_range": "fd00:5a:6e:d600::/64"}
        path = os.path.join(self.dir, "ranges.yaml")
        with open(path, "w") as f:
            json.dump(cfg, f)
        cmd = [binary(), "run", "--config", path, "--workspace", self.workspace, "--",
               "sh", "-c", "getent ahostsv4 api.test | head -1; getent ahostsv6 api.test | head -1"]
        r = run_recorded(cmd)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^10\.99\.\d+\.\d+\s")
        if len(lines) > 1:  # without IPv6 in the sandbox there is no AAAA answer
            self.assertRegex(lines[1], r"^fd00:5a:6e:d600::[0-9a-f]+\s")
        # A range that cannot be a pool is a usage error naming the key.
        cfg["transparent"] = {"ipv4_range": "fd00::/64"}
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = run_recorded(cmd)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("transparent.ipv4_range: not an IPv4 range", r.stderr)

    def test_raw_udp_query_for_denied_name_is_nxdomain_and_nothing_leaves(self):
        r, audit = self.sh(f"{PY} dns_tool.py rcode denied.example")
        self.assertEqual(r.stdout.strip(), "3", r.stderr)  # NXDOMAIN
        about = [a for a in audit if a["host"] == "denied.example"]
        self.assertEqual([(a["kind"], a["reason"]) for a in about], [("dns", "nxdomain")])
        self.assertIsNone(about[0]["upstream"])  # no address handed out, nothing dialled
        self.assertIn("1 nxdomain", r.stderr)
        self.assertIn(" 0 names", r.stderr)  # no synthetic address was assigned

    def test_node_fetch_without_proxy_reaches_upstream_with_credential(self):
        before = len(self.https.requests)
        js = ("fetch('https://api.test/echo').then(r => r.json())"
              ".then(j => console.log(JSON.stringify(j.headers)))"
              ".catch(e => { console.error(e); process.exit(3); })")
        r, audit = self.sh(NO_PROXY_ENV + f"NODE_EXTRA_CA_CERTS={self.ca_out} node -e \"{js}\"")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The upstream got the real secret (injected by sandgate); the echo of it that came back
        # to the sandbox was scrubbed.
        self.assertEqual(len(self.https.requests), before + 1)
        got = {k.lower(): v for k, v in self.https.requests[-1]["headers"]}
        self.assertEqual(got["authorization"], "Bearer " + SECRET)
        echoed = {k.lower(): v for k, v in json.loads(r.stdout)}
        self.assertEqual(echoed["authorization"], "Bearer [REDACTED:api]")
        self.assertNotIn(SECRET, r.stdout + r.stderr)
        forward = [a for a in audit if a["kind"] in ("intercept", "tunnel") and
                   a["host"] == "api.test"]
        self.assertTrue(forward, audit)
        self.assertTrue(all(a["mode"] == "transparent" for a in forward))
        self.assertTrue(any(a.get("injected") for a in forward), forward)
        self.assertRegex(forward[0]["listener"], r"^(198\.1[89]\.|\[fd53:4744:4e53::)")

    def test_plain_http_on_port_80_and_host_mismatch(self):
        before = len(self.http.requests)
        r, audit = self.sh("curl -sS --noproxy '*' http://web.test/bytes?n=7; echo; "
                           "curl -sS --noproxy '*' -o /dev/null -w '%{http_code}' "
                           "-H 'Host: other.test' http://web.test/bytes?n=1")
        self.assertEqual(r.stdout.splitlines(), ["x" * 7, "400"], r.stderr)
        self.assertEqual(len(self.http.requests), before + 1)
        fwd = [a for a in audit if a["kind"] == "forward"]
        self.assertEqual(fwd[0]["host"], "web.test")
        self.assertEqual(fwd[0]["mode"], "transparent")
        self.assertTrue(any(a["reason"] == "host_mismatch" for a in audit), audit)

    def test_ipv6_synthetic_address_is_captured_too(self):
        r, audit = self.sh("curl -sS -6 --noproxy '*' http://web.test/bytes?n=3")
        if "IPv6 capture unavailable" in r.stderr:
            self.skipTest("the kernel refused the IPv6 local route: " + r.stderr.strip())
        self.assertEqual(r.stdout, "xxx", r.stderr)
        fwd = [a for a in audit if a["kind"] == "forward"]
        self.assertTrue(fwd and fwd[0]["listener"].startswith("[fd53:4744:4e53::"), audit)

    def test_uncaptured_port_and_real_addresses_fail_at_once(self):
        # A synthetic address on a port that is not captured, a real (documentation) address
        # that only exists as "unreachable" inside the sandbox, and 127.0.0.1 on a capture port
        # (caught by the wildcard listener, but no name was given for it: closed at once).
        r, audit = self.sh(f"getent hosts other.test >/dev/null; "
                           f"A=$(getent ahostsv4 other.test | head -1 | cut -d' ' -f1); "
                           f"{PY} connect_tool.py connect $A 8444; "
                           f"{PY} connect_tool.py connect 192.0.2.1 443; "
                           f"curl -sS --noproxy '*' --max-time 5 https://127.0.0.1/ ; echo rc=$?")
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith("ECONNREFUSED"), lines)
        self.assertTrue(lines[1].startswith("ENETUNREACH"), lines)
        for line in lines[:2]:
            self.assertLess(float(line.split()[1]), 2.0)
        self.assertNotEqual(lines[2], "rc=0")
        self.assertTrue(any(a["reason"] == "not_a_synthetic_address" for a in audit), audit)

    def test_sni_mismatch_is_refused(self):
        before = len(self.https.requests)
        r, audit = self.sh(f"{PY} connect_tool.py sni other.test api.test; "
                           f"{PY} connect_tool.py sni api.test other.test")
        self.assertEqual(r.returncode, 0, r.stderr)
        for line in r.stdout.splitlines():
            self.assertTrue(line.startswith("refused") or line == "closed", r.stdout)
        sni = [a for a in audit if a["reason"] == "sni_mismatch"]
        self.assertEqual(sorted(a["host"] for a in sni), ["api.test", "other.test"], audit)
        self.assertTrue(all(a["mode"] == "transparent" for a in sni))
        self.assertEqual(len(self.https.requests), before)

    def test_configured_extra_port_is_captured(self):
        before = len(self.https.requests)
        r, audit = self.sh(f"{PY} connect_tool.py sni other.test other.test 8443")
        self.assertEqual(r.stdout.strip(), "reply", r.stderr)
        self.assertEqual(len(self.https.requests), before + 1)
        tunnel = [a for a in audit if a["kind"] == "tunnel"]
        self.assertEqual([(a["host"], a["port"], a["mode"]) for a in tunnel],
                         [("other.test", 8443, "transparent")])

    def test_malformed_dns_is_dropped_and_counted(self):
        report = os.path.join(self.dir, "malformed-report.json")
        r, _ = self.sh(f"{PY} dns_tool.py malformed", "--report", report)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["0", "0", "0"])  # nothing answered; then NOERROR
        self.assertIn("8 malformed", r.stderr)
        with open(report) as f:
            dns = json.load(f)["dns"]
        self.assertEqual(dns["malformed"], 8)
        self.assertGreaterEqual(dns["answered"], 1, dns)  # the stub kept answering afterwards

    def test_names_never_share_an_address(self):
        names = " ".join("n%d.many.test" % i for i in range(20))
        r, _ = self.sh(f"for n in {names} api.test other.test; do "
                       f"getent ahostsv4 $n | head -1; done; getent hosts bad.many.test; "
                       f"echo rc=$?")
        addrs = [line.split()[0] for line in r.stdout.splitlines() if not line.startswith("rc=")]
        self.assertEqual(len(addrs), 22, r.stdout)
        self.assertEqual(len(set(addrs)), 22)
        self.assertTrue(all(a.startswith("198.1") for a in addrs))
        self.assertEqual(r.stdout.splitlines()[-1], "rc=2")  # the deny rule wins in DNS too

    def test_nxdomain_for_a_name_allowed_on_an_uncaptured_port_says_which(self):
        # odd.test is allowed on 17443 only, which this run does not capture: the stub must
        # answer NXDOMAIN (no listener would carry it), and say which --capture-port would.
        with open(self.config) as f:
            cfg = json.load(f)
        cfg["policies"]["p"]["allow"].append({"host": "odd.test", "ports": [17443],
                                              "cidrs": ["127.0.0.0/8"]})
        path = os.path.join(self.dir, "odd-port.yaml")
        with open(path, "w") as f:
            json.dump(cfg, f)
        cmd = [binary(), "run", "--config", path, "--workspace", self.workspace, "--audit-stderr",
               "--", "sh", "-c", "getent hosts odd.test; echo rc=$?; getent hosts evil.test; "
               "echo rc=$?"]
        r = run_recorded(cmd)
        self.assertEqual(r.stdout.split(), ["rc=2", "rc=2"], r.stderr)
        audit = [json.loads(l) for l in r.stderr.splitlines() if l.startswith("{")]
        odd = [a for a in audit if a["kind"] == "dns" and a["host"] == "odd.test"]
        self.assertTrue(odd, audit)
        for a in odd:
            self.assertEqual(a["reason"], "nxdomain")
            self.assertIn("add `--capture-port 17443`", a["error"])
        evil = [a for a in audit if a["kind"] == "dns" and a["host"] == "evil.test"]
        self.assertTrue(evil and all(a["error"] is None for a in evil), evil)
        self.assertIn("sandgate run: dns: nxdomain for odd.test: the policy allows it on port "
                      "17443, which this sandbox does not capture: add `--capture-port 17443`",
                      r.stderr)
        self.assertNotIn("nxdomain for evil.test", r.stderr)
        # The run's report.json lists it under "hints" (for a harness that reads the report).
        with open(self.report_of(r)) as f:
            self.assertEqual(json.load(f)["hints"],
                             ["odd.test: the policy allows it on port 17443, which this sandbox "
                              "does not capture: add `--capture-port 17443`"])
        # With the port captured, the name resolves.
        r = run_recorded(cmd[:-4] + ["--capture-port", "17443", "--", "getent", "hosts",
                                     "odd.test"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("nxdomain for", r.stderr)
        with open(self.report_of(r)) as f:
            self.assertEqual(json.load(f)["hints"], [])

    def report_of(self, r):
        """The report.json in the run's directory, which sandgate run names on stderr."""
        m = re.search(r"^sandgate run: run \S+ \(\w+ workspace\): (\S+)$", r.stderr, re.M)
        self.assertTrue(m, r.stderr)
        return os.path.join(m[1], "report.json")

    def test_no_transparent_keeps_proxy_only(self):
        r, audit = self.sh("getent hosts api.test; echo rc=$?; "
                           f"{PY} connect_tool.py connect 198.18.0.1 443", "--no-transparent")
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "rc=2", r.stdout)
        self.assertTrue(lines[1].startswith("ENETUNREACH"), lines)
        self.assertFalse([a for a in audit if a["kind"] == "dns"])
        self.assertNotIn("sandgate run: dns:", r.stderr)


if __name__ == "__main__":
    unittest.main()
