// The wall clock in whole Unix seconds: what budget windows, their keys' expiry and the budget
// gauges count in (the same second on every replica that shares a Redis).
#pragma once

#include <chrono>
#include <cstdint>

namespace sandgate {

inline int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace sandgate
