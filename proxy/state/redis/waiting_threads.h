// The threads that wait on Redis for the proxy's workers: an admission that needs a round trip
// to `state.redis` (a budget's EVALSHA, a task's shared rate) runs here, and the connection's
// coroutine resumes on its own worker when the answer is in. A worker therefore never waits on
// Redis: its other connections are served meanwhile (issue #41).
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <utility>

namespace sandgate::proxy::redis {

// Each call waits at most the link's bound (about 550 ms) and the link pipelines what the
// threads send at once, so a few threads carry many admissions; past kWaitingThreads at once
// the rest queue here, never on a worker.
inline constexpr int kWaitingThreads = 16;
boost::asio::thread_pool& waitingThreads();

// Runs `work()` (which may wait on Redis) on the waiting threads; the awaiting coroutine
// resumes on its own executor with the result. `work` must own or outlive what it uses.
template <class R, class Work>
boost::asio::awaitable<R> offWorker(Work work) {
  namespace asio = boost::asio;
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(R)>(
      [](auto handler, Work work) {
        auto home = asio::get_associated_executor(handler);
        asio::post(waitingThreads(), [work = std::move(work), home,
                                      handler = std::move(handler)]() mutable {
          R result = work();
          // Back on the connection's own worker: its state is only touched there.
          asio::post(home, [result = std::move(result), handler = std::move(handler)]() mutable {
            std::move(handler)(std::move(result));
          });
        });
      },
      asio::use_awaitable, std::move(work));
}

}  // namespace sandgate::proxy::redis
