"""Files `sandgate run` and `sandgate serve` write on the host cannot be redirected by links a
hostile workload plants (issue 21, item 1), and every credential source works with
`sandgate run` (item 12).

The workload plants links in its workspace (the only host directory it can write) to a victim
file and a victim directory in this test's temp dir, outside the workspace: they stand for
/etc/cron.d/x and /etc/cron.d. Root must never write through them: a --report or audit.path
inside the workspace is refused before the workload runs, a --report elsewhere is opened before
it runs and written through that descriptor, and no link on the way to ca_cert_out or
audit.path (serve's too, also when SIGHUP reopens it) is followed. Runs as root (the attack is
root writing host files); the leak check gets everything the runs printed."""

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import unittest

import artifacts
from pki import test_pki
from run_support import TemporaryUser, namespaces_refused, run_bounded
from sandgate_fixture import Sandgate, binary, wait_until
from upstreams import HttpUpstream

SECRET = "sk-exec-escape-files-7c41d09e5ab2f386"
VICTIM_TEXT = "untouched: stands for /etc/cron.d/x\n"


class EscapeFilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("root writing through planted links is the attack: run as "
                                    "root")
        cls.dir = tempfile.mkdtemp(prefix="sandgate-escape-files-")
        os.chmod(cls.dir, 0o755)
        cls.victim = os.path.join(cls.dir, "victim")
        cls.victimdir = os.path.join(cls.dir, "victimdir")
        os.mkdir(cls.victimdir)
        cls.reset_victims()
        cls.base = {
            "policies": {"p": {"allow": []}},
            "tasks": [{"name": "t", "policy": "p"}],
        }
        cls.config = cls.write_config("base", {})
        probe = cls.sandgate(cls.config, cls.workspace("probe"), "true")
        if probe.returncode == 125 and namespaces_refused(probe.stderr):
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise unittest.SkipTest("this host refuses namespaces: " + probe.stderr.strip())
        if probe.returncode != 0:
            raise AssertionError(f"sandgate run -- true failed: {probe.stderr}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def tearDown(self):
        self.assertVictimsUntouched()

    # --- helpers -----------------------------------------------------------------------------

    @classmethod
    def reset_victims(cls):
        with open(cls.victim, "w") as f:
            f.write(VICTIM_TEXT)
        for name in os.listdir(cls.victimdir):
            os.unlink(os.path.join(cls.victimdir, name))

    def assertVictimsUntouched(self):
        with open(self.victim) as f:
            text = f.read()
        left = os.listdir(self.victimdir)
        self.reset_victims()  # the next test starts clean even after a failure
        self.assertEqual(text, VICTIM_TEXT, "root wrote through a link into the victim file")
        self.assertEqual(left, [], "root wrote through a link into the victim directory")

    @classmethod
    def workspace(cls, name):
        """A fresh workspace the sandbox's uid can write (root-owned: it runs as another uid)."""
        ws = os.path.join(cls.dir, "ws-" + name)
        os.mkdir(ws)
        os.chmod(ws, 0o777)
        return ws

    @classmethod
    def write_config(cls, name, extra):
        path = os.path.join(cls.dir, name + ".yaml")
        with open(path, "w") as f:
            json.dump(dict(cls.base, **extra), f)
        return path

    @classmethod
    def sandgate(cls, config, ws, script, *flags, cwd=None, timeout=60, popen=False):
        """`sandgate run` with `ws` as --workspace, or (ws None) the default: `cwd`."""
        cmd = [binary(), "run", "--config", config]
        if ws is not None:
            cmd += ["--workspace", ws]
        cmd += [*flags, "--", "sh", "-c", script]
        cls.runs_before = set(os.listdir(os.environ["SANDGATE_RUNS_DIR"]))
        r = run_bounded(cmd, timeout, cwd=cwd)
        artifacts.record("run", "stdout", r.stdout)
        artifacts.record("log", "run-stderr", r.stderr)
        return r

    def plant(self, ws, script):
        """The workload's side: a run that leaves links in its (persistent) workspace. A bind
        mode run: in overlay mode (the default) what a run writes stays in its upper layer
        until someone applies it, so the runs that check the refusals below run in overlay
        mode against links that an earlier bind run (or an applied change) left."""
        r = self.sandgate(self.config, ws, script, "--workspace-mode", "bind",
                          "--allow-root-workspace")
        self.assertEqual(r.returncode, 0, r.stderr)

    def assertRefusedBeforeTheRun(self, r, ws, *words, status=2):
        self.assertEqual(r.returncode, status, r.stdout + r.stderr)
        for w in words:
            self.assertIn(w, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(ws, "ran")),
                         "the workload ran although the run was refused")
        # In overlay mode (the default) the marker would be in a run's upper layer instead.
        runs = os.environ["SANDGATE_RUNS_DIR"]
        for run in set(os.listdir(runs)) - self.runs_before:
            upper = os.path.join(runs, run, "overlay", "upper", "ran")
            self.assertFalse(os.path.exists(upper), "the workload ran: " + upper)

    # --- --report ----------------------------------------------------------------------------

    def test_report_through_a_link_an_earlier_run_planted_in_the_workspace_is_refused(self):
        ws = self.workspace("report-planted")
        self.plant(ws, f"ln -s {self.victim} report.json")
        self.assertTrue(os.path.islink(os.path.join(ws, "report.json")))
        # The launcher's cwd is the workspace (the default), --report relative to it.
        r = self.sandgate(self.config, None, "touch ran", "--report", "report.json", cwd=ws)
        self.assertRefusedBeforeTheRun(r, ws, "inside the workspace", "put it outside",
                                       "[output_in_workspace]")
        self.assertTrue(os.path.islink(os.path.join(ws, "report.json")))

    def test_report_in_the_workspace_is_refused_before_the_workload_can_plant_a_link(self):
        ws = self.workspace("report-live")
        r = self.sandgate(self.config, None, f"ln -s {self.victim} report.json; touch ran",
                          "--report", "report.json", cwd=ws)
        self.assertRefusedBeforeTheRun(r, ws, "[output_in_workspace]")
        self.assertFalse(os.path.lexists(os.path.join(ws, "report.json")))

    def test_report_in_the_workspace_is_refused_however_the_path_names_it(self):
        ws = self.workspace("report-named")
        os.mkdir(os.path.join(ws, "sub"))
        os.chmod(os.path.join(ws, "sub"), 0o777)
        alias = os.path.join(self.dir, "alias-to-ws")
        os.symlink(ws, alias)
        for report in [os.path.join(ws, "r.json"),
                       os.path.join(ws, "sub", "r.json"),
                       os.path.join(self.victimdir, "..", os.path.basename(ws), "r.json"),
                       os.path.join(alias, "r.json")]:
            with self.subTest(report=report):
                r = self.sandgate(self.config, ws, "touch ran", "--report", report)
                self.assertRefusedBeforeTheRun(r, ws, "--report")
                self.assertFalse(os.path.exists(os.path.join(ws, "r.json")))
                self.assertFalse(os.path.exists(os.path.join(ws, "sub", "r.json")))

    def test_report_outside_the_workspace_is_opened_before_the_run_and_written_after(self):
        ws = self.workspace("report-outside")
        out = os.path.join(self.dir, "reports")
        os.mkdir(out, 0o755)  # root's: the sandbox's uid cannot write here
        report = os.path.join(out, "report.json")
        # The workload tries to put a link (or anything) at the report's path, says it has
        # started, and waits (bounded) until the host has looked.
        script = (f"ln -s {self.victim} {report} 2>/dev/null && echo planted; "
                  f"echo x > {report} 2>/dev/null && echo wrote; "
                  "touch started; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do "
                  "sleep 0.05; i=$((i+1)); done; exit 3")
        # Bind mode: `started` must reach the host's workspace.
        proc = subprocess.Popen([binary(), "run", "--config", self.config, "--workspace", ws,
                                 "--workspace-mode", "bind", "--allow-root-workspace",
                                 "--report", report, "--", "sh",
                                 "-c", script],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: os.path.exists(os.path.join(ws, "started")) or proc.poll(),
                       timeout=30, what="the workload to start")
            # While the workload runs, the report exists already: opened before it started.
            st = os.lstat(report)
            self.assertTrue(stat.S_ISREG(st.st_mode))
            self.assertEqual(st.st_size, 0)
        finally:
            with open(os.path.join(ws, "go"), "w"):
                pass
            stdout, stderr = proc.communicate(timeout=60)
        artifacts.record("run", "stdout", stdout)
        artifacts.record("log", "run-stderr", stderr)
        self.assertEqual(proc.returncode, 3, stderr)
        self.assertNotIn("planted", stdout)
        self.assertNotIn("wrote", stdout)
        self.assertFalse(os.path.islink(report))
        with open(report) as f:
            data = json.load(f)
        artifacts.record_file("report", "report.json", report)
        self.assertEqual(data["exit_status"], 3)
        self.assertEqual(data["task"], "t")

    def test_report_that_cannot_be_opened_fails_the_run_before_it_starts(self):
        ws = self.workspace("report-unopenable")
        link = os.path.join(self.dir, "link-to-victimdir")
        os.symlink(self.victimdir, link)
        for report in [os.path.join(self.dir, "no-such-dir", "r.json"),
                       os.path.join(link, "r.json")]:
            with self.subTest(report=report):
                r = self.sandgate(self.config, ws, "touch ran", "--report", report)
                self.assertRefusedBeforeTheRun(r, ws, "cannot open", "[output_unopenable]")
        self.assertIn("symbolic link", r.stderr)

    def test_rootless_report_in_the_workspace_is_refused_before_the_run(self):
        # Rootless, the launcher writes as its user: a link would reach that user's own files
        # (here `victim` in the home, standing for ~/.bashrc).
        with TemporaryUser() as user:
            ws = os.path.join(user.home, "ws")
            victim = os.path.join(user.home, "victim")
            for path, make in ((ws, os.mkdir), (victim, lambda p: open(p, "w").close())):
                make(path)
                os.chown(path, user.uid, user.gid)
            config = os.path.join(user.home, "sandgate.yaml")
            with open(config, "w") as f:
                json.dump(self.base, f)
            args = dict(user.popen_args(), cwd=ws)
            cmd = [binary(), "run", "--config", config, "--report", "report.json", "--", "sh",
                   "-c", f"ln -s {victim} report.json; touch ran"]
            r = run_bounded(cmd, 60, **args)
            artifacts.record("log", "run-stderr", r.stderr)
            if r.returncode == 125 and namespaces_refused(r.stderr):
                self.skipTest("this host refuses unprivileged namespaces: " + r.stderr.strip())
            self.assertRefusedBeforeTheRun(r, ws, "[output_in_workspace]")
            self.assertFalse(os.path.lexists(os.path.join(ws, "report.json")))
            self.assertEqual(os.path.getsize(victim), 0)

    # --- ca_cert_out -------------------------------------------------------------------------

    def test_links_planted_on_the_way_to_ca_cert_out_are_not_followed(self):
        ws = self.workspace("ca")
        # An earlier run leaves `out -> victimdir` and `ca.pem -> victim` in the workspace.
        self.plant(ws, f"ln -s {self.victimdir} out; ln -s {self.victim} ca.pem")
        config = self.write_config("ca-dir", {"ca_cert_out": os.path.join(ws, "out", "ca.pem")})
        r = self.sandgate(config, ws, "touch ran")
        # A config path sandgate will not write through: a config error, exit 2 (#39).
        self.assertRefusedBeforeTheRun(r, ws, "ca_cert_out", "symbolic link", status=2)
        # A link as the last component is replaced by the certificate, never written through.
        config = self.write_config("ca-file", {"ca_cert_out": os.path.join(ws, "ca.pem")})
        r = self.sandgate(config, ws, "grep -c 'BEGIN CERTIFICATE' ca.pem")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "1")
        self.assertFalse(os.path.islink(os.path.join(ws, "ca.pem")))
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(ws, "ca.pem")).st_mode), 0o644)

    # --- audit.path --------------------------------------------------------------------------

    def test_audit_path_in_the_workspace_is_refused(self):
        ws = self.workspace("audit-in")
        alias = os.path.join(self.dir, "alias-to-audit-ws")
        os.symlink(ws, alias)
        for path in [os.path.join(ws, "audit.log"), os.path.join(alias, "audit.log")]:
            with self.subTest(audit=path):
                config = self.write_config("audit-in", {"audit": {"path": path}})
                r = self.sandgate(config, ws, "touch ran")
                self.assertRefusedBeforeTheRun(r, ws, "audit.path")
                self.assertFalse(os.path.exists(os.path.join(ws, "audit.log")))
        # Named directly, the refusal says why and what to do.
        config = self.write_config("audit-in", {"audit": {"path": os.path.join(ws, "a.log")}})
        r = self.sandgate(config, ws, "touch ran")
        self.assertRefusedBeforeTheRun(r, ws, "[output_in_workspace]", "put it outside")

    def test_run_audit_path_through_a_link_is_refused(self):
        ws = self.workspace("audit-link")
        link = os.path.join(self.dir, "audit-link-to-victimdir")
        os.symlink(self.victimdir, link)
        config = self.write_config("audit-link", {"audit": {"path": os.path.join(link, "a.log")}})
        r = self.sandgate(config, ws, "touch ran")
        self.assertRefusedBeforeTheRun(r, ws, "audit.path", "symbolic link")

    def serve(self, audit_path):
        s = Sandgate(policies={"p": {"allow": []}}, tasks=[{"name": "t", "policy": "p"}],
                     extra={"audit": {"path": audit_path}})
        self.addCleanup(s.cleanup)
        return s

    def test_serve_refuses_an_audit_path_through_a_link(self):
        link = os.path.join(self.dir, "serve-link-to-victimdir")
        os.symlink(self.victimdir, link)
        s = self.serve(os.path.join(link, "audit.log"))
        with self.assertRaises(AssertionError) as cm:
            s.start(timeout=15)
        self.assertIn("exited", str(cm.exception))
        self.assertIn("symbolic link", s.stderr())

    def test_serve_does_not_follow_a_link_swapped_in_before_a_reopen(self):
        logs = os.path.join(self.dir, "serve-logs")
        os.mkdir(logs)
        s = self.serve(os.path.join(logs, "audit.log"))
        s.start()
        # Rotation: the directory moves away and a link takes its name; SIGHUP reopens.
        os.rename(logs, logs + ".1")
        os.symlink(self.victimdir, logs)
        os.kill(s.proc.pid, signal.SIGHUP)
        wait_until(lambda: "audit log:" in s.stderr() and "symbolic link" in s.stderr(),
                   timeout=15, what="serve's warning that the reopen failed")
        self.assertIsNone(s.proc.poll())  # the old log stays in use

    # --- exec credentials (item 12) ----------------------------------------------------------

    def test_exec_credential_works_with_sandgate_run(self):
        artifacts.register_secret("exec-run", SECRET)
        pki = test_pki()
        https = HttpUpstream(pki)
        self.addCleanup(https.close)
        ws = self.workspace("exec")
        config = self.write_config("exec", {
            "tls": {"upstream_ca": pki.ca_cert},
            "credentials": {"api": {
                "source": {"exec": ["/bin/echo", SECRET]}, "hosts": ["api.test"],
                "inject": {"header": "Authorization", "value": "Bearer {secret}"},
                "placeholder": "API_KEY"}},
            "policies": {"p": {"allow": [{"host": "api.test", "credential": "api",
                                          "cidrs": ["127.0.0.0/8"]}]}},
            "resolve": {"api.test": f"127.0.0.1:{https.port}"},
        })
        r = self.sandgate(config, ws, 'curl -sS https://api.test/echo '
                                      '-H "Authorization: Bearer $API_KEY"')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("threads", r.stderr)
        auth = [v for q in https.requests for k, v in q["headers"]
                if k.lower() == "authorization"]
        self.assertEqual(auth, ["Bearer " + SECRET])
        self.assertNotIn(SECRET, r.stdout)
        self.assertNotIn(SECRET, r.stderr)


if __name__ == "__main__":
    unittest.main()
