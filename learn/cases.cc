// renderCases() and diffDecisions().
#include "learn/cases.h"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "learn/render.h"
#include "policy/target.h"

namespace sandgate::learn {

namespace {

using Key = std::tuple<std::string, std::string, std::string>;  // task, target, method

}  // namespace

std::string checkTargetOf(const Observation& o);

namespace {

Key keyOf(const Observation& o) { return {o.task, checkTargetOf(o), o.method.value_or("")}; }

// A push's refs as `git_push` cases on the repository's URL (what `policy check --git-push`
// takes): each expects what the draft decides, and one the audit allowed must be allowed.
struct Push {
  std::string repository;  // the repository's URL, as `policy check --git-push` takes it
  policy::CheckTarget target;
  std::string ref;  // ":ref" for a deletion
};

// The refs a receive-pack request pushed, each as `policy check --git-push` would decide it.
std::vector<Push> pushesOf(const Observation& o) {
  constexpr std::string_view kEndpoint = "/git-receive-pack";
  if (!o.git || !o.path || !o.path->ends_with(kEndpoint)) return {};
  std::string repo = checkTargetOf(o);
  repo.resize(repo.size() - kEndpoint.size());
  auto parsed = policy::parseCheckTarget(repo);
  if (!std::holds_alternative<policy::CheckTarget>(parsed)) return {};
  std::vector<Push> out;
  for (const auto& ref : o.git->refs) {
    const bool del = ref.newId.find_first_not_of('0') == std::string::npos;
    out.push_back({repo, std::get<policy::CheckTarget>(parsed), del ? ":" + ref.ref : ref.ref});
  }
  return out;
}

std::string gitPushCases(const Observation& o, const policy::Engine& engine,
                         const config::Config& cfg, std::vector<std::string>* problems) {
  std::string out;
  for (const auto& [repo, target, push] : pushesOf(o)) {
    auto d = policy::checkGitPush(engine, cfg, o.task, target, push).decision;
    if (o.allowed && !d.allowed()) {
      problems->push_back(
          fmt::format("{}:{}: push of {} allowed in the audit, but the draft "
                      "decides {} ({})",
                      o.file, o.line, push, policy::verdictName(d.verdict), d.reason));
    }
    out += fmt::format("  - name: {}\n    task: {}\n    target: {}\n    git_push: {}\n",
                       quote(fmt::format("push {} to {} ({}:{})", push, repo, o.file, o.line)),
                       quote(o.task), quote(repo), quote(push));
    out += fmt::format("    expect: {}\n", d.allowed() ? "allow" : "deny");
    if (!d.allowed()) out += fmt::format("    reason: {}\n", quote(std::string(d.reason)));
  }
  return out;
}

}  // namespace

std::string checkTargetOf(const Observation& o) {
  std::string host = o.host.find(':') != std::string::npos && !o.host.starts_with('[')
                         ? "[" + o.host + "]"
                         : o.host;
  if (!o.path) return fmt::format("{}:{}", host, o.port);
  std::string scheme = o.scheme;
  if (scheme.empty()) scheme = o.kind == "forward" ? "http" : "https";
  return fmt::format("{}://{}:{}{}", scheme, host, o.port, *o.path);
}

policy::CheckResult decideObserved(const policy::Engine& engine, const config::Config& cfg,
                                   const Observation& o) {
  auto parsed = policy::parseCheckTarget(checkTargetOf(o));
  if (auto* err = std::get_if<std::string>(&parsed)) {
    policy::CheckResult bad;
    bad.decision.reason = policy::reason::kInvalidHost;
    bad.decision.detail = *err;
    return bad;
  }
  return policy::checkTarget(engine, cfg, o.task, std::get<policy::CheckTarget>(parsed), o.method);
}

std::string renderCases(const std::vector<Observation>& requests, const policy::Engine& engine,
                        const config::Config& cfg, std::vector<std::string>* problems) {
  std::string out =
      "# Written by `sandgate policy learn --tests`: one case per distinct request of the audit.\n"
      "# Allowed in the audit: expect allow. Refused in the audit: expect what the drafted\n"
      "# policy decided (it allows what was seen, so mostly allow).\n"
      "# Run: sandgate policy test --config LEARNED.yaml THIS_FILE\n"
      "cases:\n";
  std::map<Key, const Observation*> firstOf;
  std::map<Key, int> count;
  std::vector<Key> order;
  for (const auto& o : requests) {
    Key k = keyOf(o);
    // An allowed sighting decides the case: it must stay allowed.
    auto [it, fresh] = firstOf.emplace(k, &o);
    if (fresh) order.push_back(k);
    if (!fresh && o.allowed && !it->second->allowed) it->second = &o;
    ++count[k];
  }
  for (const auto& k : order) {
    const Observation& o = *firstOf[k];
    auto result = decideObserved(engine, cfg, o);
    const auto& d = result.decision;
    // The draft writes no deny rule: a deny rule deciding comes from the --merge config, whose
    // denials stand (the case asserts them).
    const bool denial =
        d.reason == policy::reason::kDeniedByRule || d.reason == policy::reason::kGlobalDeny;
    bool expectAllow = d.allowed() || (o.allowed && !denial);
    if (o.allowed && !d.allowed() && !denial) {
      problems->push_back(fmt::format("{}:{}: allowed in the audit, but the draft decides {} ({})",
                                      o.file, o.line, policy::verdictName(d.verdict), d.reason));
    }
    std::string name = fmt::format("{} {}{} ({}:{}{})", o.allowed ? "allowed" : "refused",
                                   o.method ? *o.method + " " : "", checkTargetOf(o), o.file,
                                   o.line, count[k] > 1 ? fmt::format(", {} alike", count[k]) : "");
    if (!o.allowed) name += fmt::format(" was {}", o.reason);
    out += fmt::format("  - name: {}\n    task: {}\n    target: {}\n", quote(name), quote(o.task),
                       quote(checkTargetOf(o)));
    if (o.method) out += fmt::format("    method: {}\n", quote(*o.method));
    out += fmt::format("    expect: {}\n", expectAllow ? "allow" : "deny");
    if (!expectAllow) out += fmt::format("    reason: {}\n", quote(std::string(d.reason)));
    out += gitPushCases(o, engine, cfg, problems);
  }
  return out;
}

DiffResult diffDecisions(const std::vector<Observation>& requests, const policy::Engine& before,
                         const config::Config& beforeCfg, const policy::Engine& after,
                         const config::Config& afterCfg) {
  DiffResult out;
  std::map<Key, size_t> seen;  // -> index in out.changes, or npos when unchanged
  for (const auto& o : requests) {
    Key k = keyOf(o);
    if (auto it = seen.find(k); it != seen.end()) {
      if (it->second != std::string::npos) ++out.changes[it->second].count;
      continue;
    }
    auto compare = [&](const Key& key, policy::Decision a, policy::Decision b) {
      ++out.decided;
      if (a.verdict == b.verdict && a.reason == b.reason) {
        seen.emplace(key, std::string::npos);
        return;
      }
      seen.emplace(key, out.changes.size());
      DecisionChange c;
      c.first = &o;
      c.count = 1;
      c.target = std::get<1>(key);
      c.method = std::get<2>(key);
      c.before = std::move(a);
      c.after = std::move(b);
      // Decision's pointers are into the engines, which outlive the result.
      out.changes.push_back(std::move(c));
    };
    compare(k, decideObserved(before, beforeCfg, o).decision,
            decideObserved(after, afterCfg, o).decision);
    // Each ref a push carried, under the rule's git: block (as `policy check --git-push`).
    for (const auto& [repo, target, push] : pushesOf(o)) {
      Key pk{o.task, repo, "git push " + push};
      if (seen.contains(pk)) continue;
      compare(pk, policy::checkGitPush(before, beforeCfg, o.task, target, push).decision,
              policy::checkGitPush(after, afterCfg, o.task, target, push).decision);
    }
  }
  return out;
}

}  // namespace sandgate::learn
