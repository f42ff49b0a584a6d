// Result<T>: a value or the diagnostics that explain why there is none (control path only).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sandgate {

// One problem found in input the user wrote: where it is and what was expected there.
// Rendered as "file:line:col: key.path: message"; parts that are unknown are omitted.
struct Diagnostic {
  std::string file;
  int line = 0;  // 1-based; 0 = unknown
  int col = 0;   // 1-based; 0 = unknown
  std::string keyPath;
  std::string message;

  std::string str() const;
};

using Diagnostics = std::vector<Diagnostic>;

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Diagnostic error) { errors_.push_back(std::move(error)); }  // NOLINT
  Result(Diagnostics errors) : errors_(std::move(errors)) {}          // NOLINT

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

  const Diagnostics& errors() const { return errors_; }
  // All diagnostics joined by newlines (for one-line contexts such as logs).
  std::string errorText() const {
    std::string out;
    for (const auto& e : errors_) {
      if (!out.empty()) out += '\n';
      out += e.str();
    }
    return out;
  }

 private:
  std::optional<T> value_;
  Diagnostics errors_;
};

}  // namespace sandgate
