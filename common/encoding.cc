// Base64 (via OpenSSL's EVP block coder) and percent-encoding helpers.
#include "common/encoding.h"

#include <openssl/evp.h>

namespace sandgate {

std::string base64Encode(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> base64Decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '+' || c == '/';
    if (c == '=') {
      // Padding only in the last two positions, and nothing but padding after it.
      if (i + 2 < in.size()) return std::nullopt;
      ++pad;
    } else if (!alpha || pad > 0) {
      return std::nullopt;
    }
  }
  std::string out(3 * (in.size() / 4), '\0');
  if (in.empty()) return out;
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the zero bytes that padding stands for.
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::string percentEncode(std::string_view in) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size());
  for (char ch : in) {
    auto c = static_cast<unsigned char>(ch);
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> percentDecode(std::string_view in, bool plusIsSpace) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return std::nullopt;
      int hi = hexValue(in[i + 1]);
      int lo = hexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plusIsSpace) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> base64UrlDecode(std::string_view in) {
  if (in.find_first_of("+/=") != std::string_view::npos) return std::nullopt;
  std::string s(in);
  for (char& c : s) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  if (s.size() % 4 == 1) return std::nullopt;
  while (s.size() % 4 != 0) s += '=';
  return base64Decode(s);
}

std::string base64UrlEncode(std::string_view in) {
  std::string s = base64Encode(in);
  while (!s.empty() && s.back() == '=') s.pop_back();
  for (char& c : s) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return s;
}

}  // namespace sandgate
