// How a request, tunnel or DNS query ended: the `verdict` of its audit line and of
// sandgate_requests_total.
#pragma once

#include <cstdint>
#include <string_view>

#include "policy/engine.h"

namespace sandgate::proxy {

enum class Outcome : uint8_t {
  kNone,   // not decided yet (written as null)
  kAllow,  // served
  kAudit,  // served, though a rule in audit mode would have refused it
  kLearn,  // served (no credential) because the task is in learn mode; the policy would refuse
  kDeny,   // refused: policy, identity, limits, malformed requests, a tunnel's checks
  kError,  // not served because something failed: an upstream, a credential, TLS
};

// "allow", "audit", "learn", "deny", "error"; empty for kNone.
constexpr std::string_view outcomeName(Outcome o) {
  switch (o) {
    case Outcome::kAllow:
      return "allow";
    case Outcome::kAudit:
      return "audit";
    case Outcome::kLearn:
      return "learn";
    case Outcome::kDeny:
      return "deny";
    case Outcome::kError:
      return "error";
    case Outcome::kNone:
      break;
  }
  return "";
}

// The outcome of a request the policy decided `v` and that was then served.
constexpr Outcome outcomeOf(policy::Verdict v) {
  switch (v) {
    case policy::Verdict::kAllow:
      return Outcome::kAllow;
    case policy::Verdict::kAudit:
      return Outcome::kAudit;
    case policy::Verdict::kLearn:
      return Outcome::kLearn;
    case policy::Verdict::kDeny:
      return Outcome::kDeny;
  }
  return Outcome::kDeny;
}

}  // namespace sandgate::proxy
