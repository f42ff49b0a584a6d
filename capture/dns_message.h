// DNS messages as the sandbox's stub resolver sees them (RFC 1035, RFC 6891 OPT): strict
// parsing of one query and building of the answers sandgate gives. Pure: no sockets.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sandgate::capture {

namespace dns {
inline constexpr uint16_t kTypeA = 1;
inline constexpr uint16_t kTypePtr = 12;
inline constexpr uint16_t kTypeAaaa = 28;
inline constexpr uint16_t kTypeOpt = 41;
inline constexpr uint16_t kTypeSvcb = 64;
inline constexpr uint16_t kTypeHttps = 65;
inline constexpr uint16_t kClassIn = 1;

inline constexpr uint8_t kRcodeNoError = 0;
inline constexpr uint8_t kRcodeFormErr = 1;
inline constexpr uint8_t kRcodeServFail = 2;
inline constexpr uint8_t kRcodeNxDomain = 3;
inline constexpr uint8_t kRcodeNotImp = 4;
inline constexpr uint8_t kRcodeRefused = 5;

inline constexpr size_t kHeaderBytes = 12;
inline constexpr size_t kMaxNameBytes = 255;       // wire form, RFC 1035 2.3.4
inline constexpr size_t kMaxPointerHops = 16;      // more is a loop or an attack, never a name
inline constexpr size_t kMaxUdpAnswerBytes = 512;  // without EDNS
inline constexpr size_t kMaxMessageBytes = 4096;   // what we ever read for one query
}  // namespace dns

struct DnsHeader {
  uint16_t id = 0;
  bool response = false;  // QR
  uint8_t opcode = 0;
  bool recursionDesired = false;
  uint16_t qdCount = 0, anCount = 0, nsCount = 0, arCount = 0;
};

struct DnsQuestion {
  std::string name;  // lower-cased, no trailing dot, "" for the root; labels as written
  uint16_t type = 0;
  uint16_t klass = 0;
};

// A query that parsed. Everything a stub sends alongside the question is tolerated only as one
// OPT record in the additional section.
struct DnsQuery {
  DnsHeader header;
  DnsQuestion question;
  bool edns = false;
  uint16_t ednsUdpSize = 0;  // the requester's payload size (when edns)
};

enum class ParseError {
  kNone,
  kTruncated,      // shorter than its header or its counts say
  kIsResponse,     // QR set: a response is never an answer to anything we asked
  kBadCounts,      // not exactly one question, or answer/authority records, or > 1 additional
  kBadName,        // label too long, name too long, reserved label type, non-ASCII
  kPointerLoop,    // compression pointer forward, to itself, or too many hops
  kBadAdditional,  // the additional record is not a well-formed OPT at the root
  kTrailingBytes,  // bytes after the last record
};

std::string_view parseErrorName(ParseError e);  // stable tokens for logs and tests

// Only the header (for an answer to a query that failed to parse beyond it).
std::optional<DnsHeader> parseHeader(std::span<const uint8_t> msg);

// Parses a query. On error, `*error` says why and nothing else is meaningful.
std::optional<DnsQuery> parseQuery(std::span<const uint8_t> msg, ParseError* error);

// One answer record for the question's name (always written as a pointer to the question).
struct DnsAnswer {
  uint16_t type = 0;
  uint32_t ttl = 0;
  std::vector<uint8_t> rdata;  // 4 bytes for A, 16 for AAAA, a wire name for PTR
};

// The response to `q`: same id, opcode and question, QR, AA and RA set, RD copied; an OPT
// record when the query had one. `maxBytes` is the transport's limit (UDP: 512 or the EDNS
// size; TCP: 65535): answers that do not fit are dropped and TC is set.
std::vector<uint8_t> buildResponse(const DnsQuery& q, uint8_t rcode,
                                   const std::vector<DnsAnswer>& answers, size_t maxBytes);

// A header-only error response (FORMERR, NOTIMP, ...) echoing the id and opcode of `h`.
std::vector<uint8_t> buildHeaderOnly(const DnsHeader& h, uint8_t rcode);

// "a.b" → wire form (length-prefixed labels, zero terminated). Empty input is the root.
std::vector<uint8_t> encodeName(std::string_view dotted);

}  // namespace sandgate::capture
