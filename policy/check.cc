// checkTarget() and runCase(): the CLI's view of decide() + checkAddress().
#include "policy/check.h"

#include <fmt/format.h>

#include <algorithm>

#include "policy/git_rules.h"

namespace sandgate::policy {

namespace {

const config::ResolveEntry* findOverride(const config::Config& cfg, std::string_view name) {
  auto it = std::find_if(cfg.resolve.begin(), cfg.resolve.end(),
                         [&](const config::ResolveEntry& e) { return e.name == name; });
  return it == cfg.resolve.end() ? nullptr : &*it;
}

}  // namespace

CheckResult checkTarget(const Engine& engine, const config::Config& cfg, std::string_view task,
                        const CheckTarget& target, const std::optional<std::string>& method) {
  Request req;
  req.target = target.target;
  req.port = target.port;
  std::string effectiveMethod;
  if (method || target.path) {
    effectiveMethod = method.value_or("GET");
    req.method = effectiveMethod;
    req.path = target.path ? std::string_view(*target.path) : std::string_view("/");
  }
  CheckResult out;
  out.decision = engine.decide(task, req);
  if (!out.decision.allowed() || target.target.isAddress) return out;
  if (const auto* entry = findOverride(cfg, target.target.name)) {
    if (auto addr = parseIp(entry->address)) {
      out.resolvedAddress = *addr;
      out.decision = engine.checkAddress(out.decision, *addr);
    }
  }
  return out;
}

CheckResult checkGitPush(const Engine& engine, const config::Config& cfg, std::string_view task,
                         const CheckTarget& repository, std::string_view ref) {
  CheckTarget push = repository;
  std::string path = repository.path.value_or("/");
  while (path.ends_with('/')) path.pop_back();
  push.path = path + "/git-receive-pack";
  CheckResult out = checkTarget(engine, cfg, task, push, std::string("POST"));
  Decision& d = out.decision;
  if (!d.allowed() || d.git == nullptr) return out;
  auto refuse = [&](const GitRules::Verdict& v) {
    d.verdict = Verdict::kDeny;
    d.reason = v.reason;
    d.detail = v.detail;
  };
  auto req = classifyGitRequest("POST", *push.path, "");
  if (auto v = d.git->decideRequest(*req); !v.allowed) {
    refuse(v);
    return out;
  }
  const bool del = ref.starts_with(':');
  PushCommand cmd{std::string(40, '1'), std::string(40, del ? '0' : '2'),
                  std::string(del ? ref.substr(1) : ref)};
  if (auto v = d.git->decideCommand(cmd); !v.allowed) {
    refuse(v);
  } else {
    d.detail += fmt::format("; git.push admits {} {} in {}", del ? "deleting" : "updating", cmd.ref,
                            req->repository);
  }
  return out;
}

CaseOutcome runCase(const Engine& engine, const config::Config& cfg, const config::TestCase& tc) {
  CaseOutcome out;
  auto parsed = parseCheckTarget(tc.target);
  if (auto* err = std::get_if<std::string>(&parsed)) {
    out.message = fmt::format("invalid target \"{}\": {}", tc.target, *err);
    return out;
  }
  if (!engine.hasTask(tc.task)) {
    out.message = fmt::format("unknown task \"{}\"", tc.task);
    return out;
  }
  const auto& target = std::get<CheckTarget>(parsed);
  out.result = tc.gitPush ? checkGitPush(engine, cfg, tc.task, target, *tc.gitPush)
                          : checkTarget(engine, cfg, tc.task, target, tc.method);
  const Decision& d = out.result->decision;
  bool allowed = d.allowed();
  std::string got = fmt::format("{} ({}{}{})", verdictName(d.verdict), d.reason,
                                d.rule.empty() ? "" : ", rule ", d.rule);
  if (allowed != tc.expectAllow) {
    out.message = fmt::format("expected {}, got {}", tc.expectAllow ? "allow" : "deny", got);
    return out;
  }
  if (tc.reason && *tc.reason != d.reason) {
    out.message = fmt::format("expected reason {}, got {}", *tc.reason, got);
    return out;
  }
  if (tc.rule && !d.rule.ends_with(*tc.rule)) {
    out.message = fmt::format("expected rule {}, got {}", *tc.rule, got);
    return out;
  }
  out.passed = true;
  return out;
}

}  // namespace sandgate::policy
