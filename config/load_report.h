// config::readFile/readString: a load that keeps the Config as far as it could be read next to
// every problem, for the commands that show all of a config's problems in one pass
// (policy/load_problems.h). loadFile/loadString (config.h) are these with the partial Config
// dropped.
#pragma once

#include <optional>
#include <string>

#include "common/result.h"
#include "config/config.h"

namespace sandgate::config {

// What a load found: every problem, and the Config as far as it could be read. `config` is
// unset only when there is nothing to read (not YAML, not a map, no such file). With errors,
// a broken part is left at its default (names of broken policies and credentials are kept),
// so that the checks of later stages (policy::Engine's rules) can still run on the rest and a
// user sees every problem in one pass: for diagnostics only, never to be served.
struct LoadReport {
  std::optional<Config> config;
  Diagnostics errors;
};
LoadReport readFile(const std::string& path);
LoadReport readString(const std::string& text, const std::string& name);

}  // namespace sandgate::config
