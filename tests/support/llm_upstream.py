"""The tests' own LLM API upstream (issue #41): OpenAI- and Anthropic-shaped answers, JSON and
server-sent events, with usage in each provider's shape, on 127.0.0.1 (TLS optional). Shared by
the LLM accounting, metrics, dashboard and SDK tests.
"""

import json
import socket
import ssl
import threading


def sse(events):
    return b"".join(b"data: " + e + b"\n\n" for e in events)


OPENAI_CHUNKS = [json.dumps({"id": "c1", "object": "chat.completion.chunk",
                             "choices": [{"index": 0, "delta": {"content": w}}]}).encode()
                 for w in ("Hel", "lo")]
OPENAI_USAGE_CHUNK = json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [],
                                 "usage": {"prompt_tokens": 11, "completion_tokens": 7,
                                           "total_tokens": 18}}).encode()


class LlmUpstream:
    """An LLM API on 127.0.0.1:<ephemeral>, one request per connection, answering by path:
    /v1/chat/completions (OpenAI: JSON, or SSE with the usage chunk only when the request asks
    for it), /v1/messages (Anthropic: JSON or SSE), /cut (SSE cut before any usage), /usage
    (JSON whose usage object is `self.raw_usage`, bytes as written), /error (a 500 in OpenAI's
    error shape, no usage)."""

    def __init__(self, tls=None):
        """`tls`: (certificate, key) files to serve TLS with."""
        self.ctx = None
        if tls:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(*tls)
        self.requests = []  # (path, headers, body bytes)
        self.usage = (100, 200)
        self.raw_usage = b"{}"
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(10)
        try:
            if self.ctx:
                conn = self.ctx.wrap_socket(conn, server_side=True)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            lines = head.decode().split("\r\n")
            path = lines[0].split(" ")[1]
            headers = {k.strip().lower(): v.strip()
                       for k, v in (l.split(":", 1) for l in lines[1:])}
            n = int(headers.get("content-length", "0"))
            while len(body) < n:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            self.requests.append((path, headers, body))
            conn.sendall(self._answer(path, json.loads(body or b"{}")))
        finally:
            conn.close()

    def _answer(self, path, req):
        p, c = self.usage
        if path == "/error":
            body = json.dumps({"error": {"message": "overloaded", "type": "server_error"}})
            return (b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body),
                                                                            body.encode()))
        if path == "/usage":
            body = b'{"id":"x","choices":[],"usage":' + self.raw_usage + b"}"
            return self._whole(body, "application/json")
        if path == "/cut":
            # Chunked, and closed before the last chunk: a stream cut before its usage.
            piece = sse(OPENAI_CHUNKS[:1])
            return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(piece), piece))
        if path == "/v1/messages":
            if req.get("stream"):
                events = [
                    b"event: message_start\n" + sse([json.dumps({"type": "message_start",
                     "message": {"id": "m", "usage": {"input_tokens": p, "output_tokens": 1}}}
                    ).encode()]),
                    b"event: content_block_delta\n" + sse([json.dumps(
                        {"type": "content_block_delta", "delta": {"text": "hi"}}).encode()]),
                    b"event: message_delta\n" + sse([json.dumps(
                        {"type": "message_delta", "usage": {"output_tokens": c}}).encode()]),
                    b"event: message_stop\n" + sse([b'{"type":"message_stop"}']),
                ]
                return self._whole(b"".join(events), "text/event-stream")
            return self._whole(json.dumps({"id": "m", "type": "message", "content": [],
                                           "usage": {"input_tokens": p, "output_tokens": c}}
                                          ).encode(), "application/json")
        if req.get("stream"):
            events = list(OPENAI_CHUNKS)
            if (req.get("stream_options") or {}).get("include_usage"):
                events.append(OPENAI_USAGE_CHUNK)
            events.append(b"[DONE]")
            return self._whole(sse(events), "text/event-stream")
        return self._whole(json.dumps({"id": "c", "choices": [{"message": {"content": "hi"}}],
                                       "usage": {"prompt_tokens": p, "completion_tokens": c,
                                                 "total_tokens": p + c}}).encode(),
                           "application/json")

    @staticmethod
    def _whole(body, ctype):
        return (b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n%s" % (ctype.encode(), len(body), body))

    def seen(self, path):
        return [r for r in self.requests if r[0] == path]

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
