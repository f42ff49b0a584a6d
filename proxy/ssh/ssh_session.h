// One brokered SSH connection, run on a thread of its own (libssh is blocking): the server
// leg to the sandbox's ssh on `clientFd` (any client authentication, only one git exec
// accepted), then the client leg to the real host on `upstreamFd` (already resolved, vetted and
// dialled by proxy/upstream: libssh never resolves or dials), authenticated with the
// credential's key and checked against the pinned host keys, and the relay of the exec channel
// with the push gate. No Asio and no policy engine here: the caller (ssh_broker.h) decides
// through the hooks and writes the audit lines from the result.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "policy/git_protocol.h"
#include "proxy/ssh/git_command.h"
#include "proxy/ssh/host_keys.h"

namespace sandgate::proxy::ssh {

// A decision on the exec (repository, fetch, archive) or on a push's commands.
struct GitVerdict {
  bool allowed = true;
  std::string_view reason;  // a stable token when refused
  std::string detail;       // one sentence
};

struct PushVerdict {
  bool refused = false;
  std::string_view reason;            // the first refused command's
  std::string detail;                 // the first refused command's
  std::vector<std::string> why;       // per command: what its `ng` line says (when refused)
  std::vector<std::string> verdicts;  // per command: "allowed" or its reason (audit)
};

// Something the session refused that did not end it (a pty, an env, a second channel) or
// that did (a shell): one audit line each.
struct SshRefusal {
  std::string_view reason;
  std::string detail;
};

struct SessionParams {
  int clientFd = -1;    // the sandbox's side, after the CONNECT's 200; not closed here
  int upstreamFd = -1;  // a connected socket to the real host; not closed here
  std::shared_ptr<const HostKey> hostKey;
  std::string upstreamHost;  // for messages only
  std::string user;          // the credential's ssh.user
  std::vector<PinnedKey> pins;
  // Returns the credential's private key (OpenSSH text), or empty with `*why` set; called
  // only once a git command was accepted. The session cleanses its copy after use.
  std::function<std::string(std::string* why)> privateKey;
  std::function<GitVerdict(const GitCommand&)> decideCommand;
  std::function<PushVerdict(const policy::PushCommands&)> decidePush;
  std::function<void(const SshRefusal&)> onRefusal;  // each refusal, as it happens
  std::chrono::milliseconds handshakeTimeout{10'000};
  std::chrono::milliseconds idleTimeout{300'000};
  size_t maxCommandListBytes = 64 * 1024;   // a push's command list must end within this
  const std::atomic<bool>* stop = nullptr;  // set: the session ends at its next poll
};

struct SessionResult {
  bool gitStarted = false;  // a git command was accepted and went upstream
  std::string_view reason;  // empty when it ended normally; else why it ended
  std::string detail;
  std::string service;                // git-upload-pack, …
  std::string repository;             // normalised
  std::vector<std::string> refs;      // a push's refs
  std::vector<std::string> verdicts;  // a push's per-ref verdicts
  int exitStatus = -1;
  uint64_t bytesUp = 0, bytesDown = 0;
};

SessionResult runSession(const SessionParams& params);

}  // namespace sandgate::proxy::ssh
