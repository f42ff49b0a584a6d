// `sandgate run`: picks the config and task, starts the embedded proxy, runs the command in
// the namespace sandbox with the sandbox's listeners bound to the task, and reports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sandgate::run {

// Exit statuses of `sandgate run` besides the command's own.
inline constexpr int kExitUsage = 2;          // bad flags, bad config, unknown task/policy
inline constexpr int kExitSetupFailed = 125;  // the sandbox or the proxy could not start

// The flags of `sandgate run`, as written (parsed and checked by runTask).
struct RunRequest {
  std::optional<std::string> configPath;     // none: config::defaultConfig()
  std::optional<std::string> task;           // an existing task
  std::optional<std::string> policy;         // an ad-hoc task bound to this policy
  std::optional<std::string> proxy;          // "unix:PATH" of a running serve (run/serve_run.h)
  std::string workspace;                     // empty: the current directory
  std::optional<std::string> workspaceMode;  // "overlay" | "bind" (default: sandbox.workspace_mode)
  std::optional<std::string> runDir;         // the run's directory (default: run/run_dir.h)
  std::optional<std::string> disk;  // config::parseSize or unlimited (default: sandbox.disk)
  // An earlier run whose files this one starts from (its upper layer below this run's):
  // --resume continues it (once: it records `resumed_by`), --from branches from it.
  std::optional<std::string> resume;
  std::optional<std::string> from;
  // Limits as written: override the config's `sandbox:` (or the built-in defaults, with
  // --proxy); each may also be config::kUnlimited (run/run_limits.h).
  std::optional<std::string> memory;     // config::parseSize
  std::optional<std::string> cpus;       // config::parseCpusLimit
  std::optional<std::string> pids;       // config::parsePidsLimit
  std::optional<std::string> timeout;    // config::parseDuration
  std::optional<std::string> tmpfsSize;  // config::parseSize, each of /tmp, /run, /dev/shm
  std::vector<std::string> readOnly;     // --ro: added to sandbox.ro
  std::vector<std::string> env;          // K=V
  std::optional<std::string> reportPath;
  bool allowUnenforced = false;
  // Bind mode with a root-owned workspace and a root launcher: what the run writes is root's on
  // the host. Refused unless asked for (--allow-root-workspace).
  bool allowRootWorkspace = false;
  // Transparent capture (default): a DNS stub and listeners on the capture ports, so that
  // programs that ignore HTTP_PROXY still go through sandgate. Off: --no-transparent.
  bool transparent = true;
  std::vector<uint16_t> capturePorts;  // in addition to 80 and 443
  // The embedded proxy's audit lines on stderr too, as they happen (--audit-stderr). Off by
  // default: stderr is the command's, and a line it writes in pieces would be cut by one of
  // ours; the lines are in the run's audit.jsonl (and audit.path) either way.
  bool auditStderr = false;
  // --learn: the task runs in learn mode (config::TaskMode::kLearn) and the run's directory
  // gets policy.learned.yaml and its tests (run/learn_run.h). A task with `mode: learn` is the
  // same without the flag.
  bool learn = false;
  // --ask: the task holds what its policy refuses for want of a rule (on_unknown: ask) and the
  // launcher asks on its terminal, /dev/tty (run/ask_prompt.h); no terminal: a usage error.
  bool ask = false;
  std::vector<std::string> argv;
};

// Runs the request; messages go to stderr. Returns the command's exit status, kExitUsage or
// kExitSetupFailed.
int runTask(const RunRequest& request);

}  // namespace sandgate::run
