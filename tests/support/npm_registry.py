"""A stand-in for the npm registry on 127.0.0.1:<ephemeral>: for each package it serves the
package document (GET /NAME: dist-tags, versions, each with dist.tarball, dist.shasum and
dist.integrity, as registry.npmjs.org answers) and the tarball it names (package/ inside, made
here with tarfile). Tarball URLs use the host name the test gives (a name the proxy's
`resolve:` maps here), so that npm fetches them through the proxy like the document."""

import base64
import hashlib
import http.server
import io
import json
import tarfile
import threading


def make_tarball(files):
    """A gzipped tarball of {relative path: bytes} under package/, deterministic."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.USTAR_FORMAT) as tar:
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo("package/" + rel)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        reg = self.server.owner
        reg.requests.append(self.path)
        body = reg.documents.get(self.path) or reg.tarballs.get(self.path)
        if body is None:
            self.send_response(404)
            body, ctype = b'{"error":"not found"}', "application/json"
        else:
            self.send_response(200)
            ctype = ("application/json" if self.path in reg.documents
                     else "application/octet-stream")
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class NpmRegistry:
    def __init__(self, host):
        """`host`: the name (and port, if not 80) tarball URLs use."""
        self.host = host
        self.documents, self.tarballs, self.requests = {}, {}, []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.owner = self
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def publish(self, name, version, files, dependencies=None):
        """Adds `name@version` with `files` ({path: bytes}; a package.json is made unless
        given) and returns its tarball's bytes."""
        manifest = {"name": name, "version": version, "dependencies": dependencies or {}}
        files = dict(files)
        files.setdefault("package.json", json.dumps(manifest, indent=2).encode())
        tgz = make_tarball(files)
        path = "/%s/-/%s-%s.tgz" % (name, name, version)
        self.tarballs[path] = tgz
        doc = json.loads(self.documents.get("/" + name, b'{"versions": {}}'))
        doc["name"] = name
        doc.setdefault("dist-tags", {})["latest"] = version
        doc["versions"][version] = dict(manifest, dist={
            "tarball": "http://%s%s" % (self.host, path),
            "shasum": hashlib.sha1(tgz).hexdigest(),
            "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode(),
        })
        self.documents["/" + name] = json.dumps(doc).encode()
        return tgz

    def close(self):
        self.server.shutdown()
        self.server.server_close()
