// decide() and checkAddress(): the only code that says yes to a request.
//
// Precedence, highest first (each level is tested in engine_test.cc):
//   1. unknown task                      -> deny  unknown_task
//      (decideUnder: a policy not compiled on its own -> deny  unknown_policy)
//   2. global.deny                       -> deny  global_deny
//   3. the task policy's deny rules,
//      including those of every policy it includes (transitively)
//                                        -> deny  denied_by_rule
//   4. allow rules (the policy's, its includes', and global.allow) by host specificity:
//        exact host (or exact IP literal) > "*.suffix", longest suffix first > "re:" regexes
//        > cidrs-only rules (IP-literal targets only), longest prefix first.
//      The most specific tier that has a rule for the port decides; if rules match the host
//      but none the port                 -> deny  port_not_allowed
//      if the request is visible and no rule of that tier admits the method / the path
//                                        -> deny  method_not_allowed / path_not_allowed
//      (path_ambiguous when the path is not in normal form, so no `paths` rule can judge it;
//      a deny rule with `paths` matched only for that reason says path_ambiguous too)
//      if an admitting rule has methods or paths and the request carries a method or URL
//      override header                  -> deny  override_header
//      if the admitting rules carry different credentials
//                                        -> deny  credential_conflict
//   5. nothing matched                   -> deny  no_matching_rule
//   6. an IP-literal target (in decide) or a resolved address (in checkAddress) in a denied
//      range that the admitting rule's cidrs do not cover
//                                        -> deny  address_denied
//      For an IP literal in a denied range this also replaces the refusals of steps 4 and 5
//      unless a rule that matched the address covers it: the range is the reason that matters.
// IP-literal targets match only cidrs rules and exact host rules written as that address.
// Deny rules written as cidrs also apply to resolved addresses (checkAddress).
// Deny rules with methods/paths only apply to visible requests; a CONNECT that one of them
// could apply to is admitted with intercept=true so that each request can be judged.
// A rule in audit mode that would refuse (a deny rule matching, or an allow rule whose port,
// method or path does not fit) lets the request through as Verdict::kAudit, carrying the
// would-be reason and rule. Audit mode never relaxes step 6: an audit rule must not be a way
// to reach the metadata service.
#include <algorithm>

#include "policy/address_class.h"
#include "policy/compiled_rule.h"
#include "policy/engine_impl.h"
#include "policy/path_pattern.h"

