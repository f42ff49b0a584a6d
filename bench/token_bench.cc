// Cost of verifying one task token (proxy/identity/task_token.cc) for each algorithm: the first
// time (decode, JSON twice: the duplicate-key pass and the DOM, the signature or MAC, the claim
// checks) and remembered (the token's SHA-256 found, the claims checked again). A connection
// pays it once (later requests compare a SHA-256 of the token); the budget is 20
// microseconds. Baseline in the same run: the SHA-256 a static token costs. Release build:
//   build-rel/bench/token_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "proxy/identity/proxy_auth.h"
#include "proxy/identity/task_token.h"

namespace sandgate::proxy {
namespace {

using Algorithm = config::TokenKey::Algorithm;
constexpr int64_t kNow = 1'800'000'000;
const std::string kHsKey = "benchmark-shared-key-0123456789abcdef-0123";

struct Fixture {
  std::string dir;
  config::Tokens config;
  std::shared_ptr<const TokenVerifier> verifier;
  std::string tokens[3];

  Fixture() {
    char tmpl[] = "/tmp/sandgate-token-bench-XXXXXX";
    dir = ::mkdtemp(tmpl);
    config::Tokens t;
    std::string priv[3] = {kHsKey, "", ""};
    const Algorithm algs[3] = {Algorithm::kHS256, Algorithm::kEdDSA, Algorithm::kES256};
    for (int i = 0; i < 3; ++i) {
      config::TokenKey k;
      k.id = "k" + std::to_string(i);
      k.algorithm = algs[i];
      k.file = dir + "/" + k.id;
      std::string pub = kHsKey;
      if (i > 0) {
        EVP_PKEY* p = i == 1 ? EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519")
                             : EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
        auto pem = [&](bool isPrivate) {
          BIO* bio = BIO_new(BIO_s_mem());
          if (isPrivate) {
            PEM_write_bio_PrivateKey(bio, p, nullptr, nullptr, 0, nullptr, nullptr);
          } else {
            PEM_write_bio_PUBKEY(bio, p);
          }
          char* data = nullptr;
          long n = BIO_get_mem_data(bio, &data);
          std::string out(data, static_cast<size_t>(n));
          BIO_free(bio);
          return out;
        };
        priv[i] = pem(true);
        pub = pem(false);
        EVP_PKEY_free(p);
      }
      std::ofstream(k.file) << pub;
      t.keys.push_back(k);
      TokenRequest r;
      r.task = "agent";
      r.hosts = {"api.example.com"};
      tokens[i] = mintToken(algs[i], k.id, priv[i], claimsFor(r, kNow)).value();
    }
    config = t;
    verifier = TokenVerifier::load(t, "bench.yaml").value();
  }
  ~Fixture() { std::system(("rm -rf " + dir).c_str()); }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_StaticTokenHash(benchmark::State& state) {
  const std::string& token = fixture().tokens[0];
  for (auto _ : state) benchmark::DoNotOptimize(tokenHashOf(token));
}
BENCHMARK(BM_StaticTokenHash);

// A token's first connection: the signature is checked (a fresh verifier, whose loading is not
// timed, remembers nothing).
void BM_VerifyFirst(benchmark::State& state) {
  auto& f = fixture();
  const std::string& token = f.tokens[state.range(0)];
  for (auto _ : state) {
    state.PauseTiming();
    auto verifier = TokenVerifier::load(f.config, "bench.yaml").value();
    state.ResumeTiming();
    auto c = verifier->verify(token, kNow);
    if (!c.ok()) state.SkipWithError("token refused");
    benchmark::DoNotOptimize(c);
  }
}
// 0: HS256, 1: EdDSA, 2: ES256
BENCHMARK(BM_VerifyFirst)->Arg(0)->Arg(1)->Arg(2);

// Every later connection with the same token: remembered by its SHA-256, times and revocation
// checked again.
void BM_VerifyRemembered(benchmark::State& state) {
  auto& f = fixture();
  const std::string& token = f.tokens[state.range(0)];
  for (auto _ : state) {
    auto c = f.verifier->verify(token, kNow);
    if (!c.ok()) state.SkipWithError("token refused");
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BM_VerifyRemembered)->Arg(0)->Arg(1)->Arg(2);

}  // namespace
}  // namespace sandgate::proxy

BENCHMARK_MAIN();
