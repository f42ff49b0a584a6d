// The small behaviours of the config model: task lookup and limit inheritance.
#include "config/config.h"

namespace sandgate::config {

const Task* Config::findTask(std::string_view name) const {
  for (const auto& t : tasks) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::vector<std::string> Config::secretPaths() const {
  std::vector<std::string> out;
  for (const auto& [name, c] : credentials) {
    if (c.source.kind == CredentialSource::Kind::kFile && !c.source.file.empty()) {
      out.push_back(c.source.file);
    }
  }
  if (ca && !ca->key.empty()) out.push_back(ca->key);
  if (listen.admin) out.push_back(listen.admin->value);
  // The config itself: it shows `exec:` command lines, token hashes and where every secret is.
  if (!file.empty() && file != "<embedded>") out.push_back(file);
  return out;
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
  return out;
}

}  // namespace sandgate::config
