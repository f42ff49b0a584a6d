// Cost of scrubbing a response body for a task's secrets: one multi-pattern pass (ScrubSet)
// over a 256 KiB JSON-like body fed in 16 KiB slices, for 1, 4, 16 and 64 secrets (URL forms
// on, as in the proxy; keys sharing the "sk-proj-" prefix, as one vendor's do). Baselines
// measured in the same run: copying the body (the floor any relay pays), and one pass per
// secret (one single-rule scrubber after another: what the cost would be if the matcher
// looked for each secret on its own). The BM_AllSecrets* cases measure the cost of scrubbing
// every configured secret (issue #38) at 1, 10 and 1,000. Run a Release build:
//   build-rel/bench/scrub_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "broker/scrubber.h"

namespace sandgate::broker {
namespace {

constexpr size_t kBody = 256 * 1024;
constexpr size_t kSlice = 16 * 1024;

// Text with the letters, digits, quotes, '%' and '+' of JSON and URLs, and many 's' and 'k'
// (the secrets' first bytes) that start no secret.
const std::string& body() {
  static const std::string b = [] {
    std::mt19937 rng(7);
    static constexpr char kAlphabet[] =
        "abcdefghijklmnopqrstuvwxyzsssskkkk-ABCDEFGHIJ0123456789\"{}:, %+/_.";
    std::string out;
    out.reserve(kBody);
    while (out.size() < kBody) out += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
    return out;
  }();
  return b;
}

std::vector<ScrubRule> secrets(int n) {
  std::mt19937 rng(static_cast<unsigned>(n));
  std::vector<ScrubRule> out;
  for (int i = 0; i < n; ++i) {
    std::string s = "sk-proj-";
    while (s.size() < 48) s += "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"[rng() % 62];
    std::string placeholder = "sk-proj-" + std::string(40, 'P');
    out.push_back({Secret::copyOf(s), std::move(placeholder), "c" + std::to_string(i)});
  }
  return out;
}

void feedBody(Scrubber& s, std::string& out) {
  const std::string& b = body();
  for (size_t at = 0; at < b.size(); at += kSlice) {
    s.feed(std::string_view(b).substr(at, kSlice), out);
  }
  s.finish(out);
}

void BM_Copy(benchmark::State& state) {
  std::string out;
  for (auto _ : state) {
    out.clear();
    const std::string& b = body();
    for (size_t at = 0; at < b.size(); at += kSlice) out.append(b, at, kSlice);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBody));
}
BENCHMARK(BM_Copy);

void BM_OnePass(benchmark::State& state) {
  auto set = std::make_shared<const ScrubSet>(secrets(static_cast<int>(state.range(0))));
  std::string out;
  out.reserve(kBody);
  for (auto _ : state) {
    out.clear();
    Scrubber s(set);
    feedBody(s, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBody));
}
BENCHMARK(BM_OnePass)->Arg(1)->Arg(4)->Arg(16)->Arg(64);

void BM_PassPerSecret(benchmark::State& state) {
  std::vector<std::shared_ptr<const ScrubSet>> sets;
  for (auto& r : secrets(static_cast<int>(state.range(0)))) {
    sets.push_back(std::make_shared<const ScrubSet>(std::vector<ScrubRule>{std::move(r)}));
  }
  std::string in = body(), out;
  for (auto _ : state) {
    std::string cur = in;
    for (const auto& set : sets) {
      out.clear();
      Scrubber s(set);
      for (size_t at = 0; at < cur.size(); at += kSlice) {
        s.feed(std::string_view(cur).substr(at, kSlice), out);
      }
      s.finish(out);
      cur.swap(out);
    }
    benchmark::DoNotOptimize(cur.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBody));
}
BENCHMARK(BM_PassPerSecret)->Arg(1)->Arg(4)->Arg(16)->Arg(64);

// Issue #38, item 5: every response is scrubbed for every configured secret, not only the
// task's. The per-request cost at 1, 10 and 1,000 secrets: a typical API response (4 KiB of
// JSON-like text in one slice) through a new Scrubber over the connection's compiled set;
// and compiling that set, which a connection does once (and again after a rotation).
constexpr size_t kResponse = 4 * 1024;

void BM_AllSecretsPerResponse(benchmark::State& state) {
  auto set = std::make_shared<const ScrubSet>(secrets(static_cast<int>(state.range(0))));
  const std::string_view response = std::string_view(body()).substr(0, kResponse);
  std::string out;
  out.reserve(kResponse);
  for (auto _ : state) {
    out.clear();
    Scrubber s(set);
    s.feed(response, out);
    s.finish(out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kResponse));
}
BENCHMARK(BM_AllSecretsPerResponse)->Arg(1)->Arg(10)->Arg(1000);

void BM_AllSecretsLargeBody(benchmark::State& state) { BM_OnePass(state); }
BENCHMARK(BM_AllSecretsLargeBody)->Arg(1)->Arg(10)->Arg(1000);

void BM_AllSecretsCompile(benchmark::State& state) {
  const auto rules = secrets(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    auto set = std::make_shared<const ScrubSet>(rules);
    benchmark::DoNotOptimize(set.get());
  }
}
BENCHMARK(BM_AllSecretsCompile)->Arg(1)->Arg(10)->Arg(1000);

}  // namespace
}  // namespace sandgate::broker

BENCHMARK_MAIN();
