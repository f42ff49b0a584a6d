"""Reload (SIGHUP and file change; good and bad files), graceful shutdown with a request in
flight, start-up config errors, and the metrics/audit a run leaves behind. The upstream is
on 127.0.0.1 (opened with cidrs on purpose).
"""

import json
import os
import signal
import subprocess
import threading
import time
import unittest

from clients import curl
from sandgate_fixture import Sandgate, binary, read_response, wait_until
from upstreams import HttpUpstream

TOKEN = "r3load"


def policies(hosts):
    return {"p": {"allow": [{"host": h, "ports": [80], "cidrs": ["127.0.0.0/8"]} for h in hosts]}}


class LifecycleTest(unittest.TestCase):
    def setUp(self):
        self.up = HttpUpstream()
        self.resolve = {"a.test": "127.0.0.1:%d" % self.up.port,
                        "b.test": "127.0.0.1:%d" % self.up.port}
        self.sg = Sandgate(policies(["a.test"]), [{"name": "t", "policy": "p", "token": TOKEN}],
                           resolve=self.resolve, limits={"shutdown_grace": "10s"}).start()
        self.proxy = self.sg.proxy_url("t", TOKEN)

    def tearDown(self):
        self.sg.cleanup()
        self.up.close()

    def status(self, host):
        return curl("http://%s/echo" % host, proxy=self.proxy).status

    def reloads(self, result):
        return self.sg.metric("sandgate_config_reloads_total", result=result) or 0

    def test_sighup_reload_good_then_bad(self):
        self.assertEqual((self.status("a.test"), self.status("b.test")), (200, 403))
        cfg = self.sg.make_config(policies(["b.test"]), [{"name": "t", "policy": "p",
                                                          "token": TOKEN}],
                                  resolve=self.resolve, limits={"shutdown_grace": "10s"})
        self.sg.write_config(cfg)
        os.kill(self.sg.proc.pid, signal.SIGHUP)
        wait_until(lambda: self.status("b.test") == 200, 10, interval=0.1, what="reload applied")
        self.assertEqual(self.status("a.test"), 403)
        self.assertGreaterEqual(self.reloads("ok"), 1)
        self.assertEqual(self.sg.metric("sandgate_config_last_reload_successful"), 1)
        good_at = self.sg.metric("sandgate_config_last_reload_success_timestamp_seconds")
        self.assertAlmostEqual(good_at, time.time(), delta=60)

        # A broken file changes nothing, says why, and is counted; the gauge an alert holds on
        # says so until a good config loads.
        self.sg.write_config(None, text="policies: [this is: not valid\n")
        os.kill(self.sg.proc.pid, signal.SIGHUP)
        wait_until(lambda: self.reloads("error") >= 1, 10, interval=0.1, what="reload error")
        self.assertEqual((self.status("a.test"), self.status("b.test")), (403, 200))
        self.assertIn("reload", self.sg.stderr())
        self.assertIsNone(self.sg.proc.poll())
        self.assertEqual(self.sg.metric("sandgate_config_last_reload_successful"), 0)
        self.assertEqual(self.sg.metric("sandgate_config_last_reload_success_timestamp_seconds"),
                         good_at)
        self.sg.write_config(cfg)
        os.kill(self.sg.proc.pid, signal.SIGHUP)
        wait_until(lambda: self.sg.metric("sandgate_config_last_reload_successful") == 1, 10,
                   interval=0.1, what="the good config back")

    def test_file_change_reloads_without_signal(self):
        self.assertEqual(self.status("b.test"), 403)
        cfg = self.sg.make_config(policies(["a.test", "b.test"]),
                                  [{"name": "t", "policy": "p", "token": TOKEN}],
                                  resolve=self.resolve)
        self.sg.write_config(cfg)
        wait_until(lambda: self.status("b.test") == 200, 10, interval=0.2,
                   what="file-change reload")

    def test_graceful_shutdown_finishes_request_in_flight(self):
        result = {}

        def slow():
            result["r"] = curl("http://a.test/slow?s=2", proxy=self.proxy)

        t = threading.Thread(target=slow)
        t.start()
        # SIGTERM only once the upstream has the request (it is recorded on arrival).
        wait_until(lambda: any(r["path"].startswith("/slow") for r in self.up.requests), 10,
                   what="request in flight")
        os.kill(self.sg.proc.pid, signal.SIGTERM)
        t.join(20)
        self.assertEqual(result["r"].status, 200, result["r"].stderr)
        self.assertEqual(result["r"].body, b"slow")
        self.assertEqual(self.sg.stop(timeout=15), 0)
        # New connections are refused once it has stopped listening.
        self.assertNotEqual(self.status("a.test"), 200)

    def test_metrics_and_audit_after_traffic(self):
        self.assertEqual(self.status("a.test"), 200)
        self.assertEqual(self.status("c.test"), 403)
        self.sg.wait_audit(host="c.test", reason="no_matching_rule", task="t", kind="refusal")
        rec = self.sg.wait_audit(host="a.test", kind="forward")
        for field in ("time", "request_id", "connection_id", "run", "client", "listener", "method",
                      "scheme", "port", "path", "verdict", "reason", "rule", "status", "bytes_up",
                      "bytes_down", "duration_ms", "upstream", "error"):
            self.assertIn(field, rec)
        self.assertIsNone(rec["run"])  # a token client of serve's own listener: no run
        self.assertEqual(rec["upstream"], "127.0.0.1:%d" % self.up.port)
        self.assertGreater(rec["bytes_down"], 0)
        self.assertGreaterEqual(self.sg.metric("sandgate_requests_total", task="t",
                                               kind="forward", verdict="allow"), 1)
        self.assertGreaterEqual(self.sg.metric("sandgate_requests_total", task="t",
                                               reason="no_matching_rule"), 1)
        self.assertGreater(self.sg.metric("sandgate_bytes_total", task="t", direction="down"), 0)


    def test_lines_of_one_connection_share_its_id_and_number_its_requests(self):
        # Two requests on one keep-alive connection, then one the policy refuses: one
        # connection_id, request ids -1, -2, -3; the refusal says its id (X-Request-Id, and
        # "request_id" in its body), which is the id of its audit line.
        auth = self.sg.auth_header("t", TOKEN)
        s = self.sg.connect()
        try:
            for host, path in (("a.test", "/echo/ids-1"), ("a.test", "/echo/ids-2"),
                               ("c.test", "/ids-3")):
                s.sendall(("GET http://%s%s HTTP/1.1\r\nHost: %s\r\n%s\r\n" %
                           (host, path, host, auth)).encode())
                status, headers, body = read_response(s)
            self.assertEqual(status, 403)
            refused_id = headers["x-request-id"]
            self.assertEqual(json.loads(body)["request_id"], refused_id)
        finally:
            s.close()
        first = self.sg.wait_audit(path="/echo/ids-1")
        second = self.sg.wait_audit(path="/echo/ids-2")
        third = self.sg.wait_audit(host="c.test", path="/ids-3")
        conn = first["connection_id"]
        self.assertRegex(conn, "^[0-9a-f]{16}$")
        self.assertEqual([r["connection_id"] for r in (first, second, third)], [conn] * 3)
        self.assertEqual([r["request_id"] for r in (first, second, third)],
                         [conn + "-1", conn + "-2", conn + "-3"])
        self.assertEqual(third["request_id"], refused_id)
        # Another connection, another id.
        self.assertEqual(self.status("a.test"), 200)
        others = [r for r in self.sg.audit() if r.get("connection_id") not in (None, conn)]
        self.assertTrue(others)


