// Streaming multi-needle replacement for response headers and identity-encoded bodies.
#include "broker/scrubber.h"

#include <fmt/format.h>

#include <algorithm>

namespace sandgate::broker {

std::string redactionMarker(std::string_view credential) {
  return fmt::format("[REDACTED:{}]", credential);
}

void addScrubRule(std::vector<ScrubRule>& rules, ScrubRule rule) {
  if (!rule.needle || rule.needle->empty()) return;
  for (const auto& r : rules) {
    // reveal(): compared in constant time with another secret held by this process.
    if (r.needle->equals(rule.needle->reveal())) return;
  }
  rules.push_back(std::move(rule));
}

Scrubber::Scrubber(std::vector<ScrubRule> rules) {
  for (auto& r : rules) {
    if (r.needle && !r.needle->empty()) {
      maxLen_ = std::max(maxLen_, r.needle->size());
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
    if (needle.size() > tail.size() && !tail.empty() && needle.front() == tail.front() &&
        needle.substr(0, tail.size()) == tail) {
      return true;
    }
  }
  return false;
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
  size_t i = 0;
  while (i < end) {
    // Earliest match at or after i; the longest needle wins a tie.
    size_t best = std::string_view::npos;
    const ScrubRule* bestRule = nullptr;
    for (size_t k = 0; k < rules_.size(); ++k) {
      const ScrubRule& r = rules_[k];
      if (next[k] == kUnknown || (next[k] != std::string_view::npos && next[k] < i)) {
        // reveal(): searched for in upstream response bytes so that it can be removed.
        next[k] = work.find(r.needle->reveal(), i);
      }
      size_t p = next[k];
      if (p == std::string_view::npos) continue;
      if (p < best || (p == best && r.needle->size() > bestRule->needle->size())) {
        best = p;
        bestRule = &r;
      }
    }
    // A match is final unless a needle that has not fully arrived starts at or before it: that
    // one may complete with the next slice and then wins (earlier start, or same start and
    // longer).
    if (bestRule && partialFrom(i) > best) {
      out.append(work.substr(i, best - i));
      out.append(bestRule->replacement);
      ++count_;
      ++byCredential_[bestRule->credential];
      i = best + bestRule->needle->size();
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
    // reveal(): searched for in upstream response bytes so that it can be removed.
    return text.find(r.needle->reveal()) != std::string_view::npos;
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
