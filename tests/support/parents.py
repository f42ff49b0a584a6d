"""Parent proxies for the upstream leg (issue #44): Debian's squid on loopback with its own
config in a temp dir, and a small SOCKS5 server (RFC 1928, user/password RFC 1929).

Squid runs in the foreground (-N) with its own pid file, logs and no disk cache; as root it
switches to the `proxy` user, so its directory is handed to that user. It is stopped by its PID.
Nothing here resolves a name: squid gets `dns_nameservers 127.0.0.1` (a port nothing answers),
so a name it is asked for fails fast instead of leaving the machine, and the tests ask it for
loopback addresses.
"""

import crypt
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

SQUID = "/usr/sbin/squid"
NCSA = "/usr/lib/squid/basic_ncsa_auth"


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Squid:
    """squid on 127.0.0.1:<port>. `users`: {user: password} turns on Basic auth (all requests
    then need it). `deny_ports`: CONNECT and requests to these ports are refused (403).
    `hosts`: {name: address} squid resolves from a hosts file of its own (it asks no DNS)."""

    def __init__(self, users=None, deny_ports=(), timeout=30, hosts=None):
        self.dir = tempfile.mkdtemp(prefix="sandgate-squid-")
        os.chmod(self.dir, 0o755)
        self.port = _free_port()
        self.access_log = os.path.join(self.dir, "access.log")
        self.cache_log = os.path.join(self.dir, "cache.log")
        lines = [
            "http_port 127.0.0.1:%d" % self.port,
            "pid_filename %s" % os.path.join(self.dir, "squid.pid"),
            "cache_log %s" % self.cache_log,
            "access_log stdio:%s" % self.access_log,
            "cache_store_log none",
            "cache deny all",
            "cache_mem 8 MB",
            "coredump_dir %s" % self.dir,
            "visible_hostname sandgate-test-squid",
            "dns_nameservers 127.0.0.1",
            "shutdown_lifetime 0 seconds",
            "forwarded_for delete",
            "via off",
            "acl all_ports port 1-65535",
            "acl CONNECT method CONNECT",
            "acl denied_ports port %s" % " ".join(str(p) for p in deny_ports) if deny_ports
            else "",
            "http_access deny denied_ports" if deny_ports else "",
        ]
        if hosts:
            hosts_file = os.path.join(self.dir, "hosts")
            with open(hosts_file, "w") as f:
                f.writelines("%s %s\n" % (a, n) for n, a in hosts.items())
            os.chmod(hosts_file, 0o644)
            lines.append("hosts_file %s" % hosts_file)
        if users:
            pw = os.path.join(self.dir, "passwd")
            with open(pw, "w") as f:
                for u, p in users.items():
                    f.write("%s:%s\n" % (u, crypt.crypt(p, crypt.mksalt(crypt.METHOD_MD5))))
            os.chmod(pw, 0o644)
            lines += ["auth_param basic program %s %s" % (NCSA, pw),
                      "auth_param basic realm sandgate-test",
                      "acl authed proxy_auth REQUIRED",
                      "http_access deny !authed"]
        lines += ["http_access allow all_ports", "http_access deny all"]
        self.conf = os.path.join(self.dir, "squid.conf")
        with open(self.conf, "w") as f:
            f.write("\n".join(l for l in lines if l) + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.dir, "proxy", "proxy")
        self._stderr = open(os.path.join(self.dir, "stderr.log"), "wb")
        self.proc = subprocess.Popen([SQUID, "-N", "-f", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=self._stderr)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("squid exited with %s: %s" % (self.proc.returncode,
                                                                   self.log()))
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.close()
                    raise AssertionError("squid did not listen in %ss: %s" % (timeout,
                                                                             self.log()))
                time.sleep(0.05)  # polling squid's port: it has no readiness notification

    def log(self):
        out = ""
        for p in (self.cache_log, os.path.join(self.dir, "stderr.log")):
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    out += f.read()[-4000:]
        return out

    def access(self):
        """squid's access log lines (written as requests end)."""
        if not os.path.exists(self.access_log):
            return []
        with open(self.access_log, errors="replace") as f:
            return f.read().splitlines()

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Socks5Server:
    """A SOCKS5 server on 127.0.0.1:<ephemeral> (CONNECT only). With `user`/`password` it
    requires RFC 1929 authentication. It connects only to loopback: a request for a name is
    answered from `names` ({name: "127.0.0.1"}) or refused with 4 (host unreachable), so that
    no test leaves the machine. `requests` records (atyp, host, port) asked for and `auths` the
    (user, password) pairs received."""

    def __init__(self, user=None, password=None, names=None):
        self.user, self.password = user, password
        self.names = dict(names or {})
        self.requests, self.auths = [], []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _exact(c, n):
        data = b""
        while len(data) < n:
            chunk = c.recv(n - len(data))
            if not chunk:
                raise OSError("closed")
            data += chunk
        return data

    def _serve(self, c):
        c.settimeout(30)
        up = None
        try:
            ver, n = self._exact(c, 2)
            methods = self._exact(c, n)
            want = 0x02 if self.user else 0x00
            if ver != 5 or want not in methods:
                c.sendall(b"\x05\xff")
                return
            c.sendall(bytes([5, want]))
            if self.user:
                _, ulen = self._exact(c, 2)
                u = self._exact(c, ulen).decode()
                plen = self._exact(c, 1)[0]
                p = self._exact(c, plen).decode()
                self.auths.append((u, p))
                ok = (u, p) == (self.user, self.password)
                c.sendall(b"\x01\x00" if ok else b"\x01\x01")
                if not ok:
                    return
            ver, cmd, _, atyp = self._exact(c, 4)
            if atyp == 1:
                host = socket.inet_ntop(socket.AF_INET, self._exact(c, 4))
            elif atyp == 4:
                host = socket.inet_ntop(socket.AF_INET6, self._exact(c, 16))
            else:
                host = self._exact(c, self._exact(c, 1)[0]).decode()
            port = struct.unpack("!H", self._exact(c, 2))[0]
            self.requests.append((atyp, host, port))
            addr = self.names.get(host) if atyp == 3 else host
            reply = lambda code: c.sendall(bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0]))
            if cmd != 1 or addr is None or not (addr.startswith("127.") or addr == "::1"):
                reply(4)
                return
            try:
                up = socket.create_connection((addr, port), timeout=10)
            except OSError:
                reply(5)
                return
            reply(0)
            self._pipe(c, up)
        except OSError:
            pass
        finally:
            c.close()
            if up:
                up.close()

    @staticmethod
    def _pipe(a, b):
        def one(src, dst):
            try:
                while True:
                    d = src.recv(65536)
                    if not d:
                        break
                    dst.sendall(d)
            except OSError:
                pass
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        t = threading.Thread(target=one, args=(b, a), daemon=True)
        t.start()
        one(a, b)
        t.join(timeout=30)

    def close(self):
        self.sock.close()


