// Streaming multi-needle replacement for response headers and identity-encoded bodies.
#include "broker/scrubber.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/encoding.h"

namespace sandgate::broker {

namespace {

constexpr char kUpper[] = "0123456789ABCDEF";
constexpr char kLower[] = "0123456789abcdef";
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
// Below this the base64 core (7 characters for 6 bytes) would be too short to tell from chance.
constexpr size_t kMinBase64Needle = 6;

// The 6-bit value of a base64 character of either alphabet, or -1.
int base64Value(char c) {
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

Base64Span base64Span(size_t a, size_t n) { return {(8 * a) / 6, (8 * (a + n) + 5) / 6, a, n}; }

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

// The walks a position may start, as bits (ScrubSet::formsStartingWith).
constexpr uint16_t kFormRaw = 1;  // the needle as written, and its URL forms
constexpr uint16_t kFormHex = 2;
constexpr uint16_t kFormJson = 4;
constexpr uint16_t kFormBase64 = 8;       // << alignment: from the first fixed character
constexpr uint16_t kFormBase64Lead = 64;  // << alignment: from the shared lead character

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

Probe probe(const ScrubRule& r, const ScrubSet::Base64Forms& b64, std::string_view needle,
            std::string_view text, size_t p, uint16_t forms) {
  Probe out;
  if (forms & kFormRaw) {
    std::string_view rest = text.substr(p);
    if (rest.size() >= needle.size()) {
      if (rest.substr(0, needle.size()) == needle) out.len = needle.size();
    } else if (needle.substr(0, rest.size()) == rest) {
      out.partial = true;
    }
    if (r.urlForms) merge(out, walkUrlForm(needle, text, p));
  }
  if (forms & kFormHex) merge(out, walkHex(needle, text, p));
  if (forms & kFormJson) merge(out, walkJson(needle, text, p));
  for (size_t a = 0; a < 3; ++a) {
    if (!(forms & ((kFormBase64 | kFormBase64Lead) << a)) || !b64.chars[a]) continue;
    // reveal(): the needle's base64 characters, compared with response bytes.
    const std::string_view chars = b64.chars[a]->reveal();
    if (forms & (kFormBase64 << a)) merge(out, walkBase64(chars, a, needle.size(), false, text, p));
    if (forms & (kFormBase64Lead << a)) {
      merge(out, walkBase64(chars, a, needle.size(), true, text, p));
    }
  }
  return out;
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

}  // namespace

std::string redactionMarker(std::string_view credential) {
  return fmt::format("[REDACTED:{}]", credential);
}

void addScrubRule(std::vector<ScrubRule>& rules, ScrubRule rule) {
  if (!rule.needle || rule.needle->empty()) return;
  for (auto& r : rules) {
    // reveal(): compared in constant time with another secret held by this process.
    if (r.needle->equals(rule.needle->reveal())) {
      r.urlForms = r.urlForms || rule.urlForms;
      r.encodedForms = r.encodedForms || rule.encodedForms;
      return;
    }
  }
  rules.push_back(std::move(rule));
}

ScrubSet::ScrubSet(std::vector<ScrubRule> rules) {
  for (auto& r : rules) {
    if (r.needle && !r.needle->empty()) rules_.push_back(std::move(r));
  }
  base64_.resize(rules_.size());
  std::array<std::vector<std::pair<uint32_t, uint16_t>>, 256> lists;  // rule, forms
  auto pair = [&](unsigned char x, unsigned char y) {
    const unsigned key = (static_cast<unsigned>(x) << 8) | y;
    pairs_[key >> 6] |= uint64_t{1} << (key & 63);
  };
  for (size_t k = 0; k < rules_.size(); ++k) {
    const ScrubRule& r = rules_[k];
    // Forms `forms` of rule k may start with byte `first` (the rule listed once per byte).
    auto start = [&](unsigned char first, uint16_t forms) {
      if (lists[first].empty() || lists[first].back().first != k) {
        lists[first].emplace_back(static_cast<uint32_t>(k), 0);
      }
      lists[first].back().second |= forms;
    };
    // reveal(): its first two bytes (and its length) index the filter that finds where a
    // form of it may start in a response; its base64 forms are kept in protected memory.
    const std::string_view n = r.needle->reveal();
    maxLen_ = std::max(maxLen_, n.size() * (r.encodedForms ? 6 : r.urlForms ? 3 : 1));
    preservesLength_ = preservesLength_ && r.replacement.size() == n.size() &&
                       (!r.encodedForms || jsonKeepsLength(n, r.replacement));
    // The bytes a spelling of needle byte c can begin with: c raw, and in a URL form '%'
    // (its escape) or '+' (a space).
    auto spellingStarts = [&](unsigned char c) {
      std::vector<unsigned char> v{c};
      if (r.urlForms && c != '%') v.push_back('%');
      if (r.urlForms && c == ' ') v.push_back('+');
      return v;
    };
    const auto n0 = static_cast<unsigned char>(n[0]);
    for (unsigned char first : spellingStarts(n0)) {
      start(first, kFormRaw);
      if (first == '%' && r.urlForms) {
        // The escape of n0: its first hex digit follows, in either case.
        pair('%', kUpper[n0 >> 4]);
        pair('%', kLower[n0 >> 4]);
      }
      if (first == n0 || first == '+') {  // n0 raw ('%' too, as the needle is written), or '+'
        if (n.size() == 1) {
          for (unsigned b = 0; b < 256; ++b) pair(first, static_cast<unsigned char>(b));
        } else {
          for (unsigned char second : spellingStarts(static_cast<unsigned char>(n[1]))) {
            pair(first, second);
          }
        }
      }
    }
    if (!r.encodedForms) continue;
    // Hex: n0's two digits, each in either case.
    for (char hi : {kUpper[n0 >> 4], kLower[n0 >> 4]}) {
      start(hi, kFormHex);
      pair(hi, kUpper[n0 & 0xf]);
      pair(hi, kLower[n0 & 0xf]);
    }
    // JSON: n0 raw before an escaped second byte, or n0 escaped.
    if (n0 != '\\') start(n0, kFormJson);
    if (n0 != '\\' && n.size() > 1) pair(n0, '\\');
    start('\\', kFormJson);
    pair('\\', 'u');
    if (const char x = jsonShortLetter(n0)) pair('\\', x);
    // Base64: the first character of the form (a lead shared with a neighbour: any whose
    // needle bits agree) and the one after it, each in either alphabet.
    if (n.size() < kMinBase64Needle) continue;
    for (size_t a = 0; a < 3; ++a) {
      std::string chars = base64Chars(a, n);
      const Base64Span sp = base64Span(a, n.size());
      auto both = [](int v) { return std::array<char, 2>{kBase64[v], kBase64Url[v]}; };
      const size_t f = sp.lead() ? 1 : 0;
      for (char c0 : both(base64Value(chars[f]))) {
        start(c0, kFormBase64 << a);
        for (char c1 : both(base64Value(chars[f + 1]))) pair(c0, c1);
      }
      if (sp.lead()) {
        const unsigned m = sp.mask(0);
        const unsigned want = base64Value(chars[0]) & m;
        for (int v = 0; v < 64; ++v) {
          if ((static_cast<unsigned>(v) & m) != want) continue;
          for (char c0 : both(v)) {
            start(c0, kFormBase64Lead << a);
            for (char c1 : both(base64Value(chars[1]))) pair(c0, c1);
          }
        }
      }
      base64_[k].chars[a] = Secret::take(chars);
    }
  }
  for (unsigned a = 0; a < 256; ++a) {
    firstBegin_[a] = static_cast<uint32_t>(byFirst_.size());
    for (const auto& [k, forms] : lists[a]) {
      byFirst_.push_back(k);
      formsByFirst_.push_back(forms);
    }
  }
  firstBegin_[256] = static_cast<uint32_t>(byFirst_.size());
}

namespace {

// The first position at or after `p` where the pair filter lets a form of some rule start (the
// last byte of `text` is looked at alone); text.size() when there is none. The one loop that
// reads every byte of a body: a table lookup per byte, no call.
size_t nextCandidate(const ScrubSet& set, std::string_view text, size_t p) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t end = text.size();
  while (p + 1 < end && !set.mayStartPair(s[p], s[p + 1])) ++p;
  if (p + 1 == end && !set.mayStart(s[p])) return end;
  return std::min(p, end);
}

}  // namespace

Scrubber::Scrubber(std::shared_ptr<const ScrubSet> set) : set_(std::move(set)) {
  if (!set_) set_ = std::make_shared<const ScrubSet>(std::vector<ScrubRule>{});
}

Scrubber::Scrubber(std::vector<ScrubRule> rules)
    : set_(std::make_shared<const ScrubSet>(std::move(rules))) {}

Scrubber::~Scrubber() { wipe(work_); }

struct Scrubber::Match {
  Probe probe;
};

namespace {

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

// Lower case when the form has a lower-case hex letter.
const char* hexCaseOf(std::string_view form) {
  return std::any_of(form.begin(), form.end(), [](char c) { return c >= 'a' && c <= 'f'; })
             ? kLower
             : kUpper;
}

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

}  // namespace

void Scrubber::emit(size_t k, const Match& m, std::string_view form, std::string& out) const {
  const ScrubRule& r = set_->rules()[k];
  // reveal(): compared with the matched response bytes, which are that secret (or a form of
  // it) and are being replaced.
  const std::string_view needle = r.needle->reveal();
  const std::string& repl = r.replacement;
  switch (m.probe.shape) {
    case Shape::kRaw:
      out.append(repl);
      return;
    case Shape::kUrl:
      if (form.size() == needle.size() || repl.size() != needle.size()) {
        // A form as long as the needle has no escape, or a replacement of another length
        // that has no shape to keep.
        out.append(repl);
      } else {
        emitUrl(repl, form, out);
      }
      return;
    case Shape::kHex:
      emitHex(repl, form, out);
      return;
    case Shape::kJson:
      emitJson(needle, repl, form, out);
      return;
    case Shape::kBase64:
      emitBase64(m.probe, needle.size(), repl, form, out);
      return;
  }
}

size_t Scrubber::scan(std::string_view work, std::string& out, bool final) {
  const ScrubSet& set = *set_;
  const size_t end = work.size();
  size_t done = 0;  // work[0, done) is in `out` already (as it was, or replaced)
  size_t p = nextCandidate(set, work, 0);
  while (p < end) {
    // Earliest match wins (this is the first candidate not passed), the longest among the
    // rules starting here; a form that may still complete with the next slice holds everything
    // from here back, since it would start as early and be longer.
    size_t bestLen = 0;
    size_t best = 0;
    Match bestMatch;
    bool partial = false;
    const auto first = static_cast<unsigned char>(work[p]);
    const auto rules = set.startingWith(first);
    const auto forms = set.formsStartingWith(first);
    for (size_t i = 0; i < rules.size(); ++i) {
      const uint32_t k = rules[i];
      const ScrubRule& r = set.rules()[k];
      // reveal(): compared with response bytes to find the secret and replace it.
      const Probe m = probe(r, set.base64(k), r.needle->reveal(), work, p, forms[i]);
      partial = partial || m.partial;
      if (m.len > bestLen) {
        bestLen = m.len;
        best = k;
        bestMatch.probe = m;
      }
    }
    if (partial && !final) break;
    if (bestLen == 0) {
      p = nextCandidate(set, work, p + 1);
      continue;
    }
    out.append(work.substr(done, p - done));
    emit(best, bestMatch, work.substr(p, bestLen), out);
    ++count_;
    ++byCredential_[set.rules()[best].credential];
    done = p + bestLen;
    p = nextCandidate(set, work, done);
  }
  const size_t keepFrom = std::min(p, end);
  out.append(work.substr(done, keepFrom - done));
  return keepFrom;
}

void Scrubber::feed(std::string_view in, std::string& out) {
  if (set_->empty()) {
    out.append(in);
    return;
  }
  if (work_.empty()) {
    // Nothing held back from the last slice: scan this one where it lies; only a tail that
    // may start a form is copied, to wait for more.
    const size_t keepFrom = scan(in, out, false);
    work_.assign(in.substr(keepFrom));
    return;
  }
  work_.append(in);
  const size_t keepFrom = scan(work_, out, false);
  std::string rest(work_, keepFrom);
  wipe(work_);
  work_ = std::move(rest);
}

void Scrubber::finish(std::string& out) {
  if (!work_.empty()) scan(work_, out, true);
  wipe(work_);
}

bool Scrubber::occursIn(std::string_view text) const {
  const ScrubSet& set = *set_;
  for (size_t p = nextCandidate(set, text, 0); p < text.size();
       p = nextCandidate(set, text, p + 1)) {
    const auto first = static_cast<unsigned char>(text[p]);
    const auto rules = set.startingWith(first);
    const auto forms = set.formsStartingWith(first);
    for (size_t i = 0; i < rules.size(); ++i) {
      const ScrubRule& r = set.rules()[rules[i]];
      // reveal(): compared with a response field to see whether the secret is in it.
      if (probe(r, set.base64(rules[i]), r.needle->reveal(), text, p, forms[i]).len > 0) {
        return true;
      }
    }
  }
  return false;
}

size_t Scrubber::scrubHeaders(Headers& headers) {
  if (set_->empty()) return 0;
  uint64_t before = count_;
  for (auto& [name, value] : headers) {
    for (std::string* field : {&name, &value}) {
      if (!occursIn(*field)) continue;  // the same result as scan(), without its copies
      std::string out;
      scan(*field, out, true);
      wipe(*field);  // the original value holds the secret
      *field = std::move(out);
    }
  }
  return static_cast<size_t>(count_ - before);
}

}  // namespace sandgate::broker
