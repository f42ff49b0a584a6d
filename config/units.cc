// Parsing of the duration ("10s") and size ("64KiB") values that config files use.
#include <charconv>
#include <limits>

#include "config/config.h"

namespace sandgate::config {
namespace {

// Longer durations are refused so that callers can convert any accepted value to
// std::chrono::nanoseconds (int64, ~292 years) without overflow.
constexpr double kMaxDurationSeconds = 1e9;

bool isDigit(char c) { return c >= '0' && c <= '9'; }

// Consumes a decimal number "12" or "1.5" (digits required on both sides of a dot).
std::optional<double> takeNumber(std::string_view& s) {
  size_t i = 0;
  while (i < s.size() && isDigit(s[i])) ++i;
  if (i == 0) return std::nullopt;
  if (i < s.size() && s[i] == '.') {
    size_t frac = i + 1;
    while (frac < s.size() && isDigit(s[frac])) ++frac;
    if (frac == i + 1) return std::nullopt;
    i = frac;
  }
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + i, v);
  if (ec != std::errc() || end != s.data() + i) return std::nullopt;
  s.remove_prefix(i);
  return v;
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<Seconds> parseDuration(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::string_view rest = s;
  auto first = takeNumber(rest);
  if (!first) return std::nullopt;
  if (rest.empty()) {
    if (*first > kMaxDurationSeconds) return std::nullopt;
    return Seconds(*first);  // a bare number is seconds
  }
  // A sequence of <number><unit>, as in Go: "1h30m", "1m30.5s", "250ms".
  rest = s;
  double total = 0;
  while (!rest.empty()) {
    auto n = takeNumber(rest);
    if (!n) return std::nullopt;
    double scale = 0;
    if (rest.starts_with("ms")) {
      scale = 0.001;
      rest.remove_prefix(2);
    } else if (rest.starts_with("s")) {
      scale = 1;
      rest.remove_prefix(1);
    } else if (rest.starts_with("m")) {
      scale = 60;
      rest.remove_prefix(1);
    } else if (rest.starts_with("h")) {
      scale = 3600;
      rest.remove_prefix(1);
    } else {
      return std::nullopt;
    }
    total += *n * scale;
    if (total > kMaxDurationSeconds) return std::nullopt;
  }
  return Seconds(total);
}

std::optional<uint64_t> parseSize(std::string_view s) {
  size_t digits = 0;
  while (digits < s.size() && isDigit(s[digits])) ++digits;
  if (digits == 0) return std::nullopt;
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + digits, n);
  if (ec != std::errc() || end != s.data() + digits) return std::nullopt;
  std::string_view unit = s.substr(digits);
  struct Unit {
    std::string_view name;
    uint64_t factor;
  };
  // Every unit is a power of 1024: "64K" in a limits file means 65536, never 64000.
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1ULL << 10},
      {"kb", 1ULL << 10},
      {"ki", 1ULL << 10},
      {"kib", 1ULL << 10},
      {"m", 1ULL << 20},
      {"mb", 1ULL << 20},
      {"mi", 1ULL << 20},
      {"mib", 1ULL << 20},
      {"g", 1ULL << 30},
      {"gb", 1ULL << 30},
      {"gi", 1ULL << 30},
      {"gib", 1ULL << 30},
  };
  for (const auto& u : kUnits) {
    if (!equalsIgnoreCase(unit, u.name)) continue;
    if (n > std::numeric_limits<uint64_t>::max() / u.factor) return std::nullopt;
    return n * u.factor;
  }
  return std::nullopt;
}

}  // namespace sandgate::config
