// Per-run SSH host key, known_hosts and ssh config for the sandbox (see run_ssh.h).
#include "run/run_ssh.h"

#include <fmt/format.h>
#include <libssh/libssh.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "sandbox/run_files.h"

namespace sandgate::run {

namespace {

std::string& brokerKey() {
  static std::string key;
  return key;
}

Diagnostic problem(std::string message) { return Diagnostic{"", 0, 0, "", std::move(message)}; }

void collect(const config::Config& cfg, const std::string& name, std::set<std::string>* visited,
             std::vector<SshHost>* out) {
  if (!visited->insert(name).second) return;
  auto it = cfg.policies.find(name);
  if (it == cfg.policies.end()) return;
  for (const auto& inc : it->second.include) collect(cfg, inc.value, visited, out);
  for (const auto& rule : it->second.allow) {
    if (!rule.host || rule.host->value.starts_with("re:")) continue;
    const bool ssh = std::any_of(rule.ports.begin(), rule.ports.end(),
                                 [](const auto& p) { return p.value == 22; });
    if (!ssh) continue;
    SshHost h{rule.host->value, 22};
    if (std::none_of(out->begin(), out->end(),
                     [&](const SshHost& o) { return o.host == h.host && o.port == h.port; })) {
      out->push_back(h);
    }
  }
}

}  // namespace

Result<SshHostKey> generateSshHostKey() {
  ssh_key key = nullptr;
  if (ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &key) != SSH_OK || key == nullptr) {
    return problem("cannot generate the run's SSH host key (libssh ssh_pki_generate)");
  }
  char* priv = nullptr;
  char* pub = nullptr;
  int a = ssh_pki_export_privkey_base64(key, nullptr, nullptr, nullptr, &priv);
  int b = ssh_pki_export_pubkey_base64(key, &pub);
  ssh_key_free(key);
  SshHostKey out;
  if (a == SSH_OK && priv != nullptr) out.privateOpenssh = priv;
  if (b == SSH_OK && pub != nullptr) out.publicLine = std::string("ssh-ed25519 ") + pub;
  if (priv != nullptr) {
    // The private key's text is a secret: wiped before libssh's buffer is freed.
    explicit_bzero(priv, std::char_traits<char>::length(priv));
    ssh_string_free_char(priv);
  }
  if (pub != nullptr) ssh_string_free_char(pub);
  if (out.privateOpenssh.empty() || out.publicLine.empty()) {
    return problem("cannot export the run's SSH host key (libssh)");
  }
  return out;
}

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
  auto key = generateSshHostKey();
  if (!key) return key.errors();
  const std::string config = sshConfigText();
  const std::string known = knownHostsText(sshHosts(cfg, policy), key->publicLine);
  options->runFiles["ssh/config"] = config;
  options->runFiles["ssh/known_hosts"] = known;
  options->homeFiles[".ssh/config"] = config;
  options->showSandgate = true;
  // git runs `ssh` with this config whatever the home holds; an explicit --env wins.
  options->env.emplace("GIT_SSH_COMMAND", fmt::format("ssh -F {}", kSandboxSshConfig));
  brokerKey() = key->privateOpenssh;
  // One copy of the secret is kept (the broker's); this one is wiped before it is freed.
  explicit_bzero(key->privateOpenssh.data(), key->privateOpenssh.size());
  return key->publicLine;
}

const std::string& sshBrokerHostKey() { return brokerKey(); }

}  // namespace sandgate::run
