// Fuzzes how the policy reads a request path (policy/path_pattern.h, policy/git_rules.h): the
// spellings a server or a forge reads as one path must be judged as that path (issue #38: a
// `%61` in a denied path and a `;x` git endpoint once let a key through).
//
// From a plain path p (visible ASCII, no '%', ';', '\\', '?', '#') the target makes a spelling
// s of it, and checks, beyond not crashing:
//  - canonicalPath(s) == p when s percent-encodes some of p's unreserved bytes (either hex case):
//    the form every path glob is matched against is the path a server reads;
//  - decide(): where p is refused by a deny rule (`/admin/**`, `/v1/secret*`, `/Internal/*`),
//    s is refused too, for s = p with unreserved bytes encoded and letters in another case (deny
//    globs are case-insensitive), whatever the reason;
//  - classifyGitRequest(): a Git endpoint is recognised under every spelling a lenient forge
//    routes to it (encoded bytes, another case, `;params` after a segment, '\\' for '/'), as the
//    same service, and a spelling with an escape is marked `encoded` (its repository never
//    matches a rule).
#include <fuzzer/FuzzedDataProvider.h>

#include <cctype>
#include <cstdint>
#include <memory>
#include <string>

#include "config/config.h"
#include "fuzz/check.h"
#include "policy/engine.h"
#include "policy/git_rules.h"
#include "policy/host.h"
#include "policy/path_pattern.h"

namespace {

namespace policy = sandgate::policy;

constexpr char kConfig[] = R"(
policies:
  p:
    allow:
      - host: api.test
        paths: ["/**"]
    deny:
      - host: api.test
        paths: ["/admin/**", "/v1/secret*", "/Internal/*"]
tasks:
  - name: t
    policy: p
)";

const policy::Engine& engine() {
  static const std::shared_ptr<const policy::Engine> e = [] {
    auto cfg = sandgate::config::loadString(kConfig, "fuzz.yaml");
    SANDGATE_FUZZ_CHECK(cfg.ok(), "the fuzz target's config loads");
    auto compiled = policy::Engine::compile(cfg.value());
    SANDGATE_FUZZ_CHECK(compiled.ok(), "the fuzz target's config compiles");
    return compiled.value();
  }();
  return *e;
}

bool unreserved(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
         c == '~';
}

// p made of visible ASCII without the bytes that start another reading ('%', ';', '\\') or end
// the path ('?', '#'); a leading '/'.
std::string plainPath(const std::string& raw) {
  std::string p = "/";
  for (char c : raw) {
    if (c > 0x20 && c < 0x7f && c != '%' && c != ';' && c != '\\' && c != '?' && c != '#') {
      p += c;
    }
  }
  return p;
}

std::string encodeSome(const std::string& p, FuzzedDataProvider& in, bool* encodedAny) {
  static constexpr char kUpper[] = "0123456789ABCDEF";
  static constexpr char kLower[] = "0123456789abcdef";
  std::string s;
  for (char c : p) {
    if (unreserved(c) && in.ConsumeBool()) {
      const char* hex = in.ConsumeBool() ? kUpper : kLower;
      const auto b = static_cast<unsigned char>(c);
      s += '%';
      s += hex[b >> 4];
      s += hex[b & 15];
      *encodedAny = true;
    } else {
      s += c;
    }
  }
  return s;
}

std::string flipSomeCase(const std::string& p, FuzzedDataProvider& in) {
  std::string s = p;
  for (char& c : s) {
    if (std::isalpha(static_cast<unsigned char>(c)) && in.ConsumeBool()) {
      c = std::isupper(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c))
                                                       : static_cast<char>(std::toupper(c));
    }
  }
  return s;
}

policy::Decision decidePath(const std::string& path) {
  policy::Request req;
  req.target = std::get<policy::Target>(policy::normalizeHost("api.test"));
  req.port = 443;
  req.method = "GET";
  req.path = path;
  return engine().decide("t", req);
}

void checkDenyPaths(const std::string& p, FuzzedDataProvider& in) {
  const policy::Decision plain = decidePath(p);
  if (plain.verdict != policy::Verdict::kDeny) return;
  bool encoded = false;
  const std::string s = encodeSome(flipSomeCase(p, in), in, &encoded);
  const policy::Decision spelled = decidePath(s);
  SANDGATE_FUZZ_CHECK(spelled.verdict == policy::Verdict::kDeny,
                      "a spelling of a denied path is denied");
}

// Endpoints a Git client asks for, after a repository path.
constexpr const char* kEndpoints[] = {"/git-receive-pack", "/git-upload-pack", "/info/refs",
                                      "/HEAD", "/objects/info/packs", "/archive/main.zip"};

std::string spellForge(const std::string& p, FuzzedDataProvider& in, bool* encoded) {
  std::string s = encodeSome(flipSomeCase(p, in), in, encoded);
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '/' && i > 0 && in.ConsumeBool()) out += ";x";  // a parameter after a segment
    out += (s[i] == '/' && i > 0 && in.ConsumeBool()) ? '\\' : s[i];
  }
  if (in.ConsumeBool()) out += ";jsessionid=1";
  return out;
}

void checkGitEndpoints(const std::string& repo, FuzzedDataProvider& in) {
  const std::string method = in.ConsumeBool() ? "POST" : "GET";
  const std::string query = in.ConsumeBool() ? "service=git-receive-pack" : "";
  const std::string p = repo + kEndpoints[in.ConsumeIntegralInRange<size_t>(0, 5)];
  const auto plain = policy::classifyGitRequest(method, p, query);
  if (!plain) return;
  bool encoded = false;
  const std::string s = spellForge(p, in, &encoded);
  const auto spelled = policy::classifyGitRequest(method, s, query);
  SANDGATE_FUZZ_CHECK(spelled.has_value(), "a spelled Git endpoint is recognised");
  SANDGATE_FUZZ_CHECK(spelled->service == plain->service, "as the same service");
  if (encoded) SANDGATE_FUZZ_CHECK(spelled->encoded, "a spelling with an escape is marked");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // paths are short; longer inputs only slow the search
  FuzzedDataProvider in(data, size);
  const std::string p = plainPath(in.ConsumeRandomLengthString(256));
  bool encoded = false;
  const std::string s = encodeSome(p, in, &encoded);
  SANDGATE_FUZZ_CHECK(policy::canonicalPath(s) == p, "encoded unreserved bytes decode to p");
  (void)policy::isNormalPath(s);
  checkDenyPaths(p, in);
  checkGitEndpoints(p == "/" ? "/acme/widgets" : p, in);
  return 0;
}
