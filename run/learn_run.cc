// Writes a learning run's policy.learned.yaml and its tests (see learn_run.h).
#include "run/learn_run.h"

#include <fmt/format.h>

#include <sstream>

#include "learn/learn.h"

namespace sandgate::run {

void writeLearnedPolicy(const RunDir& dir, const std::string& task,
                        std::vector<std::string>* warnings) {
  learn::LearnOptions options;
  options.audits = {dir.path + "/" + bundle::kAudit};
  options.task = task;
  options.merge = dir.path + "/" + bundle::kPolicy;
  options.wantTests = true;
  std::istringstream none;  // the audits are files: stdin is the command's, never read here
  learn::LearnOutput out = learn::learnPolicy(options, none);
  for (const auto& m : out.messages) warnings->push_back("learn: " + m);
  if (out.exit == learn::kExitError || out.config.empty()) {
    warnings->push_back(fmt::format("learn: no {} written", bundle::kLearned));
    return;
  }
  if (auto e = dir.write(bundle::kLearned, out.config)) {
    warnings->push_back(fmt::format("learn: {}: {}", bundle::kLearned, *e));
  }
  if (auto e = dir.write(bundle::kLearnedTests, out.tests)) {
    warnings->push_back(fmt::format("learn: {}: {}", bundle::kLearnedTests, *e));
  }
}

}  // namespace sandgate::run
