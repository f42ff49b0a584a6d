// Synthetic address assignment and reverse lookup (see address_pool.h).
#include "capture/address_pool.h"

#include <cassert>

namespace sandgate::capture {

namespace {

// The low 32 bits of an address (IPv4: all of it).
uint32_t low32(const policy::IpAddress& a) {
  const auto& b = a.bytes;
  size_t o = a.v6 ? 12 : 0;
  return static_cast<uint32_t>(b[o]) << 24 | static_cast<uint32_t>(b[o + 1]) << 16 |
         static_cast<uint32_t>(b[o + 2]) << 8 | b[o + 3];
}

policy::IpAddress withLow32(policy::IpAddress a, uint32_t v) {
  size_t o = a.v6 ? 12 : 0;
  a.bytes[o] = static_cast<uint8_t>(v >> 24);
  a.bytes[o + 1] = static_cast<uint8_t>(v >> 16);
  a.bytes[o + 2] = static_cast<uint8_t>(v >> 8);
  a.bytes[o + 3] = static_cast<uint8_t>(v);
  return a;
}

}  // namespace

std::optional<std::string> checkPoolRanges(const policy::Cidr& v4, const policy::Cidr& v6) {
  if (v4.base.v6 || v4.prefix < 8 || v4.prefix > 30) {
    return "the IPv4 synthetic range must be an IPv4 prefix of length 8 to 30";
  }
  if (!v6.base.v6 || v6.prefix < 64 || v6.prefix > 126) {
    return "the IPv6 synthetic range must be an IPv6 prefix of length 64 to 126";
  }
  return std::nullopt;
}

policy::Cidr defaultPoolV4() { return *policy::parseCidr(kDefaultPoolV4); }
policy::Cidr defaultPoolV6() { return *policy::parseCidr(kDefaultPoolV6); }

SyntheticPool::SyntheticPool(const policy::Cidr& v4, const policy::Cidr& v6) : v4_(v4), v6_(v6) {
  assert(!checkPoolRanges(v4, v6));
  // Both ranges must hold every index; the IPv4 one is the smaller (prefix >= 8 vs <= 126
  // leaves at least 2 bits of IPv6 host part, and 2^(32-prefix4) - 2 is what IPv4 allows).
  uint64_t v4Hosts = (uint64_t{1} << (32 - v4.prefix)) - 2;
  int v6Bits = std::min(32, 128 - v6.prefix);
  uint64_t v6Hosts = (uint64_t{1} << v6Bits) - 2;
  capacity_ = static_cast<size_t>(std::min(v4Hosts, v6Hosts));
}

SyntheticAddresses SyntheticPool::at(uint32_t index) const {
  return {withLow32(v4_.base, low32(v4_.base) + 1 + index),
          withLow32(v6_.base, low32(v6_.base) + 1 + index)};
}

std::optional<SyntheticAddresses> SyntheticPool::assign(const std::string& name) {
  std::lock_guard lock(mu_);
  if (auto it = byName_.find(name); it != byName_.end()) return at(it->second);
  if (byIndex_.size() >= capacity_) return std::nullopt;
  auto index = static_cast<uint32_t>(byIndex_.size());
  byIndex_.push_back(name);
  byName_.emplace(name, index);
  return at(index);
}

std::optional<uint32_t> SyntheticPool::indexOf(const policy::IpAddress& address) const {
  policy::IpAddress a = address;
  // ::ffff:198.18.0.7 is 198.18.0.7 (a dual-stack socket reports IPv4 peers this way).
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (a.v6 && std::equal(kMapped, kMapped + 12, a.bytes.begin())) {
    a = policy::IpAddress::v4(low32(a));
  }
  const policy::Cidr& range = a.v6 ? v6_ : v4_;
  if (!range.contains(a)) return std::nullopt;
  uint32_t offset = low32(a) - low32(range.base);
  if (offset == 0 || offset > capacity_) return std::nullopt;
  return offset - 1;
}

std::optional<std::string> SyntheticPool::nameOf(const policy::IpAddress& address) const {
  auto index = indexOf(address);
  if (!index) return std::nullopt;
  std::lock_guard lock(mu_);
  if (*index >= byIndex_.size()) return std::nullopt;
  return byIndex_[*index];
}

bool SyntheticPool::contains(const policy::IpAddress& address) const {
  policy::IpAddress a = address;
  return v4_.contains(a) || v6_.contains(a) || indexOf(a).has_value();
}

size_t SyntheticPool::size() const {
  std::lock_guard lock(mu_);
  return byIndex_.size();
}

}  // namespace sandgate::capture
