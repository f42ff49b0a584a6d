// The DNS stub's name predicate on top of the policy engine (see answer_policy.h).
#include "capture/answer_policy.h"

namespace sandgate::capture {

bool nameMayBeAllowed(const policy::Engine& engine, std::string_view task, const std::string& name,
                      std::span<const uint16_t> capturePorts) {
  policy::Target target;
  target.name = name;
  for (uint16_t port : capturePorts) {
    policy::Request req{target, port, std::nullopt, std::nullopt, std::nullopt};
    if (engine.decide(task, req).allowed()) return true;
  }
  return false;
}

}  // namespace sandgate::capture