class TlsConnectParent:
    """An HTTP CONNECT parent spoken to over TLS (`cert`: (certificate, key) files), on
    127.0.0.1:<ephemeral>. With `user`/`password` it requires Basic Proxy-Authorization (407
    otherwise). It connects only to loopback addresses; `connects` records the authorities (or
    the absolute-form targets: it forwards a request sent to it that way, once, in origin form)
    and `auths` the Proxy-Authorization values received."""

    def __init__(self, cert, user=None, password=None, names=None):
        import base64
        import ssl
        self.names = names or {}  # absolute-form requests: {name: address} it resolves
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(*cert)
        self.want = ("Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
                     if user else None)
        self.connects, self.auths = [], []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, raw):
        up = None
        c = None
        try:
            raw.settimeout(30)
            c = self.ctx.wrap_socket(raw, server_side=True)
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                d = c.recv(65536)
                if not d:
                    return
                data += d
            head = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            authority = head[0].split(" ")[1]
            auth = [l.split(":", 1)[1].strip() for l in head[1:]
                    if l.lower().startswith("proxy-authorization:")]
            self.connects.append(authority)
            self.auths += auth
            if self.want and auth != [self.want]:
                c.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                          b"Content-Length: 0\r\n\r\n")
                return
            absolute = authority.startswith("http://")
            if absolute:
                hostport, _, path = authority[len("http://"):].partition("/")
                authority = hostport if ":" in hostport else hostport + ":80"
            host, _, port = authority.rpartition(":")
            host = self.names.get(host.strip("[]"), host.strip("[]"))
            if not (host.startswith("127.") or host == "::1"):
                c.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            up = socket.create_connection((host, int(port)), timeout=10)
            if absolute:
                method, _, version = head[0].split(" ")
                fields = [l for l in head[1:] if not l.lower().startswith("proxy-")]
                up.sendall(("\r\n".join(["%s /%s %s" % (method, path, version)] + fields)
                            ).encode("latin-1") + b"\r\n\r\n" + data.split(b"\r\n\r\n", 1)[1])
            else:
                c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            Socks5Server._pipe(c, up)
        except (OSError, ValueError, IndexError):
            pass
        finally:
            for s in (c or raw, up):
                if s:
                    s.close()

    def close(self):
        self.sock.close()


class HostileParent:
    """An HTTP 'parent' that answers every CONNECT with `answer` (bytes) and then closes, or
    keeps the connection open when `keep_open`. `heads` records what sandgate sent it."""

    def __init__(self, answer, keep_open=False):
        self.answer, self.keep_open = answer, keep_open
        self.heads = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        c.settimeout(15)
        try:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                d = c.recv(65536)
                if not d:
                    break
                data += d
            self.heads.append(data)
            c.sendall(self.answer)
            if self.keep_open:
                while c.recv(65536):
                    pass
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.sock.close()
