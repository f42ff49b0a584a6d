// Admitting and settling a request against a task's budgets (see meter.h).
#include "budget/meter.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "budget/window.h"

namespace sandgate::budget {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t clamp(uint64_t v) {
  return v > static_cast<uint64_t>(kMax) ? kMax : static_cast<int64_t>(v);
}

// A key lives one window past its end: a replica whose clock is a little behind still finds it.
int64_t expiryOf(config::BudgetWindow w, const WindowSpan& span) {
  return span.endsAt == 0 ? 0 : span.endsAt + windowSeconds(w);
}

struct Taken {
  std::string key;
  int64_t amount;
  int64_t expiresAt;
};

}  // namespace

std::string counterKey(std::string_view task, const config::Budget& b, int64_t index,
                       Metric metric) {
  return fmt::format("sandgate:budget:{}:{}:{}:{}:{}", task, b.name, config::windowName(b.window),
                     index, metricName(metric));
}

namespace {

// admit(), and with `wouldWait` admitNow(): each counter call then answers without waiting or
// stops the admission (*wouldWait set, what was taken given back).
std::optional<Exceeded> admitWith(Counter& counter, std::string_view task,
                                  std::span<const config::Budget> budgets, int64_t now,
                                  std::optional<uint64_t> bodyBytes, Admission& admission,
                                  const LlmCost* llm, bool* wouldWait) {
  admission = Admission{};
  std::vector<Taken> taken;
  auto giveBack = [&] {
    for (const auto& t : taken) counter.add(t.key, -t.amount, t.expiresAt);
  };
  auto tryAdd = [&](const std::string& key, int64_t amount, int64_t limit,
                    int64_t expiresAt) -> std::optional<TakeResult> {
    if (!wouldWait) return counter.tryAdd(key, amount, limit, expiresAt);
    auto r = counter.tryAddNow(key, amount, limit, expiresAt);
    if (!r) *wouldWait = true;
    return r;
  };
  auto get = [&](const std::string& key) -> std::optional<std::optional<int64_t>> {
    if (!wouldWait) return counter.get(key);
    auto v = counter.getNow(key);
    if (!v) {
      *wouldWait = true;
      return std::nullopt;
    }
    return v;
  };
  // Stops an admission that would wait: nothing stays taken, and the caller sees *wouldWait.
  auto stop = [&] {
    giveBack();
    admission = Admission{};
    return Exceeded{};
  };
  for (const auto& b : budgets) {
    const WindowSpan span = windowAt(b.window, now);
    const int64_t expiresAt = expiryOf(b.window, span);
    auto refuse = [&](Metric m, int64_t used, int64_t limit, bool unavailable) {
      giveBack();
      admission = Admission{};
      return Exceeded{&b,
                      m,
                      used,
                      limit,
                      span.endsAt == 0 ? 0 : std::max<int64_t>(1, span.endsAt - now),
                      unavailable};
    };
    auto take = [&](Metric m, int64_t amount, int64_t limit) -> std::optional<Exceeded> {
      std::string key = counterKey(task, b, span.index, m);
      auto answer = tryAdd(key, amount, limit, expiresAt);
      if (!answer) return stop();
      const TakeResult r = *answer;
      if (r.status == TakeResult::Status::kUnavailable) return refuse(m, 0, limit, true);
      if (r.status == TakeResult::Status::kOver) return refuse(m, r.used, limit, false);
      taken.push_back({key, amount, expiresAt});
      return std::nullopt;
    };
    // A byte budget admits while it has room: the request that crosses the limit is the last
    // one (its size is known only as it goes, unless announced, when it is reserved here).
    auto room = [&](Metric m, int64_t limit, int64_t reserve) -> std::optional<Exceeded> {
      std::string key = counterKey(task, b, span.index, m);
      if (reserve > 0) {
        if (auto over = take(m, reserve, limit)) return over;
      } else {
        auto answer = get(key);
        if (!answer) return stop();
        const std::optional<int64_t> used = *answer;
        if (!used) return refuse(m, 0, limit, true);
        if (*used >= limit) return refuse(m, *used, limit, false);
      }
      admission.held.push_back({std::move(key), m, reserve, expiresAt});
      return std::nullopt;
    };
    if (b.requests) {
      if (auto over = take(Metric::kRequests, 1, clamp(*b.requests))) return over;
    }
    if (b.requestBytes) {
      const int64_t reserve = bodyBytes ? clamp(*bodyBytes) : 0;
      if (auto over = room(Metric::kRequestBytes, clamp(*b.requestBytes), reserve)) return over;
    }
    if (b.responseBytes) {
      if (auto over = room(Metric::kResponseBytes, clamp(*b.responseBytes), 0)) return over;
    }
    if (!llm) continue;
    // An LLM call reserves its worst case: a budget admits it only when that fits, so calls
    // running at once cannot together pass the limit.
    for (auto [limit, m, amount] :
         {std::tuple{b.inputTokens, Metric::kInputTokens, llm->inputTokens},
          std::tuple{b.outputTokens, Metric::kOutputTokens, llm->outputTokens},
          std::tuple{b.spendMicros, Metric::kSpend, llm->spendMicros}}) {
      if (!limit) continue;
      if (auto over = room(m, clamp(*limit), amount)) return over;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<Exceeded> admit(Counter& counter, std::string_view task,
                              std::span<const config::Budget> budgets, int64_t now,
                              std::optional<uint64_t> bodyBytes, Admission& admission,
                              const LlmCost* llm) {
  return admitWith(counter, task, budgets, now, bodyBytes, admission, llm, nullptr);
}

std::optional<std::optional<Exceeded>> admitNow(Counter& counter, std::string_view task,
                                                std::span<const config::Budget> budgets,
                                                int64_t now, std::optional<uint64_t> bodyBytes,
                                                Admission& admission, const LlmCost* llm) {
  bool wouldWait = false;
  auto over = admitWith(counter, task, budgets, now, bodyBytes, admission, llm, &wouldWait);
  if (wouldWait) return std::nullopt;
  return over;
}

void settle(Counter& counter, Admission& admission, uint64_t up, uint64_t down) {
  if (admission.settled) return;
  admission.settled = true;
  for (const auto& h : admission.held) {
    if (h.metric != Metric::kRequestBytes && h.metric != Metric::kResponseBytes) continue;
    const int64_t moved = clamp(h.metric == Metric::kRequestBytes ? up : down);
    // The difference only: what was reserved is already counted (a client that announced more
    // than it sent gets the rest back).
    const int64_t delta = moved - h.reserved;
    if (delta != 0) counter.add(h.key, delta, h.expiresAt);
  }
}

void settleLlm(Counter& counter, Admission& admission, const LlmCost& cost) {
  if (admission.llmSettled) return;
  admission.llmSettled = true;
  for (const auto& h : admission.held) {
    int64_t real = 0;
    switch (h.metric) {
      case Metric::kInputTokens:
        real = cost.inputTokens;
        break;
      case Metric::kOutputTokens:
        real = cost.outputTokens;
        break;
      case Metric::kSpend:
        real = cost.spendMicros;
        break;
      default:
        continue;
    }
    const int64_t delta = real - h.reserved;
    if (delta != 0) counter.add(h.key, delta, h.expiresAt);
  }
}

}  // namespace sandgate::budget
