"""A `file:` credential where inotify cannot watch: sandgate keeps injecting the current value,
checking the file with a stat on every request; it says so at warn, with the reason, and counts
it in sandgate_credential_files_unwatched.

The kernel's inotify limits are per user namespace: sandgate runs in a user namespace of its
own (`unshare --user --map-root-user`) whose max_inotify_instances is 0. The host's limits are
never touched. Where the kernel refuses such a namespace the test is skipped, saying so.
"""

import re
import shutil
import subprocess
import unittest

from clients import curl
from pki import test_pki
from sandgate_fixture import Sandgate, wait_until
from upstreams import HttpUpstream

TOKEN = "t0ken"
SECRET = "sk-unwatchedfilesecret-0123456789ab"
SECRET2 = "sk-unwatchedfilerotated-ba9876543210"
NO_INOTIFY = ["unshare", "--user", "--map-root-user", "sh", "-c",
              'echo 0 > /proc/sys/user/max_inotify_instances && exec "$0" "$@"']


def namespace_refused():
    """Why sandgate cannot be started without inotify here, or None."""
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    probe = subprocess.run(NO_INOTIFY + ["true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return "a user namespace with its own inotify limit: %s" % probe.stderr.strip()
    return None


class UnwatchedSecretFileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = namespace_refused()
        if why:
            raise unittest.SkipTest("skipped, the kernel refuses " + why)
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.sg = Sandgate({}, [])
        cls.secret_file = cls.sg.secret_file("unwatched", SECRET)
        cls.ca_out = cls.sg.dir + "/sandgate-ca.pem"
        policies = {"agent": {"allow": [
            {"host": "api.test", "cidrs": ["127.0.0.0/8"], "credential": "unwatched"}]}}
        creds = {"unwatched": {"source": {"file": cls.secret_file}, "hosts": ["api.test"],
                               "inject": {"header": "Authorization",
                                          "value": "Bearer {secret}"}}}
        cls.sg.config = cls.sg.make_config(
            policies, [{"name": "demo", "policy": "agent", "token": TOKEN}],
            resolve={"api.test": "127.0.0.1:%d" % cls.https.port},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": cls.pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start(wrapper=NO_INOTIFY)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.https.close()

    def sent_authorization(self, path):
        seen = [r for r in self.https.requests if r["path"] == path]
        self.assertEqual(len(seen), 1, path)
        return [v for k, v in seen[0]["headers"] if k.lower() == "authorization"]

    def get(self, path):
        r = curl("https://api.test" + path, "--cacert", self.ca_out,
                 proxy=self.sg.proxy_url("demo", TOKEN))
        self.assertEqual(r.status, 200, r)

    def test_injects_the_current_value_and_says_why_it_is_not_watched(self):
        self.get("/echo/unwatched-1")
        self.assertEqual(self.sent_authorization("/echo/unwatched-1"), ["Bearer " + SECRET])
        # Rotation is seen by the next request all the same (a stat on every request).
        self.sg.secret_file("unwatched", SECRET2)
        try:
            self.get("/echo/unwatched-2")
        finally:
            self.sg.secret_file("unwatched", SECRET)
        self.assertEqual(self.sent_authorization("/echo/unwatched-2"), ["Bearer " + SECRET2])
        # The gauge is refreshed every second.
        wait_until(lambda: self.sg.metric("sandgate_credential_files_unwatched") == 1, 10,
                   what="sandgate_credential_files_unwatched to be 1")
        warnings = [l for l in self.sg.stderr().splitlines()
                    if "changes cannot be watched" in l]
        self.assertTrue(warnings, self.sg.stderr())
        self.assertIn("credential file %s" % self.secret_file, warnings[0])
        self.assertRegex(warnings[0], re.escape(
            "(inotify_init1: Too many open files (limits: sysctl fs.inotify.max_user_instances"))
        self.assertIn("warn", warnings[0])


if __name__ == "__main__":
    unittest.main()
