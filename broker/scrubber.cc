// Streaming multi-needle replacement for response headers and identity-encoded bodies.
#include "broker/scrubber.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "broker/scrub_forms.h"
#include "common/encoding.h"

namespace sandgate::broker {

using namespace scrub;  // the forms a secret takes (scrub_forms.h)

namespace {

// The walks a position may start, as bits (ScrubSet::formsStartingWith).
constexpr uint16_t kFormRaw = 1;  // the needle as written, and its URL forms
constexpr uint16_t kFormHex = 2;
constexpr uint16_t kFormJson = 4;
constexpr uint16_t kFormBase64 = 8;       // << alignment: from the first fixed character
constexpr uint16_t kFormBase64Lead = 64;  // << alignment: from the shared lead character

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
