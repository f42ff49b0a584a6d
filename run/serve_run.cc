// `sandgate run --proxy unix:PATH` (see serve_run.h).
#include "run/serve_run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "proxy/admin/admin_client.h"
#include "run/run_limits.h"
#include "run/run_outcome.h"
#include "run/run_ssh.h"

namespace sandgate::run {

namespace {
constexpr std::string_view kScheme = "unix:";
}  // namespace

std::optional<std::string> serveRequestProblem(const RunRequest& req) {
  const std::string& spec = *req.proxy;
  if (spec.rfind(kScheme, 0) != 0 || spec.size() == kScheme.size()) {
    return fmt::format("--proxy {}: expected unix:PATH (the admin socket of sandgate serve)", spec);
  }
  // The task, its policy and its credentials are serve's: a local config would only disagree.
  if (req.configPath) {
    return fmt::format(
        "--config and --proxy exclude each other: the task is defined in the config of the "
        "sandgate serve at {}",
        spec.substr(kScheme.size()));
  }
  if (req.policy) {
    return std::string(
        "--policy cannot be used with --proxy: ad-hoc tasks exist only in an embedded proxy; "
        "name a task of serve's config with --task");
  }
  if (!req.task) return std::string("--proxy needs --task (a task of serve's config)");
  return std::nullopt;
}

int runWithServe(const RunRequest& req, sandbox::Options options, safe_open::UniqueFd report,
                 RunBundle* bundle) {
  if (auto e = serveRequestProblem(req)) return fail(kExitUsage, "{}", *e);
  const std::string& spec = *req.proxy;
  const std::string path = spec.substr(kScheme.size());
  const std::string& task = *req.task;
  // Before the command starts, once the run's directory exists: it gets its report.
  auto setupFailed = [&](int status, std::string message) {
    return finishSetupFailure(req, task, "", {Diagnostic{"", 0, 0, "", std::move(message)}}, status,
                              RunLimits::of(options), std::move(report), bundle);
  };

  auto connected = proxy::AdminClient::connect(path);
  if (!connected) {
    return setupFailed(kExitSetupFailed,
                       fmt::format("--proxy {}: {}", spec, connected.error().message));
  }
  auto& admin = *connected.value();
  // The run's id goes with it: serve's audit lines of this sandbox's connections name the run,
  // not only the task (every sandbox of a task would look the same to an incident responder).
  auto env = admin.taskEnvironment(task, bundle ? bundle->dir().id : std::string());
  if (!env) {
    const Error& e = env.error();
    return setupFailed(
        e.reason == proxy::admin_reason::kUnknownTask ? kExitUsage : kExitSetupFailed,
        fmt::format("sandgate serve at {} refused task {}: {}", path, task, e.str()));
  }
  options.extraCaPem = env->caPem;
  for (const auto& [name, value] : env->env) options.env.emplace(name, value);  // --env wins
  options.hiddenPaths = env->hiddenPaths;
  // ssh and git over SSH as in an embedded run, trusting serve's broker (task_env names its
  // key); an older serve says nothing, and the sandbox gets no ssh setup.
  if (env->sshKnownHosts) applyRunSsh(*env->sshKnownHosts, &options);
  if (std::find(options.hiddenPaths.begin(), options.hiddenPaths.end(), path) ==
      options.hiddenPaths.end()) {
    options.hiddenPaths.push_back(path);  // the socket this launcher used, however it is named
  }

  if (options.transparent && env->capture) {
    // Serve's ports and pools (its config decides them), then --capture-port.
    options.capture.ports = env->capture->ports;
    proxy::addCapturePorts(options.capture.ports, req.capturePorts);
    options.capture.rangeV4 = env->capture->ipv4Range;
    options.capture.rangeV6 = env->capture->ipv6Range;
  } else if (options.transparent) {
    fmt::print(stderr,
               "sandgate run: note: sandgate serve at {} offers no transparent capture (an older "
               "version); the sandbox reaches it through its proxy variables only\n",
               path);
    options.transparent = false;
  }
  auto onCapture = [&](sandbox::CaptureSockets s) {
    auto adopted =
        admin.adoptCapture(task, options.capture.ports, s.ipv6, s.dnsUdp, s.dnsTcp, s.listeners);
    for (int fd : {s.dnsUdp, s.dnsTcp}) ::close(fd);  // serve holds its own copies now
    for (int fd : s.listeners) ::close(fd);
    if (!adopted) {
      throw std::runtime_error(
          fmt::format("sandgate serve at {} did not adopt the transparent capture: {}", path,
                      adopted.error().message));
    }
  };
  auto result = sandbox::run(
      options,
      [&](std::vector<int> fds) {
        auto adopted = admin.adopt(task, fds);
        for (int fd : fds) ::close(fd);  // serve holds its own copies now
        if (!adopted) {
          throw std::runtime_error(
              fmt::format("sandgate serve at {} did not adopt the listeners: {}", path,
                          adopted.error().message));
        }
      },
      onCapture,
      [&] {
        if (bundle != nullptr) bundle->started();
      });
  // The command has ended: serve closes the run's sockets and says what the run did.
  auto released = admin.release();
  proxy::ReleaseSummary summary;
  if (released) {
    summary = std::move(released.value());
  } else if (req.reportPath) {
    fmt::print(stderr,
               "sandgate run: warning: no traffic summary from {} ({}); the report counts no "
               "requests, serve's audit log has them\n",
               path, released.error().message);
  }
  connected.value().reset();
  return finishRun(req, task, env->policy, result, RunLimits::of(options), summary.traffic,
                   std::move(report), bundle, summary.dns);
}

}  // namespace sandgate::run
