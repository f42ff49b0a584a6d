// `sandgate policy learn` and `sandgate policy diff`: argument parsing and output only; the
// work is in learn/ (learn/learn.h).
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "learn/learn.h"

namespace sandgate::cli {

namespace {

struct LearnArgs {
  learn::LearnOptions options;
  std::string merge;
  std::string tests;
};

int runLearn(LearnArgs& args) {
  if (!args.merge.empty()) args.options.merge = args.merge;
  args.options.wantTests = !args.tests.empty();
  if (args.options.generalise < 2) {
    fmt::print(stderr, "sandgate: --generalise takes a number of distinct values, 2 or more\n");
    return learn::kExitError;
  }
  auto out = learn::learnPolicy(args.options, std::cin);
  for (const auto& m : out.messages) fmt::print(stderr, "{}\n", m);
  if (out.exit == learn::kExitError) return out.exit;
  if (args.options.wantTests) {
    std::ofstream f(args.tests, std::ios::trunc);
    f << out.tests;
    f.close();
    if (!f) {
      fmt::print(stderr, "sandgate: cannot write {}\n", args.tests);
      return learn::kExitError;
    }
  }
  fmt::print("{}", out.config);
  return out.exit;
}

int runDiff(const learn::DiffOptions& options) {
  auto out = learn::diffPolicies(options, std::cin);
  for (const auto& m : out.messages) fmt::print(stderr, "{}\n", m);
  fmt::print("{}", out.report);
  return out.exit;
}

}  // namespace

void addLearnCommands(CLI::App& policy, Action* action) {
  auto learnArgs = std::make_shared<LearnArgs>();
  auto* learnCmd = policy.add_subcommand(
      "learn",
      "Draft a config (policies and tasks) that allows what AUDIT lines show was requested, "
      "allowed or refused, and nothing more; print it. Exit 0 ok, 1 the draft failed its own "
      "check, 2 usage, unreadable file or (--strict) a bad line.");
  auto& lo = learnArgs->options;
  learnCmd->add_option("AUDIT", lo.audits, "audit files (JSON lines; - for stdin)")->required();
  learnCmd->add_option("--task", lo.task, "learn only this task's requests");
  learnCmd->add_option("--tests", learnArgs->tests,
                       "also write `policy test` cases for every request to FILE");
  learnCmd->add_option("--merge", learnArgs->merge,
                       "propose additions to this config: print it with the rules it lacks");
  learnCmd->add_flag("--explain", lo.explain, "comment each rule with the requests it covers");
  learnCmd->add_option("--generalise", lo.generalise,
                       "a path segment becomes * once it took N distinct values (default 3)");
  learnCmd->add_flag("--strict", lo.strict, "a bad audit line is fatal (exit 2)");
  learnCmd->callback(
      [action, learnArgs] { *action = [learnArgs] { return runLearn(*learnArgs); }; });

  auto diff = std::make_shared<learn::DiffOptions>();
  auto* diffCmd = policy.add_subcommand(
      "diff",
      "Decide every request of the AUDIT files under OLD and under NEW; print each whose "
      "decision changes. Exit 0 none changes, 1 some do, 2 a config or file error.");
  diffCmd->add_option("OLD", diff->before, "the config as it is")->required();
  diffCmd->add_option("NEW", diff->after, "the edited config")->required();
  diffCmd->add_option("--audit", diff->audits, "audit files (JSON lines; - for stdin)")->required();
  diffCmd->add_option("--task", diff->task, "only this task's requests");
  diffCmd->add_flag("--strict", diff->strict, "a bad audit line is fatal (exit 2)");
  diffCmd->callback([action, diff] { *action = [diff] { return runDiff(*diff); }; });
}

}  // namespace sandgate::cli
