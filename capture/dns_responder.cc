// One query in, at most one answer out (see dns_responder.h).
#include "capture/dns_responder.h"

#include <algorithm>

#include "policy/host.h"

namespace sandgate::capture {

namespace {
constexpr uint16_t kTypeAny = 255;
constexpr uint16_t kMaxTcpMessage = 65535;
constexpr size_t kMaxEdnsAnswer = 1232;
}  // namespace

DnsResponder::DnsResponder(std::shared_ptr<SyntheticPool> pool, NamePredicate mayResolve, bool ipv6)
    : pool_(std::move(pool)), mayResolve_(std::move(mayResolve)), ipv6_(ipv6) {}

DnsOutcome DnsResponder::answer(std::span<const uint8_t> message, bool tcp) const {
  DnsOutcome out;
  auto q = parseQuery(message, &out.error);
  if (!q) {
    // Dropped, never answered: a FORMERR would give a spoofed or garbled packet a reply, and a
    // stub resolver never sends one of these.
    out.result = dns_result::kMalformed;
    return out;
  }
  out.name = q->question.name;
  out.type = q->question.type;
  if (q->header.opcode != 0) {
    out.result = dns_result::kNotImp;
    out.response = buildResponse(*q, dns::kRcodeNotImp, {}, kMaxTcpMessage);
    return out;
  }
  size_t maxBytes =
      tcp       ? kMaxTcpMessage
      : q->edns ? std::clamp<size_t>(q->ednsUdpSize, dns::kMaxUdpAnswerBytes, kMaxEdnsAnswer)
                : dns::kMaxUdpAnswerBytes;
  auto reply = [&](std::string_view result, uint8_t rcode, std::vector<DnsAnswer> answers = {}) {
    out.result = result;
    out.response = buildResponse(*q, rcode, answers, maxBytes);
    return out;
  };
  const auto type = q->question.type;
  if (q->question.klass != dns::kClassIn || type == kTypeAny) {
    return reply(dns_result::kRefused, dns::kRcodeRefused);
  }
  // A name the policy can never match (a reverse-lookup name, an address, a bad label) is
  // as unknown as a name no rule allows.
  const std::string& name = q->question.name;
  if (name.empty() || policy::checkDnsName(name) || !mayResolve_(name)) {
    return reply(dns_result::kNxDomain, dns::kRcodeNxDomain);
  }
  switch (type) {
    case dns::kTypeA:
    case dns::kTypeAaaa: {
      if (type == dns::kTypeAaaa && !ipv6_) return reply(dns_result::kNoData, dns::kRcodeNoError);
      auto addrs = pool_->assign(name);
      if (!addrs) return reply(dns_result::kPoolExhausted, dns::kRcodeServFail);
      const auto& a = type == dns::kTypeA ? addrs->v4 : addrs->v6;
      DnsAnswer rr{type, kTtlSeconds, {}};
      rr.rdata.assign(a.bytes.begin(), a.bytes.begin() + (a.v6 ? 16 : 4));
      out.address = a.str();
      return reply(dns_result::kAnswered, dns::kRcodeNoError, {rr});
    }
    case dns::kTypeHttps:
    case dns::kTypeSvcb:
      // Asked next to A/AAAA by browsers, curl and Node: "no such record" sends them on to
      // the addresses, without ALPN or ECH hints that would bypass the names we gave.
      return reply(dns_result::kNoData, dns::kRcodeNoError);
    default:
      return reply(dns_result::kRefused, dns::kRcodeRefused);
  }
}

}  // namespace sandgate::capture
