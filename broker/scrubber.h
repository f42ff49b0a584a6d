// Scrubber: replaces secrets that sandgate injected with their placeholders (or a redaction
// marker) in an upstream response, streaming, across arbitrary chunk boundaries.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
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
  // Also match every URL encoding of the needle's bytes (see "URL forms" below), not only the
  // bytes themselves. On by default: an upstream that reflects a query parameter re-encodes it
  // as its own URL encoder does (leaving '/' raw, "%2f" in lower case, '+' for a space).
  bool urlForms = true;
  // Also match the needle base64-encoded (standard or URL-safe alphabet, at each of the three
  // alignments), hex-encoded (either case) and JSON-escaped (see "Encoded forms" below). On by
  // default: an upstream that returns what it was sent inside a JSON document, a token or a
  // digest-like dump writes it in one of those.
  bool encodedForms = true;
};

// "[REDACTED:<credential>]": the replacement where a credential has no placeholder.
std::string redactionMarker(std::string_view credential);

// Adds `rule` unless an identical needle is already there (the same secret injected on every
// request of a keep-alive connection); the one kept matches URL forms if either did.
void addScrubRule(std::vector<ScrubRule>& rules, ScrubRule rule);

// A scrubber's rules compiled for one pass over a body, whatever their number: for each byte,
// the rules a form can start with, and a filter of the byte pairs any form can start with (one
// bit each). A scan reads each response byte once and probes rules only where the pair filter
// lets a form start, so its cost grows with the body, not with the number of secrets times
// the body. Immutable: shared by every scrubber of a connection (or task) and its threads.
class ScrubSet {
 public:
  explicit ScrubSet(std::vector<ScrubRule> rules);

  // What a rule's base64 forms are matched against (see "Encoded forms" below), compiled once:
  // for alignment a, the standard-alphabet characters of base64(a zero bytes + needle) that hold
  // any bit of the needle, in protected memory since they are the secret too; null where the
  // needle is too short for its base64 to be told from chance.
  struct Base64Forms {
    std::array<std::shared_ptr<const Secret>, 3> chars;
  };

  const std::vector<ScrubRule>& rules() const { return rules_; }
  const Base64Forms& base64(size_t rule) const { return base64_[rule]; }
  bool empty() const { return rules_.empty(); }
  // Of the longest form a rule can match (0 when there is no rule).
  size_t maxFormLength() const { return maxLen_; }
  // Every replacement is as long as what it replaces (placeholders are), so a body keeps its
  // length and its Content-Length.
  bool preservesLength() const { return preservesLength_; }

  // May a form start with bytes a, b (a the last byte of the input: b unknown)?
  bool mayStartPair(unsigned char a, unsigned char b) const {
    const unsigned key = (static_cast<unsigned>(a) << 8) | b;
    return (pairs_[key >> 6] >> (key & 63)) & 1;
  }
  bool mayStart(unsigned char a) const { return firstBegin_[a] != firstBegin_[a + 1]; }
  // The rules (indices into rules()) whose forms may start with byte `a`.
  std::span<const uint32_t> startingWith(unsigned char a) const {
    return {byFirst_.data() + firstBegin_[a], byFirst_.data() + firstBegin_[a + 1]};
  }
  // For each of those, which of its forms may (a bit per walk, see scrubber.cc): a position
  // probes only the walks that can start there.
  std::span<const uint16_t> formsStartingWith(unsigned char a) const {
    return {formsByFirst_.data() + firstBegin_[a], formsByFirst_.data() + firstBegin_[a + 1]};
  }

 private:
  std::vector<ScrubRule> rules_;
  std::vector<Base64Forms> base64_;  // one per rule
  size_t maxLen_ = 0;
  bool preservesLength_ = true;
  std::array<uint32_t, 257> firstBegin_{};  // byFirst_[firstBegin_[a], firstBegin_[a + 1])
  std::vector<uint32_t> byFirst_;
  std::vector<uint16_t> formsByFirst_;  // parallel to byFirst_
  std::vector<uint64_t> pairs_ = std::vector<uint64_t>(65536 / 64);
};

