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

void Scrubber::process(std::string& buffer, std::string& out, bool final) {
  const std::string_view work(buffer);
  const size_t end = work.size();
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
    // A match is final only when every needle that could start at or before it has all of its
    // bytes here; otherwise a longer needle starting earlier may complete with the next slice.
    if (bestRule && (final || best + maxLen_ <= end)) {
      out.append(work.substr(i, best - i));
      out.append(bestRule->replacement);
      ++count_;
      i = best + bestRule->needle->size();
      continue;
    }
    break;
  }
  // Hold back the last (maxLen - 1) bytes: they may be the start of a needle.
  size_t keepFrom = final || maxLen_ == 0 ? end : std::max(i, end - std::min(end, maxLen_ - 1));
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
  work_.append(in);
  process(work_, out, false);
}

void Scrubber::finish(std::string& out) {
  if (!work_.empty()) process(work_, out, true);
  wipe(work_);
}

size_t Scrubber::scrubHeaders(Headers& headers) {
  if (rules_.empty()) return 0;
  uint64_t before = count_;
  for (auto& [name, value] : headers) {
    for (std::string* field : {&name, &value}) {
      std::string out;
      process(*field, out, true);  // wipes the original value, which may hold the secret
      *field = std::move(out);
    }
  }
  return static_cast<size_t>(count_ - before);
}

}  // namespace sandgate::broker
