// The question registry of on_unknown: ask (proxy/state/questions.h): one question per
// identical request, answers for every waiter, timeouts, the per-task bound, --run memory, and
// that a held request waits on its io_context without holding its thread.
#include "proxy/state/questions.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <optional>
#include <thread>
#include <vector>

namespace sandgate::proxy {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

QuestionKey key(std::string path, std::string task = "t") {
  return QuestionKey{std::move(task), "GET", "h.test", 80, std::move(path)};
}

// Runs what is ready (restarting `io`: it stops each time it runs out of work).
void pump(asio::io_context& io) {
  io.restart();
  io.poll();
}

// Spawns an ask on `io` whose outcome lands in `*out`.
void spawnAsk(asio::io_context& io, Questions& q, QuestionKey k, std::optional<AskOutcome>* out,
              uint32_t maxPending = 8, std::chrono::milliseconds timeout = 10s) {
  asio::co_spawn(
      io,
      [&q, k, out, maxPending, timeout]() -> asio::awaitable<void> {
        auto asking = q.ask(k, "no_matching_rule", maxPending, timeout);  // named: GCC 12
        *out = co_await std::move(asking);
      },
      asio::detached);
}

TEST(Questions, IdenticalRequestsShareOneQuestionAndOneAnswer) {
  asio::io_context io;
  Questions q;
  std::optional<AskOutcome> a, b, c;
  spawnAsk(io, q, key("/x"), &a);
  spawnAsk(io, q, key("/x"), &b);
  spawnAsk(io, q, key("/y"), &c);
  pump(io);
  auto pending = q.pending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].key.path, "/x");
  EXPECT_EQ(pending[0].waiting, 2u);
  EXPECT_EQ(pending[1].waiting, 1u);
  auto answered = q.answer(pending[0].id, AnswerKind::kAllowOnce, Decider{1000, "alice"});
  ASSERT_TRUE(answered) << answered.errorText();
  pump(io);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(c);  // still waiting on its own question
  for (const auto* o : {&a, &b}) {
    EXPECT_EQ((*o)->kind, AskOutcome::Kind::kApproved);
    EXPECT_EQ((*o)->id, pending[0].id);
    EXPECT_EQ((*o)->decider->user, "alice");
    EXPECT_EQ((*o)->decider->uid, 1000u);
  }
  // Answered: gone, and answering again is an error (no second decision).
  EXPECT_EQ(q.pending().size(), 1u);
  auto again = q.answer(pending[0].id, AnswerKind::kDeny, Decider{});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().reason, "unknown_question");
  ASSERT_TRUE(q.answer(pending[1].id, AnswerKind::kDeny, Decider{0, "root"}));
  pump(io);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, AskOutcome::Kind::kDenied);
  EXPECT_TRUE(q.pending().empty());
}

TEST(Questions, ATimeoutRefusesAndTheQuestionGoesWithItsLastRequest) {
  asio::io_context io;
  Questions q;
  std::optional<AskOutcome> a;
  spawnAsk(io, q, key("/slow"), &a, 8, 50ms);
  io.restart();
  io.run_for(2s);  // returns once the timer fired and the coroutine ended
  ASSERT_TRUE(a);
  EXPECT_EQ(a->kind, AskOutcome::Kind::kTimeout);
  EXPECT_FALSE(a->decider);
  EXPECT_TRUE(q.pending().empty());
}

TEST(Questions, AFullQueueRefusesAtOncePerTask) {
  asio::io_context io;
  Questions q;
  std::optional<AskOutcome> a, b, c, d, e;
  spawnAsk(io, q, key("/1"), &a, 2);
  spawnAsk(io, q, key("/2"), &b, 2);
  spawnAsk(io, q, key("/3"), &c, 2);       // a third question of task t: refused
  spawnAsk(io, q, key("/1"), &d, 2);       // joins /1: no new question
  spawnAsk(io, q, key("/1", "u"), &e, 2);  // another task has its own bound
  pump(io);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, AskOutcome::Kind::kQueueFull);
  EXPECT_EQ(c->id, 0u);
  EXPECT_FALSE(a || b || d || e);
  EXPECT_EQ(q.pending().size(), 3u);
  for (const auto& p : q.pending()) EXPECT_TRUE(q.answer(p.id, AnswerKind::kDeny, Decider{}));
  pump(io);
  EXPECT_TRUE(a && b && d && e);
}

TEST(Questions, AllowRunIsRememberedForThatRequestOnly) {
  asio::io_context io;
  Questions q;
  std::optional<AskOutcome> a, b, c;
  spawnAsk(io, q, key("/r"), &a);
  pump(io);
  ASSERT_TRUE(q.answer(q.pending().at(0).id, AnswerKind::kAllowRun, Decider{0, "root"}));
  pump(io);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->answer, AnswerKind::kAllowRun);
  EXPECT_TRUE(q.remembered(key("/r")));
  spawnAsk(io, q, key("/r"), &b);
  pump(io);
  ASSERT_TRUE(b);  // at once, no question
  EXPECT_TRUE(b->remembered);
  EXPECT_EQ(b->kind, AskOutcome::Kind::kApproved);
  spawnAsk(io, q, key("/r", "other-task"), &c);
  pump(io);
  EXPECT_FALSE(c);  // another task's identical request is asked about
  EXPECT_EQ(q.pending().size(), 1u);
  EXPECT_TRUE(q.answer(q.pending().at(0).id, AnswerKind::kDeny, Decider{}));
  pump(io);
}

TEST(Questions, AHeldRequestLeavesItsThreadFreeAndIsAnsweredFromAnother) {
  asio::io_context io;
  Questions q;
  std::optional<AskOutcome> held;
  spawnAsk(io, q, key("/held"), &held);
  bool other = false;
  // The same single-threaded io_context runs other work while the request is held.
  asio::post(io, [&] { other = true; });
  pump(io);
  EXPECT_TRUE(other);
  EXPECT_FALSE(held);
  auto guard = asio::make_work_guard(io);
  std::thread t([&] { io.run_for(5s); });
  uint64_t id = q.pending().at(0).id;
  // Answered from this thread (as the admin socket's thread does): the cancel is posted to the
  // waiter's own io_context.
  ASSERT_TRUE(q.answer(id, AnswerKind::kAllowOnce, Decider{0, "root"}));
  guard.reset();
  t.join();
  ASSERT_TRUE(held);
  EXPECT_EQ(held->kind, AskOutcome::Kind::kApproved);
}

TEST(Questions, OnAskedIsCalledOncePerQuestion) {
  asio::io_context io;
  Questions q;
  std::vector<uint64_t> asked;
  q.onAsked([&](const QuestionInfo& info) { asked.push_back(info.id); });
  std::optional<AskOutcome> a, b;
  spawnAsk(io, q, key("/n"), &a);
  spawnAsk(io, q, key("/n"), &b);
  pump(io);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_TRUE(q.answer(asked[0], AnswerKind::kDeny, Decider{}));
  pump(io);
  EXPECT_TRUE(a && b);
}

}  // namespace
}  // namespace sandgate::proxy
