// Per-run SSH host key, known_hosts and ssh config for the sandbox (see run_ssh.h).
#include "run/run_ssh.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "proxy/ssh/ssh_broker.h"
#include "sandbox/run_files.h"

namespace sandgate::run {

namespace {

void collect(const config::Config& cfg, const std::string& name, std::set<std::string>* visited,
             std::vector<SshHost>* out) {
  if (!visited->insert(name).second) return;
  auto it = cfg.policies.find(name);
  if (it == cfg.policies.end()) return;
  for (const auto& inc : it->second.include) collect(cfg, inc.value, visited, out);
  for (const auto& rule : it->second.allow) {
    if (!rule.host || rule.host->value.starts_with("re:") || !rule.credential) continue;
    // The SSH broker serves a rule whose credential has `ssh:`, on each port the rule allows.
    auto cred = cfg.credentials.find(rule.credential->value);
    if (cred == cfg.credentials.end() || !cred->second.ssh) continue;
    std::vector<uint16_t> ports;
    for (const auto& p : rule.ports) ports.push_back(p.value);
    if (ports.empty()) ports.push_back(22);
    for (uint16_t port : ports) {
      SshHost h{rule.host->value, port};
      if (std::none_of(out->begin(), out->end(),
                       [&](const SshHost& o) { return o.host == h.host && o.port == h.port; })) {
        out->push_back(h);
      }
    }
  }
}

}  // namespace

std::vector<SshHost> sshHosts(const config::Config& cfg, const std::string& policy) {
  std::vector<SshHost> out;
  std::set<std::string> visited;
  collect(cfg, policy, &visited, &out);
  return out;
}

std::string knownHostsText(const std::vector<SshHost>& hosts, const std::string& publicLine) {
  std::string out;
  for (const auto& h : hosts) {
    std::string name = h.port == 22 ? h.host : fmt::format("[{}]:{}", h.host, h.port);
    out += name + " " + publicLine + "\n";
  }
  return out;
}

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

Result<std::string> prepareRunSsh(const config::Config& cfg, const std::string& policy,
                                  sandbox::Options* options) {
  // The broker's own key (the config's ssh.host_key, else the one this process made): the
  // sandbox gets its public half only.
  auto publicLine = proxy::sshBrokerPublicLine(cfg);
  if (!publicLine) return publicLine.errors();
  const std::string config = sshConfigText();
  const std::string known = knownHostsText(sshHosts(cfg, policy), *publicLine);
  options->runFiles["ssh/config"] = config;
  options->runFiles["ssh/known_hosts"] = known;
  options->homeFiles[".ssh/config"] = config;
  options->showSandgate = true;
  // git runs `ssh` with this config whatever the home holds; an explicit --env wins.
  options->env.emplace("GIT_SSH_COMMAND", fmt::format("ssh -F {}", kSandboxSshConfig));
  return *publicLine;
}

}  // namespace sandgate::run
