// Questions on the launcher's terminal for `sandgate run --ask` (see ask_prompt.h).
#include "run/ask_prompt.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "common/terminal_text.h"
#include "proxy/admin/admin_questions.h"

namespace sandgate::run {

struct TtyPrompter::Impl {
  int tty = -1;
  int wake = -1;  // eventfd: a new question, or stop
  std::mutex mu;
  std::deque<proxy::QuestionInfo> queue;  // guarded by mu
  bool stopping = false;                  // guarded by mu
  std::thread thread;
  proxy::EmbeddedProxy* proxy = nullptr;

  ~Impl() {
    if (tty >= 0) ::close(tty);
    if (wake >= 0) ::close(wake);
  }

  void say(const std::string& text) const {
    const char* p = text.data();
    size_t left = text.size();
    while (left > 0) {
      ssize_t n = ::write(tty, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      p += n;
      left -= static_cast<size_t>(n);
    }
  }

  void notify() {
    uint64_t one = 1;
    (void)!::write(wake, &one, sizeof one);
  }

  // One line from the terminal; nullopt when stopping (or the terminal is gone).
  std::optional<std::string> readLine() {
    std::string line;
    while (true) {
      pollfd fds[2] = {{tty, POLLIN, 0}, {wake, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return std::nullopt;
      }
      if (fds[1].revents) {
        std::lock_guard lock(mu);
        if (stopping) return std::nullopt;
        uint64_t n;
        (void)!::read(wake, &n, sizeof n);  // a new question: it waits its turn
      }
      if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) return std::nullopt;
      if (!(fds[0].revents & POLLIN)) continue;
      char buf[256];
      ssize_t n = ::read(tty, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      line.append(buf, static_cast<size_t>(n));
      if (line.size() > 4096) line.erase(0, line.size() - 4096);
      if (auto nl = line.find('\n'); nl != std::string::npos) return line.substr(0, nl);
    }
  }

  void loop() {
    const proxy::Decider me{::getuid(), proxy::userName(::getuid())};
    while (true) {
      proxy::QuestionInfo q;
      {
        std::unique_lock lock(mu);
        if (stopping) return;
        if (queue.empty()) {
          lock.unlock();
          pollfd fd{wake, POLLIN, 0};
          if (::poll(&fd, 1, -1) > 0) {
            uint64_t n;
            (void)!::read(wake, &n, sizeof n);
          }
          continue;
        }
        q = std::move(queue.front());
        queue.pop_front();
      }
      const bool tunnel = q.key.method == "CONNECT";
      // Host and path come from the sandbox: escaped, so that they cannot drive the terminal.
      say(
          fmt::format("\nsandgate: task {} asks for {} {}:{}{} ({}). Allow? [y]es once, [n]o, "
                      "[a]lways: ",
                      escapeText(q.key.task), q.key.method, escapeText(q.key.host), q.key.port,
                      tunnel ? "" : escapeText(q.key.path), q.reason));
      auto line = readLine();
      if (!line) return;
      const char c = line->empty() ? 'n' : (*line)[0];
      proxy::AnswerKind kind = c == 'y' || c == 'Y'   ? proxy::AnswerKind::kAllowOnce
                               : c == 'a' || c == 'A' ? proxy::AnswerKind::kAllowAlways
                                                      : proxy::AnswerKind::kDeny;
      auto answered = proxy->answerQuestion(q.id, kind, me);
      if (!answered && kind == proxy::AnswerKind::kAllowAlways &&
          answered.error().reason == "bad_request") {
        // No approvals file for the task: "always" holds for the run.
        say("sandgate: the task has no ask.approvals file: allowed for this run\n");
        answered = proxy->answerQuestion(q.id, proxy::AnswerKind::kAllowRun, me);
      }
      if (!answered) {
        say(fmt::format("sandgate: {}\n", escapeText(answered.error().message)));
      } else {
        say(fmt::format("sandgate: {}\n", kind == proxy::AnswerKind::kDeny ? "denied" : "allowed"));
      }
    }
  }
};

TtyPrompter::TtyPrompter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TtyPrompter::~TtyPrompter() { stop(); }

Result<std::unique_ptr<TtyPrompter>> TtyPrompter::open() {
  auto impl = std::make_unique<Impl>();
  impl->tty = ::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (impl->tty < 0) {
    return Diagnostic{"", 0, 0, "",
                      fmt::format("--ask prompts on the terminal, and there is none: cannot open "
                                  "/dev/tty: {}",
                                  std::strerror(errno))};
  }
  impl->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->wake < 0) {
    return Diagnostic{"", 0, 0, "", fmt::format("eventfd: {}", std::strerror(errno))};
  }
  return std::unique_ptr<TtyPrompter>(new TtyPrompter(std::move(impl)));
}

void TtyPrompter::start(proxy::EmbeddedProxy& proxy) {
  Impl* impl = impl_.get();
  impl->proxy = &proxy;
  proxy.onQuestion([impl](const proxy::QuestionInfo& q) {
    {
      std::lock_guard lock(impl->mu);
      if (impl->stopping || impl->queue.size() >= 1024) return;  // unanswered: it times out
      impl->queue.push_back(q);
    }
    impl->notify();
  });
  impl->thread = std::thread([impl] { impl->loop(); });
}

void TtyPrompter::stop() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->notify();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Once only: the destructor calls stop() again, after the proxy itself may be gone.
  if (impl_->proxy) impl_->proxy->onQuestion(nullptr);
  impl_->proxy = nullptr;
}

}  // namespace sandgate::run
