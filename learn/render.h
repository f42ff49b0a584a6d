// Writing a Draft as config text (policies, tasks, and what they need: resolve pins and
// placeholder credentials) that `sandgate policy lint` accepts.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "learn/generalise.h"

namespace sandgate::learn {

struct RenderOptions {
  bool explain = false;             // a comment above each rule: the requests it covers
  std::vector<std::string> header;  // comment lines at the top
  // Credentials an existing config (--merge) defines: no placeholder is written for them.
  std::set<std::string> definedCredentials;
  std::string policyPrefix = "learned-";  // the policy of task T is <prefix>T
};

// The environment variable a placeholder credential's source names: SANDGATE_LEARNED_<NAME>.
std::string placeholderEnv(const std::string& credential);

// A YAML double-quoted scalar (JSON's string syntax, which YAML reads the same way).
std::string quote(const std::string& s);

// The config text: `credentials:` (placeholders, see README "Writing a policy"), `resolve:`,
// `policies:` (one per task) and `tasks:`.
std::string renderConfig(const Draft& draft, const RenderOptions& options);

// Just the `allow:` list of one task, indented by `indent` spaces (for --merge).
std::string renderRules(const TaskDraft& task, bool explain, int indent);

}  // namespace sandgate::learn
