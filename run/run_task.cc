// `sandgate run` end to end (see run_task.h).
#include "run/run_task.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "config/config.h"
#include "config/default_config.h"
#include "policy/engine.h"
#include "policy/load_problems.h"
#include "proxy/capture_server/capture.h"
#include "proxy/server/embedded.h"
#include "proxy/ssh/ssh_broker.h"
#include "run/ask_prompt.h"
#include "run/learn_run.h"
#include "run/output_files.h"
#include "run/run_bundle.h"
#include "run/run_limits.h"
#include "run/run_outcome.h"
#include "run/run_ssh.h"
#include "run/serve_run.h"
#include "sandbox/launcher.h"
#include "sandbox/workspace.h"

namespace sandgate::run {

namespace {

// The task to run under: --task, an ad-hoc task for --policy, the only task, or `default`.
// Returns the task name, or an error message.
Result<std::string> chooseTask(config::Config& cfg, const RunRequest& req) {
  auto err = [](std::string msg) { return Diagnostic{"", 0, 0, "", std::move(msg)}; };
  if (req.policy) {
    if (!cfg.policies.count(*req.policy)) {
      std::string names;
      for (const auto& [name, p] : cfg.policies) names += (names.empty() ? "" : ", ") + name;
      return err(fmt::format("no policy '{}' in {} (policies: {})", *req.policy, cfg.file,
                             names.empty() ? "none" : names));
    }
    std::string name = "run-" + *req.policy;
    for (int i = 2; cfg.findTask(name); ++i) name = fmt::format("run-{}-{}", *req.policy, i);
    config::Task t;
    t.name = name;
    t.policy.value = *req.policy;
    cfg.tasks.push_back(std::move(t));
    return name;
  }
  std::string names;
  for (const auto& t : cfg.tasks) names += (names.empty() ? "" : ", ") + t.name;
  if (req.task) {
    if (!cfg.findTask(*req.task)) {
      return err(fmt::format("no task '{}' in {} (tasks: {})", *req.task, cfg.file,
                             names.empty() ? "none" : names));
    }
    return *req.task;
  }
  if (cfg.tasks.size() == 1) return cfg.tasks.front().name;
  if (cfg.findTask("default")) return std::string("default");
  return err(fmt::format("{} has {} tasks and none is called 'default': pick one with --task ({})",
                         cfg.file, cfg.tasks.size(), names.empty() ? "none" : names));
}

// A workspace the launcher refuses is a setup failure (as when sandbox::run refuses it); a run
// directory that cannot be made is a usage error (--run-dir).
int bundleFailure(const Error& error) {
  return error.reason == reason::kRunDirectory || error.reason == reason::kRootWorkspace
             ? kExitUsage
             : kExitSetupFailed;
}

// Bind mode writes the host's directory as its owner. A root-owned one (a checkout in CI or a
// container) would get root-owned files the workload chose, which root may later run (hooks,
// Makefiles, scripts) and, without the bind filter and the sweep, setuid root binaries: bound
// only when asked for. Overlay mode is not concerned (the host tree is not written by the run).
std::optional<std::string> refuseRootWorkspace(const RunRequest& req, const sandbox::Options& o,
                                               const sandbox::CheckedWorkspace& ws) {
  if (o.workspaceMode != sandbox::Options::WorkspaceMode::kBind || req.allowRootWorkspace ||
      geteuid() != 0 || ws.st.st_uid != 0) {
    return std::nullopt;
  }
  return fmt::format(
      "refusing to bind the root-owned workspace {}: files the run writes there would be root's "
      "on the host; use overlay mode (--workspace-mode overlay, then review and apply), give the "
      "workspace to an unprivileged user, or pass --allow-root-workspace",
      ws.path);
}

// The config file's text as it was read for this run (the bundle's policy.yaml). A config holds
// no secret values (credentials name their source: a file, a variable, a command).
Result<std::string> readConfigText(const std::string& path) {
  safe_open::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string text;
  char buf[65536];
  for (ssize_t n;
       fd.valid() && (n = ::read(fd.get(), buf, sizeof buf)) > 0 && text.size() < (16u << 20);) {
    text.append(buf, static_cast<size_t>(n));
  }
  if (!fd.valid())
    return Diagnostic{"", 0, 0, "", fmt::format("{}: {}", path, std::strerror(errno))};
  return text;
}

}  // namespace

int runTask(const RunRequest& req) {
  if (req.argv.empty()) return fail(kExitUsage, "no command given (sandgate run ... -- CMD)");
  if (req.task && req.policy) return fail(kExitUsage, "--task and --policy exclude each other");
  if (req.learn && req.proxy) {
    // serve decides for its tasks: a learning run there is its task's `mode: learn`.
    return fail(kExitUsage,
                "--learn needs the embedded proxy: with --proxy, set `mode: learn` "
                "on the serve's task instead");
  }
  if (req.ask && req.proxy) {
    return fail(kExitUsage,
                "--ask needs the embedded proxy: with --proxy, set `on_unknown: ask` on the "
                "serve's task and answer with `sandgate approve`");
  }
  if (req.ask && req.learn) {
    return fail(kExitUsage,
                "--ask and --learn exclude each other (learn mode admits what ask would hold)");
  }
  // --ask prompts on the launcher's own terminal: without one it could only time out, so it is
  // refused before anything is made.
  std::unique_ptr<TtyPrompter> prompter;
  if (req.ask) {
    auto opened = TtyPrompter::open();
    if (!opened) return fail(kExitUsage, "{}", opened.errors().front().message);
    prompter = std::move(opened.value());
  }

  sandbox::Options options;
  options.argv = req.argv;
  options.workspace = req.workspace;
  options.allowUnenforced = req.allowUnenforced;
  options.transparent = req.transparent;
  for (const auto& kv : req.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return fail(kExitUsage, "--env {}: expected NAME=VALUE", kv);
    }
    options.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // Files written on the host are checked and opened before anything runs (output_files.h):
  // once the workload runs it can plant links in the workspace, which is the cwd by default.
  std::optional<WorkspaceId> workspace;
  auto outsideWorkspace = [&](std::string_view what, const std::string& path, int flags,
                              mode_t mode) -> Result<safe_open::UniqueFd> {
    if (!workspace) {
      auto id = identifyWorkspace(req.workspace);
      if (!id) return id.errors();
      workspace = id.value();
    }
    return openOutsideWorkspace(what, path, *workspace, flags, mode);
  };
  safe_open::UniqueFd report;
  if (req.reportPath) {
    auto opened = outsideWorkspace("--report", *req.reportPath, O_TRUNC, 0644);
    if (!opened) return fail(kExitUsage, "{}", opened.errors().front().str());
    report = std::move(opened.value());
  }
  // The run's directory: made before the sandbox starts (the overlay's upper layer is in it),
  // never inside the workspace.
  // The workspace is checked first (the launcher checks it again): an unsafe one is refused
  // with its reason before anything is made for the run.
  // `unprepared`: what failed once the directory was made (RunBundle::begin): the caller
  // writes the directory's report with it.
  auto beginBundle = [&](const std::string& policyText,
                         Diagnostics* unprepared) -> Expected<std::unique_ptr<RunBundle>> {
    auto failed = [](std::string_view why, const Diagnostics& errors) {
      return Error{std::string(why), errors.front().str()};
    };
    auto checked = sandbox::openWorkspace(req.workspace, options.hiddenPaths);
    if (!checked) return failed(reason::kWorkspace, checked.errors());
    if (auto why = refuseRootWorkspace(req, options, checked.value())) {
      ::close(checked->fd);
      return Error{std::string(reason::kRootWorkspace), *why};
    }
    if (!workspace) {
      auto id = identifyWorkspace(req.workspace);
      if (!id) {
        ::close(checked->fd);
        return failed(reason::kWorkspace, id.errors());
      }
      workspace = id.value();
    }
    auto begun =
        RunBundle::begin(req, *workspace, checked.value(), policyText, &options, unprepared);
    if (!begun) return failed(reason::kRunDirectory, begun.errors());
    return std::move(begun.value());
  };
  if (req.proxy) {
    // No local config with --proxy: the built-in defaults (config::Sandbox's), then the flags.
    if (auto e = applySandboxSettings(config::Sandbox{}, req, &options); !e.empty()) {
      return fail(kExitUsage, "{}", e);
    }
    // Usage errors before anything is made for the run.
    if (auto e = serveRequestProblem(req)) return fail(kExitUsage, "{}", *e);
    Diagnostics unprepared;
    auto bundle = beginBundle("", &unprepared);  // the policy in force is serve's
    if (!bundle) return fail(bundleFailure(bundle.error()), "{}", bundle.error().message);
    if (!unprepared.empty()) {
      return finishSetupFailure(req, *req.task, "", unprepared, kExitUsage, RunLimits::of(options),
                                std::move(report), bundle.value().get());
    }
    // run/serve_run.cc
    return runWithServe(req, std::move(options), std::move(report), bundle.value().get());
  }

  std::string policyText;
  if (req.configPath) {
    auto text = readConfigText(*req.configPath);
    if (!text) return fail(kExitUsage, "{}", text.errors().front().str());
    policyText = std::move(text.value());
  } else {
    policyText = config::defaultConfigText();
  }
  // A config problem is a usage error found before anything is made for the run: every one of
  // them at once, the rule compiler's too (as `sandgate policy lint` shows them).
  auto loaded = req.configPath ? config::readFile(*req.configPath)
                               : config::readString(policyText, "<embedded>");
  Diagnostics problems = policy::loadProblems(loaded);
  if (problems.empty()) {
    if (auto engine = policy::Engine::compile(*loaded.config); !engine) problems = engine.errors();
  }
  if (!problems.empty()) {
    for (const auto& e : problems) fmt::print(stderr, "{}\n", e.str());
    return kExitUsage;
  }
  config::Config cfg = std::move(*loaded.config);
  if (auto e = applySandboxSettings(cfg.sandbox, req, &options); !e.empty()) {
    return fail(kExitUsage, "{}", e);
  }
  auto task = chooseTask(cfg, req);
  if (!task) return fail(kExitUsage, "{}", task.errors().front().message);
  const std::string taskName = task.value();
  std::string policyName = cfg.findTask(taskName)->policy.value;
  // A learning run admits, without credentials, what the policy refuses for want of a rule
  // (policy/engine.h): the guardrails and deny rules still refuse.
  bool learning = false;
  for (auto& t : cfg.tasks) {
    if (t.name != taskName) continue;
    if (req.learn) t.mode = config::TaskMode::kLearn;
    learning = t.mode == config::TaskMode::kLearn;
    if (req.ask) {
      if (learning) return fail(kExitUsage, "--ask: task {} is in learn mode", t.name);
      t.onUnknown = config::OnUnknown::kAsk;
      if (!t.ask) t.ask.emplace();
    }
  }
  options.hiddenPaths = cfg.secretPaths();
  // ssh and git over SSH in the sandbox: its ProxyCommand, and a known_hosts naming the run's
  // host key (the private half stays here, for the proxy's SSH broker: run_ssh.h).
  if (auto ssh = prepareRunSsh(cfg, policyName, &options); !ssh) {
    return fail(kExitSetupFailed, "{}", ssh.errors().front().message);
  }
  auto capture = proxy::captureConfig(cfg);  // ports and pools: 80, 443, transparent.*
  if (!capture) return fail(kExitUsage, "{}", capture.errors().front().str());
  options.capture.ports = capture->ports;
  proxy::addCapturePorts(options.capture.ports, req.capturePorts);
  // Port 22 (and the other ports of the policy's SSH hosts) too: a captured connection there
  // reaches the SSH broker as a CONNECT would, so `ssh host` works without the ProxyCommand.
  proxy::addCapturePorts(options.capture.ports, proxy::sshPortsFor(cfg, policyName));
  options.capture.rangeV4 = capture->v4Text;
  options.capture.rangeV6 = capture->v6Text;

  // Checked (and opened) before the run's directory is made: a usage error makes nothing.
  safe_open::UniqueFd auditFd;
  if (cfg.audit.path) {
    auto opened = outsideWorkspace("audit.path", *cfg.audit.path, O_APPEND, 0640);
    if (!opened) {
      return fail(kExitUsage, "{}: {}", cfg.file, opened.errors().front().str());
    }
    auditFd = std::move(opened.value());
  }
  Diagnostics unprepared;
  auto bundle = beginBundle(policyText, &unprepared);
  if (!bundle) return fail(bundleFailure(bundle.error()), "{}", bundle.error().message);
  RunBundle& runBundle = *bundle.value();
  if (!unprepared.empty()) {
    return finishSetupFailure(req, taskName, policyName, unprepared, kExitUsage,
                              RunLimits::of(options), std::move(report), &runBundle);
  }
  // The audit lines: the run's audit.jsonl, audit.path when set, and stderr only when asked:
  // the command's stderr is there too, and one of its lines written in pieces would be cut.
  proxy::EmbeddedOptions proxyOptions;
  proxyOptions.auditCopy = runBundle.auditCopy();
  if (req.auditStderr) proxyOptions.streamFd = STDERR_FILENO;
  if (auditFd.valid()) proxyOptions.auditFd = auditFd.release();
  // Created now, started once the sandbox is forked: the launcher forks single-threaded.
  auto proxy = proxy::EmbeddedProxy::create(std::move(cfg), std::move(proxyOptions));
  // A setup that fails from here on still leaves the run's directory a report saying so.
  // The embedded proxy's errors are the config's (file:line:col): a secret source it names
  // that cannot be read, a CA it cannot load. A config error is exit 2, as when the config
  // does not load; `sandgate policy lint --check-sources` finds the sources' problems first.
  auto setupFailed = [&](const Diagnostics& errors, int status) {
    return finishSetupFailure(req, taskName, policyName, errors, status, RunLimits::of(options),
                              std::move(report), &runBundle);
  };
  if (!proxy) return setupFailed(proxy.errors(), kExitUsage);
  auto& embedded = *proxy.value();
  // The sandbox trusts sandgate's CA (intercepted hosts) and holds placeholders, never the
  // credentials themselves. An explicit --env of the same name wins: the user asked for it.
  auto sandboxEnv = embedded.sandboxEnvironment(taskName);
  if (!sandboxEnv) {
    embedded.stop();
    return setupFailed(sandboxEnv.errors(), kExitSetupFailed);
  }
  options.extraCaPem = sandboxEnv.value().caPem;
  for (const auto& [name, value] : sandboxEnv.value().variables) options.env.emplace(name, value);

  std::shared_ptr<proxy::CaptureContext> adopted;
  auto onCapture = [&](sandbox::CaptureSockets s) {
    auto r = embedded.adoptCapture(
        proxy::CaptureSockets{s.dnsUdp, s.dnsTcp, std::move(s.listeners)},
        proxy::CaptureOptions{taskName, options.capture.ports, capture->v4, capture->v6, s.ipv6});
    if (!r) throw std::runtime_error("proxy: " + r.errors().front().str());
    adopted = r.value();
  };
  auto result = sandbox::run(
      options,
      [&](std::vector<int> fds) {
        std::string error;
        for (int fd : fds) {
          auto r = embedded.adoptListener(fd, taskName);
          if (!r && error.empty()) error = r.errors().front().str();
        }
        if (!error.empty()) throw std::runtime_error("proxy: " + error);
      },
      onCapture,
      [&] {
        runBundle.started();
        embedded.start();
        if (prompter) prompter->start(embedded);  // after the fork, like the proxy's threads
      });
  if (prompter) prompter->stop();
  auto traffic = embedded.stop();
  if (learning) {
    // Every audit line is in audit.jsonl once the proxy has stopped.
    std::vector<std::string> notes;
    writeLearnedPolicy(runBundle.dir(), taskName, &notes);
    for (const auto& n : notes) fmt::print(stderr, "sandgate run: {}\n", n);
    fmt::print(stderr, "sandgate run: learn: the drafted policy is {}/{} (tests: {})\n",
               runBundle.dir().path, bundle::kLearned, bundle::kLearnedTests);
  }
  std::optional<proxy::CaptureCounts> dns;
  if (adopted) dns = adopted->counts();
  return finishRun(req, taskName, policyName, result, RunLimits::of(options), traffic,
                   std::move(report), &runBundle, dns);
}

}  // namespace sandgate::run
