// "Could the task's policy allow this name?" — the question behind every DNS answer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "policy/engine.h"

namespace sandgate::capture {

// True when decide() admits `name` (a normalised DNS name) for `task` on at least one of the
// capture ports, with method and path unknown — the only connections a synthetic address can
// carry. Rules with methods/paths/credentials count (they are decided again per request).
bool nameMayBeAllowed(const policy::Engine& engine, std::string_view task, const std::string& name,
                      std::span<const uint16_t> capturePorts);

}  // namespace sandgate::capture
