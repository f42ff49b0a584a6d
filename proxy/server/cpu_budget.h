// How many CPUs this process may actually use: its affinity mask and its cgroup's CPU quota
// (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us), the default worker count of serve.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandgate::proxy {

struct CpuBudget {
  unsigned cpus = 1;  // at least 1
  std::string why;    // for the start-up log line: which limit decided, and its value
};

// The budget from the affinity mask (`affinityCpus`, 0: unknown) and the quota of the cgroup
// this process is in, read under `cgroupRoot` (the cgroup2 mount, or the v1 hierarchy's parent
// holding cpu/ or cpu,cpuacct/) as `/proc/self/cgroup` (`procSelfCgroup`) places it. A quota
// anywhere on the way from that cgroup up to the mount's root counts (a container's limit may
// sit on its parent); the smallest wins. Quota CPUs are rounded up: 1.5 CPUs → 2 workers.
CpuBudget cpuBudget(unsigned affinityCpus, std::string_view procSelfCgroup,
                    const std::string& cgroupRoot);
// The same for the running process: sched_getaffinity, /proc/self/cgroup, /sys/fs/cgroup.
CpuBudget currentCpuBudget();

// cgroup v2 `cpu.max` ("QUOTA PERIOD", or "max PERIOD" for none): the quota in CPUs.
std::optional<double> parseCpuMax(std::string_view text);
// cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us (quota -1: none): the quota in CPUs.
std::optional<double> parseCfsQuota(std::string_view quotaText, std::string_view periodText);
// The cgroup path of this process in /proc/self/cgroup text: the v2 entry ("0::/path"), or
// with `v1Controller` the entry whose controller list names it ("4:cpu,cpuacct:/path").
std::optional<std::string> cgroupPath(std::string_view procSelfCgroup,
                                      std::string_view v1Controller = {});

}  // namespace sandgate::proxy
