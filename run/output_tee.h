// The command's stdout and stderr, teed: what the command writes still reaches the launcher's
// own stream, and the first `limit` bytes of it go to the run's stdout.log / stderr.log, then a
// marker line says where the log was cut.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>

#include "common/safe_open.h"

namespace sandgate::run {

inline constexpr uint64_t kDefaultOutputLogBytes = 16u << 20;

class OutputTee {
 public:
  // Tees the launcher's descriptor `stream` (1 or 2) into `log`. nullptr when `stream` is a
  // terminal (an interactive command keeps its terminal; the log says so) or no pipe can be
  // made (then `why` says so).
  static std::unique_ptr<OutputTee> create(int stream, safe_open::UniqueFd log, uint64_t limit);
  ~OutputTee();
  OutputTee(const OutputTee&) = delete;
  OutputTee& operator=(const OutputTee&) = delete;

  // The descriptor the command writes (sandbox::Options::stdoutFd/stderrFd).
  int writeEnd() const { return write_.get(); }
  // After the sandbox is forked: starts copying and closes the launcher's write end, so that the
  // copy ends when the last process of the sandbox has gone.
  void start();
  // Waits for the copy to end (the sandbox is gone). True when the log was cut at the limit.
  bool finish();

 private:
  OutputTee(int stream, safe_open::UniqueFd log, uint64_t limit) : stream_(stream), log_(std::move(log)), limit_(limit) {}
  void copy();

  int stream_;
  safe_open::UniqueFd log_;
  uint64_t limit_;
  safe_open::UniqueFd read_, write_;
  std::thread thread_;
  bool cut_ = false;
};

}  // namespace sandgate::run
