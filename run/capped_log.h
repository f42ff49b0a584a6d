// The evidence files of a run that grow with what the workload does (exec.jsonl, audit.jsonl):
// JSON lines, each bounded after escaping, up to a byte limit; then one line that says where the
// file was cut, and a count of the lines left out for the report. A workload exec'ing in a loop
// with megabytes of control bytes in its argv (each one six bytes once escaped) or flooding the
// proxy with requests could otherwise fill the host's disk through its own evidence.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "common/safe_open.h"

namespace sandgate::run {

inline constexpr uint64_t kDefaultEvidenceLogBytes = 16u << 20;  // each of exec.jsonl, audit.jsonl
inline constexpr size_t kMaxEvidenceLineBytes = 16u << 10;       // one line, escaped

// `o` serialized on one line (no newline) of at most `maxBytes`. A longer one keeps its fields
// with every string cut to 256 bytes and each array's first elements that fit, and says
// "line_cut": true (and "line_bytes", the length it had); if even that does not fit, only its
// scalar fields of up to 64 bytes are kept.
std::string boundedJsonLine(const boost::json::object& o, size_t maxBytes = kMaxEvidenceLineBytes);

class CappedLog {
 public:
  CappedLog() = default;
  CappedLog(safe_open::UniqueFd fd, uint64_t limit) : fd_(std::move(fd)), limit_(limit) {}

  // Appends `line` (one JSON line, no newline) unless the file would pass its limit: then the
  // first time a {"truncated": true, ...} line, and every time a count. Thread-safe.
  void append(std::string_view line);
  bool cut() const;
  uint64_t linesLeftOut() const;
  uint64_t limit() const { return limit_; }

 private:
  mutable std::mutex mu_;
  safe_open::UniqueFd fd_;
  uint64_t limit_ = 0;
  uint64_t written_ = 0;
  uint64_t leftOut_ = 0;
  bool cut_ = false;
};

}  // namespace sandgate::run
