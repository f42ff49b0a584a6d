// Placeholder generation (CSPRNG, format-preserving) and the per-request placeholder scan.
#include "broker/placeholder.h"

#include <openssl/rand.h>

#include <algorithm>
#include <stdexcept>

#include "broker/store.h"
#include "common/encoding.h"

namespace sandgate::broker {

namespace {

constexpr std::string_view kGenericPrefix = "sandgate-placeholder-";
constexpr size_t kGenericRandomChars = 32;

std::string randomAlnum(size_t n) {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string out;
  out.reserve(n);
  unsigned char buf[64];
  while (out.size() < n) {
    if (RAND_bytes(buf, sizeof buf) != 1) {
      // No randomness means no safe placeholder; this cannot be handled by degrading.
      throw std::runtime_error("RAND_bytes failed");
    }
    for (unsigned char b : buf) {
      // Rejection sampling: 248 = 4 * 62, so the kept bytes map uniformly onto the alphabet.
      if (b < 248 && out.size() < n) out += kAlphabet[b % kAlphabet.size()];
    }
  }
  return out;
}

bool overlaps(std::string_view a, std::string_view b) {
  return !a.empty() && !b.empty() &&
         (a.find(b) != std::string_view::npos || b.find(a) != std::string_view::npos);
}

}  // namespace

const std::vector<std::string_view>& knownKeyPrefixes() {
  static const std::vector<std::string_view> kPrefixes = [] {
    std::vector<std::string_view> p = {
        "sk-proj-",    "sk-svcacct-", "sk-admin-", "sk-ant-api03-", "sk-ant-", "sk-",
        "github_pat_", "ghp_",        "gho_",      "ghu_",          "ghs_",    "ghr_",
        "glpat-",      "xoxb-",       "xoxp-",     "xoxa-",         "xapp-",   "hf_",
        "sk_live_",    "sk_test_",    "rk_live_",  "rk_test_",      "npm_"};
    std::stable_sort(p.begin(), p.end(),
                     [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
    return p;
  }();
  return kPrefixes;
}

std::string makePlaceholder(std::string_view secret) {
  std::string_view prefix;
  for (auto p : knownKeyPrefixes()) {
    if (secret.size() > p.size() && secret.substr(0, p.size()) == p) {
      prefix = p;
      break;
    }
  }
  for (int attempt = 0;; ++attempt) {
    std::string out;
    if (prefix.empty()) {
      out = std::string(kGenericPrefix) + randomAlnum(kGenericRandomChars);
    } else {
      size_t n = std::max(secret.size() - prefix.size(), kMinRandomChars);
      out = std::string(prefix) + randomAlnum(n);
    }
    // Astronomically unlikely, but a placeholder that equals or overlaps the secret would make
    // the sandbox hold (part of) the real key.
    if (!overlaps(out, secret)) return out;
    if (attempt > 16) throw std::runtime_error("cannot generate a placeholder");
  }
}

PlaceholderSet::PlaceholderSet(std::vector<Placeholder> placeholders)
    : placeholders_(std::move(placeholders)) {}

std::shared_ptr<const PlaceholderSet> PlaceholderSet::generate(
    const config::Credentials& credentials, const SecretStore& store) {
  std::vector<Placeholder> out;
  for (const auto& [name, cred] : credentials) {
    if (!cred.placeholder) continue;
    Fetch f = store.current(name);
    // reveal(): only the prefix and length shape the placeholder; the bytes are not copied.
    std::string_view secret = f.ok() ? f.secret->reveal() : std::string_view{};
    std::string value;
    // Two placeholders of one task must not overlap, or replacing one would corrupt the other.
    do {
      value = makePlaceholder(secret);
    } while (std::any_of(out.begin(), out.end(),
                         [&](const Placeholder& p) { return overlaps(p.value, value); }));
    out.push_back(Placeholder{name, *cred.placeholder, std::move(value)});
  }
  return std::make_shared<const PlaceholderSet>(std::move(out));
}

const Placeholder* PlaceholderSet::forCredential(std::string_view credential) const {
  for (const auto& p : placeholders_) {
    if (p.credential == credential) return &p;
  }
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> PlaceholderSet::environment() const {
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& p : placeholders_) env.emplace_back(p.variable, p.value);
  return env;
}

const Placeholder* PlaceholderSet::findInText(std::string_view text) const {
  for (const auto& p : placeholders_) {
    if (text.find(p.value) != std::string_view::npos) return &p;
  }
  return nullptr;
}

namespace {

bool appearsIn(const Placeholder& p, const Headers& headers, std::string_view target) {
  auto in = [&](std::string_view text) { return text.find(p.value) != std::string_view::npos; };
  for (const auto& [name, value] : headers) {
    if (iequals(name, "proxy-authorization")) continue;
    if (in(name) || in(value)) return true;
    // `git` sends the password (our placeholder) inside base64.
    if (auto token = basicToken(value); !token.empty()) {
      if (auto decoded = base64Decode(token); decoded && in(*decoded)) return true;
    }
  }
  if (in(target)) return true;
  // A placeholder percent-encoded character by character is still that placeholder.
  if (target.find('%') != std::string_view::npos) {
    if (auto decoded = percentDecode(target, false); decoded && in(*decoded)) return true;
  }
  return false;
}

}  // namespace

std::vector<const Placeholder*> PlaceholderSet::findAll(const Headers& headers,
                                                        std::string_view target) const {
  std::vector<const Placeholder*> out;
  for (const auto& p : placeholders_) {
    if (appearsIn(p, headers, target)) out.push_back(&p);
  }
  return out;
}

const Placeholder* PlaceholderSet::findIn(const Headers& headers, std::string_view target) const {
  for (const auto& p : placeholders_) {
    if (appearsIn(p, headers, target)) return &p;
  }
  return nullptr;
}

}  // namespace sandgate::broker
