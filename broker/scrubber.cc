// Streaming multi-needle replacement for response headers and identity-encoded bodies.
#include "broker/scrubber.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/encoding.h"

namespace sandgate::broker {

namespace {

// What a needle's forms do at one position of the response.
struct Probe {
  size_t len = 0;        // length of the longest complete form there, 0 when none
  bool partial = false;  // the input ended inside a form that may still complete
};

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
  return {pos - p, false};
}

Probe probe(const ScrubRule& r, std::string_view needle, std::string_view text, size_t p) {
  Probe out;
  std::string_view rest = text.substr(p);
  if (rest.size() >= needle.size()) {
    if (rest.substr(0, needle.size()) == needle) out.len = needle.size();
  } else if (needle.substr(0, rest.size()) == rest) {
    out.partial = true;
  }
  if (r.urlForms) {
    Probe w = walkUrlForm(needle, text, p);
    out.len = std::max(out.len, w.len);
    out.partial = out.partial || w.partial;
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
      return;
    }
  }
  rules.push_back(std::move(rule));
}

ScrubSet::ScrubSet(std::vector<ScrubRule> rules) {
  for (auto& r : rules) {
    if (r.needle && !r.needle->empty()) rules_.push_back(std::move(r));
  }
  std::array<std::vector<uint32_t>, 256> lists;
  auto pair = [&](unsigned char x, unsigned char y) {
    const unsigned key = (static_cast<unsigned>(x) << 8) | y;
    pairs_[key >> 6] |= uint64_t{1} << (key & 63);
  };
  static constexpr char kUpper[] = "0123456789ABCDEF";
  static constexpr char kLower[] = "0123456789abcdef";
  for (size_t k = 0; k < rules_.size(); ++k) {
    const ScrubRule& r = rules_[k];
    // reveal(): its first two bytes (and its length) index the filter that finds where a
    // form of it may start in a response.
    const std::string_view n = r.needle->reveal();
    maxLen_ = std::max(maxLen_, n.size() * (r.urlForms ? 3 : 1));
    preservesLength_ = preservesLength_ && r.replacement.size() == n.size();
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
      lists[first].push_back(static_cast<uint32_t>(k));
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
  }
  for (unsigned a = 0; a < 256; ++a) {
    firstBegin_[a] = static_cast<uint32_t>(byFirst_.size());
    byFirst_.insert(byFirst_.end(), lists[a].begin(), lists[a].end());
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

void Scrubber::emit(const ScrubRule& r, std::string_view form, std::string& out) const {
  // reveal(): compared with the matched response bytes, which are that secret (or a form of
  // it) and are being replaced.
  const std::string_view needle = r.needle->reveal();
  const std::string& repl = r.replacement;
  if (form.size() == needle.size() || repl.size() != needle.size()) {
    // The needle as written (a form as long as the needle has no escape), or a replacement
    // of another length that has no shape to keep.
    out.append(repl);
    return;
  }
  static constexpr char kUpper[] = "0123456789ABCDEF";
  static constexpr char kLower[] = "0123456789abcdef";
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
    const ScrubRule* best = nullptr;
    bool partial = false;
    for (uint32_t k : set.startingWith(static_cast<unsigned char>(work[p]))) {
      const ScrubRule& r = set.rules()[k];
      // reveal(): compared with response bytes to find the secret and replace it.
      const Probe m = probe(r, r.needle->reveal(), work, p);
      partial = partial || m.partial;
      if (m.len > bestLen) {
        bestLen = m.len;
        best = &r;
      }
    }
    if (partial && !final) break;
    if (!best) {
      p = nextCandidate(set, work, p + 1);
      continue;
    }
    out.append(work.substr(done, p - done));
    emit(*best, work.substr(p, bestLen), out);
    ++count_;
    ++byCredential_[best->credential];
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
    for (uint32_t k : set.startingWith(static_cast<unsigned char>(text[p]))) {
      const ScrubRule& r = set.rules()[k];
      // reveal(): compared with a response field to see whether the secret is in it.
      if (probe(r, r.needle->reveal(), text, p).len > 0) return true;
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
