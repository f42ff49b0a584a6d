// Cost of one policy decision on a large policy: 10,000 exact hosts, 1,000 wildcards and
// 100 regexes (plus a few deny rules), for hits of each kind and a miss. The budget is
// 1 microsecond per decision (median); run a Release build:
//   build-rel/bench/policy_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "policy/engine.h"

namespace sandgate::policy {
namespace {

constexpr int kExact = 10000;
constexpr int kWildcards = 1000;
constexpr int kRegexes = 100;

config::Rule rule(std::string keyPath, int line, std::string host) {
  config::Rule r;
  r.keyPath = std::move(keyPath);
  r.mark = {line, 5};
  r.host = config::Located<std::string>{std::move(host), {line, 11}};
  return r;
}

std::shared_ptr<const Engine> buildEngine() {
  config::Config cfg;
  cfg.file = "bench.yaml";
  config::Policy& p = cfg.policies["big"];
  p.name = "big";
  int line = 1;
  auto allow = [&](std::string host) {
    p.allow.push_back(
        rule("policies.big.allow[" + std::to_string(p.allow.size()) + "]", line++, host));
  };
  for (int i = 0; i < kExact; ++i) allow("host" + std::to_string(i) + ".exact-example.com");
  for (int i = 0; i < kWildcards; ++i) allow("*.zone" + std::to_string(i) + ".wild-example.net");
  for (int i = 0; i < kRegexes; ++i) {
    allow("re:(api|cdn)-" + std::to_string(i) + "[a-z0-9]*\\.region[0-9]\\.rx" +
          std::to_string(i % 10) + "-example\\.org");
  }
  // Visible-request rule with methods and paths.
  config::Rule l7 = rule("policies.big.allow[" + std::to_string(p.allow.size()) + "]", line++,
                         "api.l7-example.com");
  l7.methods.push_back({"POST", {}});
  l7.paths.push_back({"/v1/chat/**", {}});
  l7.paths.push_back({"/v1/models/*", {}});
  p.allow.push_back(std::move(l7));
  config::Rule cidr;
  cidr.keyPath = "policies.big.allow[" + std::to_string(p.allow.size()) + "]";
  cidr.mark = {line++, 5};
  cidr.cidrs.push_back({"203.0.113.0/24", {}});
  p.allow.push_back(std::move(cidr));
  for (int i = 0; i < 10; ++i) {
    p.deny.push_back(rule("policies.big.deny[" + std::to_string(p.deny.size()) + "]", line++,
                          "blocked" + std::to_string(i) + ".exact-example.com"));
    p.deny.push_back(rule("policies.big.deny[" + std::to_string(p.deny.size()) + "]", line++,
                          "*.evil" + std::to_string(i) + ".wild-example.net"));
  }
  cfg.global.deny.push_back(rule("global.deny[0]", line++, "*.blocked-everywhere.com"));
  config::Task task;
  task.name = "bench";
  task.policy = {"big", {}};
  cfg.tasks.push_back(task);
  auto engine = Engine::compile(cfg);
  if (!engine.ok()) {
    std::fprintf(stderr, "compile failed:\n%s\n", engine.errorText().c_str());
    std::exit(1);
  }
  return *engine;
}

const Engine& engine() {
  static const std::shared_ptr<const Engine> e = buildEngine();
  return *e;
}

std::vector<Request> requests(int n, auto makeHost) {
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    auto t = normalizeHost(makeHost(i));
    Request r;
    r.target = std::get<Target>(t);
    r.port = 443;
    out.push_back(std::move(r));
  }
  return out;
}

// Runs decide() over a rotating set of requests and checks every verdict, so that the
// benchmark measures the real path and fails loudly if the policy stops matching.
void runDecisions(benchmark::State& state, const std::vector<Request>& reqs, Verdict want,
                  std::string_view reason) {
  const Engine& e = engine();
  size_t i = 0;
  for (auto _ : state) {
    Decision d = e.decide("bench", reqs[i]);
    if (d.verdict != want || d.reason != reason) {
      state.SkipWithError(("unexpected decision: " + d.detail).c_str());
      return;
    }
    benchmark::DoNotOptimize(d);
    if (++i == reqs.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ExactHit(benchmark::State& state) {
  static const auto reqs =
      requests(1024, [](int i) { return fmt::format("host{}.exact-example.com", i * 9 % kExact); });
  runDecisions(state, reqs, Verdict::kAllow, reason::kAllowed);
}

void BM_WildcardHit(benchmark::State& state) {
  static const auto reqs = requests(1024, [](int i) {
    return fmt::format("cdn{}.a.zone{}.wild-example.net", i, i % kWildcards);
  });
  runDecisions(state, reqs, Verdict::kAllow, reason::kAllowed);
}

void BM_RegexHit(benchmark::State& state) {
  static const auto reqs = requests(1024, [](int i) {
    int r = i % kRegexes;
    return fmt::format("{}-{}x7k.region{}.rx{}-example.org", i % 2 ? "api" : "cdn", r, i % 10,
                       r % 10);
  });
  runDecisions(state, reqs, Verdict::kAllow, reason::kAllowed);
}

void BM_Miss(benchmark::State& state) {
  static const auto reqs =
      requests(1024, [](int i) { return fmt::format("unknown{}.somewhere-else.example.com", i); });
  runDecisions(state, reqs, Verdict::kDeny, reason::kNoMatchingRule);
}

void BM_DenyHit(benchmark::State& state) {
  static const auto reqs =
      requests(1024, [](int i) { return fmt::format("x{}.evil{}.wild-example.net", i, i % 10); });
  runDecisions(state, reqs, Verdict::kDeny, reason::kDeniedByRule);
}

void BM_IpLiteralCidrHit(benchmark::State& state) {
  static const auto reqs = requests(256, [](int i) { return fmt::format("203.0.113.{}", i); });
  runDecisions(state, reqs, Verdict::kAllow, reason::kAllowed);
}

void BM_VisibleMethodPath(benchmark::State& state) {
  static auto reqs = requests(1, [](int) { return std::string("api.l7-example.com"); });
  reqs[0].method = "POST";
  reqs[0].path = "/v1/chat/completions";
  runDecisions(state, reqs, Verdict::kAllow, reason::kAllowed);
}

void BM_NormalizeHost(benchmark::State& state) {
  const std::string host = "Host1234.Exact-Example.COM.";
  for (auto _ : state) {
    auto t = normalizeHost(host);
    benchmark::DoNotOptimize(t);
  }
}

BENCHMARK(BM_ExactHit);
BENCHMARK(BM_WildcardHit);
BENCHMARK(BM_RegexHit);
BENCHMARK(BM_Miss);
BENCHMARK(BM_DenyHit);
BENCHMARK(BM_IpLiteralCidrHit);
BENCHMARK(BM_VisibleMethodPath);
BENCHMARK(BM_NormalizeHost);

}  // namespace
}  // namespace sandgate::policy

BENCHMARK_MAIN();
