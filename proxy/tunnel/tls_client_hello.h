// A bounded parser for the TLS ClientHello at the start of a tunnel: is it TLS, and which
// server name (SNI) does it ask for? Pure; never trusts a length it has not bounds-checked.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace sandgate::proxy {

// The largest ClientHello (handshake message plus record headers) we wait for. Real ones
// are under 2 KiB (a few KiB with post-quantum key shares); this only bounds a hostile one.
inline constexpr size_t kMaxClientHelloBytes = 32 * 1024;

struct ClientHello {
  enum class Status {
    kNeedMore,   // a prefix of a plausible ClientHello: read more bytes
    kOk,         // complete and well-formed; `sni` is set when a host_name was sent
    kNotTls,     // the first bytes are not a TLS handshake record
    kMalformed,  // TLS-looking but inconsistent, or larger than kMaxClientHelloBytes
  };
  Status status = Status::kNeedMore;
  std::optional<std::string> sni;  // exactly as sent (the caller normalises it)
  std::string error;               // why, for kNotTls / kMalformed
};

// Parses the bytes a client sent first (`data` starts at the first byte of the stream).
ClientHello parseClientHello(std::string_view data);

}  // namespace sandgate::proxy
