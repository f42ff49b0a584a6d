// Typed, position-aware access to yaml-cpp nodes that records a Diagnostic for every problem.
//
// Internal to config/. Every accessor either returns a value or records why not (with the
// file, 1-based line:col, key path and what was expected) and returns nullopt, so callers
// keep going and the user sees all problems at once.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "config/config.h"

namespace sandgate::config::detail {

// A YAML value together with the key path that leads to it and the position to blame.
struct Field {
  YAML::Node node;
  std::string path;  // "policies.agent.allow[2].host"
  Mark mark;         // the value's position; the key's when the value is empty
  Mark keyMark;      // the key's position (the value's for list items)
};

// The entries of one YAML map after key checks: scalar keys, no duplicates, document order.
class MapView {
 public:
  const Field* get(std::string_view key) const;
  const std::vector<std::pair<std::string, Field>>& entries() const { return entries_; }
  void add(std::string key, Field f) { entries_.emplace_back(std::move(key), std::move(f)); }

 private:
  std::vector<std::pair<std::string, Field>> entries_;
};

// Converts yaml-cpp's 0-based Mark (or its "null mark", -1) into 1-based line:col (0 = unknown).
Mark toMark(const YAML::Mark& m);

// "path.key" for identifier-like keys, `path["odd key"]` otherwise, "key" at the top level.
std::string childPath(const std::string& parent, std::string_view key);

// Optimal-string-alignment edit distance (a transposition counts as one edit), for hints.
size_t editDistance(std::string_view a, std::string_view b);
// The closest of `candidates` within two edits of `key`, or "" when none is that close.
std::string_view closestKey(std::string_view key, const std::vector<std::string_view>& candidates);

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  void error(const Mark& mark, const std::string& path, std::string message);
  size_t errorCount() const { return errors_.size(); }
  Diagnostics take() { return std::move(errors_); }

  // A field for the document root.
  Field root(const YAML::Node& node) const;

  // A map whose keys must be among `known`. Unknown keys (with a "did you mean" hint),
  // duplicate keys and non-scalar keys are reported and left out of the result. `what`
  // names the map in the "expected" part of a type error. An empty value is an error
  // unless `emptyOk`, in which case it is an empty map.
  std::optional<MapView> map(const Field& f, const std::vector<std::string_view>& known,
                             std::string_view what, bool emptyOk = false);
  // A map whose keys are names chosen by the user (policies, credentials, resolve).
  std::optional<MapView> namedMap(const Field& f, std::string_view what, bool emptyOk);
  // A list; items get paths "path[i]". An empty value is an error unless `emptyOk`.
  std::optional<std::vector<Field>> list(const Field& f, std::string_view what, bool emptyOk);

  // A non-empty scalar, as written.
  std::optional<Located<std::string>> string(const Field& f, std::string_view what = "a string");
  // A non-empty list of non-empty strings. `example` shows the expected form.
  std::optional<std::vector<Located<std::string>>> stringList(const Field& f,
                                                              std::string_view example);
  // Exactly `true` or `false`: YAML 1.1's yes/no/on/off are refused because they read as
  // strings to most people and as booleans to some parsers.
  std::optional<bool> boolean(const Field& f);
  // A decimal integer in [min, max], no sign, no 0x/0o forms.
  std::optional<uint64_t> integer(const Field& f, uint64_t min, uint64_t max);
  // A finite decimal number > 0.
  std::optional<double> positiveNumber(const Field& f);
  // A duration ("250ms", "10s", "1m30s", bare seconds); `allowZero` admits "0".
  std::optional<Seconds> duration(const Field& f, bool allowZero);
  // A size in bytes ("65536", "64KiB", "2M"), > 0.
  std::optional<uint64_t> size(const Field& f);

  // Reports `key` as missing from the map at `f` (pointing at the map's own key).
  void missing(const Field& f, std::string_view key, std::string_view expected);

 private:
  // The scalar text of `f`, or nullopt after reporting a type error ("expected <what>").
  std::optional<std::string> scalar(const Field& f, std::string_view what);

  std::string file_;
  Diagnostics errors_;
};

// "`text`", cut to 40 characters: user input quoted in a message without flooding it.
std::string quoted(std::string_view s);
// "a map", "a list", "`text`", "nothing": what the user actually wrote, for messages.
std::string describe(const YAML::Node& n);

}  // namespace sandgate::config::detail
