// Tests of parseDuration and parseSize.
#include <gtest/gtest.h>

#include "config/config.h"

namespace sandgate::config {
namespace {

TEST(ParseDuration, Table) {
  struct Case {
    const char* name;
    const char* input;
    std::optional<double> seconds;  // nullopt: refused
  };
  const Case cases[] = {
      {"bare seconds", "10", 10},
      {"bare zero", "0", 0},
      {"bare fraction", "1.5", 1.5},
      {"seconds", "10s", 10},
      {"milliseconds", "250ms", 0.25},
      {"minutes", "5m", 300},
      {"hours", "2h", 7200},
      {"compound", "1m30s", 90},
      {"compound with ms", "1h1m1s500ms", 3661.5},
      {"fractional unit", "1.5m", 90},
      {"empty", "", std::nullopt},
      {"unit only", "s", std::nullopt},
      {"unknown unit", "10d", std::nullopt},
      {"upper case unit", "10S", std::nullopt},
      {"space", "10 s", std::nullopt},
      {"leading space", " 10s", std::nullopt},
      {"negative", "-1s", std::nullopt},
      {"plus sign", "+1s", std::nullopt},
      {"dot without digits", "1.s", std::nullopt},
      {"leading dot", ".5s", std::nullopt},
      {"trailing garbage", "10sx", std::nullopt},
      {"exponent", "1e3", std::nullopt},
      {"inf", "inf", std::nullopt},
      {"too long", "1000000001", std::nullopt},
      {"too long compound", "300000h", std::nullopt},
      {"maximum", "1000000000s", 1e9},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto d = parseDuration(c.input);
    ASSERT_EQ(d.has_value(), c.seconds.has_value()) << c.input;
    if (c.seconds) {
      EXPECT_DOUBLE_EQ(d->count(), *c.seconds);
    }
  }
}

TEST(ParseSize, Table) {
  struct Case {
    const char* name;
    const char* input;
    std::optional<uint64_t> bytes;
  };
  const Case cases[] = {
      {"bytes", "512", 512},
      {"zero", "0", 0},
      {"b suffix", "512B", 512},
      {"KiB", "64KiB", 65536},
      {"K", "64K", 65536},
      {"KB is binary too", "64KB", 65536},
      {"lower case k", "64k", 65536},
      {"M", "2M", 2u << 20},
      {"MiB", "2MiB", 2u << 20},
      {"G", "2G", 2ull << 30},
      {"GiB", "1GiB", 1ull << 30},
      {"empty", "", std::nullopt},
      {"unit only", "KiB", std::nullopt},
      {"space", "64 KiB", std::nullopt},
      {"fraction", "1.5MiB", std::nullopt},
      {"negative", "-1", std::nullopt},
      {"terabytes", "1T", std::nullopt},
      {"garbage", "lots", std::nullopt},
      {"overflow in digits", "99999999999999999999999", std::nullopt},
      {"overflow in unit", "17179869184G", std::nullopt},
      {"largest G", "17179869183G", 17179869183ull << 30},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto v = parseSize(c.input);
    ASSERT_EQ(v.has_value(), c.bytes.has_value()) << c.input;
    if (c.bytes) {
      EXPECT_EQ(*v, *c.bytes);
    }
  }
}

}  // namespace
}  // namespace sandgate::config
