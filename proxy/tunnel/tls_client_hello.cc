// TLS ClientHello / SNI extraction (RFC 8446 4.1.2, RFC 6066 3), bounded and defensive.
#include "proxy/tunnel/tls_client_hello.h"

#include <cstdint>

namespace sandgate::proxy {
namespace {

constexpr uint8_t kRecordHandshake = 22;
constexpr uint8_t kHandshakeClientHello = 1;
constexpr size_t kRecordHeader = 5;
constexpr size_t kMaxRecordPayload = 16384 + 2048;  // TLSPlaintext limit plus slack
constexpr uint16_t kExtServerName = 0;
constexpr uint8_t kNameTypeHostName = 0;

// A cursor over untrusted bytes: every read is bounds-checked and a failed read poisons it.
class Reader {
 public:
  explicit Reader(std::string_view d) : d_(d) {}
  bool ok() const { return ok_; }
  size_t left() const { return d_.size(); }
  uint32_t u8() { return take(1); }
  uint32_t u16() { return take(2); }
  uint32_t u24() { return take(3); }
  std::string_view bytes(size_t n) {
    if (!ok_ || n > d_.size()) {
      ok_ = false;
      return {};
    }
    auto out = d_.substr(0, n);
    d_.remove_prefix(n);
    return out;
  }

 private:
  uint32_t take(size_t n) {
    auto b = bytes(n);
    uint32_t v = 0;
    for (char c : b) v = (v << 8) | static_cast<uint8_t>(c);
    return v;
  }
  std::string_view d_;
  bool ok_ = true;
};

ClientHello fail(ClientHello::Status s, std::string why) {
  ClientHello h;
  h.status = s;
  h.error = std::move(why);
  return h;
}

ClientHello parseServerName(std::string_view ext, ClientHello hello) {
  Reader r(ext);
  size_t listLen = r.u16();
  auto list = r.bytes(listLen);
  if (!r.ok() || r.left() != 0 || listLen == 0) {
    return fail(ClientHello::Status::kMalformed, "bad server_name extension length");
  }
  Reader l(list);
  while (l.left() > 0) {
    uint32_t type = l.u8();
    size_t len = l.u16();
    auto name = l.bytes(len);
    if (!l.ok()) return fail(ClientHello::Status::kMalformed, "truncated server_name entry");
    if (type != kNameTypeHostName) continue;
    if (hello.sni) return fail(ClientHello::Status::kMalformed, "more than one host_name");
    if (name.empty()) return fail(ClientHello::Status::kMalformed, "empty host_name");
    for (char c : name) {
      auto u = static_cast<uint8_t>(c);
      if (u <= 0x20 || u >= 0x7f) {
        return fail(ClientHello::Status::kMalformed, "host_name with non-printable bytes");
      }
    }
    hello.sni = std::string(name);
  }
  return hello;
}

}  // namespace

ClientHello parseClientHello(std::string_view data) {
  using S = ClientHello::Status;
  if (data.empty()) return {};
  if (static_cast<uint8_t>(data[0]) != kRecordHandshake) {
    return fail(S::kNotTls, "first byte is not a TLS handshake record");
  }
  // Reassemble the handshake message from as many records as it spans.
  std::string message;
  size_t need = 0;  // total handshake message bytes (header included), once known
  size_t pos = 0;
  while (true) {
    if (data.size() - pos < kRecordHeader) {
      if (data.size() >= kMaxClientHelloBytes) return fail(S::kMalformed, "ClientHello too large");
      return {};
    }
    auto rec = data.substr(pos);
    if (static_cast<uint8_t>(rec[0]) != kRecordHandshake) {
      return fail(pos == 0 ? S::kNotTls : S::kMalformed, "expected a handshake record");
    }
    if (static_cast<uint8_t>(rec[1]) != 3) return fail(S::kNotTls, "record version is not 3.x");
    size_t recLen = (static_cast<uint8_t>(rec[3]) << 8) | static_cast<uint8_t>(rec[4]);
    if (recLen == 0 || recLen > kMaxRecordPayload) {
      return fail(S::kMalformed, "bad record length");
    }
    if (pos + kRecordHeader + recLen > kMaxClientHelloBytes) {
      return fail(S::kMalformed, "ClientHello too large");
    }
    if (rec.size() < kRecordHeader + recLen) return {};
    message.append(rec.substr(kRecordHeader, recLen));
    pos += kRecordHeader + recLen;
    if (need == 0 && message.size() >= 4) {
      if (static_cast<uint8_t>(message[0]) != kHandshakeClientHello) {
        return fail(S::kMalformed, "first handshake message is not a ClientHello");
      }
      need = 4 + ((static_cast<uint8_t>(message[1]) << 16) |
                  (static_cast<uint8_t>(message[2]) << 8) | static_cast<uint8_t>(message[3]));
      if (need > kMaxClientHelloBytes) return fail(S::kMalformed, "ClientHello too large");
    }
    if (need != 0 && message.size() >= need) break;
  }

  Reader r(std::string_view(message).substr(4, need - 4));
  uint32_t legacyVersion = r.u16();
  r.bytes(32);  // random
  size_t sessionIdLen = r.u8();
  if (sessionIdLen > 32) return fail(S::kMalformed, "session id longer than 32 bytes");
  r.bytes(sessionIdLen);
  size_t suitesLen = r.u16();
  if (suitesLen < 2 || suitesLen % 2 != 0) return fail(S::kMalformed, "bad cipher suites length");
  r.bytes(suitesLen);
  size_t compLen = r.u8();
  if (compLen < 1) return fail(S::kMalformed, "no compression methods");
  r.bytes(compLen);
  if (!r.ok()) return fail(S::kMalformed, "truncated ClientHello");
  if ((legacyVersion >> 8) != 3) return fail(S::kMalformed, "ClientHello version is not 3.x");
  ClientHello hello;
  hello.status = S::kOk;
  if (r.left() == 0) return hello;  // no extensions at all (SSL 3 / old TLS clients)
  size_t extLen = r.u16();
  auto exts = r.bytes(extLen);
  if (!r.ok() || r.left() != 0) return fail(S::kMalformed, "bad extensions length");
  Reader e(exts);
  bool seenServerName = false;
  while (e.left() > 0) {
    uint32_t type = e.u16();
    size_t len = e.u16();
    auto body = e.bytes(len);
    if (!e.ok()) return fail(S::kMalformed, "truncated extension");
    if (type != kExtServerName) continue;
    if (seenServerName) return fail(S::kMalformed, "duplicate server_name extension");
    seenServerName = true;
    hello = parseServerName(body, std::move(hello));
    if (hello.status != S::kOk) return hello;
  }
  return hello;
}

}  // namespace sandgate::proxy
