// The forms a secret takes in a response: walks and emits (see scrub_forms.h).
#include "broker/scrub_forms.h"

#include <algorithm>
#include <cstring>

#include "broker/secret.h"
#include "common/encoding.h"

namespace sandgate::broker::scrub {

// Those characters of `bytes` at alignment `a`, standard alphabet (the neighbours' bits zero).
std::string base64Chars(size_t a, std::string_view bytes) {
  std::string in(a, '\0');
  in.append(bytes);
  in.append(2, '\0');
  std::string enc = base64Encode(in);
  wipe(in);
  const Base64Span sp = base64Span(a, bytes.size());
  std::string out = enc.substr(sp.first, sp.size());
  wipe(enc);
  return out;
}

// Keeps in `best` the longer of the two, and whether either may still complete.
void merge(Probe& best, const Probe& p) {
  best.partial = best.partial || p.partial;
  if (p.len > best.len) {
    const bool partial = best.partial;
    best = p;
    best.partial = partial;
  }
}

// The URL-form walk (see scrubber.h): each needle byte b is "%XX" decoding to b, '+' when b is
// a space, or b raw unless b is '%'. One spelling per response byte, so no backtracking.
Probe walkUrlForm(std::string_view needle, std::string_view text, size_t p) {
  size_t pos = p;
  for (char ch : needle) {
    const auto b = static_cast<unsigned char>(ch);
    if (pos >= text.size()) return {0, true};
    const char c = text[pos];
    if (c == '%') {
      if (pos + 1 >= text.size()) return {0, true};
      if (hexValue(text[pos + 1]) != (b >> 4)) return {};
      if (pos + 2 >= text.size()) return {0, true};
      if (hexValue(text[pos + 2]) != (b & 0xf)) return {};
      pos += 3;
    } else if ((c == ch && ch != '%') || (c == '+' && ch == ' ')) {
      pos += 1;
    } else {
      return {};
    }
  }
  return {pos - p, false, Shape::kUrl};
}

// Two hex digits per needle byte, either case.
Probe walkHex(std::string_view needle, std::string_view text, size_t p) {
  size_t pos = p;
  for (char ch : needle) {
    const auto b = static_cast<unsigned char>(ch);
    for (int nibble : {b >> 4, b & 0xf}) {
      if (pos >= text.size()) return {0, true};
      if (hexValue(text[pos]) != nibble) return {};
      ++pos;
    }
  }
  return {pos - p, false, Shape::kHex};
}

namespace {

// The byte a JSON short escape "\x" stands for, or -1.
int jsonShortEscape(char x) {
  switch (x) {
    case '"':
      return '"';
    case '\\':
      return '\\';
    case '/':
      return '/';
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return -1;
  }
}

}  // namespace

// The letter of a byte's JSON short escape, or 0 when it has none.
char jsonShortLetter(unsigned char b) {
  for (char x : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) {
    if (jsonShortEscape(x) == b) return x;
  }
  return 0;
}

// Each needle byte raw, "\uXXXX" (ASCII only) or its short escape; a raw '\' is an escape.
Probe walkJson(std::string_view needle, std::string_view text, size_t p) {
  size_t pos = p;
  for (char ch : needle) {
    const auto b = static_cast<unsigned char>(ch);
    if (pos >= text.size()) return {0, true};
    const char c = text[pos];
    if (c != '\\') {
      if (c != ch) return {};
      pos += 1;
      continue;
    }
    if (pos + 1 >= text.size()) return {0, true};
    const char x = text[pos + 1];
    if (x != 'u') {
      if (jsonShortEscape(x) != b) return {};
      pos += 2;
      continue;
    }
    if (b >= 0x80) return {};
    const int want[4] = {0, 0, b >> 4, b & 0xf};
    for (size_t i = 0; i < 4; ++i) {
      if (pos + 2 + i >= text.size()) return {0, true};
      if (hexValue(text[pos + 2 + i]) != want[i]) return {};
    }
    pos += 6;
  }
  return {pos - p, false, Shape::kJson};
}

// The base64 form at alignment `a` (chars: base64Chars(a, needle)), starting with the shared
// lead character or with the first fixed one; a shared trail character is taken when it agrees.
Probe walkBase64(std::string_view chars, size_t a, size_t n, bool lead, std::string_view text,
                 size_t p) {
  const Base64Span sp = base64Span(a, n);
  const size_t from = sp.lead() && !lead ? 1 : 0;
  const size_t coreEnd = sp.size() - (sp.trail() ? 1 : 0);
  size_t pos = p;
  for (size_t i = from; i < sp.size(); ++i, ++pos) {
    const bool optional = i == coreEnd;
    if (pos >= text.size()) {
      return optional ? Probe{pos - p, true, Shape::kBase64, static_cast<uint8_t>(a), lead}
                      : Probe{0, true};
    }
    const unsigned m = sp.mask(i);
    const int v = base64Value(text[pos]);
    if (v < 0 || (static_cast<unsigned>(v) & m) != (base64Value(chars[i]) & m)) {
      if (optional) break;
      return {};
    }
  }
  return {pos - p, false, Shape::kBase64, static_cast<uint8_t>(a), lead};
}

// Can the JSON form of `needle` always be replaced by `repl` at the same length? Where the
// form may use a short escape (2 bytes), the replacement byte needs one too.
bool jsonKeepsLength(std::string_view needle, std::string_view repl) {
  if (needle.size() != repl.size()) return false;
  for (size_t i = 0; i < needle.size(); ++i) {
    if (jsonShortLetter(static_cast<unsigned char>(needle[i])) != 0 &&
        jsonShortLetter(static_cast<unsigned char>(repl[i])) == 0) {
      return false;
    }
  }
  return true;
}

// The replacement in the shape of a URL form (see scrubber.h).
void emitUrl(std::string_view repl, std::string_view form, std::string& out) {
  size_t pos = 0;
  for (char ch : repl) {
    const auto c = static_cast<unsigned char>(ch);
    if (form[pos] == '%') {
      const bool lower = (form[pos + 1] >= 'a' && form[pos + 1] <= 'f') ||
                         (form[pos + 2] >= 'a' && form[pos + 2] <= 'f');
      const char* hex = lower ? kLower : kUpper;
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xf];
      pos += 3;
    } else {
      out += ch;
      pos += 1;
    }
  }
}

