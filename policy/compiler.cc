// Engine::compile(): validates every rule of a Config and builds the per-task indexes.
//
// The config loader checks syntax; everything a rule *means* is checked here, once per
// snapshot, so that a bad pattern is a load-time error with file:line:col and never a
// surprise at request time.
#include <algorithm>
#include <map>
#include <set>

#include "config/approvals.h"
#include "policy/address_class.h"
#include "policy/compiled_rule.h"
#include "policy/engine_impl.h"
#include "policy/load_problems.h"
#include "policy/path_pattern.h"

namespace sandgate::policy {

bool CompiledRule::allowsPort(uint16_t p) const {
  return ports.empty() || std::find(ports.begin(), ports.end(), p) != ports.end();
}

bool CompiledRule::allowsMethod(std::string_view m) const {
  return methods.empty() || std::find(methods.begin(), methods.end(), m) != methods.end();
}

bool CompiledRule::allowsPath(std::string_view path, bool normal) const {
  if (!paths) return true;
  return normal && RE2::FullMatch(path, *paths);
}

bool CompiledRule::covers(const IpAddress& a) const {
  Classification c = classify(a);
  for (const Cidr& cidr : cidrs) {
    if (cidr.contains(a)) return true;
    // ::ffff:10.1.2.3 reaches 10.1.2.3, so a rule that opens 10.1.0.0/16 opens it too.
    if (!c.embedding.empty() && cidr.contains(c.embedded)) return true;
  }
  return false;
}

namespace {

constexpr uint16_t kDefaultAllowPort = 443;

std::string describePattern(const CompiledRule& r) {
  if (!r.host) {
    std::string out = "cidrs";
    for (const auto& c : r.cidrs) out.append(" ").append(c.str());
    return out;
  }
  switch (r.host->kind) {
    case HostPattern::Kind::kExact:
      return "host " + r.host->text;
    case HostPattern::Kind::kWildcard:
      return "host *." + r.host->text;
    case HostPattern::Kind::kRegex:
      return "host re:" + r.host->text;
  }
  return {};
}

bool intersects(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return std::any_of(a.begin(), a.end(), [&](const std::string& x) {
    return std::find(b.begin(), b.end(), x) != b.end();
  });
}

class Compiler {
 public:
  // `partial`: the loader reported errors in `cfg` already (reviewPartial()).
  Compiler(const config::Config& cfg, Engine::Impl& impl, bool partial = false)
      : cfg_(cfg), impl_(impl), partial_(partial) {}

  Diagnostics run() {
    impl_.file = cfg_.file;
    std::vector<CompiledRule*> globalDeny = compileList(cfg_.global.deny, true);
    std::vector<CompiledRule*> globalAllow = compileList(cfg_.global.allow, false);
    for (const auto& [name, p] : cfg_.policies) {
      lists_[name] = {compileList(p.deny, true), compileList(p.allow, false)};
      for (size_t i = 0; i < p.include.size() && !partial_; ++i) {
        if (!cfg_.policies.count(p.include[i].value)) {
          error(p.include[i].mark, "policies." + name + ".include[" + std::to_string(i) + "]",
                "unknown policy \"" + p.include[i].value + "\"");
        }
      }
    }
    assignOrder();
    sortByOrder(globalDeny);
    for (CompiledRule* r : globalDeny) impl_.globalDeny.add(r);
    std::string err;
    if (!impl_.globalDeny.build(&err)) error({}, "global.deny", err);

    std::map<std::string, const CompiledPolicy*> built;
    for (size_t i = 0; i < cfg_.tasks.size(); ++i) {
      const config::Task& task = cfg_.tasks[i];
      // A task with an approvals file runs under its synthetic policy, which includes its own.
      const std::string& root =
          task.approvalsPolicy.empty() ? task.policy.value : task.approvalsPolicy;
      if (!cfg_.policies.count(root)) {
        if (partial_) continue;  // the loader's references check said so
        error(task.policy.mark, "tasks[" + std::to_string(i) + "].policy",
              "unknown policy \"" + root + "\"");
        continue;
      }
      auto it = built.find(root);
      if (it == built.end()) it = built.emplace(root, buildPolicy(root, globalAllow)).first;
      impl_.tasks[task.name] = it->second;
      if (task.onUnknown == config::OnUnknown::kAsk) impl_.askTasks[task.name] = true;
      if (task.mode == config::TaskMode::kLearn) {
        impl_.learnTasks[task.name] = true;
        // Said by `policy lint`: learn mode is for a run that drafts a policy, not for serving.
        impl_.warnings.push_back(Diagnostic{
            cfg_.file, task.modeMark.line, task.modeMark.col,
            "tasks[" + std::to_string(i) + "].mode",
            "task \"" + task.name +
                "\" is in learn mode: what its policy refuses for want of a rule is admitted "
                "(without credentials; deny rules and private or metadata addresses still "
                "refuse); draft the policy with `sandgate policy learn`, then remove mode: learn"});
      }
    }
    for (const config::ResolveEntry& e : cfg_.resolve) impl_.pinnedNames[e.name] = true;
    // A task token may name any policy for an ad-hoc task (`pol`): each is compiled, and so
    // checked, like the policy of a task.
    if (cfg_.tokens) {
      for (const auto& [name, p] : cfg_.policies) {
        if (!built.count(name)) built.emplace(name, buildPolicy(name, globalAllow));
      }
    }
    for (const auto& [name, pol] : built) impl_.byPolicy[name] = pol;
    return std::move(errors_);
  }

