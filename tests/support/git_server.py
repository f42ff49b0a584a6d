"""A smart-HTTP git server for tests: `git http-backend` as CGI behind a Python HTTPS server
on 127.0.0.1, serving bare repositories it creates in a temp dir (`repos`, paths under the
root, each with one commit on main and pushes enabled). With `auth=(user, password)` every
request must carry that Basic credential (else 401 with WWW-Authenticate); the Authorization
values received are kept in `authorizations`, and every request's (method, path without the
query, Git-Protocol header, body length) in `requests`. Request bodies may be chunked (git sends a large
push that way), and Git-Protocol reaches the backend (protocol v2)."""

import base64
import http.server
import os
import shutil
import socketserver
import ssl
import subprocess
import tempfile
import threading
import urllib.parse

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"


def available():
    return os.path.exists(HTTP_BACKEND) and shutil.which("git") is not None


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0") or 0)
        return self.rfile.read(n) if n else b""

    def _cgi(self):
        url = urllib.parse.urlsplit(self.path)
        body = self._body()
        owner = self.server.owner
        owner.requests.append((self.command, url.path, self.headers.get("Git-Protocol"),
                               len(body)))
        got = self.headers.get("Authorization")
        if got is not None:
            owner.authorizations.append(got)
        if owner.auth is not None:
            want = "Basic " + base64.b64encode(("%s:%s" % owner.auth).encode()).decode()
            if got != want:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": self.server.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
        }
        for header, var in (("Git-Protocol", "GIT_PROTOCOL"),
                            ("Content-Encoding", "HTTP_CONTENT_ENCODING")):
            if self.headers.get(header):
                env[var] = self.headers[header]
        p = subprocess.run([HTTP_BACKEND], input=body, env=env, capture_output=True, timeout=30)
        head, _, payload = p.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").split("\r\n"):
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _cgi


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class GitHttpsServer:
    def __init__(self, pki, auth=None, repos=("repo.git",)):
        self.auth = auth
        self.authorizations = []
        self.requests = []
        self.dir = tempfile.mkdtemp(prefix="sandgate-git-")
        work = os.path.join(self.dir, "work")
        env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                   GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
        subprocess.run(["git", "init", "-q", "-b", "main", work], check=True, env=env)
        with open(os.path.join(work, "README"), "w") as f:
            f.write("hello\n")
        subprocess.run(["git", "-C", work, "add", "README"], check=True, env=env)
        subprocess.run(["git", "-C", work, "commit", "-q", "-m", "init"], check=True, env=env)
        for repo in repos:
            bare = os.path.join(self.dir, repo)
            subprocess.run(["git", "clone", "-q", "--bare", work, bare], check=True, env=env)
            subprocess.run(["git", "-C", bare, "config", "http.receivepack", "true"], check=True)
        self.head = subprocess.run(["git", "-C", work, "rev-parse", "HEAD"], check=True,
                                   capture_output=True).stdout.decode().strip()
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.root = self.dir
        self.server.owner = self
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki.leaf_cert, pki.leaf_key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def state(self, repo):
        """The refs ({name: id}) and the set of object ids of a bare repository: what a refused
        push must leave unchanged."""
        bare = os.path.join(self.dir, repo)
        refs = subprocess.run(["git", "-C", bare, "for-each-ref", "--format=%(refname) %(objectname)"],
                              check=True, capture_output=True).stdout.decode().split("\n")
        objects = subprocess.run(["git", "-C", bare, "cat-file", "--batch-all-objects",
                                  "--batch-check=%(objectname)"], check=True,
                                 capture_output=True).stdout.decode().split()
        return dict(line.split(" ", 1) for line in refs if line), set(objects)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)
