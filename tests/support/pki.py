"""Runtime test PKI: a throw-away CA and a leaf certificate made with the openssl CLI."""

import atexit
import os
import shutil
import subprocess
import tempfile

# Names the leaf certificate is valid for; tests map them to loopback with `resolve:`.
LEAF_NAMES = ["api.test", "git.test", "other.test", "ws.test"]

_cached = None


class TestPki:
    def __init__(self, directory):
        self.dir = directory
        self.ca_cert = os.path.join(directory, "ca.pem")
        self.leaf_cert = os.path.join(directory, "leaf.pem")
        self.leaf_key = os.path.join(directory, "leaf.key")

    def other_leaf(self, name, days=2, self_signed=False, san=True):
        """(cert, key) paths of a leaf for `name` alone: signed by this CA and valid for `days`
        (-1: it expired the moment it was made), or self-signed (no CA vouches for it).
        san=False: the name only as the subject's CN, no subjectAltName (RFC 6125 says such a
        certificate names nothing)."""
        cert, key = "%s.pem" % name, "%s.key" % name
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        ext = "%s.cnf" % name
        with open(os.path.join(self.dir, ext), "w") as f:
            f.write(("subjectAltName=DNS:%s\n" % name if san else "") +
                    "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        if self_signed:
            _run(["openssl", "req", "-x509", *ec, "-keyout", key, "-out", cert,
                  "-days", str(days), "-subj", "/CN=" + name,
                  "-addext", "subjectAltName=DNS:" + name], self.dir)
        else:
            csr = "%s.csr" % name
            _run(["openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=" + name],
                 self.dir)
            _run(["openssl", "x509", "-req", "-in", csr, "-CA", "ca.pem", "-CAkey", "ca.key",
                  "-CAcreateserial", "-out", cert, "-days", str(days), "-extfile", ext],
                 self.dir)
        return os.path.join(self.dir, cert), os.path.join(self.dir, key)


def _run(args, cwd):
    subprocess.run(args, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   timeout=30)


def make_pki(directory, names, ca_name="sandgate test CA"):
    """Writes ca.pem/ca.key and leaf.pem/leaf.key (for `names` and 127.0.0.1) into
    `directory` with the openssl CLI; valid for two days."""
    d = directory
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _run(["openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
          "-subj", "/CN=" + ca_name, "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign"], d)
    _run(["openssl", "req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr",
          "-subj", "/CN=" + names[0]], d)
    san = ",".join(["DNS:" + n for n in names] + ["IP:127.0.0.1"])
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n" % san)
    _run(["openssl", "x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
          "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "ext.cnf"], d)
    return TestPki(d)


def test_pki():
    """Creates (once per process) a CA and a leaf for LEAF_NAMES and 127.0.0.1."""
    global _cached
    if _cached:
        return _cached
    d = tempfile.mkdtemp(prefix="sandgate-pki-")
    atexit.register(shutil.rmtree, d, True)
    _cached = make_pki(d, LEAF_NAMES)
    return _cached
