// The broker's view of HTTP header fields: a plain list the proxy fills from (and writes back
// to) Beast's fields, so that broker/ stays free of Asio and Beast.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/http_text.h"

namespace sandgate::broker {

// Header fields in order, name as sent (case preserved), value without surrounding spaces.
using Headers = std::vector<std::pair<std::string, std::string>>;

// The token of an `Authorization: Basic <token>` value (scheme matched case-insensitively),
// or empty when `value` is not a Basic credential.
inline std::string_view basicToken(std::string_view value) {
  constexpr std::string_view kScheme = "basic";
  if (value.size() <= kScheme.size() || !iequals(value.substr(0, kScheme.size()), kScheme) ||
      (value[kScheme.size()] != ' ' && value[kScheme.size()] != '\t')) {
    return {};
  }
  return trimOws(value.substr(kScheme.size()));
}

}  // namespace sandgate::broker
