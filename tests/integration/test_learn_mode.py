"""A task in learn mode (`mode: learn`) on a real `sandgate serve`, from the client's side.

What the task's policy refuses only for want of a rule is admitted and audited with verdict
`learn` and the would-be reason; the guardrails stay: an address literal in a denied range, a
deny rule (with or without methods), the global deny list. A placeholder sent to a host no rule
admits, or with a method the credential's rule does not list, never becomes the secret.
Upstreams are loopback stand-ins pinned by `resolve:`.
"""

import subprocess
import unittest

from clients import curl
from sandgate_fixture import Sandgate, binary
from upstreams import HttpUpstream

TOKEN = "tok-learner"
STRICT = "tok-strict"
SECRET = "sk-learnmodesecret-0123456789abcdef"


def _header(request, name):
    return [v for k, v in request["headers"] if k.lower() == name]


class LearnModeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = HttpUpstream()
        cls.sg = Sandgate({}, [])
        rule = {"ports": [80], "cidrs": ["127.0.0.0/8"]}
        creds = {"api": {"source": {"file": cls.sg.secret_file("api", SECRET)},
                         "hosts": ["api.test"], "allow_plaintext": True, "placeholder": "API_KEY",
                         "inject": {"header": "X-Api-Key", "value": "{secret}"}}}
        policies = {"agent": {
            "allow": [dict(rule, host="api.test", credential="api", methods=["GET"])],
            "deny": [{"host": "blocked.test"}, {"host": "ro.test", "methods": ["DELETE"]}],
        }}
        pinned = "127.0.0.1:%d" % cls.up.port
        names = ["api.test", "known.test", "blocked.test", "ro.test", "gdeny.test"]
        cls.sg.config = cls.sg.make_config(
            policies,
            [{"name": "learner", "policy": "agent", "token": TOKEN, "mode": "learn"},
             {"name": "strict", "policy": "agent", "token": STRICT}],
            resolve={n: pinned for n in names},
            extra={"credentials": creds, "global": {"deny": [{"host": "gdeny.test"}]}})
        cls.sg.config["listen"]["admin"] = cls.sg.admin_path
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()
        cls.proxy = cls.sg.proxy_url("learner", TOKEN)
        cls.ph = cls.sg.token_env("learner")["env"]["API_KEY"]

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.up.close()

    def get(self, url, *args, proxy=None):
        return curl(url, *args, proxy=proxy or self.proxy)

    def test_a_host_no_rule_names_is_admitted_and_audited_as_learn(self):
        r = self.get("http://known.test/echo/learn-known")
        self.assertEqual(r.status, 200, r.stderr)
        self.assertEqual(len(self.up.requests_to("/echo/learn-known")), 1)
        rec = self.sg.wait_audit(path="/echo/learn-known", verdict="learn")
        self.assertEqual(rec["reason"], "no_matching_rule")
        self.assertEqual(rec["task"], "learner")
        self.assertFalse(rec.get("credential"))
        # The same policy without learn mode refuses it.
        r = self.get("http://known.test/echo/strict-known",
                     proxy=self.sg.proxy_url("strict", STRICT))
        self.assertEqual(r.status, 403)
        self.assertEqual(self.up.requests_to("/echo/strict-known"), [])

    def test_an_address_literal_in_a_denied_range_is_still_refused(self):
        r = self.get("http://127.0.0.1:%d/echo/learn-literal" % self.up.port)
        self.assertEqual(r.status, 403, r.stderr)
        self.assertEqual(dict(r.headers).get("x-sandgate-reason"), "address_denied")
        self.assertEqual(self.up.requests_to("/echo/learn-literal"), [])
        self.sg.wait_audit(path="/echo/learn-literal", verdict="deny", reason="address_denied")

    def test_deny_rules_and_the_global_deny_list_still_deny(self):
        cases = [("http://blocked.test/echo/learn-blocked", (), "denied_by_rule"),
                 ("http://gdeny.test/echo/learn-gdeny", (), "global_deny"),
                 ("http://ro.test/echo/learn-delete", ("-X", "DELETE"), "denied_by_rule")]
        for url, args, why in cases:
            with self.subTest(url):
                r = self.get(url, *args)
                self.assertEqual(r.status, 403, r.stderr)
                self.assertEqual(dict(r.headers).get("x-sandgate-reason"), why)
                path = url.split("test", 1)[1]
                self.assertEqual(self.up.requests_to(path), [])
        # The deny rule with methods leaves the others to learn.
        r = self.get("http://ro.test/echo/learn-ro-get")
        self.assertEqual(r.status, 200, r.stderr)

    def test_a_placeholder_never_becomes_the_secret_where_no_rule_admits(self):
        # Control: the credential's own rule injects it (so the check below can see a leak).
        r = self.get("http://api.test/echo/learn-inject", "-H", "X-Api-Key: " + self.ph)
        self.assertEqual(r.status, 200, r.stderr)
        seen = self.up.requests_to("/echo/learn-inject")
        self.assertEqual([_header(q, "x-api-key") for q in seen], [[SECRET]])
        # A host the policy does not name, and the credential's host with a method its rule does
        # not list: admitted by learn mode, or refused, but never with the secret.
        for url, args in [("http://known.test/echo/learn-ph-host", ()),
                          ("http://api.test/echo/learn-ph-post", ("-X", "POST", "-d", "x=1"))]:
            with self.subTest(url):
                r = self.get(url, "-H", "X-Api-Key: " + self.ph, *args)
                self.assertNotIn(SECRET.encode(), r.body)
                path = url.split("test", 1)[1]
                for q in self.up.requests_to(path):
                    self.assertNotIn(SECRET, repr(q))
                # Refused as the tripwire it is: learn mode names no credential, so the
                # placeholder is honoured nowhere.
                self.assertEqual(r.status, 403, r.stderr)
                self.assertIn(dict(r.headers).get("x-sandgate-reason"),
                              ("credential_host_mismatch", "placeholder_misplaced"))
                rec = self.sg.wait_audit(path=path)
                self.assertEqual(rec["verdict"], "deny")
                self.assertFalse(rec.get("injected"))

    def test_learn_merge_proposes_what_learn_mode_admitted_and_drops_the_mode(self):
        r = self.get("http://known.test/echo/learn-merge")
        self.assertEqual(r.status, 200, r.stderr)
        self.sg.wait_audit(path="/echo/learn-merge", verdict="learn")
        self.assertEqual(self.get("http://blocked.test/echo/learn-merge-blocked").status, 403)
        self.sg.wait_audit(path="/echo/learn-merge-blocked", reason="denied_by_rule")
        p = subprocess.run([binary(), "policy", "learn", self.sg.audit_path, "--task", "learner",
                            "--merge", self.sg.config_path], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("known.test", p.stdout)
        self.assertIn("learned-learner", p.stdout)
        # The proposal enforces: learn mode is not carried into it.
        self.assertNotIn("mode: learn", p.stdout)
        self.assertIn("blocked.test", p.stderr)  # stays refused by its deny rule: not proposed


if __name__ == "__main__":
    unittest.main()
