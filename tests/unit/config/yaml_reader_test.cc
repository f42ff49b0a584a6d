// Tests of the typed YAML accessors: key checks, hints, paths and scalar conversions.
#include "config/yaml_reader.h"

#include <gtest/gtest.h>

#include <functional>

namespace sandgate::config::detail {
namespace {

// Runs `read` on the value of key `v` in a one-key YAML map, returning the diagnostics.
template <typename F>
Diagnostics readValue(const std::string& yaml, F read) {
  Reader r("r.yaml");
  YAML::Node root = YAML::Load(yaml);
  auto top = r.namedMap(r.root(root), "a map", false);
  EXPECT_TRUE(top.has_value());
  const Field* f = top->get("v");
  EXPECT_NE(f, nullptr);
  if (f) read(r, *f);
  return r.take();
}

TEST(EditDistance, Table) {
  struct Case {
    const char* a;
    const char* b;
    size_t d;
  };
  const Case cases[] = {{"allow", "allow", 0}, {"alow", "allow", 1},       {"allwo", "allow", 1},
                        {"deny", "dney", 1},   {"polcies", "policies", 1}, {"", "abc", 3},
                        {"abc", "", 3},        {"kitten", "sitting", 3},   {"ab", "ca", 2}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.a) + " vs " + c.b);
    EXPECT_EQ(editDistance(c.a, c.b), c.d);
    EXPECT_EQ(editDistance(c.b, c.a), c.d);
  }
}

TEST(ClosestKey, OnlyWithinTwoEditsAndNotMostOfTheKey) {
  const std::vector<std::string_view> keys = {"include", "allow", "deny"};
  EXPECT_EQ(closestKey("alow", keys), "allow");
  EXPECT_EQ(closestKey("inclde", keys), "include");
  EXPECT_EQ(closestKey("dney", keys), "deny");
  EXPECT_EQ(closestKey("permit", keys), "");
  EXPECT_EQ(closestKey("de", keys), "");  // two edits of a two-letter key is a guess
  EXPECT_EQ(closestKey("", keys), "");
}

TEST(ChildPath, QuotesKeysThatAreNotIdentifiers) {
  EXPECT_EQ(childPath("", "policies"), "policies");
  EXPECT_EQ(childPath("policies", "github-read"), "policies.github-read");
  EXPECT_EQ(childPath("resolve", "api.example.com"), "resolve[\"api.example.com\"]");
  EXPECT_EQ(childPath("resolve", ""), "resolve[\"\"]");
}

TEST(ToMark, OneBasedAndNullMarkIsUnknown) {
  YAML::Mark m;
  m.line = 0;
  m.column = 4;
  EXPECT_EQ(toMark(m).line, 1);
  EXPECT_EQ(toMark(m).col, 5);
  EXPECT_EQ(toMark(YAML::Mark::null_mark()).line, 0);
  EXPECT_EQ(toMark(YAML::Mark::null_mark()).col, 0);
}

TEST(Reader, MapReportsUnknownDuplicateAndNonScalarKeys) {
  Reader r("m.yaml");
  YAML::Node n = YAML::Load("a: 1\nb: 2\nzzz: 3\na: 4\n[x]: 5\nbb: 6\n");
  auto m = r.map(r.root(n), {"a", "b"}, "a map");
  ASSERT_TRUE(m.has_value());
  ASSERT_EQ(m->entries().size(), 2u);
  EXPECT_EQ(m->get("a")->node.Scalar(), "1");  // the first of the duplicates is kept
  auto errors = r.take();
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[0].str(), "m.yaml:4:1: a: duplicate key `a` (first given at line 1)");
  EXPECT_EQ(errors[1].str(), "m.yaml:5:1: expected a plain key, got a list");
  EXPECT_EQ(errors[2].str(), "m.yaml:3:1: zzz: unknown key `zzz`; expected one of: a, b");
  EXPECT_EQ(errors[3].str(), "m.yaml:6:1: bb: unknown key `bb`; did you mean `b`?");
}

TEST(Reader, EmptyValueIsBlamedOnItsKey) {
  auto errors = readValue("v:\nw: 1\n", [](Reader& r, const Field& f) { (void)r.string(f); });
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].str(), "r.yaml:1:1: v: empty value; expected a string");
}

