// Typed, position-aware access to yaml-cpp nodes (see yaml_reader.h).
#include "config/yaml_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

namespace sandgate::config::detail {
namespace {

bool isIdentifierLike(std::string_view key) {
  if (key.empty()) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

std::string joinKeys(const std::vector<std::string_view>& keys) {
  std::string out;
  for (auto k : keys) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

}  // namespace

const Field* MapView::get(std::string_view key) const {
  for (const auto& [k, f] : entries_) {
    if (k == key) return &f;
  }
  return nullptr;
}

Mark toMark(const YAML::Mark& m) {
  // yaml-cpp's null mark is -1/-1; anything negative means "unknown" (0).
  if (m.line < 0 || m.column < 0) return {};
  return {m.line + 1, m.column + 1};
}

std::string childPath(const std::string& parent, std::string_view key) {
  if (isIdentifierLike(key)) {
    return parent.empty() ? std::string(key) : parent + "." + std::string(key);
  }
  return fmt::format("{}[\"{}\"]", parent, key);
}

size_t editDistance(std::string_view a, std::string_view b) {
  // Three rows suffice for the optimal-string-alignment recurrence.
  std::vector<size_t> prev2(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
      }
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string_view closestKey(std::string_view key, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  size_t bestDistance = 3;
  for (auto c : candidates) {
    size_t d = editDistance(key, c);
    // A hint that rewrites most of a short key is noise ("ab" -> "ca"), not help.
    if (d < bestDistance && d < key.size()) {
      best = c;
      bestDistance = d;
    }
  }
  return best;
}

std::string quoted(std::string_view s) {
  if (s.size() > 40) return fmt::format("`{}...`", s.substr(0, 40));
  return fmt::format("`{}`", s);
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return quoted(n.Scalar());
    default:
      return "nothing";
  }
}

void Reader::error(const Mark& mark, const std::string& path, std::string message) {
  errors_.push_back(Diagnostic{file_, mark.line, mark.col, path, std::move(message)});
}

Field Reader::root(const YAML::Node& node) const {
  Mark m = toMark(node.Mark());
  return Field{node, "", m, m};
}

void Reader::missing(const Field& f, std::string_view key, std::string_view expected) {
  error(f.keyMark, f.path, fmt::format("missing required key `{}` ({})", key, expected));
}

std::optional<MapView> Reader::map(const Field& f, const std::vector<std::string_view>& known,
                                   std::string_view what, bool emptyOk) {
  auto view = namedMap(f, what, emptyOk);
  if (!view) return std::nullopt;
  MapView out;
  for (const auto& [key, field] : view->entries()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) {
      out.add(key, field);
      continue;
    }
    auto hint = closestKey(key, known);
    if (!hint.empty()) {
      error(field.keyMark, field.path,
            fmt::format("unknown key `{}`; did you mean `{}`?", key, hint));
    } else {
      error(field.keyMark, field.path,
            fmt::format("unknown key `{}`; expected one of: {}", key, joinKeys(known)));
    }
  }
  return out;
}

std::optional<MapView> Reader::namedMap(const Field& f, std::string_view what, bool emptyOk) {
  if (f.node.IsNull() && emptyOk) return MapView{};
  if (!f.node.IsMap()) {
    if (f.node.IsNull()) {
      error(f.mark, f.path, fmt::format("empty value; expected {}", what));
    } else {
      error(f.mark, f.path, fmt::format("expected {}, got {}", what, describe(f.node)));
    }
    return std::nullopt;
  }
  MapView out;
  std::map<std::string, int, std::less<>> firstLine;
  for (const auto& kv : f.node) {
    // Copies, not references: yaml-cpp's iterator yields a temporary pair.
    YAML::Node k = kv.first;
    YAML::Node v = kv.second;
    Mark keyMark = toMark(k.Mark());
    if (!k.IsScalar()) {
      error(keyMark, f.path, fmt::format("expected a plain key, got {}", describe(k)));
      continue;
    }
    const std::string& key = k.Scalar();
    std::string path = childPath(f.path, key);
    // yaml-cpp 0.7 keeps both entries of a repeated key; which one a lookup returns is an
    // accident, so a repeated key is refused rather than silently resolved.
    auto [pos, inserted] = firstLine.emplace(key, keyMark.line);
    if (!inserted) {
      error(keyMark, path,
            fmt::format("duplicate key `{}` (first given at line {})", key, pos->second));
      continue;
    }
    // An empty value's own mark points at the next token, possibly lines later: blame the key.
    Mark valueMark = v.IsNull() ? keyMark : toMark(v.Mark());
    out.add(key, Field{v, std::move(path), valueMark, keyMark});
  }
  return out;
}

std::optional<std::vector<Field>> Reader::list(const Field& f, std::string_view what,
                                               bool emptyOk) {
  if (f.node.IsNull() && emptyOk) return std::vector<Field>{};
  if (!f.node.IsSequence()) {
    if (f.node.IsNull()) {
      error(f.mark, f.path, fmt::format("empty value; expected {}", what));
    } else {
      error(f.mark, f.path, fmt::format("expected {}, got {}", what, describe(f.node)));
    }
    return std::nullopt;
  }
  std::vector<Field> out;
  size_t i = 0;
  for (const auto& item : f.node) {
    Mark m = item.IsNull() ? f.mark : toMark(item.Mark());
    out.push_back(Field{item, fmt::format("{}[{}]", f.path, i++), m, m});
  }
  return out;
}

std::optional<std::string> Reader::scalar(const Field& f, std::string_view what) {
  if (f.node.IsNull() || (f.node.IsScalar() && f.node.Scalar().empty())) {
    error(f.mark, f.path, fmt::format("empty value; expected {}", what));
    return std::nullopt;
  }
  if (!f.node.IsScalar()) {
    error(f.mark, f.path, fmt::format("expected {}, got {}", what, describe(f.node)));
    return std::nullopt;
  }
  return f.node.Scalar();
}

std::optional<Located<std::string>> Reader::string(const Field& f, std::string_view what) {
  auto s = scalar(f, what);
  if (!s) return std::nullopt;
  return Located<std::string>{std::move(*s), f.mark};
}

std::optional<std::vector<Located<std::string>>> Reader::stringList(const Field& f,
                                                                    std::string_view example) {
  auto what = fmt::format("a list of strings, e.g. {}", example);
  auto items = list(f, what, false);
  if (!items) return std::nullopt;
  if (items->empty()) {
    // An empty list would read as "any" downstream; omitting the key says that honestly.
    error(f.mark, f.path, fmt::format("empty list; expected {} (omit the key to mean any)", what));
    return std::nullopt;
  }
  std::vector<Located<std::string>> out;
  bool ok = true;
  for (const auto& item : *items) {
    auto s = string(item, "a string");
    if (s) {
      out.push_back(std::move(*s));
    } else {
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

std::optional<bool> Reader::boolean(const Field& f) {
  auto s = scalar(f, "true or false");
  if (!s) return std::nullopt;
  if (*s == "true") return true;
  if (*s == "false") return false;
  error(f.mark, f.path, fmt::format("expected true or false, got {}", quoted(*s)));
  return std::nullopt;
}

std::optional<uint64_t> Reader::integer(const Field& f, uint64_t min, uint64_t max) {
  auto what = fmt::format("an integer from {} to {}", min, max);
  auto s = scalar(f, what);
  if (!s) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  bool digitsOnly = std::all_of(s->begin(), s->end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digitsOnly || ec != std::errc() || end != s->data() + s->size() || v < min || v > max) {
    error(f.mark, f.path, fmt::format("expected {}, got {}", what, quoted(*s)));
    return std::nullopt;
  }
  return v;
}

std::optional<double> Reader::positiveNumber(const Field& f) {
  constexpr std::string_view kWhat = "a number greater than 0";
  auto s = scalar(f, kWhat);
  if (!s) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  if (ec != std::errc() || end != s->data() + s->size() || !std::isfinite(v) || v <= 0) {
    error(f.mark, f.path, fmt::format("expected {}, got {}", kWhat, quoted(*s)));
    return std::nullopt;
  }
  return v;
}

std::optional<Seconds> Reader::duration(const Field& f, bool allowZero) {
  constexpr std::string_view kWhat = "a duration such as 250ms, 10s, 5m, 1h or 1m30s";
  auto s = scalar(f, kWhat);
  if (!s) return std::nullopt;
  auto d = parseDuration(*s);
  if (!d) {
    error(f.mark, f.path, fmt::format("expected {}, got {}", kWhat, quoted(*s)));
    return std::nullopt;
  }
  if (!allowZero && d->count() <= 0) {
    error(f.mark, f.path, fmt::format("expected a duration greater than 0, got {}", quoted(*s)));
    return std::nullopt;
  }
  return d;
}

std::optional<uint64_t> Reader::size(const Field& f) {
  constexpr std::string_view kWhat = "a size such as 65536, 64KiB or 1MiB";
  auto s = scalar(f, kWhat);
  if (!s) return std::nullopt;
  auto v = parseSize(*s);
  if (!v || *v == 0) {
    error(f.mark, f.path, fmt::format("expected {}, got {}", kWhat, quoted(*s)));
    return std::nullopt;
  }
  return v;
}

}  // namespace sandgate::config::detail
