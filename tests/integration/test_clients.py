"""Real clients through the proxy with HTTPS_PROXY=http://task:token@host:port: git (smart
HTTP over a CONNECT tunnel to a local git http-backend), curl and Python urllib over HTTPS.
The servers run on 127.0.0.1; `resolve:` maps git.test/api.test to them and the rules open
127.0.0.0/8 on purpose.
"""

import json
import os
import ssl
import subprocess
import tempfile
import unittest
import urllib.request

import git_server
from clients import clean_env, curl
from pki import test_pki
from sandgate_fixture import Sandgate
from upstreams import HttpUpstream

TOKEN = "c1ients"


class ClientsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.https = HttpUpstream(cls.pki)
        cls.git = git_server.GitHttpsServer(cls.pki) if git_server.available() else None
        resolve = {"api.test": "127.0.0.1:%d" % cls.https.port}
        if cls.git:
            resolve["git.test"] = "127.0.0.1:%d" % cls.git.port
        cls.sg = Sandgate(
            {"p": {"allow": [{"host": "api.test", "cidrs": ["127.0.0.0/8"]},
                             {"host": "git.test", "cidrs": ["127.0.0.0/8"]}]}},
            [{"name": "agent", "policy": "p", "token": TOKEN}], resolve=resolve).start()
        cls.proxy = cls.sg.proxy_url("agent", TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.https.close()
        if cls.git:
            cls.git.close()

    def test_curl_with_https_proxy_env(self):
        env = clean_env(HTTPS_PROXY=self.proxy)
        r = curl("https://api.test/echo/env", "--cacert", self.pki.ca_cert, env=env)
        self.assertEqual(r.status, 200, r.stderr)
        self.assertEqual(json.loads(r.body)["path"], "/echo/env")

    def test_python_urllib_https(self):
        ctx = ssl.create_default_context(cafile=self.pki.ca_cert)
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({"https": self.proxy}),
            urllib.request.HTTPSHandler(context=ctx))
        with opener.open("https://api.test/echo/py", timeout=10) as resp:
            self.assertEqual(json.loads(resp.read())["path"], "/echo/py")

    @unittest.skipUnless(git_server.available(), "git or git-http-backend is not installed")
    def test_git_ls_remote_and_clone(self):
        env = clean_env(HTTPS_PROXY=self.proxy, GIT_SSL_CAINFO=self.pki.ca_cert,
                        GIT_TERMINAL_PROMPT="0", HOME=tempfile.gettempdir(),
                        GIT_CONFIG_NOSYSTEM="1")
        p = subprocess.run(["git", "ls-remote", "https://git.test/repo.git"], env=env,
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertIn(self.git.head, p.stdout.decode())
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run(["git", "clone", "-q", "https://git.test/repo.git",
                                os.path.join(d, "c")], env=env, capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            with open(os.path.join(d, "c", "README")) as f:
                self.assertEqual(f.read(), "hello\n")
        self.sg.wait_audit(kind="tunnel", host="git.test", task="agent")

    @unittest.skipUnless(git_server.available(), "git or git-http-backend is not installed")
    def test_git_with_wrong_token_fails(self):
        env = clean_env(HTTPS_PROXY=self.sg.proxy_url("agent", "wrong"),
                        GIT_SSL_CAINFO=self.pki.ca_cert, GIT_TERMINAL_PROMPT="0",
                        HOME=tempfile.gettempdir(), GIT_CONFIG_NOSYSTEM="1")
        p = subprocess.run(["git", "ls-remote", "https://git.test/repo.git"], env=env,
                           capture_output=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("407", p.stderr.decode())


if __name__ == "__main__":
    unittest.main()
