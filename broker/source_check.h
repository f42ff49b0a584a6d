// `sandgate policy lint --check-sources`: each credential's secret source looked at as serve
// would look at it when it starts, without a secret ever being printed and without running
// anything.
#pragma once

#include <cstddef>

#include "common/result.h"
#include "config/config.h"

namespace sandgate::broker {

// What the checks found. A problem that would stop serve (or `sandgate run`) from starting is
// an error; one of an `optional: true` credential, and a secret file that other users can read,
// is a warning.
struct SourceChecks {
  Diagnostics errors;
  Diagnostics warnings;
  size_t checked = 0;    // sources looked at (a GitHub App's private key is one)
  size_t notRun = 0;     // exec sources: checked for a program, not run
  size_t notMinted = 0;  // github_app sources: their key checked, no token minted
};

// file: read as serve reads it (exists, a regular file, readable, not empty, within the size
// limit, no bytes a header cannot carry), and its permissions (group or others may read it:
// a warning). env: set in this process's environment, with a valid value. exec: the program
// (argv[0], or the first executable of that name in PATH, as posix_spawnp looks it up) exists
// and is executable; it is not run, since a command that prints a secret may also mint one,
// call a vault, or cost money, and lint runs where no secret should be fetched (CI, a review).
// github_app: its private key's source as above; no token is minted (that needs GitHub).
SourceChecks checkSources(const config::Config& cfg);

}  // namespace sandgate::broker
