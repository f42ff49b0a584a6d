// Result<T> and Expected<T>: a value, or what explains why there is none (control path only).
//
//   Result<T>    a T or Diagnostics: problems in input the user wrote (config, flags), each
//                with where it is (file:line:col, key path) and what was expected there.
//   Expected<T>  a T or one Error: a runtime failure (an admin request refused, a run that
//                cannot start) with a stable reason token that callers compare, never the text.
//
// Result<void> and Expected<void> only say whether it worked: default-constructed they are
// success (`return {};`). Both share their accessors (ok(), operator bool, value(), ->, *,
// errorText()); Result adds errors(), Expected error().
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
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

// All diagnostics joined by newlines, each rendered by Diagnostic::str().
std::string joinDiagnostics(const Diagnostics& errors);

// A runtime failure: a stable reason token from the catalogue of the layer that refused
// (admin_reason::…, run::reason::…; empty when there is none to compare, e.g. a system call
// that failed) and a human-readable message.
// Rendered as "message (reason)", or the message alone when the reason is empty.
struct Error {
  std::string reason;
  std::string message;

  std::string str() const;
};

namespace result_detail {

// What a void form stores for its success.
struct Nothing {};
template <typename T>
using Stored = std::conditional_t<std::is_void_v<T>, Nothing, T>;

inline std::string failureText(const Diagnostics& errors) { return joinDiagnostics(errors); }
inline std::string failureText(const Error& error) { return error.str(); }

// What Result and Expected share: a value (for T = void: only success), or the failure F.
// The value accessors exist for T != void only; calling them without a value is undefined.
template <typename T, typename F>
class ValueOr {
 public:
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }

  Stored<T>& value() & requires(!std::is_void_v<T>) { return *value_; }
  const Stored<T>& value() const& requires(!std::is_void_v<T>) { return *value_; }
  Stored<T>&& value() && requires(!std::is_void_v<T>) { return std::move(*value_); }
  Stored<T>* operator->() requires(!std::is_void_v<T>) { return &*value_; }
  const Stored<T>* operator->() const requires(!std::is_void_v<T>) { return &*value_; }
  Stored<T>& operator*() & requires(!std::is_void_v<T>) { return *value_; }
  const Stored<T>& operator*() const& requires(!std::is_void_v<T>) { return *value_; }

  // The failure on one line ("" on success): Result joins its diagnostics with newlines,
  // Expected renders its Error (Error::str()). For logs and test messages.
  std::string errorText() const { return ok() ? std::string() : failureText(failure_); }

 protected:
  ValueOr(std::in_place_t, Stored<T> value) : value_(std::move(value)) {}
  explicit ValueOr(F failure) : failure_(std::move(failure)) {}

  std::optional<Stored<T>> value_;
  F failure_{};
};

}  // namespace result_detail

template <typename T>
class [[nodiscard]] Result : public result_detail::ValueOr<T, Diagnostics> {
  using Base = result_detail::ValueOr<T, Diagnostics>;

 public:
  Result(result_detail::Stored<T> value)  // NOLINT: implicit by design
      requires(!std::is_void_v<T>)
      : Base(std::in_place, std::move(value)) {}
  Result()  // success
      requires(std::is_void_v<T>)
      : Base(std::in_place, result_detail::Nothing{}) {}
  Result(Diagnostic error) : Base(Diagnostics{std::move(error)}) {}  // NOLINT
  Result(Diagnostics errors) : Base(std::move(errors)) {}            // NOLINT

  const Diagnostics& errors() const { return this->failure_; }
};

template <typename T>
class [[nodiscard]] Expected : public result_detail::ValueOr<T, Error> {
  using Base = result_detail::ValueOr<T, Error>;

 public:
  Expected(result_detail::Stored<T> value)  // NOLINT: implicit by design
      requires(!std::is_void_v<T>)
      : Base(std::in_place, std::move(value)) {}
  Expected()  // success
      requires(std::is_void_v<T>)
      : Base(std::in_place, result_detail::Nothing{}) {}
  Expected(Error error) : Base(std::move(error)) {}  // NOLINT

  // Only when !ok().
  const Error& error() const { return this->failure_; }
};

}  // namespace sandgate
