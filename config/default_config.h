// The built-in configuration `sandgate run` uses when no --config is given: one task `default`
// whose policy allows the well-known package registries over HTTPS and nothing else, and the
// sandbox's default limits written out (`sandbox:`, the same as config::Sandbox's defaults).
#pragma once

#include <string>

#include "common/result.h"
#include "config/config.h"

namespace sandgate::config {

// The YAML text of the built-in config (also printed in the README).
const std::string& defaultConfigText();

// defaultConfigText() loaded; Config::file is "<embedded>".
Result<Config> defaultConfig();

}  // namespace sandgate::config