namespace {

// Lower case when the form has a lower-case hex letter.
const char* hexCaseOf(std::string_view form) {
  return std::any_of(form.begin(), form.end(), [](char c) { return c >= 'a' && c <= 'f'; })
             ? kLower
             : kUpper;
}

}  // namespace

void emitHex(std::string_view repl, std::string_view form, std::string& out) {
  const char* hex = hexCaseOf(form);
  for (char ch : repl) {
    const auto c = static_cast<unsigned char>(ch);
    out += hex[c >> 4];
    out += hex[c & 0xf];
  }
}

// Each replacement byte spelt as the needle byte in its place was: raw, short escape (or \u
// where the replacement byte has none), or \u in the case the form used. Of another length:
// raw, as the raw needle's replacement is.
void emitJson(std::string_view needle, std::string_view repl, std::string_view form,
              std::string& out) {
  if (repl.size() != needle.size()) {
    out.append(repl);
    return;
  }
  size_t pos = 0;
  for (char ch : repl) {
    const auto c = static_cast<unsigned char>(ch);
    if (form[pos] != '\\') {
      out += ch;
      pos += 1;
      continue;
    }
    const char x = form[pos + 1];
    const char letter = jsonShortLetter(c);
    if (x != 'u' && letter != 0) {
      out += '\\';
      out += letter;
      pos += 2;
      continue;
    }
    const char* hex = x == 'u' ? hexCaseOf(form.substr(pos + 2, 4)) : kLower;
    out += "\\u00";
    out += hex[c >> 4];
    out += hex[c & 0xf];
    pos += x == 'u' ? 6 : 2;
  }
}

// The replacement's base64 characters at the form's alignment, in its alphabet; the end
// characters keep the bits of the neighbours that the form's had.
void emitBase64(const Probe& m, size_t needleSize, std::string_view repl, std::string_view form,
                std::string& out) {
  const size_t a = m.align;
  const char* alphabet = form.find_first_of("-_") != std::string_view::npos ? kBase64Url : kBase64;
  std::string chars = base64Chars(a, repl);
  const Base64Span rs = base64Span(a, repl.size());
  const Base64Span ns = base64Span(a, needleSize);
  // Index into the form of the span's character i (the form may start after the lead).
  const size_t skip = ns.lead() && !m.lead ? 1 : 0;
  const bool sameLength = repl.size() == needleSize;
  for (size_t i = skip; i < rs.size(); ++i) {
    const size_t f = i - skip;
    unsigned v = static_cast<unsigned>(base64Value(chars[i]));
    if (f < form.size() && (i == 0 || sameLength)) {
      // A character the form had: the neighbours' bits stay (same length: at both ends).
      const unsigned mask = rs.mask(i);
      v = (v & mask) | (static_cast<unsigned>(base64Value(form[f])) & ~mask & 0x3f);
    } else if (sameLength) {
      break;  // the form ended before an optional end character: so does its replacement
    }
    out += alphabet[v];
  }
  wipe(chars);
}

}  // namespace sandgate::broker::scrub
