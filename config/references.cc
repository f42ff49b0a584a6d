// Checks of references between sections: includes, include cycles, task policies, rule
// credentials, task admin_groups and listen.admin_group.
#include <fmt/format.h>

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
    // An empty value means the task's policy was missing or broken: already reported.
    if (t.policy.value.empty() || cfg.policies.contains(t.policy.value)) continue;
    r.error(t.policy.mark, fmt::format("tasks[{}].policy", i),
            unknownName("policy", t.policy.value, cfg.policies));
  }
}

}  // namespace sandgate::config::detail
