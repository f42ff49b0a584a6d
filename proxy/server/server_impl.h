// The inside of a Server, shared by its files: server.cc (create, start, drain and shutdown),
// listeners.cc (binding, accepting, adopted sockets), reload.cc (file watch, signals, reload)
// and admin_backend.cc (what the admin socket and the launcher ask of the server).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/signal_set.hpp>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "proxy/admin/admin_socket.h"
#include "proxy/server/server.h"
#include "proxy/state/server_context.h"

namespace sandgate::proxy {

// Logs what ended a spawned coroutine with an exception (co_spawn's completion handler).
void logException(std::exception_ptr e);

// Accepts on `acceptor` until it is closed, a session per connection (listeners.cc). `owner`,
// when set, is kept alive by the loop (an adopted listener's acceptor).
boost::asio::awaitable<void> acceptLoop(
    Worker& worker, ServerState& state, boost::asio::ip::tcp::acceptor& acceptor,
    std::shared_ptr<const ListenerInfo> listener,
    std::shared_ptr<boost::asio::ip::tcp::acceptor> owner = nullptr);

// "listen.proxy" / "listen.metrics" as an endpoint; a Diagnostic at the value otherwise.
Result<boost::asio::ip::tcp::endpoint> listenEndpoint(const config::Config& cfg,
                                                      const config::Located<std::string>& value,
                                                      std::string_view key);

// Answers question `id` of `state.questions` for `who` (admin_backend.cc): an "always" answer
// first appends the rule to the task's approvals file (refused, the question left waiting, when
// that cannot be written). The admin socket's `answer` op and `run --ask`'s prompt use it.
Expected<QuestionInfo> answerQuestion(ServerState& state, uint64_t id, AnswerKind answer,
                                      const Decider& who);

// The sockets of one adopted group: listeners (one acceptor per worker and socket; a capture's
// DNS TCP socket on one worker) and a capture's DNS UDP socket.
struct AdoptedGroup {
  std::vector<std::pair<Worker*, std::shared_ptr<boost::asio::ip::tcp::acceptor>>> acceptors;
  std::vector<std::pair<Worker*, std::shared_ptr<boost::asio::ip::udp::socket>>> datagrams;

  // Each is closed on the worker that uses it: its loop ends with operation_aborted and its
  // frame drops the last reference.
  void close() const;
};

struct Server::Impl {
  using tcp = boost::asio::ip::tcp;
  ServerOptions options;
  std::string workersWhy;  // how the worker count was chosen, for the start-up line
  ServerState state;
  TaskRegistry registry;
  std::atomic<uint64_t> generation{1};
  std::mutex reloadMu;
  // Destroyed before `state`: pending sessions refer to it.
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards;
  std::vector<std::thread> threads;
  boost::asio::io_context control{1};
  std::optional<boost::asio::signal_set> signalSet;  // on `control`
  std::thread controlThread;
  std::optional<tcp::endpoint> proxyEndpoint, metricsEndpoint;
  std::unique_ptr<tcp::acceptor> metricsAcceptor;
  std::mutex ownMu;
  std::vector<OwnEndpoint> own;
  std::atomic<bool> started{false};
  bool stopping = false;  // control thread only
  struct stat lastStat {};
  // The token verifier and its revocation count the housekeeping last saw (reload.cc).
  const TokenVerifier* lastVerifier = nullptr;
  uint64_t lastRevocations = 0;
  // Adopted sockets by group (adoptListeners, adoptCapture). Declared after `workers`:
  // destroyed first, while their io_contexts still exist.
  std::mutex adoptMu;
  uint64_t nextGroup = 1;
  std::map<uint64_t, AdoptedGroup> adopted;
  // Declared last, destroyed first: its thread calls into everything above.
  std::unique_ptr<AdminSocket> admin;

  // listeners.cc
  void addOwn(const tcp::endpoint& ep);
  Result<void> bindProxy(const tcp::endpoint& ep);
  // reload.cc
  bool statChanged();
  boost::asio::awaitable<void> housekeeping();
  boost::asio::awaitable<void> signals();
  bool reloadNow();
  // server.cc
  void writeReadyFile();
  void beginShutdown();
  void drainAndStop();
};

}  // namespace sandgate::proxy
