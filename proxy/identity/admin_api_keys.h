// The keys of the admin HTTP API (metrics.admin_api): the admin token's hash and the key it
// mints task tokens with. The API itself is admin/admin_api.h.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "config/config.h"
#include "proxy/identity/proxy_auth.h"

namespace sandgate::broker {
class Secret;
}

namespace sandgate::proxy {

class TokenVerifier;

// What metrics.admin_api's files hold, loaded with each snapshot (so a reload rotates them).
struct AdminApiKeys {
  TokenHash tokenSha256{};  // of the admin token
  struct Mint {
    std::string kid;
    config::TokenKey::Algorithm algorithm = config::TokenKey::Algorithm::kHS256;
    std::shared_ptr<const broker::Secret> key;  // HS256: the shared key; else a PEM private key
  };
  std::optional<Mint> mint;
};

// Reads the token file (at least 16 bytes, one trailing newline dropped) and the mint key,
// which must sign a token that `verifier` accepts (so a private key that does not match its
// public key is an error now rather than a refusal later). Errors name the key path.
Result<std::shared_ptr<const AdminApiKeys>> loadAdminApiKeys(const config::Config& cfg,
                                                             const TokenVerifier* verifier);

}  // namespace sandgate::proxy
