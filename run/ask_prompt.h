// `sandgate run --ask`: the embedded proxy's questions (on_unknown: ask) asked on the launcher's
// controlling terminal (/dev/tty, opened by the launcher: never the sandboxed command's stdin,
// which the command may read or which may be a pipe the agent controls).
#pragma once

#include <memory>

#include "common/result.h"
#include "proxy/server/embedded.h"

namespace sandgate::run {

class TtyPrompter {
 public:
  // Opens /dev/tty for reading and writing. Error (for a usage error before the run starts):
  // the launcher has no controlling terminal.
  static Result<std::unique_ptr<TtyPrompter>> open();
  ~TtyPrompter();  // stop()
  TtyPrompter(const TtyPrompter&) = delete;
  TtyPrompter& operator=(const TtyPrompter&) = delete;

  // Asks each new question of `proxy` on the terminal, one at a time, on a thread of its own:
  // "y" allows it once, "a" always (the task's approvals file when it has one, else for the
  // run), anything else denies it. A question that timed out meanwhile is said to have.
  void start(proxy::EmbeddedProxy& proxy);
  void stop();

  struct Impl;

 private:
  explicit TtyPrompter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandgate::run
