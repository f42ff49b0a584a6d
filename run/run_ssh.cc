// Per-run SSH host key, known_hosts and ssh config for the sandbox (see run_ssh.h).
#include "run/run_ssh.h"

#include <fmt/format.h>

#include "proxy/ssh/ssh_broker.h"
#include "sandbox/run_files.h"

namespace sandgate::run {

std::string sshConfigText() {
  // Every host: the sandbox has no other route, and a host the policy refuses gets sandgate's
  // reason from `sandgate connect` rather than a timeout. No agent, no forwarding, no key of
  // the sandbox's own offered: the broker authenticates upstream with the task's key.
  return fmt::format(
      "# Written by `sandgate run`: ssh goes through sandgate's proxy, and trusts only the\n"
      "# run's host key, which sandgate's SSH broker presents.\n"
      "Host *\n"
      "  ProxyCommand {} connect %h %p\n"
      "  UserKnownHostsFile {}\n"
      "  GlobalKnownHostsFile /dev/null\n"
      "  StrictHostKeyChecking yes\n"
      "  UpdateHostKeys no\n"
      "  CheckHostIP no\n"
      "  BatchMode yes\n"
      "  IdentitiesOnly yes\n"
      "  IdentityAgent none\n"
      "  ForwardAgent no\n"
      "  ForwardX11 no\n"
      "  ClearAllForwardings yes\n",
      sandbox::kSandgateInSandbox, kSandboxKnownHosts);
}

void applyRunSsh(const std::string& knownHosts, sandbox::Options* options) {
  const std::string config = sshConfigText();
  options->runFiles["ssh/config"] = config;
  options->runFiles["ssh/known_hosts"] = knownHosts;
  options->homeFiles[".ssh/config"] = config;
  options->showSandgate = true;
  // git runs `ssh` with this config whatever the home holds; an explicit --env wins.
  options->env.emplace("GIT_SSH_COMMAND", fmt::format("ssh -F {}", kSandboxSshConfig));
}

Result<std::string> prepareRunSsh(const config::Config& cfg, const std::string& policy,
                                  sandbox::Options* options) {
  // The broker's own key (the config's ssh.host_key, else the one this process made): the
  // sandbox gets its public half only.
  auto known = proxy::sshKnownHostsFor(cfg, policy);
  if (!known) return known.errors();
  applyRunSsh(*known, options);
  return *known;
}

}  // namespace sandgate::run
