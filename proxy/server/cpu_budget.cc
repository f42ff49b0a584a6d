// The CPUs serve may use: affinity mask and cgroup CPU quota (see cpu_budget.h).
#include "proxy/server/cpu_budget.h"

#include <fmt/format.h>
#include <sched.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace sandgate::proxy {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<long long> parseInt(std::string_view s) {
  s = trim(s);
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::string> readSmallFile(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) return std::nullopt;
  std::string text;
  std::getline(f, text, '\0');
  if (text.size() > 4096) return std::nullopt;  // a cgroup file this big is not one we know
  return text;
}

// The directories from `root`/`path` up to `root`, innermost first. A path that does not
// exist under root (no cgroup namespace, a different mount) is skipped: root alone then.
std::vector<std::filesystem::path> upFrom(const std::filesystem::path& root,
                                          const std::string& path) {
  std::vector<std::filesystem::path> out;
  std::filesystem::path rel = std::filesystem::path(path).relative_path();
  std::error_code ec;
  if (rel.empty() || !std::filesystem::is_directory(root / rel, ec)) return {root};
  for (auto p = rel; !p.empty(); p = p.parent_path()) out.push_back(root / p);
  out.push_back(root);
  return out;
}

unsigned roundUp(double cpus) {
  double up = std::ceil(cpus - 1e-9);  // 2.0000000001 from a division is still 2
  return up < 1 ? 1u : static_cast<unsigned>(std::min(up, 65536.0));
}

}  // namespace

std::optional<double> parseCpuMax(std::string_view text) {
  text = trim(text);
  auto space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::string_view quota = text.substr(0, space);
  if (quota == "max") return std::nullopt;
  auto q = parseInt(quota);
  auto p = parseInt(text.substr(space + 1));
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return static_cast<double>(*q) / static_cast<double>(*p);
}

std::optional<double> parseCfsQuota(std::string_view quotaText, std::string_view periodText) {
  auto q = parseInt(quotaText);
  auto p = parseInt(periodText);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;  // -1: no quota
  return static_cast<double>(*q) / static_cast<double>(*p);
}

std::optional<std::string> cgroupPath(std::string_view procSelfCgroup,
                                      std::string_view v1Controller) {
  std::istringstream in{std::string(procSelfCgroup)};
  std::string line;
  while (std::getline(in, line)) {
    // hierarchy-ID:controller-list:cgroup-path (the path may itself contain ':')
    auto first = line.find(':');
    if (first == std::string::npos) continue;
    auto second = line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string_view id = std::string_view(line).substr(0, first);
    std::string_view controllers = std::string_view(line).substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (v1Controller.empty()) {
      if (id == "0" && controllers.empty()) return path;
      continue;
    }
    std::string_view rest = controllers;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      if (rest.substr(0, comma) == v1Controller) return path;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return std::nullopt;
}

CpuBudget cpuBudget(unsigned affinityCpus, std::string_view procSelfCgroup,
                    const std::string& cgroupRoot) {
  std::optional<double> quota;
  std::string quotaWhere;
  auto consider = [&](std::optional<double> q, const std::filesystem::path& where) {
    if (q && (!quota || *q < *quota)) {
      quota = q;
      quotaWhere = where.string();
    }
  };
  const std::filesystem::path root(cgroupRoot);
  std::error_code ec;
  if (auto v2 = cgroupPath(procSelfCgroup);
      v2 && std::filesystem::exists(root / "cgroup.controllers", ec)) {
    for (const auto& dir : upFrom(root, *v2)) {
      if (auto text = readSmallFile(dir / "cpu.max")) consider(parseCpuMax(*text), dir / "cpu.max");
    }
  } else if (auto v1 = cgroupPath(procSelfCgroup, "cpu")) {
    for (const char* mount : {"cpu,cpuacct", "cpu", "cpuacct,cpu"}) {
      if (!std::filesystem::is_directory(root / mount, ec)) continue;
      for (const auto& dir : upFrom(root / mount, *v1)) {
        auto q = readSmallFile(dir / "cpu.cfs_quota_us");
        auto p = readSmallFile(dir / "cpu.cfs_period_us");
        if (q && p) consider(parseCfsQuota(*q, *p), dir / "cpu.cfs_quota_us");
      }
      break;
    }
  }

  CpuBudget b;
  const unsigned host = std::max(1u, std::thread::hardware_concurrency());
  const unsigned affinity = affinityCpus ? affinityCpus : host;
  b.cpus = affinity;
  b.why = affinityCpus ? fmt::format("{} CPUs in the affinity mask", affinityCpus)
                       : fmt::format("{} CPUs (affinity mask unknown)", host);
  if (quota && roundUp(*quota) < b.cpus) {
    b.cpus = roundUp(*quota);
    b.why =
        fmt::format("cgroup CPU quota {:.2f} CPUs ({}), rounded up; {}", *quota, quotaWhere, b.why);
  }
  b.cpus = std::max(1u, b.cpus);
  return b;
}

CpuBudget currentCpuBudget() {
  unsigned affinity = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
  std::string cgroup = readSmallFile("/proc/self/cgroup").value_or("");
  return cpuBudget(affinity, cgroup, "/sys/fs/cgroup");
}

}  // namespace sandgate::proxy