 private:
  void error(const config::Mark& m, std::string keyPath, std::string message) {
    errors_.push_back(Diagnostic{cfg_.file, m.line, m.col, std::move(keyPath), std::move(message)});
  }

  std::vector<CompiledRule*> compileList(const std::vector<config::Rule>& rules, bool deny) {
    std::vector<CompiledRule*> out;
    for (const auto& r : rules) {
      if (CompiledRule* c = compileRule(r, deny)) out.push_back(c);
    }
    return out;
  }

  // The file a rule was written in: the config, or a task's approvals file (its rules' key
  // paths are "approvals.<task>.allow[i]": config/approvals.h).
  std::string fileOf(const config::Rule& r) const {
    constexpr std::string_view kPrefix = "approvals.";
    if (!r.keyPath.starts_with(kPrefix)) return cfg_.file;
    const size_t end = r.keyPath.rfind(".allow[");
    if (end == std::string::npos || end <= kPrefix.size()) return cfg_.file;
    const config::Task* t =
        cfg_.findTask(std::string_view(r.keyPath).substr(kPrefix.size(), end - kPrefix.size()));
    return t ? config::approvalsPath(cfg_, *t) : cfg_.file;
  }

  // Returns nullptr (after recording diagnostics) when the rule is invalid.
  CompiledRule* compileRule(const config::Rule& r, bool deny) {
    const size_t before = errors_.size();
    CompiledRule c;
    c.deny = deny;
    c.audit = r.mode == config::RuleMode::kAudit;
    c.keyPath = r.keyPath;
    c.line = r.mark.line;
    c.where = fileOf(r) + ":" + std::to_string(r.mark.line);
    // With load errors, a rule without either is one whose host could not be read (or was
    // misspelt): the loader named that already.
    bool leaveOut = partial_ && !r.host && r.cidrs.empty();
    if (!r.host && r.cidrs.empty() && !partial_) {
      error(r.mark, r.keyPath, "a rule needs a host, cidrs, or both");
    }
    if (deny && r.host && !r.cidrs.empty()) {
      error(r.mark, r.keyPath,
            "a deny rule takes either a host or cidrs, not both (write two deny rules)");
    }
    if (r.host) {
      auto p = parseHostPattern(r.host->value);
      if (auto* msg = std::get_if<std::string>(&p)) {
        error(r.host->mark, r.keyPath + ".host", *msg);
      } else {
        c.host = std::get<HostPattern>(std::move(p));
        if (!deny) warnAllowAll(r, *c.host);
      }
    }
    for (size_t i = 0; i < r.cidrs.size(); ++i) {
      std::string msg;
      if (auto cidr = parseCidr(r.cidrs[i].value, &msg)) {
        c.cidrs.push_back(*cidr);
      } else {
        error(r.cidrs[i].mark, r.keyPath + ".cidrs[" + std::to_string(i) + "]", msg);
      }
    }
    for (size_t i = 0; i < r.ports.size(); ++i) {
      if (r.ports[i].value == 0) {
        error(r.ports[i].mark, r.keyPath + ".ports[" + std::to_string(i) + "]",
              "expected a port between 1 and 65535, got 0");
      } else if (std::find(c.ports.begin(), c.ports.end(), r.ports[i].value) == c.ports.end()) {
        c.ports.push_back(r.ports[i].value);
      }
    }
    if (!deny && c.ports.empty()) c.ports.push_back(kDefaultAllowPort);
    for (size_t i = 0; i < r.methods.size(); ++i) {
      std::string msg;
      if (isValidMethod(r.methods[i].value, &msg)) {
        c.methods.push_back(r.methods[i].value);
      } else {
        error(r.methods[i].mark, r.keyPath + ".methods[" + std::to_string(i) + "]", msg);
      }
    }
    std::string combined;
    for (size_t i = 0; i < r.paths.size(); ++i) {
      std::string regex, msg;
      if (pathPatternToRegex(r.paths[i].value, &regex, &msg)) {
        combined += (combined.empty() ? "(?:" : "|(?:") + regex + ")";
        c.pathTexts.push_back(r.paths[i].value);
        warnPathSpelling(r, i, deny);
      } else {
        error(r.paths[i].mark, r.keyPath + ".paths[" + std::to_string(i) + "]", msg);
      }
    }
    if (!combined.empty()) {
      RE2::Options opts;
      opts.set_log_errors(false);
      // A deny rule matches every case ("/ADMIN/x" is "/admin/x" to a case-insensitive
      // server); an allow rule stays case-sensitive, so each errs on the side of refusing.
      if (deny) opts.set_case_sensitive(false);
      c.paths = std::make_unique<RE2>(combined, opts);
      if (!c.paths->ok()) error(r.mark, r.keyPath + ".paths", "paths do not compile together");
    }
    if (r.credential) {
      if (deny) {
        error(r.credential->mark, r.keyPath + ".credential", "deny rules take no credential");
      } else if (!cfg_.credentials.count(r.credential->value)) {
        // Left out with load errors: the loader named the unknown credential, and a rule
        // without its credential would make ties that are not there.
        if (partial_) {
          leaveOut = true;
        } else {
          error(r.credential->mark, r.keyPath + ".credential",
                "unknown credential \"" + r.credential->value + "\"");
        }
      } else {
        c.credential = r.credential->value;
      }
    }
    if (deny && r.inspect) {
      error(r.mark, r.keyPath + ".inspect", "inspect only applies to allow rules");
    }
    c.inspect = r.inspect;
    if (r.llm) {
      c.llm = *r.llm;
    } else if (r.credential) {
      if (auto it = cfg_.credentials.find(r.credential->value);
          it != cfg_.credentials.end() && it->second.llm) {
        c.llm = config::LlmRule{r.mark, *it->second.llm, {}, std::nullopt};
      }
    }
    if (r.via) {
      c.via.emplace();
      for (const auto& v : *r.via) c.via->push_back(v.value);
    }
    if (r.git) {
      auto git = GitRules::compile(*r.git, cfg_.file, r.keyPath);
      if (!git) {
        for (const auto& e : git.errors()) errors_.push_back(e);
      } else {
        c.git = std::move(*git);
      }
    }
    c.mark = r.mark;
    c.patternMark = r.host ? r.host->mark : (r.cidrs.empty() ? r.mark : r.cidrs[0].mark);
    if (errors_.size() != before || leaveOut) return nullptr;
    impl_.rules.push_back(std::move(c));
    return &impl_.rules.back();
  }

