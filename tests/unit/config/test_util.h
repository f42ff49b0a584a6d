// Helpers shared by the config tests: loading inline YAML and checking its diagnostics.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "config/config.h"

namespace sandgate::config::testing {

// Loads `yaml` and fails the test (with every diagnostic) unless it is valid.
inline Config loadOk(const std::string& yaml) {
  auto r = loadString(yaml, "test.yaml");
  EXPECT_TRUE(r.ok()) << r.errorText();
  if (!r.ok()) return Config{};
  return std::move(r).value();
}

// Loads `yaml`, expects it to be refused, returns the diagnostics.
inline Diagnostics loadErrors(const std::string& yaml) {
  auto r = loadString(yaml, "test.yaml");
  EXPECT_FALSE(r.ok()) << "unexpectedly valid:\n" << yaml;
  return r.errors();
}

// One expected diagnostic: position, key path and a stable part of the message.
struct Expected {
  int line;
  int col;
  std::string keyPath;
  std::string message;  // substring of Diagnostic::message
};

inline void expectOne(const Diagnostics& errors, const Expected& e) {
  ASSERT_EQ(errors.size(), 1u) << [&] {
    std::string all;
    for (const auto& d : errors) all += d.str() + "\n";
    return all;
  }();
  EXPECT_EQ(errors[0].line, e.line) << errors[0].str();
  EXPECT_EQ(errors[0].col, e.col) << errors[0].str();
  EXPECT_EQ(errors[0].keyPath, e.keyPath) << errors[0].str();
  EXPECT_NE(errors[0].message.find(e.message), std::string::npos)
      << "want substring: " << e.message << "\ngot: " << errors[0].str();
}

}  // namespace sandgate::config::testing
