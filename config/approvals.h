// A task's approvals file (tasks[].ask.approvals): the rules `sandgate approve allow ID
// --always` added, loaded with the task's policy like an include of it, and written here.
//
// Format (YAML, meant to be reviewed and edited like the policy it extends):
//
//   # approvals of task "demo" (sandgate approve ... --always); loaded at the next reload
//   allow:
//     # question 3: approved by alice (uid 1000) at 2026-12-05T07:30:00Z
//     - host: api.example.com
//       ports: [443]
//       methods: ["GET"]
//       paths: ["/v1/items"]
//
// It may only add allow rules to its task's own policy: the only top-level key is `allow`, and
// a rule has `host`, `ports`, `methods`, `paths`, and `cidrs` only for a host the config pins
// with `resolve:`, covering exactly that address. No credential (an operator's answer never
// names a secret), git, llm, via, mode or inspect. A bad file is a config error naming the file
// and line (at start-up fatal, on reload the old config stays).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"
#include "config/config.h"

namespace sandgate::config {

// Where the approvals file of `task` is: ask.approvals, relative to the config file's
// directory. Empty when the task names none.
std::string approvalsPath(const Config& cfg, const Task& task);

// One approved request, as `appendApproval` writes it.
struct Approval {
  std::string method;  // CONNECT: a host and port rule
  std::string host;
  uint16_t port = 0;
  std::string path;  // empty for CONNECT
  std::string note;  // the comment above the rule (who approved which question, when)
  // The address the config's `resolve:` pins the host to, if any: the rule names exactly it
  // (`cidrs`), which is how the request reached it (and all an approvals file may name).
  std::string pinnedAddress;
};

// Appends a rule admitting exactly `a` to the approvals file at `path` (created, 0640, with a
// header naming `task`, when missing). A path with glob characters ('*', '?', '[', '{') or a
// method or host with characters a rule cannot hold literally is refused: the rule would admit
// more than what was asked.
Result<void> appendApproval(const std::string& path, std::string_view task, const Approval& a);

namespace detail {
class Reader;
// Loads every ask task's approvals file into a synthetic policy `approvals.<task>` that includes
// the task's policy (Task::approvalsPolicy). Problems go to `errors`, each naming the file.
void loadApprovals(Config& cfg, Diagnostics& errors);
}  // namespace detail

}  // namespace sandgate::config
