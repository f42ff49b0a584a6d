// Streaming multi-needle replacement for response headers and identity-encoded bodies.
#include "broker/scrubber.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "broker/encoding.h"

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

// Could a form of `r` start with byte `c`? A cheap first test before any walk.
bool mayStart(const ScrubRule& r, std::string_view needle, char c) {
  if (c == needle.front()) return true;
  return r.urlForms && (c == '%' || (c == '+' && needle.front() == ' '));
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

Scrubber::Scrubber(std::vector<ScrubRule> rules) {
  for (auto& r : rules) {
    if (r.needle && !r.needle->empty()) {
      maxLen_ = std::max(maxLen_, r.needle->size() * (r.urlForms ? 3 : 1));
      rules_.push_back(std::move(r));
    }
  }
}

Scrubber::~Scrubber() { wipe(work_); }

bool Scrubber::preservesLength() const {
  return std::all_of(rules_.begin(), rules_.end(),
                     [](const ScrubRule& r) { return r.replacement.size() == r.needle->size(); });
}

bool Scrubber::couldStartNeedle(std::string_view tail) const {
  for (const auto& r : rules_) {
    // reveal(): compared with response bytes to decide whether they may be a secret's start.
    std::string_view needle = r.needle->reveal();
    // The first bytes compared inline: most positions differ there, and a memcmp call at each
    // of a body's last positions cost some 380 instructions per response more.
    if (tail.empty() || !mayStart(r, needle, tail.front())) continue;
    if (!r.urlForms) {
      if (needle.size() > tail.size() && needle.substr(0, tail.size()) == tail) return true;
      continue;
    }
    if (probe(r, needle, tail, 0).partial) return true;
  }
  return false;
}

size_t Scrubber::findRule(const ScrubRule& r, std::string_view work, size_t from,
                          size_t* len) const {
  // reveal(): searched for in upstream response bytes so that it can be removed.
  const std::string_view needle = r.needle->reveal();
  if (!r.urlForms) {
    *len = needle.size();
    return work.find(needle, from);
  }
  // Candidates are where a form can start: the first byte raw, '%', or '+' for a space. Each
  // is found with memchr and remembered until passed, so a body is scanned about once per
  // candidate byte, not once per position.
  const char first = needle.front();
  auto nextOf = [&](char c, size_t at) -> size_t {
    if (at >= work.size()) return std::string_view::npos;
    const void* hit = std::memchr(work.data() + at, c, work.size() - at);
    return hit ? static_cast<size_t>(static_cast<const char*>(hit) - work.data())
               : std::string_view::npos;
  };
  size_t nextFirst = nextOf(first, from);
  size_t nextPct = first == '%' ? std::string_view::npos : nextOf('%', from);
  size_t nextPlus = first == ' ' ? nextOf('+', from) : std::string_view::npos;
  while (true) {
    const size_t p = std::min({nextFirst, nextPct, nextPlus});
    if (p == std::string_view::npos) return p;
    if (Probe m = probe(r, needle, work, p); m.len > 0) {
      *len = m.len;
      return p;
    }
    if (nextFirst == p) nextFirst = nextOf(first, p + 1);
    if (nextPct == p) nextPct = nextOf('%', p + 1);
    if (nextPlus == p) nextPlus = nextOf('+', p + 1);
  }
}

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

size_t Scrubber::firstPartialFrom(std::string_view work, size_t from) const {
  const size_t end = work.size();
  if (maxLen_ <= 1) return end;
  for (size_t p = std::max(from, end - std::min(end, maxLen_ - 1)); p < end; ++p) {
    if (couldStartNeedle(work.substr(p))) return p;
  }
  return end;
}

void Scrubber::process(std::string& buffer, std::string& out, bool final) {
  const std::string_view work(buffer);
  const size_t end = work.size();
  // Positions near the end where a needle may start but has not fully arrived. Only bytes from
  // such a position on are held back: a stream that pauses (server-sent events, a chunk per
  // token) must reach the client when it is sent, not when the next piece comes. `from` only
  // grows below, so a position found stays the answer until `from` passes it.
  size_t partial = std::string_view::npos;
  auto partialFrom = [&](size_t from) {
    if (final) return end;
    if (partial == std::string_view::npos || partial < from) {
      partial = firstPartialFrom(work, from);
    }
    return partial;
  };
  constexpr size_t kUnknown = std::string_view::npos - 1;
  // Next occurrence of each needle at or after i: still valid after i moves past a match that
  // ended before it, so each needle is searched for about once per occurrence, not per match.
  std::vector<size_t> next(rules_.size(), kUnknown);
  std::vector<size_t> nextLen(rules_.size(), 0);
  size_t i = 0;
  while (i < end) {
    // Earliest match at or after i; the longest match wins a tie.
    size_t best = std::string_view::npos;
    size_t bestLen = 0;
    const ScrubRule* bestRule = nullptr;
    for (size_t k = 0; k < rules_.size(); ++k) {
      const ScrubRule& r = rules_[k];
      if (next[k] == kUnknown || (next[k] != std::string_view::npos && next[k] < i)) {
        next[k] = findRule(r, work, i, &nextLen[k]);
      }
      size_t p = next[k];
      if (p == std::string_view::npos) continue;
      if (p < best || (p == best && nextLen[k] > bestLen)) {
        best = p;
        bestLen = nextLen[k];
        bestRule = &r;
      }
    }
    // A match is final unless a needle that has not fully arrived starts at or before it: that
    // one may complete with the next slice and then wins (earlier start, or same start and
    // longer).
    if (bestRule && partialFrom(i) > best) {
      out.append(work.substr(i, best - i));
      emit(*bestRule, work.substr(best, bestLen), out);
      ++count_;
      ++byCredential_[bestRule->credential];
      i = best + bestLen;
      continue;
    }
    break;
  }
  // Hold back from the first position that may start a needle; everything before it is final.
  size_t keepFrom = std::max(i, partialFrom(i));
  out.append(work.substr(i, keepFrom - i));
  std::string rest(work.substr(keepFrom));
  wipe(buffer);
  buffer = std::move(rest);
}

void Scrubber::feed(std::string_view in, std::string& out) {
  if (rules_.empty()) {
    out.append(in);
    return;
  }
  if (work_.empty() && !occursIn(in)) {
    // Nothing to replace in this slice and nothing held back from the last: what process()
    // would do, without its copies. Only a tail that may start a needle waits for more.
    const size_t keepFrom = firstPartialFrom(in, 0);
    out.append(in.substr(0, keepFrom));
    work_.assign(in.substr(keepFrom));
    return;
  }
  work_.append(in);
  process(work_, out, false);
}

void Scrubber::finish(std::string& out) {
  if (!work_.empty()) process(work_, out, true);
  wipe(work_);
}

bool Scrubber::occursIn(std::string_view text) const {
  return std::any_of(rules_.begin(), rules_.end(), [&](const ScrubRule& r) {
    size_t len = 0;
    return findRule(r, text, 0, &len) != std::string_view::npos;
  });
}

size_t Scrubber::scrubHeaders(Headers& headers) {
  if (rules_.empty()) return 0;
  uint64_t before = count_;
  for (auto& [name, value] : headers) {
    for (std::string* field : {&name, &value}) {
      if (!occursIn(*field)) continue;  // the same result as process(), without its copies
      std::string out;
      process(*field, out, true);  // wipes the original value, which may hold the secret
      *field = std::move(out);
    }
  }
  return static_cast<size_t>(count_ - before);
}

}  // namespace sandgate::broker
