// One allow or deny rule after validation, and the compiled policy of one task. Internal to
// policy/: engine.h only forward-declares these.
#pragma once

#include <re2/re2.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "policy/git_rules.h"
#include "policy/host_index.h"
#include "policy/host_pattern.h"
#include "policy/ip.h"

namespace sandgate::policy {

struct CompiledRule {
  int order = 0;  // evaluation order: smaller is earlier in the config (includes pre-order)
  bool deny = false;
  bool audit = false;   // mode: audit
  std::string keyPath;  // "policies.agent.allow[2]"
  std::string where;    // "examples/agent.yaml:14"
  int line = 0;
  config::Mark mark;         // the rule's own position
  config::Mark patternMark;  // where its host (or first cidr) was written
  std::optional<HostPattern> host;
  std::vector<Cidr> cidrs;
  std::vector<uint16_t> ports;  // empty: any port (deny rules only; allow rules default to 443)
  std::vector<std::string> methods;
  std::vector<std::string> pathTexts;
  std::unique_ptr<RE2> paths;  // all `paths` as one full-match alternation; null: any path
  std::string credential;
  bool inspect = false;
  std::shared_ptr<const GitRules> git;  // the rule's `git:` block, compiled
  // `via:` parent proxy names in order; empty: direct; absent: upstream_proxy_default.
  std::optional<std::vector<std::string>> via;
  // `llm:` (the rule's own, else its credential's `llm: <api>`): its requests are LLM calls,
  // read and accounted in the proxy (proxy/exchange/llm_gate.h), so they must be seen.
  std::optional<config::LlmRule> llm;

  bool allowsPort(uint16_t p) const;
  bool allowsMethod(std::string_view m) const;
  // `normal`: isNormalPath(path). A rule with paths never admits a path that is not normal.
  bool allowsPath(std::string_view path, bool normal) const;
  bool hasL7() const { return !methods.empty() || paths != nullptr; }
  bool needsVisibility() const { return hasL7() || !credential.empty() || inspect || git || llm; }
  // Whether one of `cidrs` contains `a` (or the IPv4 address that `a` embeds).
  bool covers(const IpAddress& a) const;
};

// The effective policy of a task: its policy, every policy it includes (transitively, each
// once) and the global allow rules. Global deny rules live in Engine::Impl.
struct CompiledPolicy {
  std::string name;
  HostIndex deny;
  HostIndex allow;
};

}  // namespace sandgate::policy
