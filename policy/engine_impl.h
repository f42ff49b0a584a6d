// Engine::Impl: the compiled state of one config snapshot, shared by compiler.cc (which builds
// it) and engine.cc (which decides with it). Internal to policy/.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/string_hash.h"
#include "policy/compiled_rule.h"
#include "policy/engine.h"
#include "policy/host_index.h"

namespace sandgate::policy {

struct Engine::Impl {
  std::string file;
  std::deque<CompiledRule> rules;  // owns every rule; a deque keeps their addresses stable
  HostIndex globalDeny;
  std::vector<std::unique_ptr<CompiledPolicy>> policies;
  StringMap<const CompiledPolicy*> tasks;
  // Policy name -> its compiled form, for decideUnder(): the policies tasks use, and every
  // policy when the config has `tokens:` (an ad-hoc task may name any).
  StringMap<const CompiledPolicy*> byPolicy;
  Diagnostics warnings;  // see Engine::warnings()
  // Tasks in learn mode (config::TaskMode::kLearn), and the names `resolve:` pins.
  StringMap<bool> learnTasks;
  StringMap<bool> pinnedNames;
  // Tasks with on_unknown: ask (config::OnUnknown::kAsk): their learnable refusals are askable.
  StringMap<bool> askTasks;
};

}  // namespace sandgate::policy
