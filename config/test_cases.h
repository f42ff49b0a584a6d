// Policy test files (`sandgate policy test`): YAML lists of cases with expected decisions.
//
//   config: ../agent.yaml          # optional; relative to this file; else --config
//   cases:
//     - {task: demo, target: "https://api.openai.com/v1/responses", method: POST, expect: allow}
//     - {task: demo, target: gist.githubusercontent.com:443, expect: deny, reason: denied_by_rule}
//     - {task: demo, target: "https://github.com/acme/widgets.git", git_push: refs/heads/main,
//        expect: deny, reason: git_ref_not_allowed}
//
// A file may also be just the list of cases.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/config.h"

namespace sandgate::config {

struct TestCase {
  Mark mark;         // the case's "- " in the file
  std::string name;  // optional label, else "case N"
  std::string task;
  std::string target;
  std::optional<std::string> method;
  // A push of this ref (":ref" deletes it) to the repository `target` names.
  std::optional<std::string> gitPush;
  bool expectAllow = false;
  std::optional<std::string> reason;
  std::optional<std::string> rule;  // expected deciding rule "file:line" suffix, if given
};

struct TestSuite {
  std::string file;
  std::optional<std::string> config;  // resolved against the test file's directory
  std::vector<TestCase> cases;
};

Result<TestSuite> loadTestSuite(const std::string& path);

}  // namespace sandgate::config