namespace sandgate::policy {

std::string_view verdictName(Verdict v) {
  switch (v) {
    case Verdict::kAllow:
      return "allow";
    case Verdict::kDeny:
      return "deny";
    case Verdict::kAudit:
      return "audit";
    case Verdict::kLearn:
      return "learn";
  }
  return "deny";
}

namespace {

// The would-be refusal that an audit-mode rule let through.
struct Audited {
  std::string_view reason;
  const CompiledRule* rule = nullptr;
  std::string detail;
};

// Concatenation with a single allocation: details are built on every decision.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  const std::string_view views[] = {std::string_view(parts)...};
  size_t n = 0;
  for (auto v : views) n += v.size();
  std::string out;
  out.reserve(n);
  for (auto v : views) out.append(v);
  return out;
}

std::string_view kind(const Target& t) { return t.isAddress ? "address " : "host "; }

std::string joinList(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string joinPorts(const std::vector<uint16_t>& v) {
  std::string out;
  for (uint16_t p : v) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

Decision refuse(Decision d, std::string_view reason, const CompiledRule* rule, std::string detail) {
  d.verdict = Verdict::kDeny;
  d.reason = reason;
  d.rule = rule ? rule->where : std::string();
  d.keyPath = rule ? rule->keyPath : std::string();
  d.detail = std::move(detail);
  d.matched = nullptr;
  d.via = nullptr;
  d.llm = nullptr;
  d.credential.clear();
  d.intercept = false;
  return d;
}

Decision withAudit(Decision d, const Audited& a) {
  d.verdict = Verdict::kAudit;
  d.reason = a.reason;
  d.rule = a.rule->where;
  d.keyPath = a.rule->keyPath;
  d.detail = cat("would be refused: ", a.detail, "; allowed because ", a.rule->keyPath,
                 " is in audit mode");
  return d;
}

// Every rule of `index` whose host pattern (or cidrs, for addresses) matches the target.
// `embedded`: the IPv4 address an IPv6 literal carries, which cidrs match like the address.
void collectHostMatches(const HostIndex& index, const Target& t, const HostKey& key,
                        const std::optional<IpAddress>& embedded, RuleList* out) {
  RuleSpan ex = index.exact(key);
  out->insert(out->end(), ex.begin(), ex.end());
  if (t.isAddress) {
    auto collect = [&](RuleSpan rs) {
      out->insert(out->end(), rs.begin(), rs.end());
      return false;
    };
    index.forEachCidr(t.address, collect);
    if (embedded) index.forEachCidr(*embedded, collect);
  } else {
    index.forEachWildcard(key, [&](RuleSpan rs) {
      out->insert(out->end(), rs.begin(), rs.end());
      return false;
    });
    index.matchRegex(key, out);
  }
  std::sort(out->begin(), out->end(),
            [](const CompiledRule* a, const CompiledRule* b) { return a->order < b->order; });
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

// Deny rules ignore method and path unless the request is visible. A path that is not in
// normal form matches every deny rule with paths: we cannot tell what the upstream will
// make of it, so it must not be a way around the rule.
bool denyMatches(const CompiledRule& r, bool visible, std::string_view method,
                 std::string_view path, bool normalPath) {
  if (!visible) return !r.hasL7();
  if (!r.allowsMethod(method)) return false;
  if (r.paths && normalPath && !RE2::FullMatch(path, *r.paths)) return false;
  return true;
}

// Step 6 for one address: a denied class needs a covering CIDR on the admitting rule.
Decision vetAddressClass(Decision d, const IpAddress& addr) {
  Classification c = classify(addr);
  if (!c.denied()) return d;
  if (d.matched && d.matched->covers(addr)) return d;
  std::string detail = cat(addr.str(), " is ", className(c.cls));
  if (!c.embedding.empty())
    detail += cat(" (it embeds ", c.embedded.str(), " as ", c.embedding, ")");
  if (d.matched) {
    detail += cat("; ", d.matched->keyPath, " admits the host but names no cidrs covering it");
  } else {
    detail += "; no rule that matches it names cidrs covering it";
  }
  return refuse(std::move(d), reason::kAddressDenied, nullptr, std::move(detail));
}

// Learn mode: only the want of a rule may be waived. Deny rules, the global deny list, denied
// address ranges (IP literals already refused in decideWith), ambiguous paths and override
// headers stay refusals: they are the guardrails a learning run keeps.
bool learnable(std::string_view why) {
  return why == reason::kNoMatchingRule || why == reason::kPortNotAllowed ||
         why == reason::kMethodNotAllowed || why == reason::kPathNotAllowed;
}

// A learn-mode admission: no rule admitted it, so nothing of a rule applies (no credential is
// injected, no parent proxy or git block chosen). A tunnel is intercepted so that a deny rule
// with methods or paths still judges each request (and the audit shows what to learn).
Decision learn(Decision d, const Request& req, bool pinned) {
  if (!learnable(d.reason)) return d;
  if (req.target.isAddress && classify(req.target.address).denied()) return d;
  d.verdict = Verdict::kLearn;
  d.matched = nullptr;
  d.credential.clear();
  d.git = nullptr;
  d.via = nullptr;
  d.intercept = !(req.method || req.path);
  d.pinned = pinned && !req.target.isAddress;
  d.detail = cat("would be refused: ", d.detail, "; allowed because the task is in learn mode");
  return d;
}

// on_unknown: ask: the same refusals learn mode waives may be held and asked about; the rest
// stay refusals at once (an operator is never asked to waive a guardrail).
Decision markAskable(Decision d, const Request& req, bool pinned) {
  const bool denied = req.target.isAddress && classify(req.target.address).denied();
  if (!learnable(d.reason) || denied) {
    d.intercept = false;  // kept by decideWith for approve() only
    return d;
  }
  d.askable = true;
  d.pinned = pinned && !req.target.isAddress;
  return d;
}

// Step 1: no compiled policy for the task (or the policy) asked for.
Decision unknown(const Request& req, std::string_view why, std::string detail) {
  Decision d;
  d.port = req.port;
  return refuse(std::move(d), why, nullptr, std::move(detail));
}

}  // namespace

bool isOverrideHeader(std::string_view name) {
  // Method overrides (Rails, Laravel, Symfony, Express method-override, ASP.NET, Google APIs)
  // and URL rewrites that reverse proxies pass on (IIS URL Rewrite, Spring's forwarded-header
  // filter, Traefik, nginx auth_request setups, Envoy).
  static constexpr std::string_view kNames[] = {
      "x-http-method-override", "x-http-method",     "x-method-override",    "x-method",
      "x-forwarded-method",     "x-original-method", "x-original-url",       "x-original-uri",
      "x-rewrite-url",          "x-forwarded-uri",   "x-forwarded-prefix",   "x-forwarded-path",
      "x-forwarded-url",        "x-original-path",   "x-envoy-original-path"};
  // Any case, and '_' read as '-': CGI, PHP and Django expose both as HTTP_X_HTTP_METHOD_...
  auto fold = [](char c) {
    if (c == '_') return '-';
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  };
  for (std::string_view k : kNames) {
    if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(),
                                              [&](char a, char b) { return a == fold(b); })) {
      return true;
    }
  }
  return false;
}

bool isOverrideParameter(std::string_view key) {
  // Rails, Laravel, Symfony and Express read `_method` from a form body or the query string.
  if (key == "_method") return true;
  return isOverrideHeader(key);
}

Decision Engine::decide(std::string_view task, const Request& req) const {
  auto it = impl_->tasks.find(task);
  if (it != impl_->tasks.end()) {
    Decision d = decideWith(*it->second, req);
    if (d.verdict == Verdict::kDeny && impl_->learnTasks.count(task)) {
      return learn(std::move(d), req, impl_->pinnedNames.count(req.target.name) > 0);
    }
    if (d.verdict == Verdict::kDeny && impl_->askTasks.count(task)) {
      return markAskable(std::move(d), req, impl_->pinnedNames.count(req.target.name) > 0);
    }
    // decideWith keeps `intercept` on a refusal only for approve(): no other refusal says it.
    if (d.verdict == Verdict::kDeny) d.intercept = false;
    return d;
  }
  return unknown(req, reason::kUnknownTask,
                 "task \"" + std::string(task) + "\" is not defined in the configuration");
}

Decision approve(Decision d, const Request& req) {
  if (!d.askable || d.verdict != Verdict::kDeny) return d;
  d.verdict = Verdict::kAllow;
  d.reason = reason::kApproved;
  d.askable = false;
  d.approved = true;
  d.matched = nullptr;
  d.credential.clear();
  d.git = nullptr;
  d.llm = nullptr;
  d.via = nullptr;
  // A tunnel stays intercepted when a deny rule with methods or paths could apply (decideWith
  // said so on the refusal); otherwise it is spliced: the operator approved its host and port.
  d.intercept = d.intercept && !(req.method || req.path);
  d.detail = cat("would be refused: ", d.detail, "; allowed by an operator's approval");
  return d;
}

Decision Engine::decideUnder(std::string_view policy, const Request& req) const {
  auto it = impl_->byPolicy.find(policy);
  if (it != impl_->byPolicy.end()) {
    Decision d = decideWith(*it->second, req);
    if (d.verdict == Verdict::kDeny) d.intercept = false;  // see decide()
    return d;
  }
  return unknown(req, reason::kUnknownPolicy,
                 "policy \"" + std::string(policy) + "\" is not compiled on its own");
}

Decision Engine::decideWith(const CompiledPolicy& pol, const Request& req) const {
  Decision d;
  d.port = req.port;
  d.policy = &pol;
  const Target& t = req.target;
  const bool visible = req.method.has_value() || req.path.has_value();
  const std::string_view method = req.method.value_or("");
  std::string_view path = req.path.value_or("/");
  path = path.substr(0, path.find('?'));  // defensive: the query is never part of the path
  // Every glob sees the canonical form ("/%61dmin" is "/admin" to the server), here, once, so
  // that the proxy, `policy check` and `policy test` judge the same path.
  thread_local std::string canonical;
  if (visible) {
    canonical = canonicalPath(path);
    path = canonical;
  }
  const bool normalPath = !visible || isNormalPath(path);

  // [::ffff:10.0.0.1] is 10.0.0.1 for every cidrs rule, allow or deny.
  std::optional<IpAddress> embedded;
  if (t.isAddress && t.address.v6) {
    Classification c = classify(t.address);
    if (!c.embedding.empty()) embedded = c.embedded;
  }

  const HostKey key(t.name);  // hashed once for every table probed below
  std::optional<Audited> audited;
  bool denyNeedsIntercept = false;
  // A rule for this host and port restricts methods, paths or Git requests, so a request that
  // asks the upstream for another method or URL (override headers) would walk around it.
  const CompiledRule* restricting = nullptr;
  // Reused per thread: a decision allocates nothing but the strings it returns.
  thread_local RuleList scratch;
  thread_local RuleList admitting;
  admitting.clear();

  // Steps 2 and 3.
  const std::pair<const HostIndex*, std::string_view> denyGroups[] = {
      {&impl_->globalDeny, reason::kGlobalDeny}, {&pol.deny, reason::kDeniedByRule}};
  for (const auto& [index, why] : denyGroups) {
    if (index->empty()) continue;
    scratch.clear();
    collectHostMatches(*index, t, key, embedded, &scratch);
    for (const CompiledRule* r : scratch) {
      if (!r->allowsPort(req.port)) continue;
      if (!visible && r->hasL7()) denyNeedsIntercept = true;
      if (r->hasL7() && !restricting) restricting = r;
      if (!denyMatches(*r, visible, method, path, normalPath)) continue;
      std::string detail = r->hasL7() ? cat(kind(t), t.name, " is denied by ", r->keyPath,
                                            " (method ", method, ", path ", path, ")")
                                      : cat(kind(t), t.name, " is denied by ", r->keyPath);
      // A deny rule with paths that matched only because the path cannot be judged.
      const bool ambiguous = visible && r->paths && !normalPath;
      const std::string_view denyWhy = ambiguous ? reason::kPathAmbiguous : why;
      if (ambiguous) detail += " (the path is not in normal form)";
      if (!r->audit) return refuse(std::move(d), denyWhy, r, std::move(detail));
      if (!audited) audited = Audited{denyWhy, r, std::move(detail)};
    }
  }

  // Step 4: find the most specific tier with a rule for this port.
  const CompiledRule* firstHostMatch = nullptr;  // of the rules that matched the host only
  const CompiledRule* firstAuditHostMatch = nullptr;
  bool coveredByMatch = false;  // IP literal: a rule that matched it names a covering CIDR
  auto consider = [&](RuleSpan rules) {
    for (const CompiledRule* r : rules) {
      if (t.isAddress && !coveredByMatch) coveredByMatch = r->covers(t.address);
      if (r->allowsPort(req.port)) {
        admitting.push_back(r);
      } else {
        if (!firstHostMatch) firstHostMatch = r;
        if (r->audit && !firstAuditHostMatch) firstAuditHostMatch = r;
      }
    }
    return !admitting.empty();
  };
  bool found = false;
  if (RuleSpan ex = pol.allow.exact(key); !ex.empty()) found = consider(ex);
  if (!found && t.isAddress) {
    pol.allow.forEachCidr(t.address, [&](RuleSpan rs) { return found = consider(rs); });
    if (!found && embedded) {
      pol.allow.forEachCidr(*embedded, [&](RuleSpan rs) { return found = consider(rs); });
    }
  }
  if (!found && !t.isAddress) {
    pol.allow.forEachWildcard(key, [&](RuleSpan rs) { return found = consider(rs); });
    if (!found) {
      scratch.clear();
      pol.allow.matchRegex(key, &scratch);
      if (!scratch.empty()) found = consider(scratch);
    }
  }

  // An IP literal in a denied range that no matching rule opens with cidrs: that is the real
  // reason, whatever else is wrong with the request (CONNECT 2130706433:443 -> address_denied).
  auto refuseAllow = [&](std::string_view why, const CompiledRule* r, std::string detail) {
    if (t.isAddress && !coveredByMatch && classify(t.address).denied()) {
      return vetAddressClass(std::move(d), t.address);  // d.matched is unset: refuses
    }
    // Kept on the refusal for approve(): an approved tunnel is intercepted if a deny rule with
    // methods or paths could judge its requests.
    Decision refused = refuse(std::move(d), why, r, std::move(detail));
    refused.intercept = denyNeedsIntercept;
    return refused;
  };

  if (!found) {
    if (!firstHostMatch) {
      return refuseAllow(reason::kNoMatchingRule, nullptr,
                         cat("no rule of policy ", pol.name, " allows ", kind(t), t.name));
    }
    const CompiledRule* r = firstAuditHostMatch ? firstAuditHostMatch : firstHostMatch;
    std::string detail = cat("port ", std::to_string(req.port), " is not allowed for ", kind(t),
                             t.name, " by ", r->keyPath, " (ports: ", joinPorts(r->ports), ")");
    if (!firstAuditHostMatch) return refuseAllow(reason::kPortNotAllowed, r, std::move(detail));
    if (!audited) audited = Audited{reason::kPortNotAllowed, r, std::move(detail)};
    admitting.push_back(r);
  } else if (visible) {
    for (const CompiledRule* r : admitting) {
      if ((r->hasL7() || r->git) && (!restricting || restricting->deny)) restricting = r;
      if (restricting && !restricting->deny) break;
    }
    thread_local RuleList fits;
    fits.clear();
    for (const CompiledRule* r : admitting) {
      if (r->allowsMethod(method) && r->allowsPath(path, normalPath)) fits.push_back(r);
    }
    if (fits.empty()) {
      auto methodOk = std::find_if(admitting.begin(), admitting.end(),
                                   [&](const CompiledRule* r) { return r->allowsMethod(method); });
      auto auditRule = std::find_if(admitting.begin(), admitting.end(),
                                    [](const CompiledRule* r) { return r->audit; });
      const bool pathFault = methodOk != admitting.end();
      const CompiledRule* r = auditRule != admitting.end() ? *auditRule
                              : pathFault                  ? *methodOk
                                                           : admitting.front();
      std::string detail;
      if (!pathFault) {
        detail = cat("method ", method, " is not allowed for ", kind(t), t.name, " by ", r->keyPath,
                     " (methods: ", joinList(r->methods), ")");
      } else if (!normalPath) {
        detail =
            cat("path ", path, " for ", kind(t), t.name,
                " is not in normal form ('.', '..' or empty segments, ';', or encoded '.', '/', "
                "'\\'), so the path rules of ",
                r->keyPath, " cannot admit it");
      } else {
        detail = cat("path ", path, " is not allowed for ", kind(t), t.name, " by ", r->keyPath,
                     " (paths: ", joinList(r->pathTexts), ")");
      }
      std::string_view why = !pathFault   ? reason::kMethodNotAllowed
                             : normalPath ? reason::kPathNotAllowed
                                          : reason::kPathAmbiguous;
      if (auditRule == admitting.end()) return refuseAllow(why, r, std::move(detail));
      if (!audited) audited = Audited{why, r, std::move(detail)};
      fits.push_back(r);
    }
    admitting.swap(fits);
    // Any allow or deny rule of the host with methods, paths or a git block: an override makes
    // the upstream act on a method or path none of them judged (a broad allow narrowed by
    // `deny paths: [/admin/**]` is as exposed as a GET-only allow).
    if (req.overrideHeader && restricting) {
      const bool param = req.overrideHeader->starts_with('?');
      std::string detail =
          cat(param ? "parameter " : "header ", req.overrideHeader->substr(param ? 1 : 0),
              " may make ", t.name, " act on another method or path than ", method, " ", path,
              ", which ", restricting->keyPath, " restricts");
      if (!restricting->audit) {
        return refuseAllow(reason::kOverrideHeader, restricting, std::move(detail));
      }
      if (!audited) audited = Audited{reason::kOverrideHeader, restricting, std::move(detail)};
    }
    // A `git:` block judges Git requests by their path: one a forge may read differently
    // ("…/git-receive-pack;x", "…/git-receive-pack/.", "…%2F.") would pass as an ordinary
    // request with the credential, so on such a host every path must be in normal form.
    auto gitRule = std::find_if(admitting.begin(), admitting.end(),
                                [](const CompiledRule* r) { return r->git != nullptr; });
    if (!normalPath && gitRule != admitting.end()) {
      std::string detail = cat("path ", path, " for ", kind(t), t.name,
                               " is not in normal form, so the git block of ", (*gitRule)->keyPath,
                               " cannot tell whether it is a Git request");
      if (!(*gitRule)->audit) {
        return refuseAllow(reason::kPathAmbiguous, *gitRule, std::move(detail));
      }
      if (!audited) audited = Audited{reason::kPathAmbiguous, *gitRule, std::move(detail)};
    }
  }

  // One credential, or none: never guess which secret an upstream should receive.
  const CompiledRule* admit = admitting.front();
  bool conflict = false;
  for (const CompiledRule* r : admitting) conflict |= r->credential != admit->credential;
  if (conflict) {
    const bool allL7 = std::all_of(admitting.begin(), admitting.end(),
                                   [](const CompiledRule* r) { return r->hasL7(); });
    if (visible || !allL7) {
      auto other = std::find_if(admitting.begin(), admitting.end(), [&](const CompiledRule* r) {
        return r->credential != admit->credential;
      });
      return refuseAllow(
          reason::kCredentialConflict, admit,
          cat(kind(t), t.name, " matches ", admit->keyPath, " and ", (*other)->keyPath,
              ", which use different credentials; refusing rather than guessing"));
    }
    // A CONNECT: the rules differ by method/path, so each request inside will pick one.
  }

  d.verdict = Verdict::kAllow;
  d.reason = reason::kAllowed;
  d.matched = admit;
  d.via = admit->via ? &*admit->via : nullptr;
  d.rule = admit->where;
  d.keyPath = admit->keyPath;
  d.credential = conflict ? std::string() : admit->credential;
  // A `git:` block narrows what a Git request may do: the first admitting rule's that has one
  // applies, so that a broader rule for the same host cannot lift it.
  auto withGit = std::find_if(admitting.begin(), admitting.end(),
                              [](const CompiledRule* r) { return r->git != nullptr; });
  if (withGit != admitting.end()) d.git = (*withGit)->git.get();
  // Likewise `llm:`: a second rule for the same host without one cannot lift the model list,
  // the cap or the accounting.
  auto withLlm = std::find_if(admitting.begin(), admitting.end(),
                              [](const CompiledRule* r) { return r->llm.has_value(); });
  if (withLlm != admitting.end()) d.llm = &*(*withLlm)->llm;
  const bool anyUnrestricted = std::any_of(admitting.begin(), admitting.end(),
                                           [](const CompiledRule* r) { return !r->hasL7(); });
  const bool anyInjects =
      std::any_of(admitting.begin(), admitting.end(), [](const CompiledRule* r) {
        return !r->credential.empty() || r->inspect || r->git != nullptr || r->llm;
      });
  d.intercept = denyNeedsIntercept || anyInjects || !anyUnrestricted;
  d.detail =
      cat(kind(t), t.name, " port ", std::to_string(req.port), " is allowed by ", admit->keyPath);

  // Step 6 for IP literals: "CONNECT 2130706433:443" is refused here, before any dialling.
  if (t.isAddress) {
    d = vetAddressClass(std::move(d), t.address);
    if (!d.allowed()) return d;
  }
  if (audited) return withAudit(std::move(d), *audited);
  return d;
}

Decision Engine::checkAddress(const Decision& allowed, const IpAddress& addr) const {
  if (!allowed.allowed()) return allowed;
  Decision d = allowed;
  // Deny rules written as cidrs also cover names that resolve into them; otherwise a
  // `deny: [{cidrs: [...]}]` would only stop people who type addresses.
  std::optional<Audited> audited;
  Classification c = classify(addr);
  RuleList hits;
  const HostIndex* groups[] = {&impl_->globalDeny, d.policy ? &d.policy->deny : nullptr};
  const std::string_view why[] = {reason::kGlobalDeny, reason::kDeniedByRule};
  for (int g = 0; g < 2; ++g) {
    if (!groups[g] || groups[g]->empty()) continue;
    hits.clear();
    auto collect = [&](RuleSpan rs) {
      hits.insert(hits.end(), rs.begin(), rs.end());
      return false;
    };
    groups[g]->forEachCidr(addr, collect);
    if (!c.embedding.empty()) groups[g]->forEachCidr(c.embedded, collect);
    std::sort(hits.begin(), hits.end(),
              [](const CompiledRule* a, const CompiledRule* b) { return a->order < b->order; });
    for (const CompiledRule* r : hits) {
      if (!r->allowsPort(d.port) || r->hasL7()) continue;
      std::string detail = cat("address ", addr.str(), " is denied by ", r->keyPath);
      if (!r->audit) return refuse(std::move(d), why[g], r, std::move(detail));
      if (!audited) audited = Audited{why[g], r, std::move(detail)};
    }
  }
  // Learn mode: a name `resolve:` pins is the operator's own statement of where it lives; a
  // cloud metadata address is refused even so (nothing learned may reach instance credentials).
  if ((d.verdict == Verdict::kLearn || d.approved) && d.pinned &&
      c.cls != AddressClass::kCloudMetadata) {
    return d;
  }
  d = vetAddressClass(std::move(d), addr);
  if (d.allowed() && audited && d.verdict == Verdict::kAllow)
    return withAudit(std::move(d), *audited);
  return d;
}

}  // namespace sandgate::policy
