// Loading policy test files; unknown keys and wrong types are errors with positions.
#include "config/test_cases.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace sandgate::config {

namespace {

class SuiteReader {
 public:
  explicit SuiteReader(std::string file) : file_(std::move(file)) {}

  Diagnostics& errors() { return errors_; }

  void error(const YAML::Node& n, const std::string& path, const std::string& msg) {
    errors_.push_back({file_, n.Mark().line + 1, n.Mark().column + 1, path, msg});
  }

  std::optional<std::string> scalar(const YAML::Node& n, const std::string& path) {
    if (!n.IsScalar() || n.Scalar().empty()) {
      error(n, path, "expected a non-empty string");
      return std::nullopt;
    }
    return n.Scalar();
  }

  void readCase(const YAML::Node& n, size_t index, TestSuite& suite) {
    std::string path = "cases[" + std::to_string(index) + "]";
    if (!n.IsMap()) {
      error(n, path, "expected a mapping {task, target, method?, expect, reason?}");
      return;
    }
    TestCase tc;
    tc.mark = {n.Mark().line + 1, n.Mark().column + 1};
    tc.name = "case " + std::to_string(index + 1);
    bool haveTask = false, haveTarget = false, haveExpect = false;
    std::set<std::string> seen;
    for (const auto& kv : n) {
      std::string key = kv.first.Scalar();
      std::string kpath = path + "." + key;
      if (!seen.insert(key).second) {
        error(kv.first, kpath, "duplicate key");
        continue;
      }
      auto value = scalar(kv.second, kpath);
      if (!value) continue;
      if (key == "name") {
        tc.name = *value;
      } else if (key == "task") {
        tc.task = *value;
        haveTask = true;
      } else if (key == "target") {
        tc.target = *value;
        haveTarget = true;
      } else if (key == "method") {
        tc.method = *value;
      } else if (key == "git_push") {
        tc.gitPush = *value;
      } else if (key == "expect") {
        if (*value != "allow" && *value != "deny") {
          error(kv.second, kpath, "expected allow or deny, got \"" + *value + "\"");
          continue;
        }
        tc.expectAllow = *value == "allow";
        haveExpect = true;
      } else if (key == "reason") {
        tc.reason = *value;
      } else if (key == "rule") {
        tc.rule = *value;
      } else {
        error(kv.first, kpath,
              "unknown key (expected name, task, target, method, git_push, expect, reason, rule)");
      }
    }
    if (!haveTask) error(n, path, "missing required key \"task\"");
    if (!haveTarget) error(n, path, "missing required key \"target\"");
    if (!haveExpect) error(n, path, "missing required key \"expect\" (allow or deny)");
    suite.cases.push_back(std::move(tc));
  }

  void readCases(const YAML::Node& list, TestSuite& suite) {
    if (!list.IsSequence()) {
      error(list, "cases", "expected a list of test cases");
      return;
    }
    for (size_t i = 0; i < list.size(); ++i) readCase(list[i], i, suite);
  }

 private:
  std::string file_;
  Diagnostics errors_;
};

}  // namespace

Result<TestSuite> loadTestSuite(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Diagnostic{path, 0, 0, "", "cannot read the test file"};
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::ParserException& e) {
    return Diagnostic{path, e.mark.line + 1, e.mark.column + 1, "", e.msg};
  }
  TestSuite suite;
  suite.file = path;
  SuiteReader reader(path);
  if (root.IsSequence()) {
    reader.readCases(root, suite);
  } else if (root.IsMap()) {
    bool haveCases = false;
    for (const auto& kv : root) {
      std::string key = kv.first.Scalar();
      if (key == "config") {
        auto value = reader.scalar(kv.second, "config");
        if (!value) continue;
        std::filesystem::path p(*value);
        if (p.is_relative()) p = std::filesystem::path(path).parent_path() / p;
        suite.config = p.lexically_normal().string();
      } else if (key == "cases") {
        haveCases = true;
        reader.readCases(kv.second, suite);
      } else {
        reader.error(kv.first, key, "unknown key (expected config or cases)");
      }
    }
    if (!haveCases) reader.error(root, "", "missing \"cases\": the list of test cases");
  } else {
    return Diagnostic{path, 1, 1, "",
                      "expected a list of test cases or a mapping with \"config\" and \"cases\""};
  }
  if (suite.cases.empty() && reader.errors().empty()) {
    reader.error(root, "cases", "no test cases");
  }
  if (!reader.errors().empty()) return std::move(reader.errors());
  return suite;
}

}  // namespace sandgate::config
