#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/ (seed-*.bin).

Deterministic but for the ClientHellos (Python's ssl makes a fresh random each time); rerun after
changing a target's input layout. Regression inputs that a fuzzer
found are committed next to the seeds as regress-*.bin and are never rewritten here.
Targets that read their parameters with FuzzedDataProvider take integers from the end of the
input: the trailing bytes below are such parameters (mode, piece sizes), not data.
"""
import gzip
import pathlib
import ssl
import struct
import zlib

root = pathlib.Path(__file__).resolve().parent
corpus = root / "corpus"


def write(target, name, data):
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed-{name}.bin").write_bytes(data if isinstance(data, bytes) else data.encode())


heads = {
    "origin": "GET /a?b=c HTTP/1.1\r\nHost: example.test\r\nUser-Agent: t\r\n\r\n",
    "absolute": "GET http://example.test:8080/p?q HTTP/1.1\r\nHost: example.test:8080\r\n\r\n",
    "connect": "CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n"
               "Proxy-Authorization: Basic dGFzazp0b2tlbg==\r\n\r\n",
    "connect_v6": "CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
    "post_length": "POST http://example.test/up HTTP/1.1\r\nHost: example.test\r\n"
                   "Content-Length: 5\r\n\r\nhello",
    "chunked": "POST /up HTTP/1.1\r\nHost: example.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    "http10": "GET http://example.test/ HTTP/1.0\r\n\r\n",
    "asterisk": "OPTIONS * HTTP/1.1\r\nHost: example.test\r\n\r\n",
    "obs_fold": "GET / HTTP/1.1\r\nHost: example.test\r\nX: a\r\n b\r\n\r\n",
    "cl_te": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    "dup_cl": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
    "bare_lf": "GET / HTTP/1.1\nHost: a\r\n\r\n",
    "userinfo": "GET http://u:p@example.test/ HTTP/1.1\r\nHost: example.test\r\n\r\n",
    "host_mismatch": "GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
    "pipelined": "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: b\r\n\r\n",
}
for name, text in heads.items():
    write("request_head_fuzz", name, text)

# chunked_body_fuzz, read from the end: raw mode (1), one piece (count byte 0) of 8 bytes, a
# 65-byte body buffer; the rest is the chunked body.
params = bytes([0x40, 0x00, 0x07, 0x00, 0x00, 0x01])
for name, body in {
    "simple": b"5\r\nhello\r\n0\r\n\r\n",
    "ext": b"5;name=value\r\nhello\r\n6;q=\"a b\"\r\n world\r\n0\r\n\r\n",
    "hex_case": b"A\r\n0123456789\r\n00a\r\n0123456789\r\n0\r\n\r\n",
    "trailer": b"3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n",
    "prefix_0x": b"0x5\r\nhello\r\n0\r\n\r\n",
    "overflow": b"10000000000000005\r\nhello\r\n0\r\n\r\n",
    "bare_lf": b"5\nhello\n0\n\n",
    "pipelined": b"1\r\na\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
}.items():
    write("chunked_body_fuzz", "raw_" + name, body + params)
write("chunked_body_fuzz", "roundtrip", b"a body to encode in chunks" + bytes([3, 1, 7, 2, 9, 0, 0x40, 0, 1, 0]))


def client_hello(server_name, alpn=None, tls13=True):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if not tls13:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if alpn:
        ctx.set_alpn_protocols(alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


hello = client_hello("example.test", ["h2", "http/1.1"])
write("client_hello_fuzz", "tls13_sni", hello)
write("client_hello_fuzz", "tls12_sni", client_hello("api.example.test", tls13=False))
write("client_hello_fuzz", "no_sni", client_hello(None))
# The same hello split over two records.
body = hello[5:]
write("client_hello_fuzz", "two_records",
      b"\x16\x03\x01" + struct.pack(">H", 40) + body[:40] +
      b"\x16\x03\x01" + struct.pack(">H", len(body) - 40) + body[40:])
write("client_hello_fuzz", "http", b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
write("client_hello_fuzz", "roundtrip", b"\x01" + b"name.example.test" + bytes([5, 2, 1, 3, 7, 9]))


def name(dotted):
    out = b""
    for label in dotted.split(".") if dotted else []:
        out += bytes([len(label)]) + label.encode()
    return out + b"\x00"


def query(qname, qtype=1, opt=None, flags=0x0100, raw_name=None):
    ar = 1 if opt is not None else 0
    msg = struct.pack(">HHHHHH", 0x1234, flags, 1, 0, 0, ar)
    msg += (raw_name if raw_name is not None else name(qname)) + struct.pack(">HH", qtype, 1)
    if opt is not None:
        msg += b"\x00" + struct.pack(">HHIH", 41, opt, 0, 0)
    return msg


write("dns_message_fuzz", "a", query("example.test"))
write("dns_message_fuzz", "aaaa_edns", query("api.example.test", 28, opt=4096))
write("dns_message_fuzz", "https", query("example.test", 65))
write("dns_message_fuzz", "ptr", query("1.0.0.127.in-addr.arpa", 12))
write("dns_message_fuzz", "upper", query("ExAmPlE.TeSt"))
write("dns_message_fuzz", "root", query(""))
write("dns_message_fuzz", "pointer_back", query("", raw_name=b"\xc0\x04"))
write("dns_message_fuzz", "notimp", query("example.test", flags=0x2100))

for p in sorted((root.parent / "config" / "examples").glob("*.yaml")):
    write("config_loader_fuzz", "example_" + p.stem.replace(".", "_"), p.read_bytes())
for p in sorted((root.parent / "tests" / "testdata" / "config").glob("*.yaml"))[:12]:
    write("config_loader_fuzz", "testdata_" + p.stem, p.read_bytes())

text = b"HTTP bodies are often compressed. " * 20
# Read from the end: the coding (1 gzip, 0 deflate), one piece (count byte 0) of 65 bytes.
tail = bytes([0x40, 0x00, 0x00])
write("body_decoder_fuzz", "gzip", b"\x00" + gzip.compress(text, mtime=0) + tail + b"\x01")
write("body_decoder_fuzz", "zlib", b"\x00" + zlib.compress(text) + tail + b"\x00")
deflater = zlib.compressobj(wbits=-15)
write("body_decoder_fuzz", "bare_deflate", b"\x00" + deflater.compress(text) + deflater.flush() + tail + b"\x00")
write("body_decoder_fuzz", "two_members",
      b"\x00" + gzip.compress(b"one", mtime=0) + gzip.compress(b"two", mtime=0) + tail + b"\x01")
write("body_decoder_fuzz", "roundtrip", b"\x01" + text + bytes([1, 0, 4, 2, 1, 3]))

for n, s in enumerate([b"dXNlcjpwYXNzd29yZA==", b"a%20b+c%2Fd", b"eyJhbGciOiJIUzI1NiJ9",
                       b"sk-proj-abcdefghijklmnopqrstuvwxyz012345", b"AB==", b"%zz%4"]):
    write("encoding_fuzz", f"text{n}", s + bytes([n, 7, 3, 1, 2]))

write("scrubber_fuzz", "raw", b"sk-live-abcdef0123456789" + b"the body {\"token\":\"" + bytes([0, 1, 0, 2, 3, 1, 1]))
write("scrubber_fuzz", "url", b"a secret with space " + b"?q=a%20secret%20with+space&x=1" + bytes([1, 0, 1, 1, 0, 3]))
# path_rules_fuzz: a path, then the provider's choices (taken from the end: spelling bits).
for name, path in (("admin", b"admin/users"), ("secret", b"v1/secretKeys"),
                   ("internal", b"Internal/x"), ("repo", b"acme/widgets.git"), ("plain", b"v1/models")):
    write("path_rules_fuzz", name, path + bytes([0x55, 0xAA, 0x0F, 0xF0, 1, 2, 3, 4]))

write("llm_body_fuzz", "openai_request",
      '{"model":"gpt-mini","max_completion_tokens":512,"stream":true,'
      '"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}')
write("llm_body_fuzz", "anthropic_request",
      '{"model":"claude-x","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}')
write("llm_body_fuzz", "duplicate_model", '{"model":"cheap","model":"big"}')
write("llm_body_fuzz", "openai_usage", '{"usage":{"prompt_tokens":12,"completion_tokens":34}}')
write("llm_body_fuzz", "openai_sse",
      'data: {"choices":[],"usage":null}\n\n'
      'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":9}}\r\n\r\n'
      'data: [DONE]\n\n')
write("llm_body_fuzz", "anthropic_sse",
      'event: message_start\ndata: {"type":"message_start","message":{"usage":'
      '{"input_tokens":25,"cache_read_input_tokens":3,"output_tokens":1}}}\n\n'
      'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":15}}\n\n')

# h2_frames_fuzz: 4 bytes of limits (streams 1 + b0 % 8, continuations b1 % 5, ...), then the
# frames a client sends after the preface (the target prepends it). Frames are built by hand
# (9-byte header, HPACK literals without indexing or Huffman) so that no library is needed.
def h2_frame(ftype, flags, sid, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + sid.to_bytes(4, "big") + payload


def hpack_literal(fields):
    out = b""
    for name, value in fields:
        assert len(name) < 127 and len(value) < 127
        out += b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
    return out


def h2_get(path=b"/a", extra=()):
    return hpack_literal([(b":method", b"GET"), (b":scheme", b"https"),
                          (b":authority", b"api.test"), (b":path", path)] + list(extra))


H2_SETTINGS = h2_frame(4, 0, 0)
H2_END_STREAM, H2_END_HEADERS = 0x1, 0x4
h2_limits = bytes([3, 0x22, 0x11, 0x47])  # 4 streams, 2 continuations, small bursts
h2_seeds = {
    "get": H2_SETTINGS + h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1, h2_get()),
    "settings_ack": H2_SETTINGS + h2_frame(4, 1, 0) +
                    h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1, h2_get()),
    "five_streams": H2_SETTINGS + b"".join(
        h2_frame(1, H2_END_HEADERS, 2 * i + 1, h2_get(b"/s%d" % i)) for i in range(5)),
    "continuation": H2_SETTINGS + h2_frame(1, H2_END_STREAM, 1, h2_get()[:20]) +
                    h2_frame(9, 0, 1, h2_get()[20:30]) + h2_frame(9, H2_END_HEADERS, 1, h2_get()[30:]),
    "rapid_reset": H2_SETTINGS + b"".join(
        h2_frame(1, H2_END_HEADERS, 2 * i + 1, h2_get()) + h2_frame(3, 0, 2 * i + 1, b"\0\0\0\x08")
        for i in range(20)),
    "post_data_trailers": H2_SETTINGS +
        h2_frame(1, H2_END_HEADERS, 1, h2_get(b"/p", [(b"content-length", b"5")])) +
        h2_frame(0, 0x8, 1, b"\x02hello\0\0") +
        h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1, hpack_literal([(b"x-t", b"1")])),
    "ping_window": H2_SETTINGS + h2_frame(6, 0, 0, b"12345678") +
                   h2_frame(8, 0, 0, (0x7fffffff).to_bytes(4, "big")),
    "upper_case": H2_SETTINGS + h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1,
                                         h2_get(extra=[(b"X-Up", b"1")])),
    "te_gzip": H2_SETTINGS + h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1,
                                      h2_get(extra=[(b"te", b"gzip")])),
    "crlf_value": H2_SETTINGS + h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1,
                                         h2_get(extra=[(b"x-a", b"a\r\nb: c")])),
    "connect": H2_SETTINGS + h2_frame(1, H2_END_HEADERS, 1, hpack_literal(
        [(b":method", b"CONNECT"), (b":authority", b"other.test:443")])),
    "settings_flood": b"".join(h2_frame(4, 0, 0, b"\0\x03\0\0\0\x64" * 20) for _ in range(3)),
}
for name, frames in h2_seeds.items():
    write("h2_frames_fuzz", name, h2_limits + frames)

# h2_streams_fuzz: 3 bytes (the client's chunk size: 1 + b0 % 128, or 4 KiB with the top bit;
# the fake upstream's response shape, h2_streams_fuzz.cc's k* bits; its DATA split: 1 + b2),
# then the client's frames after the preface. The task may GET and POST api.test/ok/*, not
# /ok/private*.
SECRET_HEADER, SECRET_BODY, TRAILERS, GRPC = 0x01, 0x02, 0x04, 0x08
UP_RESET, NO_BODY, AT_HEAD, EARLY = 0x10, 0x20, 0x40, 0x80


def h2_req(method, path, extra=(), authority=b"api.test"):
    return hpack_literal([(b":method", method), (b":scheme", b"https"),
                          (b":authority", authority), (b":path", path)] + list(extra))


def streams(chunk, shape, split, frames):
    return bytes([chunk, shape, split]) + H2_SETTINGS + frames


grpc_message = b"\x00\x00\x00\x00\x05\x0a\x03abc"
h2_stream_seeds = {
    "get": streams(0x80, SECRET_HEADER | SECRET_BODY, 7,
                   h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1, h2_req(b"GET", b"/ok/a"))),
    "get_small_chunks": streams(0x04, SECRET_BODY | TRAILERS | EARLY, 0,
                                h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1,
                                         h2_req(b"GET", b"/ok/a?x=1"))),
    "post_body": streams(0x10, SECRET_BODY, 5,
                         h2_frame(1, H2_END_HEADERS, 1, h2_req(b"POST", b"/ok/upload",
                                                               [(b"content-length", b"11")])) +
                         h2_frame(0, 0, 1, b"hello") + h2_frame(0, H2_END_STREAM, 1, b" world")),
    "grpc_trailers": streams(0x80, SECRET_HEADER | SECRET_BODY | TRAILERS | GRPC, 3,
                             h2_frame(1, H2_END_HEADERS, 1, h2_req(
                                 b"POST", b"/ok/svc.Method",
                                 [(b"content-type", b"application/grpc"), (b"te", b"trailers")])) +
                             h2_frame(0, H2_END_STREAM, 1, grpc_message)),
    "refused_by_policy": streams(0x80, SECRET_HEADER | SECRET_BODY | AT_HEAD, 64,
                                 h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1,
                                          h2_req(b"GET", b"/ok/private/keys")) +
                                 h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 3,
                                          h2_req(b"DELETE", b"/ok/a")) +
                                 h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 5,
                                          h2_req(b"GET", b"/admin")) +
                                 h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 7,
                                          h2_req(b"GET", b"/ok/a", authority=b"other.test"))),
    "malformed_head": streams(0x80, SECRET_HEADER, 16,
                              h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1,
                                       h2_req(b"GET", b"/ok/a", [(b"X-Up", b"1")])) +
                              h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 3,
                                       hpack_literal([(b":method", b"GET"),
                                                      (b":authority", b"api.test")])) +
                              h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 5,
                                       h2_req(b"GET", b"/ok/b", [(b"x-a", b"a\r\nb: c")]))),
    "reset": streams(0x20, SECRET_BODY | AT_HEAD, 2,
                     h2_frame(1, H2_END_HEADERS, 1, h2_req(b"POST", b"/ok/a")) +
                     h2_frame(0, 0, 1, b"part") + h2_frame(3, 0, 1, b"\0\0\0\x08") +
                     h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 3, h2_req(b"GET", b"/ok/b"))),
    "upstream_reset": streams(0x80, UP_RESET | SECRET_BODY, 9,
                              h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 1,
                                       h2_req(b"GET", b"/ok/a"))),
    "five_streams": streams(0x80, SECRET_HEADER | SECRET_BODY | NO_BODY, 30, b"".join(
        h2_frame(1, H2_END_STREAM | H2_END_HEADERS, 2 * i + 1, h2_req(b"GET", b"/ok/%d" % i))
        for i in range(5))),
}
for name, data in h2_stream_seeds.items():
    write("h2_streams_fuzz", name, data)

# git_wire_fuzz: byte 0 even: an SSH exec command; odd: two bytes of limit (64 + the value),
# then a receive-pack command list in pkt-lines.
for name, cmd in (("upload", "git-upload-pack 'org/repo.git'"),
                  ("receive", "git-receive-pack '/org/repo.git'"),
                  ("archive", "git-upload-archive 'org/repo'"),
                  ("unquoted", "git-receive-pack org/Repo/"),
                  ("dotdot", "git-upload-pack 'org/../other'"),
                  ("shell", "git-upload-pack 'a';id"),
                  ("dash", "git-upload-pack '--upload-pack=x'"),
                  # Found by the smoke run: a working tree's git directory is its repository.
                  ("gitdir", "git-upload-pack 'kregpor/.git'"),
                  ("gitdir_only", "git-receive-pack '/.git'"),
                  ("dotdot_suffix", "git-receive-pack '..GIt'")):
    write("git_wire_fuzz", "cmd_" + name, b"\x00" + cmd.encode())


def pkt(payload):
    return b"%04x" % (len(payload) + 4) + payload


zero, one, two = b"0" * 40, b"1" * 40, b"2" * 40
push_lists = {
    "one": pkt(zero + b" " + one + b" refs/heads/agent/x\x00report-status side-band-64k") + b"0000PACK",
    "two": pkt(one + b" " + two + b" refs/heads/main\x00report-status") +
           pkt(one + b" " + zero + b" refs/tags/v1") + b"0000PACK",
    "options": pkt(zero + b" " + one + b" refs/heads/a\x00push-options") + b"0000" +
               pkt(b"ci.skip") + b"0000PACK",
    "shallow": pkt(b"shallow " + one) + pkt(zero + b" " + one + b" refs/heads/a\x00") + b"0000",
    "sha256": pkt(b"0" * 64 + b" " + b"1" * 64 + b" refs/heads/a\x00object-format=sha256") + b"0000",
    "cert": pkt(b"push-cert\x00report-status") + b"0000",
    "empty": b"0000",
}
for name, body in push_lists.items():
    write("git_wire_fuzz", "push_" + name, b"\x01\x01\x00" + body)
write("git_wire_fuzz", "push_tight_limit", b"\x01\x00\x00" + push_lists["two"])
