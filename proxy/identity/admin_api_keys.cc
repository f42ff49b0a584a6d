// Loading the admin HTTP API's keys (see admin_api_keys.h).
#include "proxy/identity/admin_api_keys.h"

#include <fmt/format.h>

#include "broker/secret.h"
#include "proxy/identity/task_token.h"

namespace sandgate::proxy {

Result<std::shared_ptr<const AdminApiKeys>> loadAdminApiKeys(const config::Config& cfg,
                                                             const TokenVerifier* verifier) {
  const config::AdminApi& api = *cfg.metrics.adminApi;
  auto fail = [&](const config::Mark& m, std::string keyPath, std::string message) {
    return Diagnostics{{cfg.file, m.line, m.col, std::move(keyPath), std::move(message)}};
  };
  auto keys = std::make_shared<AdminApiKeys>();
  std::string why;
  auto token = readKeyFile(api.tokenFile, &why);
  if (!token) return fail(api.mark, "metrics.admin_api.token_file", why);
  broker::trimTrailingNewline(*token);
  if (token->size() < 16) {
    broker::wipe(*token);
    return fail(api.mark, "metrics.admin_api.token_file",
                fmt::format("{}: the admin token must be at least 16 bytes", api.tokenFile));
  }
  keys->tokenSha256 = tokenHashOf(*token);
  broker::wipe(*token);
  if (api.mintKid) {
    const config::TokenKey* key = nullptr;
    if (cfg.tokens) {
      for (const auto& k : cfg.tokens->keys) {
        if (k.id == *api.mintKid) key = &k;
      }
    }
    if (!key || !verifier) {
      return fail(api.mintMark, "metrics.admin_api.mint.kid",
                  fmt::format("`{}` is not the id of a tokens.keys[] key", *api.mintKid));
    }
    if (key->algorithm != config::TokenKey::Algorithm::kHS256 && !api.mintFile) {
      return fail(api.mintMark, "metrics.admin_api.mint.file",
                  fmt::format("key `{}` is {}: name the PEM private key to mint with", key->id,
                              config::algorithmName(key->algorithm)));
    }
    const std::string file = api.mintFile.value_or(key->file);
    auto bytes = readKeyFile(file, &why);
    if (!bytes) return fail(api.mintMark, "metrics.admin_api.mint.file", why);
    if (key->algorithm == config::TokenKey::Algorithm::kHS256) broker::trimTrailingNewline(*bytes);
    AdminApiKeys::Mint m{key->id, key->algorithm, broker::Secret::take(*bytes)};
    // A probe token: the key must load and match the key replicas verify with.
    auto probe = mintToken(m.algorithm, m.kid, m.key->reveal(),
                           R"({"sub":"mint-key-check","exp":4102444800})");
    const bool verifies =
        probe && verifier->verify(probe.value(), 0).reason != token_reason::kBadSignature;
    if (!verifies) {
      return fail(api.mintMark, "metrics.admin_api.mint.file",
                  fmt::format("{}: {}", file,
                              probe ? fmt::format("does not match key `{}`", key->id)
                                    : probe.errors().front().message));
    }
    keys->mint = std::move(m);
  }
  return std::shared_ptr<const AdminApiKeys>(std::move(keys));
}

}  // namespace sandgate::proxy
