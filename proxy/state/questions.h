// The questions of `on_unknown: ask`: requests a task's policy refuses only for want of a rule,
// held while an operator answers (`sandgate approve`, or `sandgate run --ask` on its terminal).
//
// A held request costs no thread: its coroutine waits on a timer of its own worker, which an
// answer cancels (posted to that worker: a timer is touched only on its own thread). Identical
// requests (task, method, host, port, path) wait on one question. Bounds: at most `maxPending`
// questions per task and kMaxWaiters requests on one question (a sandbox cannot pile up holds:
// a full queue refuses at once); each request waits at most its task's timeout.
// "allow --run" (and "--always", until the reload that loads the approvals file) is remembered
// here for the server's life: the same request then passes without a question.
#pragma once

#include <sys/types.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/result.h"

namespace sandgate::proxy {

// What a question is about: one request as the policy saw it. `method` is CONNECT for a tunnel
// (then `path` is empty).
struct QuestionKey {
  std::string task, method, host;
  uint16_t port = 0;
  std::string path;
  auto tie() const { return std::tie(task, method, host, port, path); }
  bool operator<(const QuestionKey& o) const { return tie() < o.tie(); }
  bool operator==(const QuestionKey& o) const { return tie() == o.tie(); }
};

enum class AnswerKind {
  kAllowOnce,    // this request and those waiting with it
  kAllowRun,     // and the same request again, for the server's life
  kAllowAlways,  // as kAllowRun, and a rule in the task's approvals file (at the next reload)
  kDeny,         // approval_denied
};
std::string_view answerName(AnswerKind a);  // "once", "run", "always", "deny"

// Who answered, as the kernel said at the admin socket's connect() (or the launcher itself).
struct Decider {
  uid_t uid = 0;
  std::string user;  // the uid's name, or the uid in decimal when it has none
};

struct QuestionInfo {
  uint64_t id = 0;
  QuestionKey key;
  std::string reason;  // the would-be refusal (no_matching_rule, path_not_allowed, ...)
  std::chrono::system_clock::time_point asked;
  size_t waiting = 0;  // requests held on it
};

// How a held request ended.
struct AskOutcome {
  enum class Kind { kApproved, kDenied, kTimeout, kQueueFull } kind = Kind::kTimeout;
  uint64_t id = 0;                   // the question (0: none was asked)
  std::optional<AnswerKind> answer;  // kApproved, kDenied
  std::optional<Decider> decider;    // who answered; none when remembered from --run
  bool remembered = false;           // approved by an earlier --run / --always answer
};

class Questions {
 public:
  // At most this many requests wait on one question (further ones are refused as a full queue).
  static constexpr size_t kMaxWaiters = 64;

  // Holds the calling coroutine until an operator answers the question of `key` (asking it,
  // or joining the one already asked) or `timeout` passes. Never blocks the thread.
  boost::asio::awaitable<AskOutcome> ask(QuestionKey key, std::string reason, uint32_t maxPending,
                                         std::chrono::milliseconds timeout);

  // The questions waiting, oldest first.
  std::vector<QuestionInfo> pending() const;

  // Answers question `id` for everyone waiting on it. Error (reason "unknown_question") when no
  // such question waits (answered already, or every request on it timed out).
  Expected<QuestionInfo> answer(uint64_t id, AnswerKind answer, const Decider& who);

  // A request an earlier "--run" or "--always" answer approved for the server's life.
  bool remembered(const QuestionKey& key) const;

  // Called (outside the lock, on the asking worker's thread) when a new question is asked:
  // `sandgate run --ask` prompts on its terminal from here.
  void onAsked(std::function<void(const QuestionInfo&)> f);

 private:
  struct Waiter;
  struct Question {
    QuestionInfo info;
    std::vector<std::shared_ptr<Waiter>> waiters;
  };

  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::map<uint64_t, Question> byId_;
  std::map<QuestionKey, uint64_t> byKey_;
  std::set<QuestionKey> remembered_;
  std::function<void(const QuestionInfo&)> onAsked_;
};

}  // namespace sandgate::proxy
