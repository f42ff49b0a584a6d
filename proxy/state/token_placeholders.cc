// Token clients' placeholders (see token_placeholders.h).
#include "proxy/state/token_placeholders.h"

namespace sandgate::proxy {

std::shared_ptr<const broker::PlaceholderSet> TokenPlaceholders::forTask(
    const std::string& task, const config::Credentials& credentials,
    const broker::SecretStore& store) {
  std::lock_guard lock(mu_);
  auto& slot = sets_[task];
  if (!slot) slot = broker::PlaceholderSet::generate(credentials, store);
  return slot;
}

}  // namespace sandgate::proxy
