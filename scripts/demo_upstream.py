#!/usr/bin/env python3
"""A tiny demo API for scripts/run.sh, standing for a real service such as an LLM API.

Usage: demo_upstream.py DIR NAME

Makes a throw-away CA and a certificate for NAME in DIR (DIR/ca.pem is what sandgate must
trust for this upstream), then serves HTTPS on 127.0.0.1 and an ephemeral port, written to
DIR/port. GET /v1/hello answers 200 only with `Authorization: Bearer <key>`, where <key> is
the content of DIR/api-key (the real credential, which only sandgate reads); anything else
gets 401. What the API received is appended to DIR/received, one JSON line per request: the
key is never written there, only whether the header carried it.
"""

import http.server
import json
import os
import signal
import ssl
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "support"))
import pki  # noqa: E402  (the test suite's runtime PKI helper)


def main():
    directory, name = sys.argv[1], sys.argv[2]
    certs = pki.make_pki(directory, [name], ca_name="sandgate demo CA")
    with open(os.path.join(directory, "api-key")) as f:
        key = f.read().strip()
    received = os.path.join(directory, "received")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            auth = self.headers.get("Authorization", "")
            ok = auth == "Bearer " + key
            with open(received, "a") as f:
                f.write(json.dumps({"path": self.path, "authorization_present": bool(auth),
                                    "real_key": ok}) + "\n")
            if not self.path.startswith("/v1/hello"):
                status, body = 404, {"error": "not found"}
            elif ok:
                status, body = 200, {"message": "hello from the demo API: your key is valid"}
            else:
                status, body = 401, {"error": "invalid API key"}
            data = json.dumps(body).encode() + b"\n"
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs.leaf_cert, certs.leaf_key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    port_file = os.path.join(directory, "port")
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
