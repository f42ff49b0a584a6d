// Basic proxy credentials and constant-time token checks (see proxy_auth.h).
#include "proxy/identity/proxy_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "common/encoding.h"

namespace sandgate::proxy {

std::optional<BasicCredentials> parseBasicAuth(std::string_view value) {
  auto sp = value.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  std::string_view scheme = value.substr(0, sp);
  if (scheme.size() != 5) return std::nullopt;
  for (size_t i = 0; i < 5; ++i) {
    if (std::tolower(static_cast<unsigned char>(scheme[i])) != "basic"[i]) return std::nullopt;
  }
  std::string_view b64 = value.substr(sp + 1);
  while (!b64.empty() && b64.front() == ' ') b64.remove_prefix(1);
  // Bounded before decoding: a task:token pair, whose token may be a task token of up to
  // kMaxTokenBytes (a longer one is refused by the verifier with its true reason,
  // token_malformed, not taken for a static token that does not match: auth_invalid).
  if (b64.empty() || b64.size() > kMaxBasicBytes) return std::nullopt;
  auto decoded = base64Decode(b64);
  if (!decoded) return std::nullopt;
  auto colon = decoded->find(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  return BasicCredentials{decoded->substr(0, colon), decoded->substr(colon + 1)};
}

std::optional<TokenHash> parseTokenHash(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  TokenHash out{};
  for (size_t i = 0; i < 32; ++i) {
    int hi = hexValue(hex[2 * i]), lo = hexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

bool tokenMatches(std::string_view token, const TokenHash& expected) {
  const TokenHash got = tokenHashOf(token);
  return CRYPTO_memcmp(got.data(), expected.data(), got.size()) == 0;
}

TokenHash tokenHashOf(std::string_view token) {
  TokenHash got{};
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), got.data());
  return got;
}

}  // namespace sandgate::proxy