TEST(Reader, ScalarConversions) {
  struct Case {
    const char* name;
    const char* yaml;
    const char* error;  // nullptr: accepted
  };
  auto integer = [](Reader& r, const Field& f) { (void)r.integer(f, 1, 100); };
  auto boolean = [](Reader& r, const Field& f) { (void)r.boolean(f); };
  auto number = [](Reader& r, const Field& f) { (void)r.positiveNumber(f); };
  auto size = [](Reader& r, const Field& f) { (void)r.size(f); };
  auto duration = [](Reader& r, const Field& f) { (void)r.duration(f, false); };
  auto durationZero = [](Reader& r, const Field& f) { (void)r.duration(f, true); };
  auto list = [](Reader& r, const Field& f) { (void)r.stringList(f, "[a]"); };
  struct Typed {
    Case c;
    std::function<void(Reader&, const Field&)> read;
  };
  const Typed cases[] = {
      {{"int ok", "v: 42", nullptr}, integer},
      {{"int min", "v: 1", nullptr}, integer},
      {{"int max", "v: 100", nullptr}, integer},
      {{"int below", "v: 0", "expected an integer from 1 to 100, got `0`"}, integer},
      {{"int above", "v: 101", "expected an integer from 1 to 100, got `101`"}, integer},
      {{"int sign", "v: +5", "expected an integer from 1 to 100, got `+5`"}, integer},
      {{"int hex", "v: 0x10", "expected an integer from 1 to 100, got `0x10`"}, integer},
      {{"int float", "v: 5.0", "expected an integer from 1 to 100, got `5.0`"}, integer},
      {{"int list", "v: [5]", "expected an integer from 1 to 100, got a list"}, integer},
      {{"int map", "v: {a: 1}", "expected an integer from 1 to 100, got a map"}, integer},
      {{"int quoted ok", "v: \"7\"", nullptr}, integer},
      {{"bool true", "v: true", nullptr}, boolean},
      {{"bool false", "v: false", nullptr}, boolean},
      {{"bool yes", "v: yes", "expected true or false, got `yes`"}, boolean},
      {{"bool on", "v: on", "expected true or false, got `on`"}, boolean},
      {{"bool True", "v: True", "expected true or false, got `True`"}, boolean},
      {{"bool 1", "v: 1", "expected true or false, got `1`"}, boolean},
      {{"bool empty", "v:", "empty value; expected true or false"}, boolean},
      {{"number ok", "v: 2.5", nullptr}, number},
      {{"number zero", "v: 0", "expected a number greater than 0, got `0`"}, number},
      {{"number negative", "v: -1", "expected a number greater than 0, got `-1`"}, number},
      {{"number inf", "v: inf", "expected a number greater than 0, got `inf`"}, number},
      {{"size ok", "v: 1KiB", nullptr}, size},
      {{"size zero", "v: 0", "expected a size such as 65536, 64KiB or 1MiB, got `0`"}, size},
      {{"duration ok", "v: 1s", nullptr}, duration},
      {{"duration zero", "v: 0s", "expected a duration greater than 0, got `0s`"}, duration},
      {{"duration zero allowed", "v: 0s", nullptr}, durationZero},
      {{"list ok", "v: [a, b]", nullptr}, list},
      {{"list empty", "v: []",
        "empty list; expected a list of strings, e.g. [a] (omit the key to mean any)"},
       list},
      {{"list scalar", "v: a", "expected a list of strings, e.g. [a], got `a`"}, list},
      {{"list of maps", "v: [{a: 1}]", "expected a string, got a map"}, list},
      {{"long value is cut", "v: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "expected an integer from 1 to 100, got `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...`"},
       integer},
  };
  for (const auto& t : cases) {
    SCOPED_TRACE(t.c.name);
    auto errors = readValue(t.c.yaml, t.read);
    if (!t.c.error) {
      EXPECT_TRUE(errors.empty()) << errors[0].str();
      continue;
    }
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].message, t.c.error);
    EXPECT_EQ(errors[0].line, 1);
  }
}

TEST(Describe, ShortensLongScalars) {
  EXPECT_EQ(describe(YAML::Load(std::string(50, 'x'))), "`" + std::string(40, 'x') + "...`");
  EXPECT_EQ(describe(YAML::Load("[1]")), "a list");
  EXPECT_EQ(describe(YAML::Load("{a: 1}")), "a map");
  EXPECT_EQ(describe(YAML::Node()), "nothing");
}

}  // namespace
}  // namespace sandgate::config::detail
