// The launcher side of git over SSH in `sandgate run`: the sandbox's known_hosts naming the
// host key of the run's own SSH broker (a key made for this process, whose private half never
// leaves the broker, like the per-run CA key) for the hosts the policy lets the task reach over
// SSH, and an ssh config whose ProxyCommand is `sandgate connect %h %p` through the run's proxy.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "sandbox/launcher.h"

namespace sandgate::run {

// Where the sandbox finds them (under /run/sandgate, read-only).
inline constexpr const char* kSandboxSshConfig = "/run/sandgate/ssh/config";
inline constexpr const char* kSandboxKnownHosts = "/run/sandgate/ssh/known_hosts";

// The sandbox's ssh client config: every host through `sandgate connect`, only the run's
// known_hosts trusted, strict host key checking, no agent, no forwarding, batch mode.
std::string sshConfigText();

// Adds the run's SSH setup to the sandbox's options: the files (config, known_hosts, and
// ~/.ssh/config, which plain `ssh` reads from the passwd entry's home), GIT_SSH_COMMAND (unless
// --env set it) and the sandgate binary at sandbox::kSandgateInSandbox. `knownHosts` names the
// key of the broker the run's connections reach: the embedded proxy's (prepareRunSsh), or
// serve's, from its admin socket's task_env (`run --proxy`).
void applyRunSsh(const std::string& knownHosts, sandbox::Options* options);

// applyRunSsh with the embedded broker's known_hosts (proxy::sshKnownHostsFor); returns it.
Result<std::string> prepareRunSsh(const config::Config& cfg, const std::string& policy,
                                  sandbox::Options* options);

}  // namespace sandgate::run
