// The launcher side of git over SSH in `sandgate run`: a per-run ed25519 host key (its private
// half stays in this process, like the per-run CA key), the sandbox's known_hosts naming it for
// the hosts the policy lets the task reach over SSH, and an ssh config whose ProxyCommand is
// `sandgate connect %h %p` through the run's proxy.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "sandbox/launcher.h"

namespace sandgate::run {

// A per-run SSH host key. `privateOpenssh` is the OpenSSH private key text
// ("-----BEGIN OPENSSH PRIVATE KEY-----", what ssh_pki_import_privkey_base64 reads): a secret,
// never written to the sandbox, the run's directory, a log or the report.
struct SshHostKey {
  std::string privateOpenssh;
  std::string publicLine;  // "ssh-ed25519 AAAA..." (what known_hosts holds after the host)
};

// A fresh ed25519 key (libssh's ssh_pki_generate).
Result<SshHostKey> generateSshHostKey();

// One host the sandbox may reach over SSH, as known_hosts names it.
struct SshHost {
  std::string host;  // an exact name, an address or a "*.suffix" pattern
  uint16_t port = 22;
};

// The hosts of `policy`'s allow rules (its includes too) that the task reaches over SSH.
// Until the broker's config lands (credentials with `ssh:`), a rule is an SSH rule when its
// ports include 22; `re:` hosts cannot be written in known_hosts and are left out.
std::vector<SshHost> sshHosts(const config::Config& cfg, const std::string& policy);

// known_hosts lines: "host ssh-ed25519 AAAA..." (port 22) or "[host]:port ssh-ed25519 ...".
std::string knownHostsText(const std::vector<SshHost>& hosts, const std::string& publicLine);

// Where the sandbox finds them (under /run/sandgate, read-only).
inline constexpr const char* kSandboxSshConfig = "/run/sandgate/ssh/config";
inline constexpr const char* kSandboxKnownHosts = "/run/sandgate/ssh/known_hosts";

// The sandbox's ssh client config: every host through `sandgate connect`, only the run's
// known_hosts trusted, strict host key checking, no agent, no forwarding, batch mode.
std::string sshConfigText();

// Adds the run's SSH setup to the sandbox's options: the files (config, known_hosts, and
// ~/.ssh/config, which plain `ssh` reads from the passwd entry's home), GIT_SSH_COMMAND (unless
// --env set it) and the sandgate binary at sandbox::kSandgateInSandbox. Returns the key's public
// line; its private half goes to the in-process proxy's SSH broker only (sshBrokerHostKey).
Result<std::string> prepareRunSsh(const config::Config& cfg, const std::string& policy,
                                  sandbox::Options* options);

// The hook for the SSH broker of the in-process proxy: the host key it presents to this run's
// sandbox (the OpenSSH private key text, for ssh_pki_import_privkey_base64), or empty before
// prepareRunSsh ran. One run per process: `sandgate run` sets it once.
const std::string& sshBrokerHostKey();

}  // namespace sandgate::run
