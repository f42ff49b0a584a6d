// known_hosts pins for the upstream leg and the broker's own host key (see host_keys.h).
#include "proxy/ssh/host_keys.h"

#include <fmt/format.h>
#include <libssh/libssh.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace sandgate::proxy::ssh {
namespace {

// A known_hosts file is a few lines per host; anything far larger is the wrong file.
constexpr size_t kMaxKnownHostsBytes = 1024 * 1024;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

Diagnostic problem(const std::string& file, int line, std::string message) {
  return Diagnostic{file, line, 0, "", std::move(message)};
}

}  // namespace

std::vector<PinnedKey> KnownHosts::keysFor(std::string_view host, uint16_t port) const {
  const std::string name = port == 22 ? lower(host) : fmt::format("[{}]:{}", lower(host), port);
  auto it = hosts.find(name);
  return it == hosts.end() ? std::vector<PinnedKey>{} : it->second;
}

Result<KnownHosts> parseKnownHosts(std::string_view text, const std::string& file) {
  KnownHosts out;
  Diagnostics errors;
  int lineNo = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto f = fields(line);
    if (f.empty() || f[0].front() == '#') continue;
    if (f[0].front() == '@') {
      errors.push_back(problem(
          file, lineNo, fmt::format("{} lines are not supported: pin each host's own key", f[0])));
      continue;
    }
    if (f[0].starts_with("|1|")) {
      // A hashed name can only be matched by hashing every candidate: write the host name.
      errors.push_back(problem(file, lineNo,
                               "hashed host names (|1|...) are not supported; write the host "
                               "name (ssh-keyscan without -H)"));
      continue;
    }
    if (f.size() < 3) {
      errors.push_back(problem(file, lineNo, "expected `host[,host...] keytype base64-key`"));
      continue;
    }
    const std::string type(f[1]);
    const std::string blob(f[2]);
    ssh_key key = nullptr;
    const auto keyType = ssh_key_type_from_name(type.c_str());
    if (keyType == SSH_KEYTYPE_UNKNOWN ||
        ssh_pki_import_pubkey_base64(blob.c_str(), keyType, &key) != SSH_OK) {
      errors.push_back(problem(
          file, lineNo, fmt::format("`{}` key is not a valid public key of that type", type)));
      continue;
    }
    ssh_key_free(key);
    std::string names(f[0]);
    std::replace(names.begin(), names.end(), ',', ' ');
    for (auto name : fields(names)) {
      if (name.find_first_of("*?!") != std::string_view::npos) {
        errors.push_back(problem(
            file, lineNo,
            fmt::format("`{}`: wildcards and negations are not supported; pin each host", name)));
        continue;
      }
      out.hosts[lower(name)].push_back(PinnedKey{type, blob});
    }
  }
  if (!errors.empty()) return errors;
  return out;
}

Result<KnownHosts> loadKnownHosts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return problem(path, 0, "cannot read the known_hosts file");
  std::string text;
  text.resize(kMaxKnownHostsBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxKnownHostsBytes) return problem(path, 0, "known_hosts file too large");
  return parseKnownHosts(text, path);
}

HostKey::HostKey(ssh_key_struct* key) : key_(key) {
  char* b64 = nullptr;
  if (ssh_pki_export_pubkey_base64(key_, &b64) == SSH_OK) {
    publicLine_ = fmt::format("{} {}", ssh_key_type_to_char(ssh_key_type(key_)), b64);
    ssh_string_free_char(b64);
  }
}

HostKey::~HostKey() { ssh_key_free(key_); }

ssh_key_struct* HostKey::duplicate() const { return ssh_key_dup(key_); }

Result<std::shared_ptr<const HostKey>> HostKey::fromFile(const std::string& path) {
  ssh_key key = nullptr;
  if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK) {
    return problem(path, 0, "cannot read the SSH host key (an unencrypted OpenSSH or PEM key)");
  }
  return std::shared_ptr<const HostKey>(new HostKey(key));
}

Result<std::shared_ptr<const HostKey>> HostKey::generate() {
  ssh_key key = nullptr;
  if (ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &key) != SSH_OK) {
    return problem("", 0, "cannot generate the SSH broker's host key");
  }
  return std::shared_ptr<const HostKey>(new HostKey(key));
}

}  // namespace sandgate::proxy::ssh
