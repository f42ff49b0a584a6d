// What sandgate answers to one DNS query from a sandbox: synthetic addresses for names the
// task's policy could allow, NXDOMAIN for every other name, REFUSED/NOTIMP for what a stub
// resolver does not need, nothing at all for malformed packets. Never a query upstream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capture/address_pool.h"
#include "capture/dns_message.h"

namespace sandgate::capture {

// Stable result tokens: the metric label and the audit line use them.
namespace dns_result {
inline constexpr std::string_view kAnswered = "answered";  // A/AAAA with an address
inline constexpr std::string_view kNoData = "nodata";      // allowed name, no such record
inline constexpr std::string_view kNxDomain = "nxdomain";  // no rule could allow the name
inline constexpr std::string_view kRefused = "refused";    // type or class we do not serve
inline constexpr std::string_view kNotImp = "notimp";      // opcode other than QUERY
inline constexpr std::string_view kPoolExhausted = "pool_exhausted";  // SERVFAIL
inline constexpr std::string_view kMalformed = "malformed";           // dropped without an answer
}  // namespace dns_result

struct DnsOutcome {
  std::string_view result;        // a dns_result token
  std::vector<uint8_t> response;  // empty: send nothing (malformed)
  std::string name;               // the question's name, when it parsed
  uint16_t type = 0;
  ParseError error = ParseError::kNone;  // why a malformed query was dropped
  std::string address;                   // the synthetic address answered, if any
};

// Says whether the task's policy could allow some connection to `name` (a normalised, valid
// DNS name). Evaluated on every query, so a reload that denies a name takes effect at once.
using NamePredicate = std::function<bool(const std::string& name)>;

class DnsResponder {
 public:
  DnsResponder(std::shared_ptr<SyntheticPool> pool, NamePredicate mayResolve, bool ipv6);

  // One query in; the answer fits the transport (UDP: 512 bytes, or the query's EDNS size
  // capped at 1232; TCP: 65535), with TC set when an answer had to be left out.
  DnsOutcome answer(std::span<const uint8_t> message, bool tcp) const;

  static constexpr uint32_t kTtlSeconds = 300;

 private:
  std::shared_ptr<SyntheticPool> pool_;
  NamePredicate mayResolve_;
  bool ipv6_;
};

}  // namespace sandgate::capture
