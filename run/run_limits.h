// The sandbox's limits for one `sandgate run`: the config's `sandbox:` section (or the
// built-in defaults) with the flags on top, put into sandbox::Options; and how they are said
// to the user (the line on stderr at the start, the report's `limits`).
#pragma once

#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "run/run_task.h"
#include "sandbox/launcher.h"

namespace sandgate::run {

// The limits a run was given; nullopt is unlimited.
struct RunLimits {
  std::optional<uint64_t> memoryBytes;
  std::optional<uint32_t> pids;
  std::optional<double> cpus;
  std::optional<std::chrono::milliseconds> timeout;
  uint64_t tmpfsBytes = 0;

  static RunLimits of(const sandbox::Options& options);
};

// Fills the limits, tmpfs size, read-only paths and id range of `options` from `sandbox` and
// the flags of `req` (a flag wins; `unlimited` unsets). A value that comes from `sandbox`
// sets the matching *IsDefault, so that a machine that cannot enforce it warns instead of
// refusing. Sets options->onLimits to print "sandgate run: limits: ..." (describeLimits) on
// stderr once the launcher knows which limits it could enforce. Returns "" or a usage error
// (the flag and what was expected).
std::string applySandboxSettings(const config::Sandbox& sandbox, const RunRequest& req,
                                 sandbox::Options* options);

// "4G", "512M", "64K", "1000B": the largest power-of-1024 unit that divides `bytes`.
std::string formatSize(uint64_t bytes);
// "2h", "1h30m", "90s" as "1m30s", "250ms".
std::string formatDuration(std::chrono::milliseconds d);

// Whether the cgroup could not enforce `controller` ("memory", "pids", "cpu"): an entry of
// RunResult::unenforced starts with the controller's name.
bool isUnenforced(const std::vector<std::string>& unenforced, std::string_view controller);

// "memory 4G, pids 1024, cpus unlimited, timeout 2h, tmpfs 1G each (/tmp /run /dev/shm)";
// a limit the machine could not enforce says "(NOT ENFORCED)".
std::string describeLimits(const RunLimits& limits, const std::vector<std::string>& unenforced);

// The report's `limits`: {memory_bytes, pids, cpus, timeout_seconds, tmpfs_bytes} (null for
// unlimited) and `enforced` {memory, pids, cpus, timeout, tmpfs}: true when in force, false
// when set but not enforced by this machine, null when unlimited.
boost::json::object limitsToJson(const RunLimits& limits,
                                 const std::vector<std::string>& unenforced);

}  // namespace sandgate::run
