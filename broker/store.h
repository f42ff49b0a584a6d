// SecretStore: the secrets of one config snapshot, kept current (file rotation, exec refresh).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "broker/github_app.h"
#include "broker/source.h"
#include "common/result.h"
#include "config/config.h"

namespace sandgate::broker {

// Stable refusal reasons (response header, audit log, metric label, tests).
namespace reason {
inline constexpr std::string_view kCredentialUnavailable = "credential_unavailable";
inline constexpr std::string_view kCredentialHostMismatch = "credential_host_mismatch";
inline constexpr std::string_view kCredentialRequiresTls = "credential_requires_tls";
// 403: a placeholder outside the one place its credential is injected, or on a request whose
// admitting rule does not name its credential: a possible exfiltration attempt.
inline constexpr std::string_view kPlaceholderMisplaced = "placeholder_misplaced";
}  // namespace reason

struct StoreOptions {
  ExecLimits exec;
  // An exec secret is refreshed in the background once this fraction of its ttl has passed,
  // so that requests keep a valid value while the command runs.
  double refreshFraction = 0.8;
  // After a failed refresh, retry after minBackoff, doubling up to maxBackoff.
  std::chrono::milliseconds minBackoff{1000};
  std::chrono::milliseconds maxBackoff{60'000};
  // false: open() starts no thread, startRefresh() does. A process that forks after loading
  // its secrets (`sandgate run` forks the sandbox single-threaded) starts it after the fork.
  bool startRefresh = true;
  // github_app sources: who makes the HTTPS call (the proxy's; required when one is
  // configured), how long it may take, and when minted tokens are used and renewed.
  std::shared_ptr<const ApiClient> api;
  std::chrono::milliseconds apiTimeout{10'000};
  TokenTiming tokens;
};

// The answer to "give me credential X now".
struct Fetch {
  std::shared_ptr<const Secret> secret;  // null: the request must fail closed
  std::string_view reason;               // empty, or reason::kCredentialUnavailable
  std::string detail;                    // why, for logs and the refusal body; never secret bytes

  bool ok() const { return secret != nullptr; }
};

// One per config snapshot; thread-safe. get() never runs a command: exec secrets are loaded
// when the store opens and refreshed by one background thread (started by open(), or by
// startRefresh() with StoreOptions::startRefresh false), which the destructor stops (killing a
// running command, so dropping an old snapshot on reload never blocks for long).
class SecretStore {
 public:
  // Loads every credential. A source that cannot be loaded is an error (file:line:col of the
  // credential's `source:`) unless the credential is `optional`, in which case requests that
  // need it fail with credential_unavailable until it can be loaded.
  // A github_app credential gets one token for its own repositories and one for each set a
  // task of `tasks` narrows it to (Task::repositories), each minted here.
  static Result<std::shared_ptr<const SecretStore>> open(
      const config::Credentials& credentials, const std::string& configFile,
      StoreOptions options = {}, const std::vector<config::Task>& tasks = {});

  // The current secret of `credential` for `task` (which matters only for github_app
  // sources: the token of the task's repositories), or credential_unavailable and why. Cheap:
  // a lock and, for file sources, one read(2) of an inotify descriptor (see FileSource). For a
  // github_app source whose token is missing or expired (the refresher keeps it current, so
  // this is rare) it mints one first, single flight (TokenCache::get): the caller waits for
  // that one HTTP request, bounded by StoreOptions::apiTimeout.
  Fetch get(std::string_view credential, std::string_view task = {}) const;
  // get() that never mints: what a response may be scrubbed for, placeholder shapes.
  Fetch current(std::string_view credential, std::string_view task = {}) const;

  // Starts the background refresh of exec secrets, if there are any and it has not started.
  // Idempotent and thread-safe. A secret whose refresh fell due before it starts is refreshed
  // at once; until then the value loaded by open() serves (within its ttl).
  void startRefresh() const;

  // Counters for metrics: background refreshes that succeeded / failed.
  uint64_t refreshes() const;
  uint64_t refreshFailures() const;

  ~SecretStore();
  SecretStore(const SecretStore&) = delete;
  SecretStore& operator=(const SecretStore&) = delete;

  struct Impl;

 private:
  explicit SecretStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandgate::broker
