// Fuzzes the ClientHello/SNI parser that decides a tunnel (proxy/tunnel/tls_client_hello.h).
//
// Properties, beyond not crashing:
//  - Split invariance: the proxy parses what has arrived so far and reads more on kNeedMore, so
//    a prefix of any input must parse as kNeedMore or as the whole input does, never as a
//    refusal the whole would not give, and an accepted prefix names the same server.
//  - Round trip (first byte odd): a well-formed ClientHello built from the input (a server name
//    of printable ASCII, other extensions around it, the message split over several records)
//    parses as kOk with that name exactly.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/check.h"
#include "proxy/tunnel/tls_client_hello.h"

namespace {

using sandgate::proxy::ClientHello;
using sandgate::proxy::parseClientHello;

void checkPrefixes(std::string_view data) {
  const ClientHello whole = parseClientHello(data);
  // Every prefix for small inputs, 64 spread out for larger ones: bounded work per input.
  const size_t step = data.size() <= 128 ? 1 : data.size() / 64;
  for (size_t n = 0; n < data.size(); n += step) {
    const ClientHello part = parseClientHello(data.substr(0, n));
    if (part.status == ClientHello::Status::kNeedMore) continue;
    SANDGATE_FUZZ_CHECK(part.status == whole.status, "a prefix decides as the whole does");
    SANDGATE_FUZZ_CHECK(part.sni == whole.sni, "a prefix names the server the whole does");
  }
  if (whole.sni) {
    SANDGATE_FUZZ_CHECK(whole.status == ClientHello::Status::kOk, "a name only when kOk");
    SANDGATE_FUZZ_CHECK(!whole.sni->empty(), "no empty name");
    for (char c : *whole.sni) {
      SANDGATE_FUZZ_CHECK(c > 0x20 && c < 0x7f, "the name is printable ASCII");
    }
  }
}

void put16(std::string& s, size_t v) {
  s += static_cast<char>((v >> 8) & 0xff);
  s += static_cast<char>(v & 0xff);
}

void roundTrip(FuzzedDataProvider& in) {
  std::string name = in.ConsumeRandomLengthString(300);
  for (char& c : name) c = static_cast<char>(0x21 + static_cast<uint8_t>(c) % 0x5e);
  if (name.empty()) name = "example.test";
  std::string exts;
  auto otherExtension = [&] {
    put16(exts, in.ConsumeIntegralInRange<uint16_t>(1, 0xffff));  // never server_name (0)
    std::string body = in.ConsumeRandomLengthString(64);
    put16(exts, body.size());
    exts += body;
  };
  const int before = in.ConsumeIntegralInRange(0, 3), after = in.ConsumeIntegralInRange(0, 3);
  for (int i = 0; i < before; ++i) otherExtension();
  std::string list;
  list += '\0';  // host_name
  put16(list, name.size());
  list += name;
  put16(exts, 0);
  put16(exts, list.size() + 2);
  put16(exts, list.size());
  exts += list;
  for (int i = 0; i < after; ++i) otherExtension();

  std::string body = "\x03\x03";  // legacy_version TLS 1.2
  body += std::string(32, 'r');
  const size_t sessionId = in.ConsumeIntegralInRange<size_t>(0, 32);
  body += static_cast<char>(sessionId);
  body += std::string(sessionId, 's');
  put16(body, 4);
  body += std::string("\x13\x01\x13\x02", 4);
  body += std::string("\x01\x00", 2);  // one compression method: null
  put16(body, exts.size());
  body += exts;
  std::string message = "\x01";
  message += static_cast<char>((body.size() >> 16) & 0xff);
  put16(message, body.size() & 0xffff);
  message += body;

  std::string wire;
  for (size_t at = 0; at < message.size();) {
    // Mostly one record, now and then many small ones (a byte each at worst).
    const size_t most = in.ConsumeBool() ? 16384 : in.ConsumeIntegralInRange<size_t>(1, 64);
    const size_t n = std::min(message.size() - at, most);
    wire += "\x16\x03\x01";
    put16(wire, n);
    wire.append(message, at, n);
    at += n;
  }
  if (wire.size() > sandgate::proxy::kMaxClientHelloBytes) return;
  const ClientHello got = parseClientHello(wire);
  SANDGATE_FUZZ_CHECK(got.status == ClientHello::Status::kOk, "a well-formed ClientHello is kOk");
  SANDGATE_FUZZ_CHECK(got.sni && *got.sni == name, "the server name as sent");
  checkPrefixes(wire);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && (data[0] & 1)) {
    FuzzedDataProvider in(data + 1, size - 1);
    roundTrip(in);
  } else {
    checkPrefixes(std::string_view(reinterpret_cast<const char*>(data), size));
  }
  return 0;
}