  // "First" among rules means first in the file: by line, then column, then compile order.
  void assignOrder() {
    std::vector<CompiledRule*> all;
    for (auto& r : impl_.rules) all.push_back(&r);
    std::stable_sort(all.begin(), all.end(), [&](const CompiledRule* a, const CompiledRule* b) {
      const config::Mark &ma = a->mark, &mb = b->mark;
      return ma.line != mb.line ? ma.line < mb.line : ma.col < mb.col;
    });
    for (size_t i = 0; i < all.size(); ++i) all[i]->order = static_cast<int>(i);
  }

  static void sortByOrder(std::vector<CompiledRule*>& v) {
    std::sort(v.begin(), v.end(),
              [](const CompiledRule* a, const CompiledRule* b) { return a->order < b->order; });
  }

  const CompiledPolicy* buildPolicy(const std::string& root,
                                    const std::vector<CompiledRule*>& globalAllow) {
    auto pol = std::make_unique<CompiledPolicy>();
    pol->name = root;
    std::vector<CompiledRule*> deny, allow(globalAllow);
    // Includes, transitively and each policy once (a diamond or a cycle adds nothing twice).
    std::set<std::string> seen;
    std::vector<std::string> stack{root};
    while (!stack.empty()) {
      std::string name = stack.back();
      stack.pop_back();
      if (!seen.insert(name).second) continue;
      auto p = cfg_.policies.find(name);
      if (p == cfg_.policies.end()) continue;  // reported once in run()
      const auto& lists = lists_[name];
      deny.insert(deny.end(), lists.first.begin(), lists.first.end());
      allow.insert(allow.end(), lists.second.begin(), lists.second.end());
      for (auto it = p->second.include.rbegin(); it != p->second.include.rend(); ++it) {
        stack.push_back(it->value);
      }
    }
    sortByOrder(deny);
    sortByOrder(allow);
    for (CompiledRule* r : deny) pol->deny.add(r);
    for (CompiledRule* r : allow) pol->allow.add(r);
    std::string err;
    if (!pol->deny.build(&err) || !pol->allow.build(&err)) error({}, "policies." + root, err);
    checkTies(pol->allow);
    impl_.policies.push_back(std::move(pol));
    return impl_.policies.back().get();
  }

