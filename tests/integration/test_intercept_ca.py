"""TLS interception's certificate authorities, on both legs.

Client leg: `sandgate ca init --out DIR` writes an ECDSA P-256 CA (ca.pem, ca.key mode 0600)
that `sandgate serve` then uses (`ca: {cert, key}`) to mint the leaves clients see; a CA key
that is missing, not a key, or not the certificate's key stops `serve` before it listens.
Upstream leg: a credential's own `upstream_ca` is trusted for that credential only (another
credential talking to the same upstream gets `502 upstream_tls_failed`), and an upstream that
speaks nothing newer than TLS 1.1 is refused (skipped where this machine's OpenSSL cannot
serve TLS 1.1 at all). Without any `upstream_ca`, the system store decides: an upstream signed by
a CA in it (the test CA, through SSL_CERT_FILE in sandgate's environment) is trusted, one
signed by a CA outside it (this machine's own store) is not. Every refused request must never
reach its upstream.

All hosts are mapped to loopback upstreams with `resolve:`; secrets are registered for the
suite-wide leak check (tests/leak/).
"""

import os
import shutil
import socket
import ssl
import stat
import subprocess
import tempfile
import threading
import time
import unittest
import warnings

import artifacts
from clients import curl
from pki import make_pki, test_pki
from sandgate_fixture import Sandgate, binary, wait_until
from upstreams import HttpUpstream

TOKEN = "ca-t0ken"
SECRET = "sk-cainitsecret-0123456789abcdef"
INTERNAL_SECRET = "sk-internalsecret-a1b2c3d4e5f60718"
OTHER_SECRET = "sk-othersecret-99887766554433221100"
LEGACY_SECRET = "sk-legacytlssecret-5a5a5a5a5a5a5a5a"
SYSTEM_STORE_SECRET = "sk-systemstoresecret-0f1e2d3c4b5a6978"
RULE = {"cidrs": ["127.0.0.0/8"]}


def bearer(name, secret_path, hosts, **more):
    """A credential injected as `Authorization: Bearer {secret}` from a file source."""
    return dict({"source": {"file": secret_path}, "hosts": hosts,
                 "inject": {"header": "Authorization", "value": "Bearer {secret}"}}, **more)


def sent_authorization(upstream, path):
    """The Authorization values of every request for `path` that `upstream` received."""
    return [v for r in upstream.requests if r["path"] == path
            for k, v in r["headers"] if k.lower() == "authorization"]


def ca_init(out_dir):
    """Runs `sandgate ca init --out out_dir`; returns the completed process."""
    p = subprocess.run([binary(), "ca", "init", "--out", out_dir], capture_output=True,
                       timeout=30)
    artifacts.record("log", "ca-init", p.stdout + p.stderr)
    return p


def register_key(path):
    """Registers the base64 lines of a PEM private key for the leak check."""
    with open(path) as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("-----")]
    for i, line in enumerate(lines):
        if len(line) >= 16:
            artifacts.register_secret("ca-key-line%d" % i, line)


class CaInitTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sandgate-ca-init-")
        self.https = HttpUpstream(test_pki())
        self.sg = None

    def tearDown(self):
        if self.sg:
            self.sg.cleanup()
        self.https.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_ca_init_then_serve_with_it(self):
        # `ca init` makes a P-256 CA with a private key only its owner can read; `serve` with
        # that CA injects the credential, and the leaf the client sees chains to that CA alone.
        out = os.path.join(self.tmp, "ca")
        p = ca_init(out)
        self.assertEqual(p.returncode, 0, p.stderr)
        cert, key = os.path.join(out, "ca.pem"), os.path.join(out, "ca.key")
        self.assertTrue(os.path.isfile(cert))
        self.assertTrue(os.path.isfile(key))
        register_key(key)
        self.assertEqual(stat.S_IMODE(os.stat(key).st_mode), 0o600)
        text = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-text"],
                              capture_output=True, text=True, timeout=30, check=True).stdout
        self.assertIn("CA:TRUE", text)
        self.assertIn("id-ecPublicKey", text)
        self.assertIn("prime256v1", text)
        self.assertIn("Certificate Sign", text)
        # A second run refuses to overwrite the CA (and leaves it as it was).
        with open(cert, "rb") as f:
            before = f.read()
        again = ca_init(out)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn(b"already exists", again.stderr)
        with open(cert, "rb") as f:
            self.assertEqual(f.read(), before)

        self.sg = Sandgate({}, [])
        secret_path = self.sg.secret_file("cainit", SECRET)
        self.sg.config = self.sg.make_config(
            {"agent": {"allow": [dict(RULE, host="api.test", credential="cainit")]}},
            [{"name": "demo", "policy": "agent", "token": TOKEN}],
            resolve={"api.test": "127.0.0.1:%d" % self.https.port},
            extra={"credentials": {"cainit": bearer("cainit", secret_path, ["api.test"])},
                   "ca": {"cert": cert, "key": key},
                   "tls": {"upstream_ca": test_pki().ca_cert}})
        self.sg.write_config(self.sg.config)
        self.sg.start()

        r = curl("https://api.test/echo/ca-init", "--cacert", cert,
                 "-H", "Authorization: Bearer client-own", proxy=self.sg.proxy_url("demo", TOKEN))
        self.assertEqual(r.status, 200, r.stderr)
        self.assertEqual(sent_authorization(self.https, "/echo/ca-init"), ["Bearer " + SECRET])
        self.assertNotIn(SECRET.encode(), r.body)
        self.assertIn(b"[REDACTED:cainit]", r.body)

        # The leaf the client got: verified against ca.pem only, issued by "sandgate CA",
        # and its signature checks out against that CA and not against any other.
        t = self.sg.tls_tunnel("api.test", "demo", TOKEN, cert)
        try:
            issuer = dict(x[0] for x in t.getpeercert()["issuer"])
            der = t.getpeercert(binary_form=True)
        finally:
            t.close()
        self.assertEqual(issuer.get("commonName"), "sandgate CA")
        leaf = os.path.join(self.tmp, "seen-leaf.pem")
        with open(leaf, "w") as f:
            f.write(ssl.DER_cert_to_PEM_cert(der))
        ok = subprocess.run(["openssl", "verify", "-CAfile", cert, leaf], capture_output=True,
                            text=True, timeout=30)
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        wrong = subprocess.run(["openssl", "verify", "-CAfile", test_pki().ca_cert, leaf],
                               capture_output=True, text=True, timeout=30)
        self.assertNotEqual(wrong.returncode, 0, wrong.stdout)
        self.sg.wait_audit(path="/echo/ca-init", credential="cainit", injected=True)


class CaKeyFailureTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sandgate-ca-bad-")
        self.procs = []

    def tearDown(self):
        for p in self.procs:  # only our own processes, by PID
            if p.poll() is None:
                p.kill()
                p.wait(5)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def serve(self, sg):
        """Starts `sandgate serve` on sg's config; returns (exit status, stderr, ready seen).
        Bounded: a process still running after 15 s is killed and reported as None."""
        stderr_path = os.path.join(sg.dir, "serve-stderr.log")
        with open(stderr_path, "wb") as err:
            p = subprocess.Popen([binary(), "serve", "--config", sg.config_path,
                                  "--threads", "2", "--ready-file", sg.ready_path],
                                 stdout=subprocess.DEVNULL, stderr=err)
        self.procs.append(p)
        ready_seen = False
        deadline = time.monotonic() + 15
        while p.poll() is None and time.monotonic() < deadline:
            ready_seen = ready_seen or os.path.exists(sg.ready_path)
            time.sleep(0.02)
        rc = p.poll()
        if rc is None:
            p.kill()
            p.wait(5)
        ready_seen = ready_seen or os.path.exists(sg.ready_path)
        artifacts.record_file("log", "serve-stderr", stderr_path)
        with open(stderr_path, "rb") as f:
            return rc, f.read().decode(errors="replace"), ready_seen

    def test_bad_ca_key_fails_closed(self):
        # A CA key that is missing, garbage, or another CA's key: `serve` exits non-zero naming
        # the key file, and never gets as far as listening (no ready file).
        out = os.path.join(self.tmp, "ca")
        self.assertEqual(ca_init(out).returncode, 0)
        register_key(os.path.join(out, "ca.key"))
        cert = os.path.join(out, "ca.pem")
        garbage = os.path.join(out, "garbage.key")
        with open(garbage, "wb") as f:
            f.write(b"\x00\xffnot a key at all\x01" + bytes(range(256)))
        os.chmod(garbage, 0o600)
        cases = (("missing", os.path.join(out, "missing.key"), "cannot read CA key"),
                 ("garbage", garbage, "not an unencrypted PEM private key"),
                 ("mismatched", os.path.join(test_pki().dir, "ca.key"), "does not match"))
        for what, key, why in cases:
            with self.subTest(what):
                sg = Sandgate({}, [])
                try:
                    secret_path = sg.secret_file("cakeyfail", SECRET)
                    sg.config = sg.make_config(
                        {"agent": {"allow": [dict(RULE, host="api.test", credential="c")]}},
                        [{"name": "demo", "policy": "agent", "token": TOKEN}],
                        resolve={"api.test": "127.0.0.1:9"},
                        extra={"credentials": {"c": bearer("c", secret_path, ["api.test"])},
                               "ca": {"cert": cert, "key": key}})
                    sg.write_config(sg.config)
                    rc, err, ready_seen = self.serve(sg)
                    self.assertIsNotNone(rc, "sandgate kept running with a bad CA key")
                    self.assertNotEqual(rc, 0, err)
                    self.assertFalse(ready_seen, "sandgate listened with a bad CA key")
                    self.assertIn(key, err)
                    self.assertIn(why, err)
                finally:
                    sg.cleanup()


class CredentialUpstreamCaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki_dir = tempfile.mkdtemp(prefix="sandgate-internal-pki-")
        cls.internal_pki = make_pki(cls.pki_dir, ["internal.test", "internal2.test"],
                                    ca_name="internal test CA")
        cls.internal = HttpUpstream(cert=(cls.internal_pki.leaf_cert,
                                          cls.internal_pki.leaf_key))
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        creds = {
            "internal": bearer("internal", cls.sg.secret_file("internal", INTERNAL_SECRET),
                               ["internal.test"], upstream_ca=cls.internal_pki.ca_cert),
            "other": bearer("other", cls.sg.secret_file("other", OTHER_SECRET),
                            ["internal2.test"]),
        }
        upstream = "127.0.0.1:%d" % cls.internal.port
        cls.sg.config = cls.sg.make_config(
            {"agent": {"allow": [dict(RULE, host="internal.test", credential="internal"),
                                 dict(RULE, host="internal2.test", credential="other")]}},
            [{"name": "demo", "policy": "agent", "token": TOKEN}],
            resolve={"internal.test": upstream, "internal2.test": upstream},
            extra={"credentials": creds, "ca_cert_out": cls.ca_out,
                   "tls": {"upstream_ca": test_pki().ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.internal.close()
        shutil.rmtree(cls.pki_dir, ignore_errors=True)

    def get(self, url):
        return curl(url, "--cacert", self.ca_out, proxy=self.sg.proxy_url("demo", TOKEN))

    def test_credential_upstream_ca_is_trusted_for_that_credential(self):
        # internal.test's certificate comes from a CA only the `internal` credential trusts:
        # the request goes through with that credential's secret.
        r = self.get("https://internal.test/echo/internal")
        self.assertEqual(r.status, 200, r.stderr)
        self.assertEqual(sent_authorization(self.internal, "/echo/internal"),
                         ["Bearer " + INTERNAL_SECRET])
        self.assertNotIn(INTERNAL_SECRET.encode(), r.body)
        self.sg.wait_audit(path="/echo/internal", credential="internal", injected=True)

    def test_credential_upstream_ca_is_not_trusted_for_another(self):
        # The same upstream (its certificate names internal2.test too) reached with `other`,
        # which has no upstream_ca: the global bundle does not hold the internal CA, so the
        # handshake fails on trust, and nothing (no secret) reaches the upstream.
        before = len(self.internal.requests)
        r = self.get("https://internal2.test/echo/other")
        self.assertEqual(r.status, 502, r.stderr)
        self.assertIn(("x-sandgate-reason", "upstream_tls_failed"), r.headers)
        self.assertIn(b"unable to get local issuer certificate", r.body)
        self.assertEqual(len(self.internal.requests), before)
        self.assertEqual(sent_authorization(self.internal, "/echo/other"), [])
        self.assertNotIn(OTHER_SECRET.encode(), r.body)
        self.sg.wait_audit(host="internal2.test", reason="upstream_tls_failed",
                           credential="other")


class SystemTrustStoreTest(unittest.TestCase):
    """Without `tls.upstream_ca`, the upstream is verified against the system store alone:
    OpenSSL's default paths, which SSL_CERT_FILE and SSL_CERT_DIR in sandgate's own environment
    replace (as for other OpenSSL programs). One sandgate is pointed at a store that holds only
    the runtime test CA; another keeps this machine's real store, which cannot hold that CA."""

    @classmethod
    def setUpClass(cls):
        cls.upstream = HttpUpstream(test_pki())
        cls.store_dir = tempfile.mkdtemp(prefix="sandgate-system-store-")
        cls.sandgates = {}
        for name, env in (("test-ca-store", {"SSL_CERT_FILE": test_pki().ca_cert,
                                             "SSL_CERT_DIR": cls.store_dir}),
                          ("machine-store", None)):
            sg = Sandgate({}, [])
            creds = {"api": bearer("api", sg.secret_file("api-" + name, SYSTEM_STORE_SECRET),
                                   ["api.test"])}
            sg.config = sg.make_config(
                {"agent": {"allow": [dict(RULE, host="api.test", credential="api")]}},
                [{"name": "demo", "policy": "agent", "token": TOKEN}],
                resolve={"api.test": "127.0.0.1:%d" % cls.upstream.port},
                extra={"credentials": creds,
                       "ca_cert_out": os.path.join(sg.dir, "sandgate-ca.pem")})
            sg.write_config(sg.config)
            sg.start(env=env)
            cls.sandgates[name] = sg

    @classmethod
    def tearDownClass(cls):
        for sg in cls.sandgates.values():
            sg.cleanup()
        cls.upstream.close()
        shutil.rmtree(cls.store_dir, ignore_errors=True)

    def get(self, name, path):
        sg = self.sandgates[name]
        return curl("https://api.test" + path, "--cacert", os.path.join(sg.dir, "sandgate-ca.pem"),
                    proxy=sg.proxy_url("demo", TOKEN))

    def test_upstream_trusted_through_the_system_store(self):
        r = self.get("test-ca-store", "/echo/system-store")
        self.assertEqual(r.status, 200, r.stderr)
        self.assertEqual(sent_authorization(self.upstream, "/echo/system-store"),
                         ["Bearer " + SYSTEM_STORE_SECRET])
        self.sandgates["test-ca-store"].wait_audit(path="/echo/system-store", injected=True)

    def test_upstream_outside_the_system_store_is_refused(self):
        r = self.get("machine-store", "/echo/machine-store")
        self.assertEqual(r.status, 502, r.stderr)
        self.assertIn(("x-sandgate-reason", "upstream_tls_failed"), r.headers)
        self.assertIn(b"unable to get local issuer certificate", r.body)
        self.assertEqual(sent_authorization(self.upstream, "/echo/machine-store"), [])
        self.assertNotIn(SYSTEM_STORE_SECRET.encode(), r.body)
        self.sandgates["machine-store"].wait_audit(host="api.test", reason="upstream_tls_failed")


def tls_context(server, tls11_only, cert=None, key=None, cafile=None):
    """A TLS context; `tls11_only`: TLS 1.1 and nothing else, at OpenSSL security level 0."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    if tls11_only:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_1
            ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        ctx.set_ciphers("DEFAULT@SECLEVEL=0")
    if cert:
        ctx.load_cert_chain(cert, key)
    if cafile:
        ctx.load_verify_locations(cafile)
    return ctx


class TlsUpstream:
    """A minimal HTTPS server on 127.0.0.1:<ephemeral> (TLS 1.1 only, or the defaults):
    answers each request with a fixed 200 and closes. `requests`: (request line, headers) of
    each request; `versions`: the protocol of each completed handshake; `failures`: failed
    handshakes' errors."""

    def __init__(self, cert, key, tls11_only):
        self.ctx = tls_context(True, tls11_only, cert, key)
        self.requests, self.versions, self.failures = [], [], []
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        c.settimeout(10)
        try:
            t = self.ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError) as e:
            self.failures.append(str(e))
            c.close()
            return
        try:
            self.versions.append(t.version())
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = t.recv(4096)
                if not chunk:
                    break
                data += chunk
            if b"\r\n\r\n" in data:
                lines = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
                headers = [tuple(x.strip() for x in ln.split(":", 1)) for ln in lines[1:]]
                self.requests.append((lines[0], headers))
                t.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                          b"Content-Length: 6\r\nConnection: close\r\n\r\nlegacy")
        except (ssl.SSLError, OSError):
            pass
        finally:
            t.close()

    def authorization(self, path):
        return [v for line, headers in self.requests if line.split(" ")[1] == path
                for k, v in headers if k.lower() == "authorization"]

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def probe_tls11(upstream, cafile, name):
    """None if a TLS 1.1-only Python client completes a verified handshake with `upstream`,
    else why not."""
    try:
        ctx = tls_context(False, True, cafile=cafile)
        with socket.create_connection(("127.0.0.1", upstream.port), timeout=10) as s:
            with ctx.wrap_socket(s, server_hostname=name) as t:
                if t.version() != "TLSv1.1":
                    return "the handshake gave %s" % t.version()
    except (ssl.SSLError, OSError, ValueError) as e:
        return "%s: %s" % (type(e).__name__, e)
    return None


class LegacyTlsUpstreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        pki = test_pki()
        legacy_cert = pki.other_leaf("legacy.test")
        modern_cert = pki.other_leaf("modern.test")
        try:
            cls.legacy = TlsUpstream(*legacy_cert, tls11_only=True)
        except (ssl.SSLError, ValueError) as e:
            raise unittest.SkipTest("TLS 1.1 upstream refusal not tested: this machine's "
                                    "OpenSSL cannot make a TLS 1.1 server (%s)" % e)
        why = probe_tls11(cls.legacy, pki.ca_cert, "legacy.test")
        if why is not None:
            cls.legacy.close()
            raise unittest.SkipTest("TLS 1.1 upstream refusal not tested: this machine's "
                                    "OpenSSL will not complete a TLS 1.1 handshake (%s)" % why)
        # The server notes the probe's handshake on its own thread, maybe after the client's
        # side returned: wait for it, so that only handshakes of the test itself are counted.
        wait_until(lambda: cls.legacy.versions, 10, what="the probe's handshake to be noted")
        cls.legacy.versions.clear()
        cls.modern = TlsUpstream(*modern_cert, tls11_only=False)
        cls.sg = Sandgate({}, [])
        cls.ca_out = os.path.join(cls.sg.dir, "sandgate-ca.pem")
        secret_path = cls.sg.secret_file("legacy", LEGACY_SECRET)
        cls.sg.config = cls.sg.make_config(
            {"agent": {"allow": [dict(RULE, host="legacy.test", credential="legacy"),
                                 dict(RULE, host="modern.test", credential="legacy")]}},
            [{"name": "demo", "policy": "agent", "token": TOKEN}],
            resolve={"legacy.test": "127.0.0.1:%d" % cls.legacy.port,
                     "modern.test": "127.0.0.1:%d" % cls.modern.port},
            extra={"credentials": {"legacy": bearer("legacy", secret_path,
                                                    ["legacy.test", "modern.test"])},
                   "ca_cert_out": cls.ca_out, "tls": {"upstream_ca": pki.ca_cert}})
        cls.sg.write_config(cls.sg.config)
        cls.sg.start()

    @classmethod
    def tearDownClass(cls):
        cls.sg.cleanup()
        cls.legacy.close()
        cls.modern.close()

    def get(self, url):
        return curl(url, "--cacert", self.ca_out, proxy=self.sg.proxy_url("demo", TOKEN))

    def test_tls11_upstream_is_refused(self):
        # Control: the same kind of server, with the same CA, at TLS 1.2+ gets the request and
        # the secret. Limited to TLS 1.1 (which a TLS 1.1 client just reached): 502, and the
        # server saw only a failed handshake, never a request.
        ok = self.get("https://modern.test/echo/modern")
        self.assertEqual(ok.status, 200, ok.stderr)
        self.assertEqual(ok.body, b"legacy")
        self.assertEqual(self.modern.authorization("/echo/modern"), ["Bearer " + LEGACY_SECRET])

        r = self.get("https://legacy.test/echo/legacy")
        self.assertEqual(r.status, 502, r.stderr)
        self.assertIn(("x-sandgate-reason", "upstream_tls_failed"), r.headers)
        self.assertIn(b"protocol version", r.body)
        self.assertEqual(self.legacy.requests, [])
        self.assertEqual(self.legacy.versions, [])
        # Noted by the server's thread, maybe after sandgate answered.
        wait_until(lambda: self.legacy.failures, 10, what="the failed handshake to be noted")
        self.sg.wait_audit(host="legacy.test", reason="upstream_tls_failed",
                           credential="legacy")


if __name__ == "__main__":
    unittest.main()
