// The compiled policy of one config snapshot and decide(): the only place that says yes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "config/config.h"
#include "policy/host.h"
#include "policy/ip.h"

namespace sandgate::policy {

// kAudit: allowed, but a rule would have refused. kLearn: allowed without any rule's
// credential, routing or git block because the task is in learn mode (config::TaskMode) and
// only the want of a rule refused it; `reason` is the would-be refusal.
enum class Verdict { kAllow, kDeny, kAudit, kLearn };
std::string_view verdictName(Verdict v);  // "allow", "deny", "audit", "learn"

// Stable reason tokens: the response header, the audit log, metric labels and tests use them.
namespace reason {
inline constexpr std::string_view kAllowed = "allowed";
inline constexpr std::string_view kNoMatchingRule = "no_matching_rule";
inline constexpr std::string_view kDeniedByRule = "denied_by_rule";
inline constexpr std::string_view kGlobalDeny = "global_deny";
inline constexpr std::string_view kPortNotAllowed = "port_not_allowed";
inline constexpr std::string_view kMethodNotAllowed = "method_not_allowed";
inline constexpr std::string_view kPathNotAllowed = "path_not_allowed";
// A rule with `paths` would decide the request, but its path is not in normal form (dot
// segments in any spelling, ';' parameters, '\\', encoded '/' or '\\'): an upstream may read
// another path than the one matched (Tomcat, Spring and Jetty read /v1/..;/admin as /admin).
inline constexpr std::string_view kPathAmbiguous = "path_ambiguous";
// A request that a rule with `methods` or `paths` admits carries a header that makes some
// upstreams read another method or path (X-HTTP-Method-Override, X-Original-URL, ...).
inline constexpr std::string_view kOverrideHeader = "override_header";
inline constexpr std::string_view kAddressDenied = "address_denied";
inline constexpr std::string_view kUnknownTask = "unknown_task";
inline constexpr std::string_view kUnknownPolicy = "unknown_policy";
inline constexpr std::string_view kInvalidHost = "invalid_host";
inline constexpr std::string_view kCredentialConflict = "credential_conflict";
// Allowed by an operator's answer to a held request (tasks[].on_unknown: ask), not by a rule.
inline constexpr std::string_view kApproved = "approved";
}  // namespace reason

struct CompiledRule;    // opaque outside policy/
class GitRules;         // policy/git_rules.h
struct CompiledPolicy;  // opaque outside policy/

// What the client asked for. `method` and `path` are present only where the request is
// visible (plain HTTP, or a request inside an intercepted TLS connection).
struct Request {
  Target target;
  uint16_t port = 0;
  std::optional<std::string_view> method;
  std::optional<std::string_view> path;  // origin-form path, query excluded
  // The name of a method or URL override header the request carries (isOverrideHeader()),
  // or "?" and the name of an override query parameter ("?_method"), if any: a host with a
  // rule (allow or deny) that has `methods`, `paths` or `git` cannot admit it.
  std::optional<std::string_view> overrideHeader;
};

// X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override, X-Method, X-Forwarded-Method,
// X-Original-Method, X-Original-URL, X-Original-URI, X-Rewrite-URL, X-Forwarded-Uri,
// X-Forwarded-Prefix, X-Forwarded-Path, X-Forwarded-Url, X-Original-Path,
// X-Envoy-Original-Path, in any case and with '_' for '-': frameworks that honour them act on
// another method or path than the request line's, which is the one the rules saw.
bool isOverrideHeader(std::string_view name);

// A query (or form) parameter name, already percent-decoded, that frameworks read as the
// method: `_method`, or any override header name.
bool isOverrideParameter(std::string_view key);

struct Decision {
  Verdict verdict = Verdict::kDeny;
  std::string_view reason = reason::kNoMatchingRule;
  std::string rule;     // "file:line" of the deciding rule; empty for default deny
  std::string keyPath;  // key path of the deciding rule ("policies.agent.deny[0]"), if any
  std::string detail;   // one human sentence: why (used in refusal bodies and `check`)
  const CompiledRule* matched = nullptr;  // the allow rule that admitted the request, if any
  std::string credential;                 // credential name of the admitting rule, empty if none
  // The admitting rule needs to see requests (credential, methods, paths or inspect), so a
  // CONNECT must be intercepted rather than tunnelled.
  bool intercept = false;
  // The `git:` block of an admitting rule (policy/git_rules.h), if one has it: Git requests
  // are then also decided by it. Valid as long as the Engine.
  const GitRules* git = nullptr;
  // The `llm:` of an admitting rule (the first that has one), if any: the request is an LLM
  // call to read, limit and account. Valid as long as the Engine.
  const config::LlmRule* llm = nullptr;
  // The admitting rule's `via:` (parent proxy names in order, empty: direct); null when the
  // rule has none and upstream_proxy_default applies. Valid as long as the Engine.
  const std::vector<std::string>* via = nullptr;
  // Context for checkAddress(): the request port and the task's compiled policy. Like
  // `matched`, valid as long as the Engine that made the decision.
  uint16_t port = 0;
  const CompiledPolicy* policy = nullptr;
  // kLearn: the target is a name the config's `resolve:` pins. The operator wrote its address,
  // so checkAddress() lets it into private and loopback ranges (never cloud metadata).
  bool pinned = false;
  // kDeny, in a task with on_unknown: ask, only for want of a rule (the reasons learn mode
  // waives; never a deny rule, a denied range or an ambiguous path): the proxy may hold the
  // request and ask an operator (proxy/state/questions.h) instead of refusing it.
  bool askable = false;
  // Made by approve(): an operator said yes. Like kLearn, no rule's credential, routing or git
  // block applies, and a `resolve:` pin (`pinned`) may reach its private address.
  bool approved = false;

