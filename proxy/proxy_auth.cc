// Basic proxy credentials and constant-time token checks (see proxy_auth.h).
#include "proxy/proxy_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace sandgate::proxy {
namespace {

int base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::optional<std::string> decodeBase64(std::string_view in) {
  if (in.empty() || in.size() % 4 != 0 || in.size() > 4096) return std::nullopt;
  size_t pad = 0;
  if (in.back() == '=') ++pad;
  if (in.size() >= 2 && in[in.size() - 2] == '=') ++pad;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    int v;
    if (i >= in.size() - pad) {
      if (in[i] != '=') return std::nullopt;
      v = 0;
    } else {
      v = base64Value(in[i]);
      if (v < 0) return std::nullopt;
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    if (i % 4 == 3) {
      out += static_cast<char>((acc >> 16) & 0xff);
      out += static_cast<char>((acc >> 8) & 0xff);
      out += static_cast<char>(acc & 0xff);
      acc = 0;
    }
  }
  out.resize(out.size() - pad);
  return out;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

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
  auto decoded = decodeBase64(b64);
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
  TokenHash got{};
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), got.data());
  return CRYPTO_memcmp(got.data(), expected.data(), got.size()) == 0;
}

}  // namespace sandgate::proxy
