"""An HTTPS upstream that speaks only HTTP/2 (ALPN h2), on 127.0.0.1:0, for interception tests.

Every request is recorded (its header list as received, its body, and `conn`: which TLS
connection it arrived on, numbered from 1 in accept order). The answer depends on the path:
  /echo...      200, the request's Authorization echoed back in a header (x-echo-auth), in the
                body (split across two DATA frames in the middle of the value, each padded when
                the path has "padded") and in a trailer (x-trailer-auth): a secret the upstream
                saw comes back everywhere it can.
  .../big       200, 1 MiB of body sent as the windows allow, with the Authorization it got
                in the middle of it (astride two DATA frames).
  .../goaway    GOAWAY (NO_ERROR, this stream the last) on that connection, which it keeps
                open, then the short JSON answer: a server going away gracefully.
  anything else 200 with a short JSON body naming the path and the size of the body it got.
"""

import json
import os
import socket
import ssl
import sys
import threading

try:
    import h2.config
    import h2.connection
    import h2.events
except ImportError:  # the interpreter on PATH may not see Debian's python3-h2
    sys.path.append("/usr/lib/python3/dist-packages")
    import h2.config
    import h2.connection
    import h2.events
from hyperframe.frame import GoAwayFrame  # noqa: E402  (h2's own frame layer)


def intercepting_sandgate(pki, upstream_port, token, secret, task_limits=None, creds_extra=None,
                          admin=False):
    """A started Sandgate whose task `demo` (token `token`) reaches api.test (at
    127.0.0.1:upstream_port, verified with pki's CA) intercepted, with the credential `api`
    (`secret`) injected as a Bearer Authorization. `task_limits` is the task's `limits:`,
    `creds_extra` more keys of the credential (e.g. a placeholder), `admin` whether serve has
    its admin socket (where token_env hands out placeholders). Returns (sandgate, ca_out)."""
    from sandgate_fixture import Sandgate
    sg = Sandgate({}, [])
    key = sg.secret_file("api", secret)
    ca_out = os.path.join(sg.dir, "sandgate-ca.pem")
    policies = {"agent": {"allow": [
        {"host": "api.test", "cidrs": ["127.0.0.0/8"], "credential": "api"}]}}
    creds = {"api": {"source": {"file": key}, "hosts": ["api.test"],
                     "inject": {"header": "Authorization", "value": "Bearer {secret}"}}}
    creds["api"].update(creds_extra or {})
    task = {"name": "demo", "policy": "agent", "token": token}
    if task_limits:
        task["limits"] = task_limits
    sg.config = sg.make_config(
        policies, [task],
        resolve={"api.test": "127.0.0.1:%d" % upstream_port},
        extra={"credentials": creds, "ca_cert_out": ca_out,
               "tls": {"upstream_ca": pki.ca_cert}})
    if admin:
        sg.config["listen"]["admin"] = sg.admin_path
    sg.write_config(sg.config)
    sg.start()
    return sg, ca_out


class H2Upstream:
    def __init__(self, pki, alpn=("h2",)):
        self.requests = []  # dicts: headers (list of (name, value) str pairs), body, stream
        self.connections = 0
        self.alpn_seen = []
        self._lock = threading.Lock()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki.leaf_cert, pki.leaf_key)
        ctx.set_alpn_protocols(list(alpn))
        self._ctx = ctx
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self._closed = False
        self._threads = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()

    def close(self):
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass

    def _accept(self):
        while not self._closed:
            try:
                raw, _ = self._sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(raw,), daemon=True)
            t.start()

    def _serve(self, raw):
        raw.settimeout(20)
        try:
            conn_sock = self._ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        with self._lock:
            self.connections += 1
            number = self.connections
            self.alpn_seen.append(conn_sock.selected_alpn_protocol())
        if conn_sock.selected_alpn_protocol() != "h2":
            self._serve_h1(conn_sock)
            return
        conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        conn_sock.sendall(conn.data_to_send())
        streams = {}
        self._pending = {}  # stream -> body bytes waiting for window
        try:
            for _ in range(100000):  # bounded: one connection's frames
                data = conn_sock.recv(65536)
                if not data:
                    break
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.RequestReceived):
                        streams[ev.stream_id] = {"headers": list(ev.headers), "body": b"",
                                                 "stream": ev.stream_id, "conn": number}
                    elif isinstance(ev, h2.events.DataReceived):
                        streams[ev.stream_id]["body"] += ev.data
                        conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    elif isinstance(ev, h2.events.StreamEnded):
                        req = streams.pop(ev.stream_id)
                        with self._lock:
                            self.requests.append(req)
                        self._respond(conn, req)
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        break
                self._flush(conn)
                conn_sock.sendall(conn.data_to_send())
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError):
            pass
        finally:
            conn_sock.close()

    def _serve_h1(self, s):
        """A bare HTTP/1.1 answer, for a client that did not select h2 (it should never)."""
        try:
            s.recv(65536)
            s.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nh1")
        except OSError:
            pass
        s.close()

    def _flush(self, conn):
        """Sends pending bodies as far as the flow-control windows allow."""
        for sid in list(self._pending):
            body = self._pending[sid]
            while body:
                n = min(len(body), conn.local_flow_control_window(sid), 16384)
                if n <= 0:
                    break
                conn.send_data(sid, body[:n])
                body = body[n:]
            if body:
                self._pending[sid] = body
            else:
                del self._pending[sid]
                conn.end_stream(sid)

    def _respond(self, conn, req):
        headers = dict(req["headers"])
        path = headers.get(":path", "")
        sid = req["stream"]
        if path.startswith("/echo"):
            auth = headers.get("authorization", "")
            body = ("auth=" + auth + ";").encode()
            cut = len("auth=") + len(auth) // 2  # inside the secret
            conn.send_headers(sid, [(":status", "200"), ("content-type", "text/plain"),
                                    ("x-echo-auth", auth)])
            pad = 200 if "padded" in path else None  # padding around each half
            conn.send_data(sid, body[:cut], pad_length=pad)
            conn.send_data(sid, body[cut:], pad_length=pad)
            conn.send_headers(sid, [("x-trailer-auth", auth)], end_stream=True)
            return
        if path.endswith("/big"):
            auth = headers.get("authorization", "").encode()
            half = 512 * 1024 - len(auth) // 2 - 3  # the secret straddles a 16 KiB boundary
            body = b"a" * half + auth + b"b" * (1024 * 1024 - half - len(auth))
            conn.send_headers(sid, [(":status", "200"), ("content-type", "text/plain"),
                                    ("content-length", str(len(body)))])
            self._pending[sid] = body
            return
        body = json.dumps({"path": path, "received": len(req["body"])}).encode()
        if path.endswith("/goaway"):
            # GOAWAY (NO_ERROR, last stream = this one) ahead of the answer, written past h2's
            # state machine (which sends nothing after its own GOAWAY): a proxy has read it
            # before the answer it relays, so its client cannot leave before it was seen.
            conn._data_to_send += GoAwayFrame(stream_id=0, last_stream_id=sid,
                                              error_code=0).serialize()
        conn.send_headers(sid, [(":status", "200"), ("content-type", "application/json"),
                                ("content-length", str(len(body)))])
        conn.send_data(sid, body, end_stream=True)
