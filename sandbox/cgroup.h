// A per-run cgroup (v2 where the controller is delegated, else v1) that enforces the memory,
// CPU and PIDs limits, reports peak memory and OOM kills, and is removed after the run.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sandgate::sandbox {

struct CgroupLimits {
  std::optional<uint64_t> memoryBytes;
  std::optional<double> cpus;
  std::optional<uint32_t> pids;
};

struct CgroupStats {
  std::optional<uint64_t> peakMemoryBytes;
  uint64_t oomKills = 0;        // memory.events oom_kill (v2) / memory.oom_control oom_kill (v1)
  uint64_t memoryFailures = 0;  // v1 memory.failcnt: charges refused at the limit
  bool pidsLimitReached = false;
};

class Cgroup {
 public:
  // Creates the directories and writes the limits. A controller that is requested but cannot be
  // used is named in `unenforced` ("memory: ..." with the reason) and skipped; the memory
  // controller is also used without a limit, when available, to measure peak memory. Empty run
  // cgroups in the same parents whose launcher no longer exists (killed before its cleanup)
  // are removed first.
  static std::unique_ptr<Cgroup> create(const CgroupLimits& limits, const std::string& name,
                                        std::vector<std::string>* unenforced,
                                        std::vector<std::string>* warnings);
  ~Cgroup();  // kills what is left and removes the directories (bounded retries)

  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  // Moves `pid` into every directory. Returns an empty string or the failure.
  std::string addProcess(pid_t pid);
  CgroupStats stats() const;
  // The directories created (absolute paths), for tests and logs.
  std::vector<std::string> paths() const;

 private:
  struct Dir {
    std::string path;
    bool v2 = false;
    std::vector<std::string> controllers;
  };
  Cgroup() = default;
  const Dir* find(const std::string& controller) const;
  std::vector<Dir> dirs_;
};

}  // namespace sandgate::sandbox
