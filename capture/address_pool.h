// The per-task pool of synthetic addresses that the sandbox's DNS stub hands out: one IPv4 and
// one IPv6 address per name, assigned on first lookup and kept for the pool's life.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "policy/ip.h"

namespace sandgate::capture {

// Defaults. 198.18.0.0/15 is reserved for benchmarking (RFC 2544): never a real destination, so
// a synthetic address cannot shadow a host the task could otherwise reach. The IPv6 range is a
// fixed ULA /64 (RFC 4193; "fd53:4744:4e53" spells "SG" "DNS"): routed only inside the
// sandbox's own network namespace, so a random global ID buys nothing, and a fixed one lets
// tests and logs recognise it. Not 64:ff9b::/96: that is NAT64 and policy code reads the IPv4
// address embedded in it.
inline constexpr std::string_view kDefaultPoolV4 = "198.18.0.0/15";
inline constexpr std::string_view kDefaultPoolV6 = "fd53:4744:4e53::/64";

struct SyntheticAddresses {
  policy::IpAddress v4;
  policy::IpAddress v6;
};

// Thread-safe. Index i (from 0) maps to base+1+i in both ranges, so a name's two addresses are
// found from either. The first and last address of the IPv4 range are never handed out.
// Addresses are never freed or reused: a connection to an address always means the one name
// it was given for, so a credential bound to one name can never reach another.
class SyntheticPool {
 public:
  // Call checkPoolRanges() first; invalid ranges are a bug here.
  SyntheticPool(const policy::Cidr& v4, const policy::Cidr& v6);

  // The name's addresses, assigned on first use; nullopt once the pool is exhausted.
  std::optional<SyntheticAddresses> assign(const std::string& name);
  // The name an address was assigned to (IPv4, IPv6, or IPv4-mapped IPv6); nullopt if none.
  std::optional<std::string> nameOf(const policy::IpAddress& address) const;
  // Whether an address lies in one of the ranges (assigned or not).
  bool contains(const policy::IpAddress& address) const;

  size_t size() const;
  size_t capacity() const { return capacity_; }
  const policy::Cidr& v4Range() const { return v4_; }
  const policy::Cidr& v6Range() const { return v6_; }

 private:
  SyntheticAddresses at(uint32_t index) const;
  std::optional<uint32_t> indexOf(const policy::IpAddress& address) const;

  policy::Cidr v4_, v6_;
  size_t capacity_ = 0;
  mutable std::mutex mu_;
  std::unordered_map<std::string, uint32_t> byName_;  // guarded by mu_
  std::vector<std::string> byIndex_;                  // guarded by mu_
};

// Why the ranges cannot make a pool (IPv4 prefix 8..30, IPv6 prefix 64..126), or nullopt.
std::optional<std::string> checkPoolRanges(const policy::Cidr& v4, const policy::Cidr& v6);

// The default ranges, parsed.
policy::Cidr defaultPoolV4();
policy::Cidr defaultPoolV6();

}  // namespace sandgate::capture
