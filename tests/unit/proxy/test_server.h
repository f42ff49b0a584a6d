// An in-process Server for the proxy unit tests: its config from YAML text, no signal
// handling, no config file watching.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "common/result.h"
#include "config/config.h"
#include "proxy/server.h"

namespace sandgate::proxy {

// `name` is the config's file name in diagnostics. Not started.
inline Result<std::unique_ptr<Server>> testServer(const std::string& yaml, const std::string& name,
                                                  unsigned threads = 2) {
  auto cfg = config::loadString(yaml, name);
  if (!cfg) return cfg.errors();
  ServerOptions opts;
  opts.threads = threads;
  opts.handleSignals = false;
  opts.watchConfigFile = false;
  return Server::create(std::move(cfg.value()), std::move(opts));
}

}  // namespace sandgate::proxy