// Feed an identity-encoded body in slices of any size; output is exactly what a single pass
// over the whole body would give, whatever the split: at each position the earliest match wins,
// the longest match among those starting there. Between calls only a tail that could still
// become a match is held back (at most longest form - 1 bytes; none when the input does not
// end with the start of one), and it is wiped when released. Not thread-safe (one per response).
//
// URL forms (ScrubRule::urlForms). A URL encoder may leave a byte raw or write it as %XX, in
// either hex case, and may write a space as '+'; encoders differ in which bytes they leave
// raw (JavaScript's encodeURIComponent escapes '/', Python's quote() does not). Rather than
// list the 3^n spellings of an n-byte needle, the matcher walks the needle byte by byte and
// takes, at each response byte, the one spelling it can be: '%' must be an escape whose value
// (hexValue(): either case) is the needle byte; '+' is a space or a raw '+'; any other byte
// must be the needle byte raw. A raw '%' is never part of a URL form (an encoder always
// escapes it), so the walk never backtracks; the needle as written is matched as well. A form
// is at most 3 * needle length bytes, which bounds what is held back between slices. A form
// is replaced by the replacement in the same shape (byte for byte raw where the form was raw,
// %XX in the case it used where it was escaped), so a placeholder of the secret's length keeps
// the body's length and the client decodes the placeholder it sent.
//
// Encoded forms (ScrubRule::encodedForms), matched by walks of the same kind (one spelling per
// response byte, no backtracking), each replaced by the replacement in the same encoding:
// - Hex: two hex digits per needle byte, either case (digit by digit). Length 2n.
// - JSON: each needle byte raw, as \uXXXX (either case) or as its short escape (\" \\ \/ \b
//   \f \n \r \t); a raw '\' always starts an escape. Only ASCII bytes are matched escaped
//   (a non-ASCII byte of the needle must be raw: \u escapes of a multi-byte character are not
//   matched). At most 6n bytes: this is the longest form, and so what bounds the hold-back.
// - Base64: 3 input bytes make 4 characters of 6 bits. Where the needle starts inside the
//   encoded input (offset a = 0, 1 or 2 mod 3) decides which characters it fixes: character i
//   holds bits [6i, 6i + 6) of the group stream, the needle bits [8a, 8a + 8n). A character
//   wholly inside is fixed (the core: the same whatever surrounds the needle); one at either
//   end also holds bits of the neighbouring bytes (for a = 1 the second character holds the
//   needle's first 4 bits, for a = 2 the third its first 2; at the end 2 or 4 bits, depending
//   on (a + n) mod 3). The matcher requires the core and takes each end character too when its
//   needle bits agree, so a padded or unpadded end, or any neighbour, is matched alike. Either
//   alphabet ('+' or '-', '/' or '_') is read at each character. The replacement is written at
//   the same alignment, in the form's alphabet, keeping the neighbours' bits of the end
//   characters: with a same-length placeholder the client decodes exactly the placeholder.
//   Only needles of at least 6 bytes (a core of at least 7 characters, 42 bits).
// Forms are not combined (a URL-encoded JSON escape, base64 of base64 or of a gzip stream are
// not matched). A replacement of another length than the secret in a base64 form leaves what
// follows misaligned (it decodes to other bytes); the secret is gone all the same.
class Scrubber {
 public:
  explicit Scrubber(std::shared_ptr<const ScrubSet> set);
  explicit Scrubber(std::vector<ScrubRule> rules);  // compiles its own set
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
  size_t maxHoldBack() const {
    return set_->maxFormLength() == 0 ? 0 : set_->maxFormLength() - 1;
  }
  bool empty() const { return set_->empty(); }
  bool preservesLength() const { return set_->preservesLength(); }

 private:
  // The one pass: appends to `out` the final part of `work` with every match replaced, and
  // returns where the held-back tail begins (work.size() when nothing is held back). `final`:
  // no more input will come, so nothing is held back.
  size_t scan(std::string_view work, std::string& out, bool final);
  struct Match;
  // Appends the replacement for the match `form` of rule `k`.
  void emit(size_t k, const Match& m, std::string_view form, std::string& out) const;

  std::shared_ptr<const ScrubSet> set_;
  std::string work_;  // held-back tail + new input; may hold a partial secret, wiped
  uint64_t count_ = 0;
  std::map<std::string, uint64_t> byCredential_;
};

}  // namespace sandgate::broker
