// The `budgets` claim of a task token (see token_budgets.h).
#include "proxy/identity/token_budgets.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <limits>
#include <set>

#include "common/llm_api.h"

namespace sandgate::proxy {

namespace json = boost::json;

namespace {

bool validName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// A whole number from 1 to 2^63-1 (counters are signed 64-bit).
std::optional<uint64_t> positiveCount(const json::value& v) {
  if (v.is_uint64()) {
    const uint64_t n = v.as_uint64();
    if (n >= 1 && n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return n;
    return std::nullopt;
  }
  if (v.is_int64() && v.as_int64() >= 1) return static_cast<uint64_t>(v.as_int64());
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<config::Budget>> parseTokenBudgets(const json::value& v,
                                                             std::string* why) {
  if (!v.is_array()) {
    *why = "is not a list";
    return std::nullopt;
  }
  if (v.as_array().size() > kMaxTokenBudgets) {
    *why = fmt::format("has more than {} budgets", kMaxTokenBudgets);
    return std::nullopt;
  }
  std::vector<config::Budget> out;
  std::set<std::string, std::less<>> names;
  for (const auto& item : v.as_array()) {
    const size_t i = out.size();
    if (!item.is_object()) {
      *why = fmt::format("[{}] is not an object", i);
      return std::nullopt;
    }
    config::Budget b;
    b.keyPath = fmt::format("token.budgets[{}]", i);
    bool limited = false;
    for (const auto& [key, value] : item.as_object()) {
      if (key == "name" || key == "window") {
        if (!value.is_string()) {
          *why = fmt::format("[{}].{} is not a string", i, std::string_view(key));
          return std::nullopt;
        }
        const std::string_view s = value.as_string();
        if (key == "name") {
          if (!validName(s)) {
            *why = fmt::format("[{}].name is not a name (letters, digits, '.', '_', '-')", i);
            return std::nullopt;
          }
          b.name = std::string(s);
        } else if (auto w = config::parseWindow(s)) {
          b.window = *w;
        } else {
          *why = fmt::format("[{}].window is not minute, hour, day or run", i);
          return std::nullopt;
        }
        continue;
      }
      if (key == "spend") {
        // The config's exact decimal (a string, "1.00"), in millionths: a JSON number would be
        // a float, and two replicas must read one limit.
        std::optional<uint64_t> micros;
        if (value.is_string()) micros = parseMicros(value.as_string());
        if (!micros || *micros == 0) {
          *why = fmt::format("[{}].spend is not a decimal string above 0 such as \"1.00\"", i);
          return std::nullopt;
        }
        b.spendMicros = micros;
        limited = true;
        continue;
      }
      std::optional<uint64_t>* limit = key == "requests"         ? &b.requests
                                       : key == "request_bytes"  ? &b.requestBytes
                                       : key == "response_bytes" ? &b.responseBytes
                                       : key == "input_tokens"   ? &b.inputTokens
                                       : key == "output_tokens"  ? &b.outputTokens
                                                                 : nullptr;
      if (!limit) {
        *why = fmt::format("[{}] names `{}`, which is not a budget key", i,
                           std::string_view(key).substr(0, 32));
        return std::nullopt;
      }
      *limit = positiveCount(value);
      if (!*limit) {
        *why =
            fmt::format("[{}].{} is not a whole number from 1 to 2^63-1", i, std::string_view(key));
        return std::nullopt;
      }
      limited = true;
    }
    if (b.name.empty() || !item.as_object().contains("window") || !limited) {
      *why = fmt::format("[{}] needs a name, a window and at least one limit", i);
      return std::nullopt;
    }
    if (!names.insert(b.name).second) {
      *why = fmt::format("names budget `{}` twice", b.name);
      return std::nullopt;
    }
    out.push_back(std::move(b));
  }
  return out;
}

std::optional<std::string> narrowBudgets(std::vector<config::Budget>& task,
                                         const std::vector<config::Budget>& token) {
  for (const auto& t : token) {
    auto it = std::find_if(task.begin(), task.end(),
                           [&](const config::Budget& b) { return b.name == t.name; });
    if (it == task.end()) {
      task.push_back(t);  // another limit on top of the task's: only narrower
      continue;
    }
    if (it->window != t.window) {
      return fmt::format("the token's budget `{}` counts per {}, the task's per {}", t.name,
                         config::windowName(t.window), config::windowName(it->window));
    }
    auto lower = [&](const std::optional<uint64_t>& claim, std::optional<uint64_t>& limit,
                     std::string_view key) -> std::optional<std::string> {
      if (!claim) return std::nullopt;
      if (limit && *claim > *limit) {
        return fmt::format("the token's budget `{}` has {} {}, above the task's {}", t.name, *claim,
                           key, *limit);
      }
      limit = claim;
      return std::nullopt;
    };
    if (auto w = lower(t.requests, it->requests, "requests")) return w;
    if (auto w = lower(t.requestBytes, it->requestBytes, "request_bytes")) return w;
    if (auto w = lower(t.responseBytes, it->responseBytes, "response_bytes")) return w;
    if (auto w = lower(t.inputTokens, it->inputTokens, "input_tokens")) return w;
    if (auto w = lower(t.outputTokens, it->outputTokens, "output_tokens")) return w;
    if (auto w = lower(t.spendMicros, it->spendMicros, "spend (millionths)")) return w;
  }
  return std::nullopt;
}

json::array budgetsJson(const std::vector<config::Budget>& budgets) {
  json::array out;
  for (const auto& b : budgets) {
    json::object o;
    o["name"] = b.name;
    o["window"] = config::windowName(b.window);
    if (b.requests) o["requests"] = *b.requests;
    if (b.requestBytes) o["request_bytes"] = *b.requestBytes;
    if (b.responseBytes) o["response_bytes"] = *b.responseBytes;
    if (b.inputTokens) o["input_tokens"] = *b.inputTokens;
    if (b.outputTokens) o["output_tokens"] = *b.outputTokens;
    if (b.spendMicros) {
      o["spend"] = fmt::format("{}.{:06}", *b.spendMicros / 1000000, *b.spendMicros % 1000000);
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace sandgate::proxy