  // Two allow rules with the same pattern are equally specific, so nothing but their order
  // would pick between their credentials: refuse to guess which key the upstream should get.
  void checkTies(const HostIndex& index) {
    index.forEachGroup([&](RuleSpan rules) {
      for (size_t j = 1; j < rules.size(); ++j) {
        for (size_t i = 0; i < j; ++i) {
          const CompiledRule& a = *rules[i];
          const CompiledRule& b = *rules[j];
          if (a.credential == b.credential) continue;
          if (!std::any_of(a.ports.begin(), a.ports.end(),
                           [&](uint16_t p) { return b.allowsPort(p); })) {
            continue;
          }
          // Rules that can never admit the same request are not a tie.
          const bool disjoint =
              (!a.methods.empty() && !b.methods.empty() && !intersects(a.methods, b.methods)) ||
              (!a.pathTexts.empty() && !b.pathTexts.empty() &&
               !intersects(a.pathTexts, b.pathTexts));
          if (disjoint) {
            if (a.credential.empty() != b.credential.empty()) warnMixed(a, b);
            continue;
          }
          if (!reportedTies_.insert({a.order, b.order}).second) continue;
          auto cred = [](const CompiledRule& r) {
            return r.credential.empty() ? std::string("none") : r.credential;
          };
          error(b.patternMark, b.keyPath + (b.host ? ".host" : ".cidrs"),
                "rules at " + a.where + " (" + a.keyPath + ") and " + b.where + " (" + b.keyPath +
                    ") both match " + describePattern(b) +
                    " with equal specificity but use different credentials (" + cred(a) + " vs " +
                    cred(b) +
                    "); make them agree, or give them different ports, "
                    "methods or paths");
        }
      }
    });
  }

  // `sandgate policy lint`: a bare '*' is refused as a host because it would allow every host;
  // an expression that matches names with nothing in common ("re:.*", "re:.+", "re:[^/]*")
  // does the same and deserves the same word.
  void warnAllowAll(const config::Rule& r, const HostPattern& host) {
    if (host.kind != HostPattern::Kind::kRegex) return;
    RE2::Options opts;
    opts.set_log_errors(false);
    RE2 re(host.text, opts);
    if (!re.ok()) return;
    for (std::string_view probe : {"example.com", "a", "sandgate-probe.invalid",
                                   "x.y.z.example.org", "localhost", "169.254.169.254"}) {
      if (!RE2::FullMatch(probe, re)) return;
    }
    impl_.warnings.push_back(Diagnostic{
        cfg_.file, r.host->mark.line, r.host->mark.col, r.keyPath + ".host",
        "\"" + r.host->value +
            "\" allows every host (like a bare '*', which is refused): list the hosts, or use "
            "'*.example.com' for the subdomains of one domain"});
  }

