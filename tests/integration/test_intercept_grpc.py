"""gRPC through interception over HTTP/2 (issue #40): grpcio's client through sandgate as its
HTTP proxy (grpc.http_proxy, with the task's token), sandgate's CA as its roots, to a grpcio
server on loopback TLS (api.test, mapped with `resolve:`). Unary and server-streaming calls pass
with their trailers (grpc-status) and `te: trailers`; the credential reaches the server; a call
whose answer carries the secret is reset (grpc_not_scrubbable) rather than relayed unscrubbed
or with its message lengths corrupted, since this task's redaction marker is not as long as
the secret. With a placeholder for the credential (from the admin socket's token_env, as a
token client gets it), the secret inside a message is replaced by the placeholder, byte for
byte as long, and the call decodes.
"""

import sys
import unittest
from concurrent import futures

try:
    import grpc
except ImportError:  # the interpreter on PATH may not see Debian's python3-grpcio
    sys.path.append("/usr/lib/python3/dist-packages")
    import grpc

import h2_upstream
from pki import test_pki

TOKEN = "grpct0ken"
SECRET = "sk-grpcsecretvalue-0123456789abcdef"
SERVICE = "sandgate.test.Echo"


class EchoServer:
    def __init__(self, pki):
        self.seen_auth = []

        def unary(request, context):
            md = dict(context.invocation_metadata())
            self.seen_auth.append(md.get("authorization"))
            if request == b"auth":
                return b"your key: " + md.get("authorization", "").encode()
            return b"pong:" + request

        def stream(request, context):
            md = dict(context.invocation_metadata())
            for i in range(3):
                if request == b"auth" and i == 1:
                    yield b"key " + md.get("authorization", "").encode() + b" in part 1"
                else:
                    yield b"part %d of %s" % (i, request)

        handler = grpc.method_handlers_generic_handler(SERVICE, {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Stream": grpc.unary_stream_rpc_method_handler(stream),
        })
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        with open(pki.leaf_key, "rb") as k, open(pki.leaf_cert, "rb") as c:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())])
        self.port = self.server.add_secure_port("127.0.0.1:0", creds)
        self.server.start()

    def close(self):
        self.server.stop(0)


class InterceptGrpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.echo = EchoServer(cls.pki)
        cls.sg, cls.ca_out = h2_upstream.intercepting_sandgate(cls.pki, cls.echo.port, TOKEN,
                                                               SECRET)
        with open(cls.ca_out, "rb") as f:
            roots = f.read()
        cls.channel = grpc.secure_channel(
            "api.test:443", grpc.ssl_channel_credentials(root_certificates=roots),
            options=[("grpc.http_proxy", cls.sg.proxy_url("demo", TOKEN)),
                     ("grpc.enable_retries", 0)])

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.sg.cleanup()
        cls.echo.close()

    def call(self, method, request, streaming=False):
        path = "/%s/%s" % (SERVICE, method)
        if streaming:
            return list(self.channel.unary_stream(path)(request, timeout=10))
        return self.channel.unary_unary(path)(request, timeout=10)

    def test_unary_call_passes_with_the_credential_injected(self):
        self.assertEqual(self.call("Unary", b"ping"), b"pong:ping")
        self.assertIn("Bearer " + SECRET, self.echo.seen_auth)
        line = self.sg.wait_audit(path="/%s/Unary" % SERVICE, verdict="allow")
        self.assertEqual(line["status"], 200)
        self.assertEqual(line["kind"], "intercept")

    def test_server_streaming_call_passes_every_message_and_its_status(self):
        parts = self.call("Stream", b"x", streaming=True)
        self.assertEqual(parts, [b"part 0 of x", b"part 1 of x", b"part 2 of x"])

    def test_a_secret_in_a_message_resets_the_stream_never_relayed_or_corrupted(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.call("Unary", b"auth")
        err = cm.exception
        self.assertNotIn(SECRET, str(err.details()))
        self.assertNotEqual(err.code(), grpc.StatusCode.OK)
        line = self.sg.wait_audit(path="/%s/Unary" % SERVICE, reason="grpc_not_scrubbable")
        self.assertEqual(line["verdict"], "error")
        # The connection serves the next call.
        self.assertEqual(self.call("Unary", b"again"), b"pong:again")


class GrpcPlaceholderTest(unittest.TestCase):
    """The credential has a placeholder: a secret in a gRPC message is replaced by it (same
    length, so the message and protobuf lengths still hold) and unary and streaming calls
    decode; the client's placeholder in its metadata is replaced by the secret upstream."""

    @classmethod
    def setUpClass(cls):
        cls.pki = test_pki()
        cls.echo = EchoServer(cls.pki)
        cls.sg, cls.ca_out = h2_upstream.intercepting_sandgate(
            cls.pki, cls.echo.port, TOKEN, SECRET, creds_extra={"placeholder": "API_KEY"},
            admin=True)
        cls.placeholder = cls.sg.token_env("demo")["env"]["API_KEY"]
        with open(cls.ca_out, "rb") as f:
            roots = f.read()
        cls.channel = grpc.secure_channel(
            "api.test:443", grpc.ssl_channel_credentials(root_certificates=roots),
            options=[("grpc.http_proxy", cls.sg.proxy_url("demo", TOKEN)),
                     ("grpc.enable_retries", 0)])

    tearDownClass = InterceptGrpcTest.__dict__["tearDownClass"]
    call = InterceptGrpcTest.call

    def test_the_placeholder_is_as_long_as_the_secret_and_not_it(self):
        self.assertEqual(len(self.placeholder), len(SECRET))
        self.assertNotEqual(self.placeholder, SECRET)

    def test_a_secret_in_a_unary_answer_comes_back_as_the_placeholder(self):
        path = "/%s/Unary" % SERVICE
        reply = self.channel.unary_unary(path)(
            b"auth", timeout=10, metadata=[("authorization", "Bearer " + self.placeholder)])
        self.assertEqual(reply, b"your key: Bearer " + self.placeholder.encode())
        # Upstream, the placeholder was the secret (injection over the client's value).
        self.assertEqual(self.echo.seen_auth[-1], "Bearer " + SECRET)
        line = self.sg.wait_audit(path=path, verdict="allow")
        self.assertEqual(line["status"], 200)

    def test_a_secret_in_a_streamed_message_comes_back_as_the_placeholder(self):
        parts = self.call("Stream", b"auth", streaming=True)
        self.assertEqual(parts, [b"part 0 of auth",
                                 b"key Bearer " + self.placeholder.encode() + b" in part 1",
                                 b"part 2 of auth"])
        for p in parts:
            self.assertNotIn(SECRET.encode(), p)


if __name__ == "__main__":
    unittest.main()
