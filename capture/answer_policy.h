// "Could the task's policy allow this name?" — the question behind every DNS answer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/engine.h"

namespace sandgate::capture {

// True when decide() admits `name` (a normalised DNS name) for `task` on at least one of the
// capture ports, with method and path unknown — the only connections a synthetic address can
// carry. Rules with methods/paths/credentials count (they are decided again per request).
bool nameMayBeAllowed(const policy::Engine& engine, std::string_view task, const std::string& name,
                      std::span<const uint16_t> capturePorts);

// The ports among `candidates` on which decide() admits `name` for `task`, method and path
// unknown: asked for a name answered NXDOMAIN, with the ports the policy's rules name that the
// sandbox does not capture, it says which `--capture-port` the workload lacks.
std::vector<uint16_t> portsAllowingName(const policy::Engine& engine, std::string_view task,
                                        const std::string& name,
                                        std::span<const uint16_t> candidates);

}  // namespace sandgate::capture