  // `sandgate policy lint`: what a path pattern covers is not always what its author reads in
  // it (README "Paths as a server reads them").
  void warnPathSpelling(const config::Rule& r, size_t i, bool deny) {
    const auto& item = r.paths[i];
    const std::string keyPath = r.keyPath + ".paths[" + std::to_string(i) + "]";
    if (!reportedPaths_.insert(keyPath).second) return;
    auto warn = [&](std::string message) {
      impl_.warnings.push_back(
          Diagnostic{cfg_.file, item.mark.line, item.mark.col, keyPath, std::move(message)});
    };
    const std::string& text = item.value;
    if (text.starts_with("re:")) {
      if (deny) {
        warn("\"" + text +
             "\" is matched against the canonical path (encoded unreserved characters decoded), "
             "case-insensitively; a path not in normal form is refused on this host whatever the "
             "expression says, but other spellings the server treats alike (case, trailing "
             "slashes, repeated segments) are for the expression to cover");
      }
      return;
    }
    if (const std::string canon = canonicalPath(text); canon != text) {
      warn("\"" + text + "\" is matched as \"" + canon +
           "\": percent-encoded unreserved characters are decoded in paths before matching "
           "(RFC 3986 6.2.2.2)");
    }
    if (deny && !text.ends_with("**")) {
      warn("\"" + text + "\" denies " +
           (text.find('*') == std::string::npos ? "that path only" : "paths of that depth only") +
           ", not what is under it (\"" + text + "/x\" passes); write \"" +
           (text.ends_with('/') ? text + "**" : text + "/**") +
           "\" to deny the tree (it matches the directory itself too)");
    }
  }

  // One host, one rule with a credential and one without (disjoint methods or paths): legal,
  // and often meant (a public path), but the credential then binds only to the first rule's
  // requests, which a policy author may not expect.
  void warnMixed(const CompiledRule& a, const CompiledRule& b) {
    if (!reportedMixes_.insert({a.order, b.order}).second) return;
    const CompiledRule& with = a.credential.empty() ? b : a;
    const CompiledRule& without = a.credential.empty() ? a : b;
    impl_.warnings.push_back(Diagnostic{
        cfg_.file, without.patternMark.line, without.patternMark.col,
        without.keyPath + (without.host ? ".host" : ".cidrs"),
        "rules at " + with.where + " (" + with.keyPath + ", credential " + with.credential +
            ") and " + without.where + " (" + without.keyPath + ", no credential) both match " +
            describePattern(without) + ": requests that " + without.keyPath +
            " admits get no credential, and a placeholder of " + with.credential +
            " sent on them is refused (placeholder_misplaced); if they need it, add `credential: " +
            with.credential + "` to " + without.keyPath});
  }

  const config::Config& cfg_;
  Engine::Impl& impl_;
  const bool partial_;
  Diagnostics errors_;
  std::map<std::string, std::pair<std::vector<CompiledRule*>, std::vector<CompiledRule*>>> lists_;
  std::set<std::pair<int, int>> reportedTies_;
  std::set<std::pair<int, int>> reportedMixes_;
  std::set<std::string> reportedPaths_;
};

}  // namespace

Result<std::shared_ptr<const Engine>> Engine::compile(const config::Config& cfg) {
  auto impl = std::make_unique<Impl>();
  Diagnostics errors = Compiler(cfg, *impl).run();
  if (!errors.empty()) return errors;
  // `sandgate policy lint` on parent proxies: what they do to the checks above.
  for (size_t i = 0; i < cfg.upstream.proxies.size(); ++i) {
    const auto& p = cfg.upstream.proxies[i];
    const std::string path = "upstream_proxies[" + std::to_string(i) + "]";
    if (p.resolve == config::UpstreamProxy::Resolve::kParent) {
      impl->warnings.push_back(Diagnostic{
          cfg.file, p.mark.line, p.mark.col, path + ".resolve",
          "parent `" + p.name +
              "` resolves names itself: sandgate never sees the addresses, so the deny ranges "
              "(private, loopback, metadata) do not apply to names sent through it; use "
              "resolve: local where sandgate can resolve"});
    }
    if (p.credential && p.scheme == config::UpstreamProxy::Scheme::kHttp) {
      impl->warnings.push_back(Diagnostic{
          cfg.file, p.credential->mark.line, p.credential->mark.col, path + ".credential",
          "parent `" + p.name + "` is http://: its credential `" + p.credential->value +
              "` travels in clear (Basic) on the way to it"});
    }
  }
  return std::shared_ptr<const Engine>(new Engine(std::move(impl)));
}

PartialReview reviewPartial(const config::Config& partial) {
  Engine::Impl impl;
  PartialReview out;
  out.errors = Compiler(partial, impl, true).run();
  out.warnings = std::move(impl.warnings);
  return out;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

const Diagnostics& Engine::warnings() const { return impl_->warnings; }

bool Engine::hasTask(std::string_view task) const {
  return impl_->tasks.find(task) != impl_->tasks.end();
}

bool Engine::hasPolicy(std::string_view policy) const {
  return impl_->byPolicy.find(policy) != impl_->byPolicy.end();
}

}  // namespace sandgate::policy
