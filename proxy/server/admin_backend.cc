// What the admin socket and a launcher ask of a server: a task's environment (CA,
// placeholders, policy), adopting and releasing a run's sockets, the groups a task admits.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "broker/placeholder.h"
#include "config/approvals.h"
#include "proxy/admin/admin_protocol.h"
#include "proxy/admin/admin_questions.h"
#include "proxy/intercept/intercept.h"
#include "proxy/server/server_impl.h"
#include "proxy/ssh/ssh_broker.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using asio::ip::tcp;

AdminBackend Server::adminBackend() {
  AdminBackend b;
  auto unknownTask = [](const config::Config& cfg, const std::string& task) {
    std::string names;
    for (const auto& t : cfg.tasks) names += (names.empty() ? "" : ", ") + t.name;
    return Error{std::string(admin_reason::kUnknownTask),
                 fmt::format("no task '{}' in {} (tasks: {})", task, cfg.file,
                             names.empty() ? "none" : names)};
  };
  // What the server could not do for a known task (its first diagnostic says why).
  auto unavailable = [](const Diagnostics& why) {
    return Error{std::string(admin_reason::kUnavailable), why.front().message};
  };
  // The reply of task_env or token_env: the policy, the CA and the placeholders of `env`.
  auto reply = [this, unknownTask, unavailable](
                   const std::string& task, bool run,
                   std::shared_ptr<const broker::PlaceholderSet>* placeholders)
      -> Expected<TaskEnvironment> {
    auto snap = impl_->state.snapshot.load();
    const config::Task* t = snap->config.findTask(task);
    if (!t) return unknownTask(snap->config, task);
    auto env = run ? sandboxEnvironment(task) : tokenClientEnvironment(task);
    if (!env) {
      return unavailable(env.errors());
    }
    if (placeholders) *placeholders = env->placeholders;
    TaskEnvironment out;
    out.policy = t->policy.value;
    out.caPem = env->caPem;
    for (const auto& [name, value] : env->variables) out.env[name] = value;
    if (!run) return out;
    // Absolute: the launcher resolves them from its own working directory, not serve's.
    for (auto p : snap->config.secretPaths()) {
      if (!p.empty() && p.front() != '/') {
        std::error_code ec;
        auto abs = std::filesystem::absolute(p, ec);
        if (!ec) p = abs.lexically_normal().string();
      }
      out.hiddenPaths.push_back(std::move(p));
    }
    // Serve's config decides the pools: the launcher routes them before the sandbox exists.
    out.capture = CaptureOffer{snap->capture.ports, snap->capture.v4Text, snap->capture.v6Text};
    // The ports of the policy's SSH hosts too: plain `ssh host` reaches the broker (run_task.cc).
    addCapturePorts(out.capture->ports, sshPortsFor(snap->config, t->policy.value));
    // The sandbox's ssh trusts this serve's SSH broker for the policy's SSH hosts: the launcher
    // learns the key from the serve its connections reach (only the public half).
    if (auto known = sshKnownHostsFor(snap->config, t->policy.value)) out.sshKnownHosts = *known;
    return out;
  };
  b.environment = [reply](const std::string& task) -> Expected<RunEnvironment> {
    RunEnvironment run;
    auto out = reply(task, true, &run.placeholders);
    if (!out) return out.error();
    run.reply = std::move(out.value());
    return run;
  };
  b.tokenEnvironment = [reply](const std::string& task) { return reply(task, false, nullptr); };
  b.adopt = [this, unknownTask, unavailable](
                std::vector<int> fds, const std::string& task, std::shared_ptr<ListenerTally> tally,
                std::shared_ptr<const broker::PlaceholderSet> placeholders) -> Expected<uint64_t> {
    auto snap = impl_->state.snapshot.load();
    if (!snap->config.findTask(task)) {
      for (int fd : fds) ::close(fd);
      return unknownTask(snap->config, task);
    }
    auto group =
        adoptListeners(std::move(fds), task, std::move(tally), nullptr, std::move(placeholders));
    if (!group) {
      return unavailable(group.errors());
    }
    return group.value();
  };
  b.adoptCapture =
      [this, unknownTask, unavailable](
          CaptureSockets sockets, CaptureOptions options, std::shared_ptr<ListenerTally> tally,
          std::shared_ptr<const broker::PlaceholderSet> placeholders) -> Expected<AdoptedCapture> {
    auto snap = impl_->state.snapshot.load();
    if (!snap->config.findTask(options.task)) {
      sockets.close();
      return unknownTask(snap->config, options.task);
    }
    auto adopted = adoptCapture(std::move(sockets), std::move(options), std::move(tally),
                                std::move(placeholders));
    if (!adopted) {
      return unavailable(adopted.errors());
    }
    return adopted.value();
  };
  b.release = [this](uint64_t group) { releaseListeners(group); };
  // The current snapshot's: a reload that changes a task's admin_groups applies to the next
  // request.
  b.taskGroups = [this](const std::string& task) -> std::optional<std::vector<gid_t>> {
    auto snap = impl_->state.snapshot.load();
    const TaskEntry* t = snap->findTask(task);
    if (!t) return std::nullopt;
    return t->adminGids;
  };
  b.questions = [this] { return impl_->state.questions.pending(); };
  b.answer = [this](uint64_t id, AnswerKind answer,
                    const Decider& who) -> Expected<QuestionInfo> {
    return proxy::answerQuestion(impl_->state, id, answer, who);
  };
  return b;
}

