// Escaping for a terminal (see terminal_text.h).
#include "common/terminal_text.h"

#include <cstdint>

namespace sandgate {
namespace {

// The C escape of a byte git writes by name, or 0.
char named(unsigned char c) {
  switch (c) {
    case '\a':
      return 'a';
    case '\b':
      return 'b';
    case '\t':
      return 't';
    case '\n':
      return 'n';
    case '\v':
      return 'v';
    case '\f':
      return 'f';
    case '\r':
      return 'r';
    default:
      return 0;
  }
}

void escapeByte(unsigned char c, std::string* out) {
  if (char n = named(c)) {
    *out += '\\';
    *out += n;
    return;
  }
  *out += '\\';
  *out += static_cast<char>('0' + ((c >> 6) & 7));
  *out += static_cast<char>('0' + ((c >> 3) & 7));
  *out += static_cast<char>('0' + (c & 7));
}

// The length of the well-formed UTF-8 sequence at `s[i]` (2..4 bytes) and its code point, or 0.
size_t utf8At(std::string_view s, size_t i, uint32_t* cp) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  unsigned char c = b(0);
  size_t len = c >= 0xc2 && c <= 0xdf   ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
  if (len == 0 || i + len > s.size()) return 0;
  uint32_t v = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3f);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
  if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10ffff)) ||
      (v >= 0xd800 && v <= 0xdfff)) {
    return 0;
  }
  *cp = v;
  return len;
}

// Code points a terminal obeys or that change what a reader sees: C1 controls, bidirectional
// marks, embeddings, overrides and isolates, line and paragraph separators.
bool unsafeCodePoint(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

// escapeText's loop; `out` null: only says whether anything would change.
bool escapeInto(std::string_view text, bool tabs, std::string* out) {
  bool changed = false;
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (out != nullptr) *out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\t' && !tabs) {
      if (out != nullptr) *out += '\t';
      ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t len = c >= 0x80 ? utf8At(text, i, &cp) : 0;
    if (len > 0 && !unsafeCodePoint(cp)) {
      if (out != nullptr) out->append(text.substr(i, len));
      i += len;
      continue;
    }
    changed = true;
    if (out == nullptr) return true;
    for (size_t k = 0; k < (len > 0 ? len : 1); ++k) {
      escapeByte(static_cast<unsigned char>(text[i + k]), out);
    }
    i += len > 0 ? len : 1;
  }
  return changed;
}

}  // namespace

std::string quoteName(std::string_view name) {
  bool plain = true;
  for (char ch : name) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      plain = false;
      break;
    }
  }
  if (plain) return std::string(name);
  std::string out = "\"";
  for (char ch : name) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c >= 0x7f) {
      escapeByte(c, &out);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string escapeText(std::string_view text, bool tabs) {
  std::string out;
  out.reserve(text.size());
  escapeInto(text, tabs, &out);
  return out;
}

bool needsEscape(std::string_view text) { return escapeInto(text, false, nullptr); }

}  // namespace sandgate
