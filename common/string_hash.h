// Hash maps keyed by std::string that are searched with a std::string_view, without a copy of
// the key per lookup (C++20's heterogeneous lookup: a transparent hash and equality).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sandgate {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

}  // namespace sandgate