  bool allowed() const { return verdict != Verdict::kDeny; }
};

// The admission of an askable refusal an operator approved: verdict kAllow with reason
// `approved`, and nothing of any rule (no credential is ever injected for it: the policy did not
// name the request). `d` must be askable; anything else is returned unchanged.
Decision approve(Decision d, const Request& req);

class Engine {
 public:
  // Compiles every task's effective policy (its policy, included policies, global rules).
  // Errors: invalid host patterns, CIDRs, paths, methods; ambiguous credential ties. All
  // problems are reported, each with file:line:col and key path.
  static Result<std::shared_ptr<const Engine>> compile(const config::Config& cfg);

  // The name-level decision: host, port and (when visible) method and path. The precedence
  // is written at the top of engine.cc. An IP-literal target is matched only by `cidrs` rules
  // and exact `host` rules written as that address, and is vetted like a resolved address
  // (so "CONNECT 2130706433:443" is address_denied unless a rule's cidrs cover 127.0.0.1).
  // Thread-safe; the Engine must outlive the Decision (`matched`, `policy`).
  Decision decide(std::string_view task, const Request& req) const;

  // After DNS: may `addr` be dialled for a request that `allowed` admitted? Deny rules written
  // as `cidrs` apply (global_deny / denied_by_rule); denied ranges (see address_class.h) are
  // refused with address_denied unless the admitting rule names a CIDR covering `addr` (or
  // the IPv4 address it embeds). Audit mode never relaxes the range check. Returns `allowed`
  // unchanged when the address is fine; a refusal is returned unchanged.
  Decision checkAddress(const Decision& allowed, const IpAddress& addr) const;

  // decide() for a task that the config does not name but that runs under `policy` (an
  // ad-hoc task of a task token): the policy with its includes and global rules, as a task of
  // that policy gets it. Every policy is compiled on its own when the config has `tokens:`;
  // without it only the policies tasks use are. Another policy: unknown_policy.
  Decision decideUnder(std::string_view policy, const Request& req) const;

  bool hasTask(std::string_view task) const;
  bool hasPolicy(std::string_view policy) const;  // decideUnder() can decide under it

  // What compiles but may not do what its author meant (`sandgate policy lint` prints them):
  // one host with a rule that names a credential and another, for other methods or paths,
  // that names none.
  const Diagnostics& warnings() const;

  ~Engine();
  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  Decision decideWith(const CompiledPolicy& pol, const Request& req) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandgate::policy