void Server::onQuestion(std::function<void(const QuestionInfo&)> f) {
  impl_->state.questions.onAsked(std::move(f));
}

Expected<QuestionInfo> Server::answerQuestion(uint64_t id, AnswerKind answer, const Decider& who) {
  return proxy::answerQuestion(impl_->state, id, answer, who);
}

Expected<QuestionInfo> answerQuestion(ServerState& state, uint64_t id, AnswerKind answer,
                                      const Decider& who) {
  if (answer == AnswerKind::kAllowAlways) {
    // Written before anyone is let through: an "always" that cannot be recorded is refused,
    // and the question stays for another answer.
    std::optional<QuestionInfo> q;
    for (auto& p : state.questions.pending()) {
      if (p.id == id) q = std::move(p);
    }
    if (!q) {
      return Error{std::string(admin_reason::kUnknownQuestion),
                   fmt::format("no question {} is waiting", id)};
    }
    auto snap = state.snapshot.load();
    const config::Task* t = snap->config.findTask(q->key.task);
    const std::string path = t ? config::approvalsPath(snap->config, *t) : std::string();
    if (path.empty()) {
      return Error{std::string(admin_reason::kBadRequest),
                   fmt::format("task {} has no ask.approvals file: answer once or run",
                               q->key.task)};
    }
    config::Approval a;
    a.method = q->key.method;
    a.host = q->key.host;
    a.port = q->key.port;
    a.path = q->key.path;
    a.note = fmt::format("question {}: approved by {} (uid {}) at {:%Y-%m-%dT%H:%M:%SZ}", id,
                         who.user, who.uid,
                         std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()));
    for (const auto& e : snap->config.resolve) {
      if (e.name == q->key.host) a.pinnedAddress = e.address;
    }
    if (auto written = config::appendApproval(path, q->key.task, a); !written) {
      return Error{std::string(admin_reason::kUnavailable), written.errorText()};
    }
  }
  return state.questions.answer(id, answer, who);
}

namespace {

// The environment of `task` with the placeholders `set` (those of the credentials its policy
// names); made by `make` when interception is available.
template <typename MakeSet>
Result<SandboxEnvironment> environmentOf(const ServerState& state, const std::string& task,
                                         MakeSet make) {
  auto snap = state.snapshot.load();
  const TaskEntry* t = snap->findTask(task);
  if (!t) {
    return Diagnostic{"", 0, 0, "", fmt::format("no task '{}' in {}", task, snap->config.file)};
  }
  SandboxEnvironment env;
  const auto& icpt = state.interception;
  if (!icpt) return env;
  env.caPem = icpt->caCertificatePem();
  env.placeholders = make(*snap);
  for (const auto& p : env.placeholders->all()) {
    if (std::binary_search(t->credentials.begin(), t->credentials.end(), p.credential)) {
      env.variables.emplace_back(p.variable, p.value);
    }
  }
  return env;
}

}  // namespace

Result<SandboxEnvironment> Server::sandboxEnvironment(const std::string& task) {
  return environmentOf(impl_->state, task, [](const Snapshot& snap) {
    return broker::PlaceholderSet::generate(snap.config.credentials, *snap.secrets);
  });
}

Result<SandboxEnvironment> Server::tokenClientEnvironment(const std::string& task) {
  return environmentOf(impl_->state, task, [&](const Snapshot& snap) {
    return impl_->state.tokenPlaceholders.forTask(task, snap.config.credentials, *snap.secrets);
  });
}

}  // namespace sandgate::proxy
