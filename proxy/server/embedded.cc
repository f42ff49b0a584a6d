// The proxy embedded in `sandgate run` (see embedded.h). Audit lines reach us through a pipe
// that the server's AuditLog opens as its file: a reader thread copies each line to the real
// destination and tallies it, so the proxy's audit code stays the one used by `serve`.
#include "proxy/server/embedded.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "common/safe_open.h"
#include "proxy/observe/audit_fields.h"
#include "proxy/server/server.h"

namespace sandgate::proxy {

namespace {

std::string stringField(const boost::json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

uint64_t numberField(const boost::json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  if (!v) return 0;
  if (v->is_uint64()) return v->as_uint64();
  if (v->is_int64()) return v->as_int64() < 0 ? 0 : static_cast<uint64_t>(v->as_int64());
  if (v->is_double()) return v->as_double() < 0 ? 0 : static_cast<uint64_t>(v->as_double());
  return 0;
}

using Key = std::tuple<std::string, uint16_t, std::string, std::string, std::string>;

}  // namespace

struct EmbeddedProxy::Impl {
  std::unique_ptr<Server> server;
  int readFd = -1;
  int destFd = -1;
  int streamFd = -1;                           // EmbeddedOptions::streamFd, not ours
  std::function<void(std::string_view)> copy;  // EmbeddedOptions::auditCopy
  bool ownsDest = false;
  std::thread reader;
  std::mutex mu;
  std::map<Key, TrafficEntry> tally;  // guarded by mu
  TrafficSummary totals;              // guarded by mu (entries filled by stop())
  std::set<std::string> credentials;  // guarded by mu
  bool started = false;
  bool stopped = false;
  // The run's placeholders by task, from sandboxEnvironment(): the embedded proxy serves one
  // run, and its listeners honour exactly those.
  std::map<std::string, std::shared_ptr<const broker::PlaceholderSet>> placeholders;  // mu

  std::shared_ptr<const broker::PlaceholderSet> runPlaceholders(const std::string& task) {
    std::lock_guard lock(mu);
    auto it = placeholders.find(task);
    return it == placeholders.end() ? nullptr : it->second;
  }

  void tallyLine(std::string_view line) {
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec || !v.is_object()) return;
    const auto& o = v.as_object();
    TrafficEntry e;
    e.host = stringField(o, field::kHost);
    e.port = static_cast<uint16_t>(numberField(o, field::kPort));
    e.kind = stringField(o, field::kKind);
    e.verdict = stringField(o, field::kVerdict);
    e.reason = stringField(o, field::kReason);
    uint64_t up = numberField(o, field::kBytesUp), down = numberField(o, field::kBytesDown);
    std::string credential = stringField(o, "credential");  // the name, never the secret
    std::lock_guard lock(mu);
    if (!credential.empty()) credentials.insert(credential);
    auto [it, fresh] = tally.try_emplace(Key{e.host, e.port, e.kind, e.verdict, e.reason}, e);
    it->second.count++;
    it->second.bytesUp += up;
    it->second.bytesDown += down;
    if (e.verdict == "allow") {
      totals.allowed++;
    } else if (e.verdict == "deny") {
      totals.denied++;
    } else {
      totals.other++;
    }
    totals.bytesUp += up;
    totals.bytesDown += down;
  }

