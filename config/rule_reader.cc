// Reading allow/deny rules, `policies:` and `global:`.
#include <fmt/format.h>

#include "config/readers.h"

namespace sandgate::config::detail {
namespace {

enum class RuleList { kAllow, kDeny };

const std::vector<std::string_view> kRuleKeys = {
    "host", "cidrs", "ports", "methods", "paths", "credential", "mode", "inspect", "git", "via", "llm"};

// Whether `node` (a map) has a key that is a near miss for one of `keys`.
bool hasMisspelt(const YAML::Node& node, const std::vector<std::string_view>& keys) {
  for (const auto& kv : node) {
    YAML::Node k = kv.first;
    if (k.IsScalar() && !closestKey(k.Scalar(), keys).empty()) return true;
  }
  return false;
}

// `git:` (the meaning of the globs is checked by policy/, like `paths`).
std::optional<GitRules> readGit(Reader& r, const Field& f) {
  auto m = r.map(f, {"repositories", "fetch", "push", "archive"},
                 "a git block (a map with repositories, fetch, push, archive)");
  if (!m) return std::nullopt;
  GitRules git;
  git.mark = f.keyMark;
  if (const Field* v = m->get("repositories")) {
    if (auto list = r.stringList(*v, "[acme/widgets, acme/tools-*]")) {
      git.repositories = std::move(*list);
    }
  } else {
    // Every repository on the host would be a surprise for a block meant to narrow access.
    r.missing(f, "repositories", "a list of owner/name globs, e.g. [acme/widgets]");
  }
  if (const Field* v = m->get("fetch")) {
    if (auto b = r.boolean(*v)) git.fetch = *b;
  }
  if (const Field* v = m->get("archive")) {
    if (auto b = r.boolean(*v)) git.archive = *b;
  }
  if (const Field* v = m->get("push")) {
    auto pm = r.map(*v, {"refs", "delete", "tags"}, "a push block (refs, delete, tags)", true);
    if (pm) {
      GitPush push;
      if (const Field* refs = pm->get("refs")) {
        if (auto list = r.stringList(*refs, "[refs/heads/agent/*]")) push.refs = std::move(*list);
      }
      if (const Field* d = pm->get("delete")) {
        if (auto b = r.boolean(*d)) push.allowDelete = *b;
      }
      if (const Field* t = pm->get("tags")) {
        if (auto b = r.boolean(*t)) push.tags = *b;
      }
      git.push = std::move(push);
    }
  }
  return git;
}

std::optional<Rule> readRule(Reader& r, const Field& f, RuleList kind) {
  auto m = r.map(f, kRuleKeys, "a rule (a map with `host` or `cidrs`)");
  if (!m) return std::nullopt;
  Rule rule;
  rule.mark = f.mark;
  rule.keyPath = f.path;
  if (const Field* h = m->get("host")) rule.host = r.string(*h, "a host name or pattern");
  if (const Field* c = m->get("cidrs")) {
    if (auto v = r.stringList(*c, "[10.0.0.0/8]")) rule.cidrs = std::move(*v);
  }
  if (const Field* p = m->get("ports")) {
    if (auto items = r.list(*p, "a list of ports, e.g. [443] or [80, 443]", false)) {
      if (items->empty()) {
        r.error(p->mark, p->path,
                "empty list; expected a list of ports, e.g. [443] (omit the key for the "
                "default)");
      }
      for (const auto& item : *items) {
        if (auto port = r.integer(item, 1, 65535)) {
          rule.ports.push_back({static_cast<uint16_t>(*port), item.mark});
        }
      }
    }
  }
  if (const Field* v = m->get("methods")) {
    if (auto list = r.stringList(*v, "[GET, POST]")) rule.methods = std::move(*list);
  }
  if (const Field* v = m->get("paths")) {
    if (auto list = r.stringList(*v, "[/v1/*, /api/**]")) rule.paths = std::move(*list);
  }
  if (const Field* c = m->get("credential")) {
    if (kind == RuleList::kDeny) {
      // A deny rule never forwards anything, so a credential there is a misplaced line.
      r.error(c->keyMark, c->path,
              "a deny rule cannot name a credential; move it to an allow rule");
    } else {
      rule.credential = r.string(*c, "a credential name");
    }
  }
  if (const Field* v = m->get("mode")) {
    if (auto s = r.string(*v, "enforce or audit")) {
      if (s->value == "enforce") {
        rule.mode = RuleMode::kEnforce;
      } else if (s->value == "audit") {
        rule.mode = RuleMode::kAudit;
      } else {
        r.error(v->mark, v->path,
                fmt::format("expected enforce or audit, got {}", quoted(s->value)));
      }
    }
  }
  if (const Field* v = m->get("inspect")) {
    if (auto b = r.boolean(*v)) rule.inspect = *b;
  }
  if (const Field* g = m->get("git")) {
    if (kind == RuleList::kDeny) {
      // A deny rule refuses the host outright; what a push may do is an allow rule's business.
      r.error(g->keyMark, g->path, "a deny rule cannot have a git block; move it to an allow rule");
    } else {
      rule.git = readGit(r, *g);
    }
  }
  if (const Field* v = m->get("via")) {
    if (kind == RuleList::kDeny) {
      r.error(v->keyMark, v->path, "a deny rule forwards nothing; `via` belongs on an allow rule");
    } else if (v->node.IsScalar()) {
      // `via: direct` (a parent's name alone must be written as a list: [corp]).
      if (auto s = r.string(*v, "direct or a list of upstream proxy names")) {
        if (s->value == "direct") {
          rule.via.emplace();
        } else {
          r.error(v->mark, v->path,
                  fmt::format("expected direct or a list of upstream proxy names such as [{}]",
                              s->value));
        }
      }
    } else if (auto list = r.stringList(*v, "[corp, corp-backup]")) {
      rule.via = std::move(*list);
    }
    rule.viaMark = v->mark;
  }
  if (const Field* v = m->get("llm")) {
    if (kind == RuleList::kDeny) {
      r.error(v->keyMark, v->path, "a deny rule forwards nothing; `llm` belongs on an allow rule");
    } else {
      rule.llm = readLlmRule(r, *v);
    }
  }
  // Presence, not validity: a present but broken `host` already has its own error, and so
  // has a misspelt one (`hots:`), which must not also read as "no host".
  if (!m->get("host") && !m->get("cidrs") && !hasMisspelt(f.node, {"host", "cidrs"})) {
    r.error(f.mark, f.path, "a rule needs `host` or `cidrs`");
  }
  return rule;
}

std::vector<Rule> readRules(Reader& r, const Field& f, RuleList kind) {
  std::vector<Rule> out;
  auto items = r.list(f, "a list of rules", true);
  if (!items) return out;
  for (const auto& item : *items) {
    if (auto rule = readRule(r, item, kind)) out.push_back(std::move(*rule));
  }
  return out;
}

}  // namespace

std::optional<Rule> readAllowRule(Reader& r, const Field& f) {
  return readRule(r, f, RuleList::kAllow);
}

void readPolicies(Reader& r, const Field& f, Config& cfg) {
  auto names = r.namedMap(f, "a map of policy names to policies", true);
  if (!names) return;
  for (const auto& [name, body] : names->entries()) {
    checkName(r, body.keyMark, body.path, name);
    Policy& p = cfg.policies[name];
    p.name = name;
    p.mark = body.keyMark;
    auto m = r.map(body, {"include", "allow", "deny", "budgets"},
                   "a policy (a map with include, allow, deny, budgets)");
    if (!m) continue;
    if (const Field* inc = m->get("include")) {
      if (auto items = r.list(*inc, "a list of policy names, e.g. [npm, pypi]", true)) {
        for (const auto& item : *items) {
          if (auto s = r.string(item, "a policy name")) p.include.push_back(std::move(*s));
        }
      }
    }
    if (const Field* a = m->get("allow")) p.allow = readRules(r, *a, RuleList::kAllow);
    if (const Field* d = m->get("deny")) p.deny = readRules(r, *d, RuleList::kDeny);
    if (const Field* b = m->get("budgets")) p.budgets = readBudgets(r, *b);
  }
}

void readGlobal(Reader& r, const Field& f, Global& global) {
  auto m = r.map(f, {"deny", "allow"}, "a map with deny and allow", true);
  if (!m) return;
  if (const Field* d = m->get("deny")) global.deny = readRules(r, *d, RuleList::kDeny);
  if (const Field* a = m->get("allow")) global.allow = readRules(r, *a, RuleList::kAllow);
}

}  // namespace sandgate::config::detail
