// Scrubber: replaces secrets that sandgate injected with their placeholders (or a redaction
// marker) in an upstream response, streaming, across arbitrary chunk boundaries.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "broker/headers.h"
#include "broker/secret.h"

namespace sandgate::broker {

// One form of a secret that went upstream on a connection and what replaces it in responses.
struct ScrubRule {
  std::shared_ptr<const Secret> needle;  // never empty (secrets are validated)
  std::string replacement;               // the placeholder, or "[REDACTED:<credential>]"
  std::string credential;
};

// "[REDACTED:<credential>]": the replacement where a credential has no placeholder.
std::string redactionMarker(std::string_view credential);

// Adds `rule` unless an identical needle is already there (the same secret injected on every
// request of a keep-alive connection).
void addScrubRule(std::vector<ScrubRule>& rules, ScrubRule rule);

// Feed an identity-encoded body in slices of any size; output is exactly what a single pass
// over the whole body would give, whatever the split: at each position the earliest match wins,
// the longest needle among those starting there. Between calls only a tail that could still
// become a needle is held back (at most longest needle - 1 bytes; none when the input does not
// end with the start of one), and it is wiped when released. Not thread-safe (one per response).
class Scrubber {
 public:
  explicit Scrubber(std::vector<ScrubRule> rules);
  ~Scrubber();
  Scrubber(const Scrubber&) = delete;
  Scrubber& operator=(const Scrubber&) = delete;

  // Appends to `out` what can be emitted after `in`.
  void feed(std::string_view in, std::string& out);
  // Flushes the held-back bytes (end of body).
  void finish(std::string& out);
  // Replaces needles in every header name and value (whole values: no streaming needed).
  // Returns how many replacements were made; they count towards count() as well.
  size_t scrubHeaders(Headers& headers);
  // Does any needle occur in `text` (a whole header name or value)? Most responses carry no
  // secret: a caller looks before copying every field out to scrub it.
  bool occursIn(std::string_view text) const;

  // Replacements made so far, headers and body.
  uint64_t count() const { return count_; }
  // The same, by the credential whose secret was replaced (for the per-credential metric).
  const std::map<std::string, uint64_t>& countByCredential() const { return byCredential_; }
  size_t maxHoldBack() const { return maxLen_ == 0 ? 0 : maxLen_ - 1; }
  bool empty() const { return rules_.empty(); }
  // Every replacement is as long as what it replaces (placeholders are), so a body keeps its
  // length and its Content-Length.
  bool preservesLength() const;

 private:
  // Emits the replaced, final part of `buffer` into `out` and leaves the held-back tail in it;
  // `final` means no more input will come (nothing is held back).
  void process(std::string& buffer, std::string& out, bool final);
  // Is `tail` a proper prefix of some needle (it may complete with the next slice)?
  bool couldStartNeedle(std::string_view tail) const;
  // The first position at or after `from`, among the last maxLen_ - 1 of `work`, where a needle
  // may start but has not fully arrived (couldStartNeedle); work.size() when there is none.
  size_t firstPartialFrom(std::string_view work, size_t from) const;

  std::vector<ScrubRule> rules_;
  size_t maxLen_ = 0;
  std::string work_;  // held-back tail + new input; may hold a partial secret, wiped
  uint64_t count_ = 0;
  std::map<std::string, uint64_t> byCredential_;
};

}  // namespace sandgate::broker
