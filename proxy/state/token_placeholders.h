// The placeholders of each task's token clients (serve's own listeners): generated on first
// use and then kept for the server's life, across reloads. No run shares them: each run has
// its own (Server::sandboxEnvironment).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "broker/placeholder.h"
#include "broker/store.h"
#include "config/config.h"

namespace sandgate::proxy {

class TokenPlaceholders {
 public:
  std::shared_ptr<const broker::PlaceholderSet> forTask(const std::string& task,
                                                        const config::Credentials& credentials,
                                                        const broker::SecretStore& store);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const broker::PlaceholderSet>> sets_;
};

}  // namespace sandgate::proxy
