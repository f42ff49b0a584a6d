// Fuzzes the response scrubber (broker/scrubber.h): a set of secrets, a body that carries them
// (raw, and URL-encoded as upstreams reflect them: any bytes escaped, either hex case, '+' for
// a space) among arbitrary bytes, fed in slices split at random points.
//
// Properties, beyond not crashing:
//  - The invariant: no secret comes out. Neither raw in the output, nor, for rules with URL
//    forms, in the output percent-decoded (with and without '+' as a space). The replacement
//    is made of a byte no secret contains, whose escape has no character a secret contains
//    ('%', 'F', 'f'), so a secret in the output can only be one the scrubber let through.
//  - Split invariance: the output is the one a single pass over the whole body gives.
//  - Streaming bound: with length-preserving replacements, no more than maxHoldBack() bytes
//    are ever held back between slices.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "broker/scrubber.h"
#include "broker/secret.h"
#include "common/encoding.h"
#include "fuzz/check.h"

namespace {

using sandgate::broker::ScrubRule;
using sandgate::broker::Scrubber;
using sandgate::broker::ScrubSet;
using sandgate::broker::Secret;

constexpr char kReplacementByte = '\xff';

// A secret's bytes: no control byte (checkSecretBytes refuses them), and none of the bytes the
// replacement and its escapes are made of (URL: `%FF`, `%ff`; JSON: `\u00ff`), or the
// replacement's own encoded form would count as the secret coming out.
std::string secretBytes(std::string s) {
  for (char& ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f || c == 0xff || ch == '%' || ch == 'F' || ch == 'f' || ch == '\\' ||
        ch == 'u' || ch == '0') {
      ch = static_cast<char>('g' + c % 14);  // 'g'..'t': none of the bytes above
    }
  }
  return s;
}

// One URL spelling of `s`: each byte raw or escaped (either case), a space raw, escaped or '+'.
std::string urlForm(FuzzedDataProvider& in, std::string_view s) {
  static constexpr char kUpper[] = "0123456789ABCDEF";
  static constexpr char kLower[] = "0123456789abcdef";
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const int how = in.ConsumeIntegralInRange(0, 3);
    if (how == 0 || how == 1) {
      const char* hex = how == 0 ? kUpper : kLower;
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else if (how == 2 && ch == ' ') {
      out += '+';
    } else {
      out += ch;
    }
  }
  return out;
}

void noSecretIn(std::string_view text, const std::vector<std::string>& secrets,
                const char* what) {
  for (const auto& s : secrets) SANDGATE_FUZZ_CHECK(text.find(s) == std::string_view::npos, what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool urlForms = in.ConsumeBool();
  const bool sameLength = in.ConsumeBool();
  const size_t count = in.ConsumeIntegralInRange<size_t>(1, 3);
  std::vector<std::string> secrets;
  std::vector<ScrubRule> rules;
  for (size_t i = 0; i < count; ++i) {
    std::string s = secretBytes(in.ConsumeRandomLengthString(40));
    if (s.empty()) s = "sk-" + std::to_string(i);
    secrets.push_back(s);
    const size_t n = sameLength ? s.size() : in.ConsumeIntegralInRange<size_t>(1, 60);
    rules.push_back(ScrubRule{Secret::copyOf(s), std::string(n, kReplacementByte),
                              "cred" + std::to_string(i), urlForms});
  }
  auto set = std::make_shared<const ScrubSet>(std::move(rules));

  // The body: arbitrary bytes with the secrets (and URL forms of them) dropped in.
  std::string body;
  while (in.remaining_bytes() > 0 && body.size() < 16384) {
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 0:
        body += secrets[in.ConsumeIntegralInRange<size_t>(0, secrets.size() - 1)];
        break;
      case 1:
        body += urlForm(in, secrets[in.ConsumeIntegralInRange<size_t>(0, secrets.size() - 1)]);
        break;
      default:
        body += in.ConsumeRandomLengthString(64);
    }
  }
  std::vector<size_t> cuts;
  for (int i = 0; i < 8; ++i) cuts.push_back(in.ConsumeIntegralInRange<size_t>(1, 300));

  std::string once;
  {
    Scrubber s(set);
    s.feed(body, once);
    s.finish(once);
  }
  std::string streamed;
  Scrubber s(set);
  size_t fed = 0, k = 0;
  while (fed < body.size()) {
    const size_t n = std::min(body.size() - fed, cuts[k++ % cuts.size()]);
    s.feed(std::string_view(body).substr(fed, n), streamed);
    fed += n;
    if (set->preservesLength()) {
      SANDGATE_FUZZ_CHECK(fed - streamed.size() <= s.maxHoldBack(), "holds back a bounded tail");
    }
  }
  s.finish(streamed);
  SANDGATE_FUZZ_CHECK(streamed == once, "the output does not depend on the split");
  if (set->preservesLength()) {
    SANDGATE_FUZZ_CHECK(streamed.size() == body.size(), "length-preserving replacements");
  }
  noSecretIn(streamed, secrets, "no secret in the output");
  if (urlForms) {
    for (bool plus : {false, true}) {
      if (auto decoded = sandgate::percentDecode(streamed, plus)) {
        noSecretIn(*decoded, secrets, "no secret in the output, percent-decoded");
      }
    }
  }
  return 0;
}
