// Fuzzes Basic/placeholder decoding: base64 (standard and URL-safe) and percent-encoding
// (common/encoding.h), and the placeholder scan of a request that the injector's tripwire
// relies on (broker/placeholder.h: PlaceholderSet::findIn / findAll).
//
// Properties, beyond not crashing:
//  - Round trips: decode(encode(x)) == x for base64, base64url and percent-encoding (with and
//    without '+' as space); and whatever a decoder accepts, encoding it and decoding again
//    gives the same bytes.
//  - A placeholder is found wherever a client can put it: raw in a header value, inside the
//    token of `Authorization: Basic` (as git sends a password), raw or percent-encoded in the
//    target; never in Proxy-Authorization alone (sandgate consumes it); and findIn agrees with
//    findAll.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "broker/headers.h"
#include "broker/placeholder.h"
#include "common/encoding.h"
#include "fuzz/check.h"

namespace {

using sandgate::base64Decode;
using sandgate::base64Encode;
using sandgate::base64UrlDecode;
using sandgate::base64UrlEncode;
using sandgate::percentDecode;
using sandgate::percentEncode;
using sandgate::broker::Headers;
using sandgate::broker::Placeholder;
using sandgate::broker::PlaceholderSet;

void checkCodecs(const std::string& s) {
  SANDGATE_FUZZ_CHECK(base64Decode(base64Encode(s)) == s, "base64 round trip");
  SANDGATE_FUZZ_CHECK(base64UrlDecode(base64UrlEncode(s)) == s, "base64url round trip");
  SANDGATE_FUZZ_CHECK(percentDecode(percentEncode(s), false) == s, "percent round trip");
  SANDGATE_FUZZ_CHECK(percentDecode(percentEncode(s), true) == s, "percent round trip, '+'");
  if (auto d = base64Decode(s)) {
    SANDGATE_FUZZ_CHECK(base64Decode(base64Encode(*d)) == *d, "base64 decodes stably");
    SANDGATE_FUZZ_CHECK(base64Encode(*d).size() == s.size(), "base64 keeps its length");
  }
  if (auto d = base64UrlDecode(s)) {
    SANDGATE_FUZZ_CHECK(base64UrlDecode(base64UrlEncode(*d)) == *d, "base64url decodes stably");
  }
  for (bool plus : {false, true}) {
    if (auto d = percentDecode(s, plus)) {
      SANDGATE_FUZZ_CHECK(d->size() <= s.size(), "decoding never grows");
      SANDGATE_FUZZ_CHECK(percentDecode(percentEncode(*d), plus) == *d, "percent decodes stably");
    }
  }
}

void checkFindings(const PlaceholderSet& set, const Headers& headers, const std::string& target) {
  const Placeholder* first = set.findIn(headers, target);
  const auto all = set.findAll(headers, target);
  SANDGATE_FUZZ_CHECK((first == nullptr) == all.empty(), "findIn finds iff findAll does");
  if (first) SANDGATE_FUZZ_CHECK(all.front() == first, "findIn is findAll's first");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string a = in.ConsumeRandomLengthString(512);
  checkCodecs(a);

  // A placeholder (printable, as the generator makes them) and where the client puts it.
  std::string value = in.ConsumeRandomLengthString(64);
  for (char& c : value) c = static_cast<char>(0x21 + static_cast<uint8_t>(c) % 0x5e);
  if (value.size() < 4) value = "sandgate-placeholder-" + value;
  const PlaceholderSet set({Placeholder{"cred", "CRED_KEY", value}});
  const std::string before = in.ConsumeRandomLengthString(64);
  const std::string after = in.ConsumeRandomLengthString(64);
  const std::string carrier = before + value + after;
  const int where = in.ConsumeIntegralInRange(0, 4);
  Headers headers;
  std::string target = "/";
  const std::string noise = in.ConsumeRandomLengthString(128);
  headers.emplace_back("Accept", noise);
  switch (where) {
    case 0:
      headers.emplace_back("X-Api-Key", carrier);
      break;
    case 1:  // git: Authorization: Basic base64(user:password)
      headers.emplace_back("Authorization", "Basic " + base64Encode(before + ":" + value + after));
      break;
    case 2:
      target = "/v1?key=" + percentEncode(carrier);
      break;
    case 3:
      target = "/v1/" + carrier;
      for (char& c : target) {
        if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '_';
      }
      if (target.find(value) == std::string::npos) target = "/v1/" + value;
      break;
    case 4:  // sandgate's own header: consumed, never forwarded, not a finding
      headers = {{"Proxy-Authorization", "Basic " + base64Encode("task:" + carrier)}};
      break;
  }
  checkFindings(set, headers, target);
  const bool found = set.findIn(headers, target) != nullptr;
  if (where == 4) {
    SANDGATE_FUZZ_CHECK(!found, "Proxy-Authorization is not searched");
  } else {
    SANDGATE_FUZZ_CHECK(found, "the placeholder is found where the client put it");
  }

  // Arbitrary fields and target: the scan must hold up, whatever the client sent.
  Headers any;
  while (in.remaining_bytes() > 0 && any.size() < 8) {
    std::string name = in.ConsumeRandomLengthString(32);
    any.emplace_back(std::move(name), in.ConsumeRandomLengthString(256));
  }
  checkFindings(set, any, in.ConsumeRandomLengthString(256));
  return 0;
}
