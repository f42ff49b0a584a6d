// Held requests and their questions (see questions.h).
#include "proxy/state/questions.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include "proxy/net/completion.h"

namespace sandgate::proxy {

namespace asio = boost::asio;

std::string_view answerName(AnswerKind a) {
  switch (a) {
    case AnswerKind::kAllowOnce:
      return "once";
    case AnswerKind::kAllowRun:
      return "run";
    case AnswerKind::kAllowAlways:
      return "always";
    case AnswerKind::kDeny:
      return "deny";
  }
  return "deny";
}

// One held request: its timer (on its worker's executor) and, once answered, the answer.
struct Questions::Waiter {
  explicit Waiter(const asio::any_io_executor& ex) : executor(ex), timer(ex) {}
  asio::any_io_executor executor;
  asio::steady_timer timer;
  std::optional<AnswerKind> answer;  // set under mu_
  Decider decider;
};

asio::awaitable<AskOutcome> Questions::ask(QuestionKey key, std::string reason,
                                           uint32_t maxPending, std::chrono::milliseconds timeout) {
  auto ex = co_await asio::this_coro::executor;
  auto w = std::make_shared<Waiter>(ex);
  AskOutcome out;
  std::optional<QuestionInfo> fresh;
  std::function<void(const QuestionInfo&)> notify;
  {
    std::lock_guard lock(mu_);
    if (remembered_.count(key)) {
      out.kind = AskOutcome::Kind::kApproved;
      out.remembered = true;
      co_return out;
    }
    auto it = byKey_.find(key);
    if (it == byKey_.end()) {
      const size_t ofTask = std::count_if(byId_.begin(), byId_.end(), [&](const auto& q) {
        return q.second.info.key.task == key.task;
      });
      if (ofTask >= maxPending) {
        out.kind = AskOutcome::Kind::kQueueFull;
        co_return out;
      }
      Question q;
      q.info.id = next_++;
      q.info.key = key;
      q.info.reason = std::move(reason);
      q.info.asked = std::chrono::system_clock::now();
      it = byKey_.emplace(key, q.info.id).first;
      byId_.emplace(q.info.id, std::move(q));
      fresh = byId_[it->second].info;
      notify = onAsked_;
    }
    Question& q = byId_[it->second];
    if (q.waiters.size() >= kMaxWaiters) {
      out.kind = AskOutcome::Kind::kQueueFull;
      co_return out;
    }
    q.waiters.push_back(w);
    q.info.waiting = q.waiters.size();
    out.id = q.info.id;
    // Armed under the lock: an answer (which takes the lock) posts its cancel only after this.
    w->timer.expires_after(timeout);
  }
  if (fresh && notify) notify(*fresh);
  co_await w->timer.async_wait(kUse);
  std::lock_guard lock(mu_);
  if (w->answer) {
    out.answer = w->answer;
    out.decider = w->decider;
    out.kind = *w->answer == AnswerKind::kDeny ? AskOutcome::Kind::kDenied
                                               : AskOutcome::Kind::kApproved;
    co_return out;
  }
  // Timed out: this request leaves its question; the question goes with its last request.
  if (auto q = byId_.find(out.id); q != byId_.end()) {
    auto& ws = q->second.waiters;
    ws.erase(std::remove(ws.begin(), ws.end(), w), ws.end());
    q->second.info.waiting = ws.size();
    if (ws.empty()) {
      byKey_.erase(q->second.info.key);
      byId_.erase(q);
    }
  }
  out.kind = AskOutcome::Kind::kTimeout;
  co_return out;
}

std::vector<QuestionInfo> Questions::pending() const {
  std::lock_guard lock(mu_);
  std::vector<QuestionInfo> out;
  for (const auto& [id, q] : byId_) out.push_back(q.info);
  return out;  // ids grow with time: oldest first
}

Expected<QuestionInfo> Questions::answer(uint64_t id, AnswerKind answer, const Decider& who) {
  std::lock_guard lock(mu_);
  auto it = byId_.find(id);
  if (it == byId_.end()) {
    return Error{"unknown_question",
                 fmt::format("no question {} is waiting (answered already, or timed out)", id)};
  }
  Question q = std::move(it->second);
  byId_.erase(it);
  byKey_.erase(q.info.key);
  if (answer == AnswerKind::kAllowRun || answer == AnswerKind::kAllowAlways) {
    remembered_.insert(q.info.key);
  }
  for (auto& w : q.waiters) {
    w->answer = answer;
    w->decider = who;
    // The timer belongs to the waiter's worker thread: cancel it there.
    asio::post(w->executor, [w] { w->timer.cancel(); });
  }
  return q.info;
}

bool Questions::remembered(const QuestionKey& key) const {
  std::lock_guard lock(mu_);
  return remembered_.count(key) > 0;
}

void Questions::onAsked(std::function<void(const QuestionInfo&)> f) {
  std::lock_guard lock(mu_);
  onAsked_ = std::move(f);
}

}  // namespace sandgate::proxy
