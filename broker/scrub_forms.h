// The forms a secret takes in a response, for the scrubber (scrubber.h says which and why):
// as written and URL-encoded, hex, JSON-escaped, and base64 at each of its three alignments.
// For each form, a walk that says whether it starts at a position of the response (and how
// long it is there), and an emit that writes a replacement in the same shape. Internal to
// broker/ (scrubber.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sandgate::broker::scrub {

inline constexpr char kUpper[] = "0123456789ABCDEF";
inline constexpr char kLower[] = "0123456789abcdef";
inline constexpr char kBase64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
inline constexpr char kBase64Url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
// Below this the base64 core (7 characters for 6 bytes) would be too short to tell from chance.
inline constexpr size_t kMinBase64Needle = 6;

// The 6-bit value of a base64 character of either alphabet, or -1.
inline int base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

// The base64 characters of a needle of `n` bytes at alignment `a` (see scrubber.h): those at
// stream positions [first, last) hold needle bits; `lead` / `trail`: the first / last of them
// holds bits of a neighbour too. mask(i): the needle's bits in character first + i.
struct Base64Span {
  size_t first, last;
  size_t a, n;
  bool lead() const { return (8 * a) % 6 != 0; }
  bool trail() const { return (8 * (a + n)) % 6 != 0; }
  size_t size() const { return last - first; }
  unsigned mask(size_t i) const {
    const size_t bit0 = 6 * (first + i);
    unsigned m = 0;
    for (size_t j = 0; j < 6; ++j) {
      if (bit0 + j >= 8 * a && bit0 + j < 8 * (a + n)) m |= 0x20u >> j;
    }
    return m;
  }
};

inline Base64Span base64Span(size_t a, size_t n) {
  return {(8 * a) / 6, (8 * (a + n) + 5) / 6, a, n};
}

// How a form was spelt, for emit().
enum class Shape : uint8_t { kRaw, kUrl, kHex, kJson, kBase64 };

// What a needle's forms do at one position of the response.
struct Probe {
  size_t len = 0;        // length of the longest complete form there, 0 when none
  bool partial = false;  // the input ended inside a form that may still complete
  Shape shape = Shape::kRaw;
  uint8_t align = 0;  // kBase64: the alignment
  bool lead = false;  // kBase64: the form starts with the character shared with a neighbour
};

// Keeps in `best` the longer of the two, and whether either may still complete.
void merge(Probe& best, const Probe& p);

// Where a form of `needle` starts at text[p], each walk one spelling per response byte.
Probe walkUrlForm(std::string_view needle, std::string_view text, size_t p);
Probe walkHex(std::string_view needle, std::string_view text, size_t p);
Probe walkJson(std::string_view needle, std::string_view text, size_t p);
// `chars`: the needle's base64 characters at alignment `a` (base64Chars); `lead`: the form
// starts with the character it shares with the byte before the needle.
Probe walkBase64(std::string_view chars, size_t a, size_t n, bool lead, std::string_view text,
                 size_t p);

// Those characters of `bytes` at alignment `a`, standard alphabet (the neighbours' bits zero).
std::string base64Chars(size_t a, std::string_view bytes);
// The JSON escape letter of byte b ('n' for a newline, ...), or 0 when it has none.
char jsonShortLetter(unsigned char b);
// Can the JSON form of `needle` always be replaced by `repl` at the same length?
bool jsonKeepsLength(std::string_view needle, std::string_view repl);

// The replacement `repl` written in the shape of the matched `form`.
void emitUrl(std::string_view repl, std::string_view form, std::string& out);
void emitHex(std::string_view repl, std::string_view form, std::string& out);
void emitJson(std::string_view needle, std::string_view repl, std::string_view form,
              std::string& out);
void emitBase64(const Probe& m, size_t needleSize, std::string_view repl, std::string_view form,
                std::string& out);

}  // namespace sandgate::broker::scrub
