// Reading `budgets:` lists (of a policy or a task): named limits on what a task may use per
// window. A budget that limits nothing would read as a safeguard that is not there, so each
// one must set at least one limit.
#include <fmt/format.h>

#include <limits>
#include <map>

#include "config/readers.h"

namespace sandgate::config {

std::string_view windowName(BudgetWindow w) {
  switch (w) {
    case BudgetWindow::kMinute:
      return "minute";
    case BudgetWindow::kHour:
      return "hour";
    case BudgetWindow::kDay:
      return "day";
    case BudgetWindow::kRun:
      return "run";
  }
  return "run";
}

std::optional<BudgetWindow> parseWindow(std::string_view s) {
  for (auto w :
       {BudgetWindow::kMinute, BudgetWindow::kHour, BudgetWindow::kDay, BudgetWindow::kRun}) {
    if (s == windowName(w)) return w;
  }
  return std::nullopt;
}

namespace detail {

std::vector<Budget> readBudgets(Reader& r, const Field& f) {
  std::vector<Budget> out;
  auto items = r.list(f, "a list of budgets ({name, window, requests, ...})", true);
  if (!items) return out;
  std::map<std::string, int, std::less<>> seen;  // name -> line of the first
  for (const auto& item : *items) {
    auto m = r.map(item,
                   {"name", "window", "requests", "request_bytes", "response_bytes",
                    "input_tokens", "output_tokens", "spend"},
                   "a budget (a map with name, window and at least one of requests, "
                   "request_bytes, response_bytes, input_tokens, output_tokens, spend)");
    if (!m) continue;
    Budget b;
    b.mark = item.mark;
    b.keyPath = item.path;
    if (const Field* n = m->get("name")) {
      if (auto s = r.string(*n, "a budget name")) {
        checkName(r, n->mark, n->path, s->value);
        if (auto [it, fresh] = seen.emplace(s->value, n->mark.line); !fresh) {
          r.error(n->mark, n->path,
                  fmt::format("duplicate budget name `{}` (first defined at line {})", s->value,
                              it->second));
        }
        b.name = s->value;
      }
    } else {
      r.missing(item, "name", "the budget's name (it names the budget in refusals and metrics)");
    }
    if (const Field* w = m->get("window")) {
      if (auto s = r.string(*w, "minute, hour, day or run")) {
        if (auto window = parseWindow(s->value)) {
          b.window = *window;
        } else {
          r.error(w->mark, w->path,
                  fmt::format("expected minute, hour, day or run, got {}", quoted(s->value)));
        }
      }
    } else {
      r.missing(item, "window", "minute, hour, day or run");
    }
    constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
    if (const Field* v = m->get("requests")) b.requests = r.integer(*v, 1, kMax);
    if (const Field* v = m->get("request_bytes")) b.requestBytes = r.size(*v);
    if (const Field* v = m->get("response_bytes")) b.responseBytes = r.size(*v);
    if (const Field* v = m->get("input_tokens")) b.inputTokens = r.integer(*v, 1, kMax);
    if (const Field* v = m->get("output_tokens")) b.outputTokens = r.integer(*v, 1, kMax);
    if (const Field* v = m->get("spend")) {
      // A decimal in llm.prices.currency, kept in millionths (exact, like the prices).
      if (auto s = r.string(*v, "a spend limit such as 1.00")) {
        auto micros = parseMicros(s->value);
        if (!micros || *micros == 0) {
          r.error(v->mark, v->path,
                  fmt::format("expected a spend limit above 0 such as 1.00 (at most 6 decimals), "
                              "got {}",
                              quoted(s->value)));
        } else {
          b.spendMicros = micros;
        }
      }
    }
    // Counters are signed 64-bit (a settle may subtract): a limit above that is no limit.
    for (auto* limit : {&b.requestBytes, &b.responseBytes}) {
      if (*limit && **limit > kMax) {
        r.error(item.mark, item.path, "a byte limit above 2^63-1 bytes");
        limit->reset();
      }
    }
    const bool any = m->get("requests") || m->get("request_bytes") || m->get("response_bytes") ||
                     m->get("input_tokens") || m->get("output_tokens") || m->get("spend");
    if (!any) {
      r.error(item.mark, item.path,
              "a budget sets at least one of requests, request_bytes, response_bytes, "
              "input_tokens, output_tokens, spend");
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace detail
}  // namespace sandgate::config
