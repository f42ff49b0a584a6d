// Teeing the command's output into the run's directory (see output_tee.h).
#include "run/output_tee.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace sandgate::run {

std::unique_ptr<OutputTee> OutputTee::create(int stream, safe_open::UniqueFd log, uint64_t limit) {
  if (::isatty(stream)) {
    (void)safe_open::writeAll(log.get(), "[sandgate: not recorded: the output was a terminal]\n");
    return nullptr;
  }
  std::unique_ptr<OutputTee> tee(new OutputTee(stream, std::move(log), limit));
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  tee->read_.reset(fds[0]);
  tee->write_.reset(fds[1]);
  return tee;
}

OutputTee::~OutputTee() { finish(); }

void OutputTee::start() {
  if (thread_.joinable() || !read_.valid()) return;
  thread_ = std::thread([this] { copy(); });
  write_.reset();
}

bool OutputTee::finish() {
  write_.reset();  // the sandbox was never started: nothing else holds it
  if (thread_.joinable()) thread_.join();
  return cut_;
}

void OutputTee::copy() {
  char buf[65536];
  uint64_t logged = 0;
  bool toStream = true;
  for (;;) {
    ssize_t n = ::read(read_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::string_view data(buf, static_cast<size_t>(n));
    // A closed or full destination (the reader of `sandgate run | head` went away) must not
    // block the command: the copy to it stops, the log and the draining go on.
    if (toStream && !safe_open::writeAll(stream_, data)) toStream = false;
    if (!cut_) {
      auto take = std::min<uint64_t>(data.size(), limit_ - logged);
      (void)safe_open::writeAll(log_.get(), data.substr(0, take));
      logged += take;
      if (take < data.size()) {
        cut_ = true;
        (void)safe_open::writeAll(
            log_.get(), fmt::format("\n[sandgate: log cut at {} bytes; the rest reached only the "
                                    "launcher's stream]\n",
                                    limit_));
      }
    }
  }
  read_.reset();
}

}  // namespace sandgate::run
