"""The leak check's own check: planted secrets in every form it claims to catch are caught,
near misses and clean artifacts are not, and an empty run is refused."""

import base64
import os
import shutil
import tempfile
import unittest
import urllib.parse

import artifacts
import leak_check

FAKE = "planted-fake-secret/+=&0123456789"
NAME = "planted"


class LeakCheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sandgate-leakcheck-")
        self.old = os.environ.get(artifacts.ENV)
        os.environ[artifacts.ENV] = self.dir
        artifacts.register_secret(NAME, FAKE)

    def tearDown(self):
        if self.old is None:
            del os.environ[artifacts.ENV]
        else:
            os.environ[artifacts.ENV] = self.old
        shutil.rmtree(self.dir, ignore_errors=True)

    def leaks(self):
        secrets, files, leaks = leak_check.find_leaks(self.dir)
        self.assertEqual([s[0] for s in secrets], [NAME])
        return files, leaks

    def test_every_form_is_found(self):
        planted = {
            "raw": b"log line: token=" + FAKE.encode() + b" end",
            "url": b"GET /x?key=" + urllib.parse.quote(FAKE, safe="").encode() + b" HTTP/1.1",
            "url-lower-hex": b"?key=" + urllib.parse.quote(FAKE, safe="").lower().encode(),
            "url-plus": b"key=" + urllib.parse.quote_plus(FAKE).encode(),
            "json-body": b'{"error":"x","header":"Bearer ' + FAKE.encode() + b'"}',
        }
        # Inside a longer base64 string, at each of the three byte alignments.
        for prefix in ("", "u:", "us:", "user:"):
            enc = base64.b64encode((prefix + FAKE + "!tail").encode())
            planted["basic-" + str(len(prefix))] = b"Proxy-Authorization: Basic " + enc
            planted["b64url-" + str(len(prefix))] = base64.urlsafe_b64encode(
                (prefix + FAKE).encode())
        for label, data in planted.items():
            artifacts.record("log", label, data)
        files, leaks = self.leaks()
        self.assertEqual(len(files), len(planted))
        found = {os.path.basename(path).split("-", 3)[3] for path, name, _ in leaks}
        self.assertEqual(found, set(planted))
        # A finding names the file and the secret, never the value.
        for path, name, form in leaks:
            self.assertEqual(name, NAME)
            self.assertNotIn(FAKE, path + name + form)

    def test_recorded_response_and_file_are_scanned(self):
        artifacts.record_response("refusal", 403, {"X-Sandgate-Reason": "x"},
                                  b'{"error":"' + FAKE.encode() + b'"}')
        src = os.path.join(self.dir, "..", os.path.basename(self.dir) + "-audit.log")
        with open(src, "w") as f:
            f.write('{"task":"t","note":"%s"}\n' % FAKE)
        try:
            artifacts.record_file("audit", "audit.log", src)
        finally:
            os.unlink(src)
        files, leaks = self.leaks()
        self.assertEqual(len(files), 2)
        self.assertEqual(len(leaks), 2)

    def test_clean_artifacts_and_near_misses_pass(self):
        near = FAKE[:-1] + "X"
        artifacts.record("log", "clean", b"nothing to see; [REDACTED:planted]")
        artifacts.record("log", "near", near.encode() + b" " + base64.b64encode(near[:10].encode()))
        artifacts.record("metrics", "page", b'sandgate_secret_scrubs_total{credential="planted"} 1')
        files, leaks = self.leaks()
        self.assertEqual(len(files), 3)
        self.assertEqual(leaks, [])

    def test_secrets_are_not_artifacts(self):
        files, leaks = self.leaks()  # only the secret record itself exists
        self.assertEqual(files, [])
        self.assertEqual(leaks, [])

    def test_short_secrets_are_refused(self):
        with self.assertRaises(ValueError):
            artifacts.register_secret("short", "abc")


if __name__ == "__main__":
    unittest.main()
