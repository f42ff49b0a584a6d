// Builders of raw DNS queries for the capture tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capture/dns_message.h"

namespace sandgate::capture::testing {

inline void put16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}

// A standard query (RD set) for `name`, optionally with an EDNS OPT record.
inline std::vector<uint8_t> query(const std::string& name, uint16_t type, bool edns = false,
                                  uint16_t id = 0x1234, uint16_t klass = dns::kClassIn) {
  std::vector<uint8_t> m;
  put16(m, id);
  m.push_back(0x01);  // RD
  m.push_back(0x00);
  put16(m, 1);
  put16(m, 0);
  put16(m, 0);
  put16(m, edns ? 1 : 0);
  auto n = encodeName(name);
  m.insert(m.end(), n.begin(), n.end());
  put16(m, type);
  put16(m, klass);
  if (edns) {
    m.push_back(0);
    put16(m, dns::kTypeOpt);
    put16(m, 4096);
    put16(m, 0);
    put16(m, 0);
    put16(m, 0);
  }
  return m;
}

}  // namespace sandgate::capture::testing
