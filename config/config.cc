// The small behaviours of the config model: task lookup, limit inheritance and the values of
// sandbox limits.
#include "config/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>

namespace sandgate::config {

const Task* Config::findTask(std::string_view name) const {
  for (const auto& t : tasks) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

// The files an `exec:` source's command is given to read: each argument after the program that
// is an absolute path, or ends in one after '=' (--key-file=/path). A token helper's input (a
// key, a refresh token, a script with a secret in it) is as secret as a `file:` source. Paths in
// the system's program directories are programs and libraries (an interpreter given as an
// argument), not inputs: hiding them would break the sandbox's own tools. A path the command
// finds by itself (in a config of its own, or in `sh -c` text) is not named here: README says
// to keep such files where the sandbox's view does not reach.
void execInputs(const std::vector<std::string>& argv, std::vector<std::string>* out) {
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string_view a = argv[i];
    if (auto eq = a.find('='); a.rfind("-", 0) == 0 && eq != std::string_view::npos) {
      a = a.substr(eq + 1);
    }
    if (a.size() < 2 || a[0] != '/') continue;
    bool program = false;
    for (std::string_view dir : {"/usr/", "/bin/", "/sbin/", "/lib"}) {
      program = program || a.rfind(dir, 0) == 0;
    }
    if (!program) out->emplace_back(a);
  }
}

}  // namespace

std::vector<std::string> Config::secretPaths() const {
  std::vector<std::string> out;
  for (const auto& [name, c] : credentials) {
    if (c.source.kind == CredentialSource::Kind::kFile && !c.source.file.empty()) {
      out.push_back(c.source.file);
    }
    if (c.source.kind == CredentialSource::Kind::kExec) execInputs(c.source.exec, &out);
    if (c.source.kind == CredentialSource::Kind::kGithubApp && c.source.githubApp &&
        c.source.githubApp->privateKey.kind == CredentialSource::Kind::kExec) {
      execInputs(c.source.githubApp->privateKey.exec, &out);
    }
    // A GitHub App's private key mints tokens for every repository of its installation.
    if (c.source.kind == CredentialSource::Kind::kGithubApp && c.source.githubApp &&
        c.source.githubApp->privateKey.kind == CredentialSource::Kind::kFile &&
        !c.source.githubApp->privateKey.file.empty()) {
      out.push_back(c.source.githubApp->privateKey.file);
    }
  }
  if (ca && !ca->key.empty()) out.push_back(ca->key);
  // The SSH broker's host key: a sandbox holding it could pose as sandgate to other runs.
  if (ssh.hostKey) out.push_back(*ssh.hostKey);
  if (tokens) {
    for (const auto& k : tokens->keys) {
      // A shared HS256 key mints tokens: a sandbox that read it could make its own.
      if (k.algorithm == TokenKey::Algorithm::kHS256 && !k.file.empty()) out.push_back(k.file);
    }
  }
  if (metrics.adminApi) {
    // The admin token mints and revokes; a mint key file signs tokens.
    if (!metrics.adminApi->tokenFile.empty()) out.push_back(metrics.adminApi->tokenFile);
    if (metrics.adminApi->mintFile) out.push_back(*metrics.adminApi->mintFile);
  }
  if (listen.admin) out.push_back(listen.admin->value);
  // The config itself: it shows `exec:` command lines, token hashes and where every secret is.
  if (!file.empty() && file != "<embedded>") out.push_back(file);
  return out;
}

std::string_view algorithmName(TokenKey::Algorithm a) {
  switch (a) {
    case TokenKey::Algorithm::kHS256:
      return "HS256";
    case TokenKey::Algorithm::kEdDSA:
      return "EdDSA";
    case TokenKey::Algorithm::kES256:
      return "ES256";
  }
  return "?";
}

EffectiveLimits resolveLimits(const Limits& global, const Limits& task) {
  EffectiveLimits out;
  // Task value, else the `limits:` section, else the built-in default in EffectiveLimits.
  auto pick = [](auto& dst, const auto& g, const auto& t) {
    if (t) {
      dst = *t;
    } else if (g) {
      dst = *g;
    }
  };
  pick(out.maxConnections, global.maxConnections, task.maxConnections);
  pick(out.maxTunnels, global.maxTunnels, task.maxTunnels);
  pick(out.newConnectionsPerSecond, global.newConnectionsPerSecond, task.newConnectionsPerSecond);
  pick(out.maxHeaderBytes, global.maxHeaderBytes, task.maxHeaderBytes);
  pick(out.headerTimeout, global.headerTimeout, task.headerTimeout);
  pick(out.bodyTimeout, global.bodyTimeout, task.bodyTimeout);
  pick(out.idleTimeout, global.idleTimeout, task.idleTimeout);
  pick(out.connectTimeout, global.connectTimeout, task.connectTimeout);
  pick(out.shutdownGrace, global.shutdownGrace, task.shutdownGrace);
  pick(out.revokeGrace, global.revokeGrace, task.revokeGrace);
  pick(out.h2MaxConcurrentStreams, global.h2MaxConcurrentStreams, task.h2MaxConcurrentStreams);
  pick(out.h2ResetBurst, global.h2ResetBurst, task.h2ResetBurst);
  pick(out.h2ResetsPerSecond, global.h2ResetsPerSecond, task.h2ResetsPerSecond);
  pick(out.h2MaxContinuations, global.h2MaxContinuations, task.h2MaxContinuations);
  pick(out.h2MaxSettings, global.h2MaxSettings, task.h2MaxSettings);
  pick(out.h2MaxOutboundAck, global.h2MaxOutboundAck, task.h2MaxOutboundAck);
  return out;
}

std::optional<std::string> normaliseReadOnlyPath(std::string_view path, std::string* why) {
  if (path.empty() || path.front() != '/') {
    *why = "expected an absolute path (one that starts with /)";
    return std::nullopt;
  }
  std::string out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t end = path.find('/', i);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(i, end - i);
    if (part == "." || part == "..") {
      *why = "expected a path without . or .. components";
      return std::nullopt;
    }
    if (!part.empty()) {
      out += '/';
      out += part;
    }
    i = end;
  }
  if (out.empty()) {
    *why = "/ cannot be read-only in the sandbox: name the directories it needs";
    return std::nullopt;
  }
  return out;
}

std::optional<uint32_t> parsePidsLimit(std::string_view s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v == 0) return std::nullopt;
  return v;
}

std::optional<double> parseCpusLimit(std::string_view s) {
  // Plain decimal only: from_chars would also take "inf", "nan" and "1e3".
  if (s.empty() ||
      !std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; })) {
    return std::nullopt;
  }
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !(v > 0) || v > kMaxCpus) {
    return std::nullopt;
  }
  return v;
}

}  // namespace sandgate::config
