// Token identity: "Proxy-Authorization: Basic base64(task:token)" checked against the
// SHA-256 of the token in the config, in constant time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandgate::proxy {

using TokenHash = std::array<uint8_t, 32>;

struct BasicCredentials {
  std::string task;
  std::string token;
};

// The longest base64 a Basic value may have: room for a task name and a task token of
// kMaxTokenBytes (task_token.h) and more, so that an oversized token reaches the verifier and
// is refused as token_malformed.
inline constexpr size_t kMaxBasicBytes = 16384;

// Parses a Proxy-Authorization value of the Basic scheme (scheme name case-insensitive,
// strict base64). Returns nullopt for any other scheme or malformed value.
std::optional<BasicCredentials> parseBasicAuth(std::string_view value);

// Parses 64 hex digits (either case).
std::optional<TokenHash> parseTokenHash(std::string_view hex);

// SHA-256(token) == expected, compared with CRYPTO_memcmp so that timing reveals nothing.
bool tokenMatches(std::string_view token, const TokenHash& expected);

// SHA-256(token): what a connection keeps of a task token it verified.
TokenHash tokenHashOf(std::string_view token);

}  // namespace sandgate::proxy
