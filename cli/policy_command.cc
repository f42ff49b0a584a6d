// `sandgate policy lint | check | test` (learn and diff: learn_commands.cc): argument parsing and
// output formatting only.
#include <fmt/format.h>

#include <boost/json.hpp>
#include <cstdio>
#include <map>
#include <memory>

#include "broker/injector.h"
#include "broker/source_check.h"
#include "cli/commands.h"
#include "config/config.h"
#include "config/test_cases.h"
#include "policy/check.h"
#include "policy/engine.h"
#include "policy/load_problems.h"
#include "policy/target.h"

namespace sandgate::cli {

namespace {

// Exit statuses shared by the policy commands (documented in --help and the README).
constexpr int kExitAllowOrValid = 0;
constexpr int kExitDenyOrInvalid = 1;
constexpr int kExitUsage = 2;

void printErrors(const Diagnostics& errors) {
  for (const auto& e : errors) fmt::print(stderr, "{}\n", e.str());
}

struct Loaded {
  config::Config config;
  std::shared_ptr<const policy::Engine> engine;
};

std::string plural(size_t n, std::string_view what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

// Loads and compiles; on failure prints every problem both stages found (policy::loadProblems)
// and returns nullopt. `problems` (lint): how many errors and warnings were printed.
struct Problems {
  size_t errors = 0;
  size_t warnings = 0;
};
std::optional<Loaded> loadAndCompile(const std::string& path, Problems* problems = nullptr) {
  auto report = config::readFile(path);
  Diagnostics errors, warnings;
  std::optional<Loaded> loaded;
  if (!report.errors.empty()) {
    errors = policy::loadProblems(report, &warnings);
  } else if (auto engine = policy::Engine::compile(*report.config); !engine) {
    errors = engine.errors();
  } else {
    loaded = Loaded{std::move(*report.config), std::move(engine).value()};
  }
  printErrors(errors);
  if (problems) {
    // Lint prints the warnings of a config that does not load too: one pass shows everything.
    for (const auto& w : warnings) fmt::print(stderr, "warning: {}\n", w.str());
    *problems = {errors.size(), warnings.size()};
  }
  return loaded;
}

struct LintArgs {
  std::string file;
  bool checkSources = false;
};

int invalid(const std::string& file, const Problems& problems) {
  fmt::print(stderr, "{}: invalid: {}{}\n", file, plural(problems.errors, "error"),
             problems.warnings ? ", " + plural(problems.warnings, "warning") : "");
  return kExitDenyOrInvalid;
}

int runLint(const LintArgs& args) {
  const std::string& file = args.file;
  Problems problems;
  auto loaded = loadAndCompile(file, &problems);
  if (!loaded) return invalid(file, problems);
  Diagnostics warnings = loaded->engine->warnings();
  // A config that loads can still fail serve's start (or run's: exit 2) on a secret source it
  // names: opened only when asked, since lint often runs where the secrets are not (CI, a
  // review, the chart's helm test).
  std::optional<broker::SourceChecks> sources;
  if (args.checkSources) {
    sources = broker::checkSources(loaded->config);
    printErrors(sources->errors);
    warnings.insert(warnings.end(), sources->warnings.begin(), sources->warnings.end());
  }
  for (const auto& w : warnings) fmt::print(stderr, "warning: {}\n", w.str());
  if (sources && !sources->errors.empty()) {
    return invalid(file, Problems{sources->errors.size(), warnings.size()});
  }
  fmt::print("{}: ok ({} tasks, {} policies, {} credentials{})\n", file,
             loaded->config.tasks.size(), loaded->config.policies.size(),
             loaded->config.credentials.size(),
             warnings.empty() ? "" : "; " + plural(warnings.size(), "warning"));
  if (loaded->config.credentials.empty()) return kExitAllowOrValid;
  if (!sources) {
    fmt::print("secret sources: not opened (--check-sources opens them)\n");
  } else {
    std::string notes;
    if (sources->notRun) notes += "; exec: the program checked, not run";
    if (sources->notMinted) notes += "; github_app: no token minted";
    fmt::print("secret sources: {} checked{}\n", sources->checked, notes);
  }
  return kExitAllowOrValid;
}

struct CheckArgs {
  std::string config;
  std::string task;
  std::string target;
  std::string method;
  std::string gitPush;  // --git-push REF: TARGET is the repository's URL
  bool json = false;
};

int runCheck(const CheckArgs& args) {
  auto loaded = loadAndCompile(args.config);
  if (!loaded) return kExitUsage;
  if (!loaded->engine->hasTask(args.task)) {
    fmt::print(stderr, "sandgate: unknown task \"{}\" in {}\n", args.task, args.config);
    return kExitUsage;
  }
  auto parsed = policy::parseCheckTarget(args.target);
  if (auto* err = std::get_if<std::string>(&parsed)) {
    fmt::print(stderr, "sandgate: invalid target \"{}\": {}\n", args.target, *err);
    return kExitUsage;
  }
  const auto& target = std::get<policy::CheckTarget>(parsed);
  std::optional<std::string> method;
  if (!args.method.empty()) method = args.method;
  const bool gitPush = !args.gitPush.empty();
  if (gitPush && (!target.path || method.value_or("POST") != "POST")) {
    fmt::print(stderr,
               "sandgate: --git-push takes the repository's URL (https://host/owner/name.git) "
               "and no --method other than POST\n");
    return kExitUsage;
  }
  if (gitPush) method = "POST";
  auto result =
      gitPush
          ? policy::checkGitPush(*loaded->engine, loaded->config, args.task, target, args.gitPush)
          : policy::checkTarget(*loaded->engine, loaded->config, args.task, target, method);
  const policy::Decision& d = result.decision;
  bool visible = method || target.path;
  std::string effectiveMethod = visible ? method.value_or("GET") : "";

  if (args.json) {
    boost::json::object o;
    o["verdict"] = policy::verdictName(d.verdict);
    o["reason"] = d.reason;
    o["rule"] = d.rule;
    o["detail"] = d.detail;
    o["task"] = args.task;
    o["host"] = target.target.name;
    o["port"] = target.port;
    if (visible) {
      o["method"] = effectiveMethod;
      o["path"] = target.path.value_or("/");
    }
    if (gitPush) o["git_push"] = args.gitPush;
    o["credential"] = d.credential;
    if (auto c = loaded->config.credentials.find(d.credential);
        d.allowed() && c != loaded->config.credentials.end()) {
      o["injected_into"] = broker::injectionPlace(c->second, target.target.name);
    }
    o["intercept"] = d.intercept;
    if (result.resolvedAddress) o["resolved"] = result.resolvedAddress->str();
    fmt::print("{}\n", boost::json::serialize(o));
  } else {
    std::string what = fmt::format("{}:{}",
                                   target.target.isAddress && target.target.address.v6
                                       ? "[" + target.target.name + "]"
                                       : target.target.name,
                                   target.port);
    if (visible) what = fmt::format("{} {}{}", effectiveMethod, what, target.path.value_or("/"));
    fmt::print("{} {} (task {})\n", policy::verdictName(d.verdict), what, args.task);
    if (gitPush) fmt::print("  git push: {}\n", args.gitPush);
    fmt::print("  reason: {}\n", d.reason);
    fmt::print("  rule:   {}\n", d.rule.empty() ? "(none: default deny)" : d.rule);
    if (!d.detail.empty()) fmt::print("  detail: {}\n", d.detail);
    if (result.resolvedAddress) {
      fmt::print("  resolve override: {}\n", result.resolvedAddress->str());
    }
    if (d.allowed() && d.intercept) {
      fmt::print("  TLS: intercepted{}\n",
                 d.credential.empty() ? "" : " (credential " + d.credential + " injected)");
    }
    if (d.allowed()) {
      // Which secret this target gets, and where the sandbox's placeholder would be honoured.
      auto c = loaded->config.credentials.find(d.credential);
      if (c != loaded->config.credentials.end()) {
        fmt::print("  credential: {} (injected into {}; its placeholder is honoured only there)\n",
                   d.credential, broker::injectionPlace(c->second, target.target.name));
      } else if (!visible && d.intercept) {
        fmt::print(
            "  credential: none for the CONNECT (each request inside gets its admitting rule's; "
            "pass a URL to see one)\n");
      } else {
        fmt::print("  credential: none (a placeholder sent on this request is refused)\n");
      }
    }
  }
  return d.allowed() ? kExitAllowOrValid : kExitDenyOrInvalid;
}

struct TestArgs {
  std::string config;
  std::vector<std::string> files;
  bool verbose = false;
};

int runTests(const TestArgs& args) {
  std::map<std::string, std::optional<Loaded>> configs;
  auto configFor = [&](const std::string& path) -> const Loaded* {
    auto it = configs.find(path);
    if (it == configs.end()) it = configs.emplace(path, loadAndCompile(path)).first;
    return it->second ? &*it->second : nullptr;
  };
  int passed = 0, failed = 0;
  bool loadError = false;
  for (const auto& file : args.files) {
    auto suite = config::loadTestSuite(file);
    if (!suite) {
      printErrors(suite.errors());
      loadError = true;
      continue;
    }
    std::string configPath = suite->config.value_or(args.config);
    if (configPath.empty()) {
      fmt::print(stderr, "{}: no config: add \"config: PATH\" to the file or pass --config\n",
                 file);
      loadError = true;
      continue;
    }
    const Loaded* loaded = configFor(configPath);
    if (!loaded) {
      loadError = true;
      continue;
    }
    for (const auto& tc : suite->cases) {
      auto outcome = policy::runCase(*loaded->engine, loaded->config, tc);
      if (outcome.passed) {
        ++passed;
        if (args.verbose) fmt::print("PASS {}:{}: {}\n", file, tc.mark.line, tc.name);
        continue;
      }
      ++failed;
      fmt::print("FAIL {}:{}:{}: {} (task {}, target {}{}{}): {}\n", file, tc.mark.line,
                 tc.mark.col, tc.name, tc.task, tc.target,
                 tc.method ? ", method " + *tc.method : "",
                 tc.gitPush ? ", git push " + *tc.gitPush : "", outcome.message);
    }
  }
  fmt::print("{} passed, {} failed\n", passed, failed);
  if (loadError) return kExitUsage;
  return failed == 0 ? kExitAllowOrValid : kExitDenyOrInvalid;
}

}  // namespace

void addPolicyCommands(CLI::App& app, Action* action) {
  auto* policy = app.add_subcommand("policy", "Validate, query and test egress policy");
  policy->require_subcommand(1);

  auto lintArgs = std::make_shared<LintArgs>();
  auto* lint = policy->add_subcommand(
      "lint",
      "Validate a config file: every problem in one pass. Exit 0 when valid, 1 when invalid "
      "(errors on stderr, then how many).");
  lint->add_option("FILE", lintArgs->file, "config file")->required();
  lint->add_flag("--check-sources", lintArgs->checkSources,
                 "also open each credential's secret source as serve would (file: readable, not "
                 "empty, not readable by others; env: set; exec: the program exists, not run)");
  lint->callback([action, lintArgs] { *action = [lintArgs] { return runLint(*lintArgs); }; });

  auto check = std::make_shared<CheckArgs>();
  auto* checkCmd =
      policy->add_subcommand("check",
                             "Show the decision for TARGET (host:port, IP, or http(s):// URL). "
                             "Exit 0 allow, 1 deny, 2 usage or config error.");
  checkCmd->add_option("--config", check->config, "config file")->required();
  checkCmd->add_option("--task", check->task, "task name")->required();
  checkCmd->add_option("--method", check->method,
                       "HTTP method (makes the request visible; URLs default to GET)");
  checkCmd->add_option("--git-push", check->gitPush,
                       "decide a push of REF (\":REF\" deletes it) to the repository TARGET, "
                       "an https:// URL, under the rule's git block");
  checkCmd->add_flag("--json", check->json, "print one JSON object");
  checkCmd->add_option("TARGET", check->target, "host:port, IP, or URL")->required();
  checkCmd->callback([action, check] { *action = [check] { return runCheck(*check); }; });

  auto test = std::make_shared<TestArgs>();
  auto* testCmd = policy->add_subcommand(
      "test",
      "Run policy test cases (YAML) against a config. Prints each failure and a summary; "
      "exit 0 all passed, 1 a case failed, 2 a file or config could not be loaded.");
  testCmd->add_option("--config", test->config, "config file (unless the test file names one)");
  testCmd->add_flag("-v,--verbose", test->verbose, "print passing cases too");
  testCmd->add_option("FILE", test->files, "test files")->required();
  testCmd->callback([action, test] { *action = [test] { return runTests(*test); }; });

  addLearnCommands(*policy, action);
}

}  // namespace sandgate::cli