class StartupTest(unittest.TestCase):
    def test_bad_config_exits_2_with_diagnostics(self):
        sg = Sandgate({"p": {"allow": [{"host": "a.test"}]}},
                      [{"name": "t", "policy": "missing-policy"}])
        try:
            p = subprocess.run([binary(), "serve", "--config", sg.config_path],
                               capture_output=True, timeout=20)
            self.assertEqual(p.returncode, 2)
            self.assertIn("missing-policy", p.stderr.decode())
        finally:
            sg.cleanup()

    def test_nothing_to_listen_on_exits_2_and_says_so(self):
        # Only a metrics listener: no client could ever reach this serve, so it does not start.
        sg = Sandgate({"p": {"allow": [{"host": "a.test"}]}}, [{"name": "t", "policy": "p"}])
        try:
            cfg = sg.make_config({"p": {"allow": [{"host": "a.test"}]}},
                                 [{"name": "t", "policy": "p"}])
            cfg["listen"] = {"metrics": "127.0.0.1:0"}
            sg.write_config(cfg)
            p = subprocess.run([binary(), "serve", "--config", sg.config_path],
                               capture_output=True, timeout=20)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("nothing to serve: set listen.proxy", p.stderr.decode())
        finally:
            sg.cleanup()

    def test_idle_spin_off_serves_and_shuts_down(self):
        # `--idle-spin 0`: the workers sleep as soon as they are idle (io_context::run()); the
        # rest of the suite runs with the default spin.
        up = HttpUpstream()
        sg = Sandgate(policies(["a.test"]), [{"name": "t", "policy": "p", "token": TOKEN}],
                      resolve={"a.test": "127.0.0.1:%d" % up.port},
                      serve_args=["--idle-spin", "0"])
        try:
            sg.start()
            for _ in range(3):
                r = curl("http://a.test/echo", proxy=sg.proxy_url("t", TOKEN))
                self.assertEqual(r.status, 200, r.stderr)
            self.assertEqual(sg.stop(timeout=15), 0)
        finally:
            sg.cleanup()
            up.close()

    def test_idle_spin_out_of_range_is_refused(self):
        sg = Sandgate({"p": {"allow": [{"host": "a.test"}]}}, [{"name": "t", "policy": "p"}])
        try:
            p = subprocess.run([binary(), "serve", "--config", sg.config_path,
                                "--idle-spin", "20000"], capture_output=True, timeout=20)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("--idle-spin", p.stderr.decode() + p.stdout.decode())
        finally:
            sg.cleanup()

    def test_repeated_sigterm_still_exits_cleanly(self):
        # A supervisor may repeat SIGTERM while sandgate is already exiting; the second one
        # must not turn the clean exit into death by signal. Bounded: 8 starts, 0-7 ms apart.
        for i in range(8):
            sg = Sandgate({"p": {"allow": [{"host": "a.test"}]}}, [{"name": "t", "policy": "p"}])
            try:
                sg.start()
                os.kill(sg.proc.pid, signal.SIGTERM)
                time.sleep(i / 1000)
                self.assertEqual(sg.stop(timeout=15), 0, "second SIGTERM %d ms after the first" % i)
            finally:
                sg.cleanup()


if __name__ == "__main__":
    unittest.main()
