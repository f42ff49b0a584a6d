// HostKey: one right-to-left pass over a host that hashes it and all of its suffixes.
#include "policy/name_table.h"

#include <algorithm>
#include <tuple>

namespace sandgate::policy {

HostKey::HostKey(std::string_view n) : name(n) {  // NOLINT: arrays filled up to `suffixes`
  // Right to left: at each '.', `h` is the hash of everything after it. Suffixes are found
  // shortest first and stored from the back, so that they read longest first.
  constexpr int kMax = static_cast<int>(std::tuple_size_v<decltype(suffixStart)>);
  uint64_t h = kHashSeed;
  int slot = kMax;
  for (size_t i = n.size(); i-- > 0;) {
    const unsigned char c = static_cast<unsigned char>(n[i]);
    if (c == '.' && i + 1 < n.size() && slot > 0) {
      --slot;
      suffixStart[slot] = static_cast<uint16_t>(i + 1);
      suffixHash[slot] = h;
    }
    h = (h ^ c) * kHashPrime;
  }
  hash = h;
  suffixes = kMax - slot;
  if (slot > 0) {
    std::copy(suffixStart.begin() + slot, suffixStart.end(), suffixStart.begin());
    std::copy(suffixHash.begin() + slot, suffixHash.end(), suffixHash.begin());
  }
}

}  // namespace sandgate::policy