  void readLoop() {
    std::string pending;
    char buf[16384];
    while (true) {
      ssize_t n = ::read(readFd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      size_t start = 0, nl;
      while ((nl = pending.find('\n', start)) != std::string::npos) {
        std::string_view line(pending.data() + start, nl - start + 1);
        // A destination that is gone: keep tallying.
        if (destFd >= 0) (void)safe_open::writeAll(destFd, line);
        if (streamFd >= 0) (void)safe_open::writeAll(streamFd, line);  // one write(2) unless short
        if (copy) copy(line.substr(0, line.size() - 1));
        tallyLine(line.substr(0, line.size() - 1));
        start = nl + 1;
      }
      pending.erase(0, start);
    }
    if (!pending.empty() && destFd >= 0) (void)safe_open::writeAll(destFd, pending);
    if (!pending.empty() && copy) copy(pending);
  }

  void close() {
    if (readFd >= 0) ::close(readFd);
    if (ownsDest && destFd >= 0) ::close(destFd);
    readFd = destFd = -1;
  }
};

EmbeddedProxy::EmbeddedProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EmbeddedProxy::~EmbeddedProxy() { stop(); }

Result<std::unique_ptr<EmbeddedProxy>> EmbeddedProxy::create(config::Config config,
                                                             EmbeddedOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->copy = std::move(options.auditCopy);
  if (options.auditFd >= 0) {
    impl->destFd = options.auditFd;
    impl->ownsDest = true;
  }
  impl->streamFd = options.streamFd;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    impl->close();
    return Diagnostic{"", 0, 0, "", fmt::format("pipe: {}", std::strerror(errno))};
  }
  impl->readFd = fds[0];
  config.audit.path.reset();  // the server's AuditLog writes into the pipe instead
  config.listen.proxy.reset();
  config.listen.metrics.reset();
  config.listen.admin.reset();      // the admin socket is serve's, never a launcher's
  config.metrics.adminApi.reset();  // so is the admin HTTP API, with its token and mint key
  ServerOptions serverOptions;
  serverOptions.threads = options.threads;
  serverOptions.handleSignals = false;
  serverOptions.watchConfigFile = false;
  serverOptions.auditFd = fds[1];  // taken: from now on only the AuditLog holds the write end
  auto server = Server::create(std::move(config), std::move(serverOptions));
  if (!server) {
    impl->close();
    return server.errors();
  }
  impl->server = std::move(server.value());
  return std::unique_ptr<EmbeddedProxy>(new EmbeddedProxy(std::move(impl)));
}

void EmbeddedProxy::onQuestion(std::function<void(const QuestionInfo&)> f) {
  impl_->server->onQuestion(std::move(f));
}

Expected<QuestionInfo> EmbeddedProxy::answerQuestion(uint64_t id, AnswerKind answer,
                                                     const Decider& who) {
  return impl_->server->answerQuestion(id, answer, who);
}

void EmbeddedProxy::start() {
  auto& im = *impl_;
  if (im.started || im.stopped) return;
  im.started = true;
  im.reader = std::thread([raw = impl_.get()] { raw->readLoop(); });
  im.server->start();
}

Result<void> EmbeddedProxy::adoptListener(int fd, const std::string& task) {
  return impl_->server->adoptListener(fd, task, impl_->runPlaceholders(task));
}

Result<SandboxEnvironment> EmbeddedProxy::sandboxEnvironment(const std::string& task) {
  auto env = impl_->server->sandboxEnvironment(task);
  if (env) {
    std::lock_guard lock(impl_->mu);
    impl_->placeholders[task] = env->placeholders;
  }
  return env;
}

Result<std::shared_ptr<CaptureContext>> EmbeddedProxy::adoptCapture(CaptureSockets sockets,
                                                                    CaptureOptions options) {
  auto placeholders = impl_->runPlaceholders(options.task);
  auto adopted = impl_->server->adoptCapture(std::move(sockets), std::move(options), nullptr,
                                             std::move(placeholders));
  if (!adopted) return adopted.errors();
  return adopted->context;  // never released: the server lives as long as the run
}

TrafficSummary EmbeddedProxy::stop() {
  auto& im = *impl_;
  if (!im.stopped) {
    im.stopped = true;
    if (im.started) {
      im.server->shutdown();
      im.server->wait();
    }
    im.server.reset();  // closes the AuditLog: the reader sees end of file
    if (im.reader.joinable()) im.reader.join();
    im.close();
  }
  std::lock_guard lock(im.mu);
  TrafficSummary out = im.totals;
  for (const auto& [key, entry] : im.tally) out.entries.push_back(entry);
  out.credentials.assign(im.credentials.begin(), im.credentials.end());
  return out;
}

}  // namespace sandgate::proxy
