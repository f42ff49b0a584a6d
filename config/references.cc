// Checks of references between sections: includes, include cycles, task policies, rule
// credentials, task admin_groups and listen.admin_group.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "config/readers.h"

namespace sandgate::config::detail {
namespace {

// "unknown policy `x`; did you mean `y`?" or the list of what exists.
template <typename Map>
std::string unknownName(std::string_view kind, std::string_view name, const Map& known) {
  std::vector<std::string_view> names;
  for (const auto& [k, v] : known) names.push_back(k);
  auto hint = closestKey(name, names);
  if (!hint.empty()) return fmt::format("unknown {} `{}`; did you mean `{}`?", kind, name, hint);
  if (names.empty()) return fmt::format("unknown {} `{}`; none are defined", kind, name);
  std::string list;
  for (size_t i = 0; i < names.size() && i < 10; ++i) {
    if (i) list += ", ";
    list += names[i];
  }
  if (names.size() > 10) list += ", ...";
  return fmt::format("unknown {} `{}`; defined: {}", kind, name, list);
}

class CycleFinder {
 public:
  CycleFinder(Reader& r, const Config& cfg) : r_(r), cfg_(cfg) {}

  void run() {
    // Every edge is followed once, so every cycle is reported once, at the include that
    // closes it.
    for (const auto& [name, p] : cfg_.policies) {
      if (state_[name] == State::kNew) visit(p);
    }
  }

 private:
  enum class State { kNew, kActive, kDone };

  void visit(const Policy& p) {
    state_[p.name] = State::kActive;
    stack_.push_back(p.name);
    for (size_t i = 0; i < p.include.size(); ++i) {
      const auto& inc = p.include[i];
      auto it = cfg_.policies.find(inc.value);
      if (it == cfg_.policies.end()) continue;  // reported as unknown
      State s = state_[inc.value];
      if (s == State::kActive) {
        std::string cycle;
        bool in = false;
        for (const auto& n : stack_) {
          if (n == inc.value) in = true;
          if (in) cycle += n + " -> ";
        }
        cycle += inc.value;
        r_.error(inc.mark, fmt::format("policies.{}.include[{}]", p.name, i),
                 fmt::format("include cycle: {}", cycle));
      } else if (s == State::kNew) {
        visit(it->second);
      }
    }
    stack_.pop_back();
    state_[p.name] = State::kDone;
  }

  Reader& r_;
  const Config& cfg_;
  std::map<std::string, State, std::less<>> state_;
  std::vector<std::string> stack_;
};

void checkRuleCredentials(Reader& r, const Config& cfg, const std::vector<Rule>& rules) {
  for (const auto& rule : rules) {
    if (!rule.credential || cfg.credentials.contains(rule.credential->value)) continue;
    r.error(rule.credential->mark, rule.keyPath + ".credential",
            unknownName("credential", rule.credential->value, cfg.credentials));
  }
}

bool iequalsAscii(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// tasks[].repositories: each names a github_app credential and a subset of its repositories
// (GitHub compares names case-insensitively), so that a task's token never reaches further
// than the source allows.
void checkTaskRepositories(Reader& r, const Config& cfg, size_t i, const Task& t) {
  for (const auto& [credential, repos] : t.repositories) {
    const std::string path = childPath(fmt::format("tasks[{}].repositories", i), credential);
    auto it = cfg.credentials.find(credential);
    if (it == cfg.credentials.end()) {
      r.error(t.repositoriesMark, path, unknownName("credential", credential, cfg.credentials));
      continue;
    }
    const auto& src = it->second.source;
    if (src.kind != CredentialSource::Kind::kGithubApp || !src.githubApp) {
      r.error(t.repositoriesMark, path,
              fmt::format("credential `{}` is not a github_app source: only minted tokens can "
                          "be narrowed to repositories",
                          credential));
      continue;
    }
    for (size_t j = 0; j < repos.size(); ++j) {
      const auto& name = repos[j].value;
      const auto& allowed = src.githubApp->repositories;
      const bool in = std::any_of(allowed.begin(), allowed.end(),
                                  [&](const auto& a) { return iequalsAscii(a.value, name); });
      if (in) continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a.value;
      r.error(repos[j].mark, fmt::format("{}[{}]", path, j),
              fmt::format("`{}` is not among credential `{}`'s repositories ({}): a task may "
                          "only narrow the source's set",
                          name, credential, list));
    }
  }
}

}  // namespace

void checkReferences(Reader& r, const Config& cfg) {
  for (const auto& [name, p] : cfg.policies) {
    for (size_t i = 0; i < p.include.size(); ++i) {
      const auto& inc = p.include[i];
      if (cfg.policies.contains(inc.value)) continue;
      r.error(inc.mark, fmt::format("{}.include[{}]", childPath("policies", name), i),
              unknownName("policy", inc.value, cfg.policies));
    }
    checkRuleCredentials(r, cfg, p.allow);
    checkRuleCredentials(r, cfg, p.deny);
  }
  checkRuleCredentials(r, cfg, cfg.global.allow);
  checkRuleCredentials(r, cfg, cfg.global.deny);
  CycleFinder(r, cfg).run();
  for (size_t i = 0; i < cfg.tasks.size(); ++i) {
    const auto& t = cfg.tasks[i];
    // Only root and members of listen.admin_group can reach the admin socket at all, and root
    // may use every task: without admin_group, a task's admin_groups would allow nobody more.
    if (t.adminGroups && !cfg.listen.adminGroup) {
      r.error(t.adminGroups->front().mark, fmt::format("tasks[{}].admin_groups", i),
              "admin_groups needs listen.admin_group (the group that may reach the admin "
              "socket; admin_groups then narrows which of its members may use this task)");
    }
    checkTaskRepositories(r, cfg, i, t);
    // A task's budget and its policy's are counted under their names: one name for both would
    // count each request twice against two limits.
    if (auto p = cfg.policies.find(t.policy.value); p != cfg.policies.end()) {
      for (const auto& b : t.budgets) {
        for (const auto& pb : p->second.budgets) {
          if (!b.name.empty() && b.name == pb.name) {
            r.error(b.mark, b.keyPath,
                    fmt::format("budget `{}` is also a budget of policy `{}` (line {}): give it "
                                "another name",
                                b.name, p->first, pb.mark.line));
          }
        }
      }
    }
    // An empty value means the task's policy was missing or broken: already reported.
    if (t.policy.value.empty() || cfg.policies.contains(t.policy.value)) continue;
    r.error(t.policy.mark, fmt::format("tasks[{}].policy", i),
            unknownName("policy", t.policy.value, cfg.policies));
  }
}

}  // namespace sandgate::config::detail
