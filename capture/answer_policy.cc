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

std::vector<uint16_t> portsAllowingName(const policy::Engine& engine, std::string_view task,
                                        const std::string& name,
                                        std::span<const uint16_t> candidates) {
  std::vector<uint16_t> out;
  for (uint16_t port : candidates) {
    if (nameMayBeAllowed(engine, task, name, std::span<const uint16_t>(&port, 1))) {
      out.push_back(port);
    }
  }
  return out;
}

}  // namespace sandgate::capture
