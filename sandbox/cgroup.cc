// Per-run cgroup directories: discovery (v2 first, v1 per controller), limits, stats, removal.
#include "sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

std::optional<std::string> readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Returns 0 or errno.
int writeFile(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = write(fd, content.data(), content.size());
  int err = n < 0 ? errno : (n == static_cast<ssize_t>(content.size()) ? 0 : EIO);
  close(fd);
  return err;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  for (const auto& e : v) {
    if (e == x) return true;
  }
  return false;
}

// "key value" lines (memory.events, pids.events, memory.oom_control).
std::optional<uint64_t> keyedValue(const std::optional<std::string>& text, const std::string& key) {
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::optional<uint64_t> number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  try {
    return std::stoull(*text);
  } catch (...) {
    return std::nullopt;
  }
}

struct Hierarchy {
  std::string mountPoint;
  std::string root;  // the mount's root inside the hierarchy (a cgroup namespace or a bind)
  std::vector<std::string> controllers;
  bool v2 = false;
};

// Mounted cgroup hierarchies, from /proc/self/mountinfo.
std::vector<Hierarchy> hierarchies() {
  std::vector<Hierarchy> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  for (int i = 0; i < 100000 && std::getline(in, line); ++i) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    auto left = split(line.substr(0, dash), ' ');
    auto right = split(line.substr(dash + 3), ' ');
    if (left.size() < 5 || right.size() < 3) continue;
    Hierarchy h;
    h.root = left[3];
    h.mountPoint = left[4];
    if (right[0] == "cgroup2") {
      h.v2 = true;
    } else if (right[0] == "cgroup") {
      h.controllers = split(right[2], ',');
    } else {
      continue;
    }
    out.push_back(h);
  }
  return out;
}

// The launcher's own cgroup directory in a hierarchy (v2: the "0::" line; v1: the line that
// names `controller`).
std::optional<std::string> ownPath(const Hierarchy& h, const std::string& controller = {}) {
  auto text = readFile("/proc/self/cgroup");
  if (!text) return std::nullopt;
  for (const auto& line : split(*text, '\n')) {
    auto a = line.find(':');
    auto b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    auto list = split(line.substr(a + 1, b - a - 1), ',');
    bool match = h.v2 ? line.substr(0, a) == "0" && list.empty() : contains(list, controller);
    if (!match) continue;
    std::string path = line.substr(b + 1);
    if (h.root != "/" && path.rfind(h.root, 0) == 0) path = path.substr(h.root.size());
    if (path == "/") path.clear();
    return h.mountPoint + path;
  }
  return std::nullopt;
}

// Removes from `parent` the run cgroups that a launcher killed before its own cleanup left
// behind: sandgate-<pid>-<n> where no process <pid> exists. rmdir(2) removes only an empty
// cgroup, so one that still holds processes stays (and is not ours to kill).
void removeStale(const std::string& parent) {
  DIR* dir = opendir(parent.c_str());
  if (dir == nullptr) return;
  const std::string self = "sandgate-" + std::to_string(getpid()) + "-";
  int seen = 0;
  while (dirent* e = readdir(dir)) {
    if (++seen > 100000) break;
    std::string_view name = e->d_name;
    if (e->d_type != DT_DIR || name.rfind("sandgate-", 0) != 0 || name.rfind(self, 0) == 0) {
      continue;
    }
    std::string_view rest = name.substr(9);
    auto dash = rest.find('-');
    pid_t pid = 0;
    uint64_t run = 0;
    if (dash == std::string_view::npos || dash == 0 || dash + 1 == rest.size()) continue;
    auto p1 = std::from_chars(rest.data(), rest.data() + dash, pid);
    auto p2 = std::from_chars(rest.data() + dash + 1, rest.data() + rest.size(), run);
    if (p1.ec != std::errc() || p1.ptr != rest.data() + dash || p2.ec != std::errc() ||
        p2.ptr != rest.data() + rest.size() || pid <= 0) {
      continue;
    }
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // its launcher may still be running
    std::string path = parent + "/" + std::string(name);
    if (rmdir(path.c_str()) == 0) {
      spdlog::warn("sandbox: removed {}, left by a launcher that was killed", path);
    }
  }
  closedir(dir);
}

std::string fmtCpu(double cpus, uint64_t period) {
  auto quota = static_cast<uint64_t>(std::llround(cpus * static_cast<double>(period)));
  if (quota < 1000) quota = 1000;  // the kernel's minimum quota is 1ms
  return std::to_string(quota);
}

}  // namespace

std::unique_ptr<Cgroup> Cgroup::create(const CgroupLimits& limits, const std::string& name,
                                       std::vector<std::string>* unenforced,
                                       std::vector<std::string>* warnings) {
  std::unique_ptr<Cgroup> cg(new Cgroup());
  auto all = hierarchies();
  const Hierarchy* v2 = nullptr;
  for (const auto& h : all) {
    if (h.v2) v2 = &h;
  }
  std::optional<std::string> v2parent = v2 ? ownPath(*v2) : std::nullopt;
  std::vector<std::string> v2available;
  if (v2parent) {
    v2available = split(readFile(*v2parent + "/cgroup.controllers").value_or(""), ' ');
    for (auto& c : v2available) {
      while (!c.empty() && c.back() == '\n') c.pop_back();
    }
  }

  struct Want {
    std::string controller;
    bool required;
  };
  // The memory controller is wanted even without a limit: it measures peak memory.
  std::vector<Want> wants = {{"memory", limits.memoryBytes.has_value()},
                             {"cpu", limits.cpus.has_value()},
                             {"pids", limits.pids.has_value()}};
  std::set<std::string> swept;  // parent directories already cleared of stale run cgroups
  for (const auto& w : wants) {
    if (!w.required && w.controller != "memory") continue;
    std::string why;
    Dir* dir = nullptr;
    // cgroup v2: the controller must be available and enabled in our cgroup's subtree_control
    // (enabling it fails with EBUSY when our cgroup holds processes: the no-internal-process
    // rule); then the run's cgroup is a child of the launcher's own cgroup.
    if (v2parent && contains(v2available, w.controller)) {
      auto sub = split(readFile(*v2parent + "/cgroup.subtree_control").value_or(""), ' ');
      for (auto& c : sub) {
        while (!c.empty() && c.back() == '\n') c.pop_back();
      }
      int err = contains(sub, w.controller)
                    ? 0
                    : writeFile(*v2parent + "/cgroup.subtree_control", "+" + w.controller);
      if (err == 0) {
        if (swept.insert(*v2parent).second) removeStale(*v2parent);
        std::string path = *v2parent + "/" + name;
        for (auto& d : cg->dirs_) {
          if (d.path == path) dir = &d;
        }
        if (dir == nullptr && (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST)) {
          cg->dirs_.push_back({path, true, {}});
          dir = &cg->dirs_.back();
        } else if (dir == nullptr) {
          why = sysFailure("cgroup v2 " + path, "mkdir", errno);
        }
      } else {
        why = sysFailure("enable " + w.controller + " in " + *v2parent + "/cgroup.subtree_control",
                         "write", err);
      }
    } else {
      why = "cgroup v2 has no " + w.controller + " controller";
    }
    if (dir == nullptr) {
      for (const auto& h : all) {
        if (h.v2 || !contains(h.controllers, w.controller)) continue;
        auto base = ownPath(h, w.controller);
        if (!base) continue;
        if (swept.insert(*base).second) removeStale(*base);
        std::string path = *base + "/" + name;
        for (auto& d : cg->dirs_) {
          if (d.path == path) dir = &d;
        }
        if (dir == nullptr && mkdir(path.c_str(), 0755) == 0) {
          cg->dirs_.push_back({path, false, {}});
          dir = &cg->dirs_.back();
        } else if (dir == nullptr) {
          why += "; " + sysFailure("cgroup v1 " + path, "mkdir", errno);
        }
        break;
      }
      if (dir == nullptr && why.find("v1") == std::string::npos) {
        why += "; no cgroup v1 " + w.controller + " hierarchy is mounted";
      }
    }
    int err = 0;
    std::string file;
    if (dir != nullptr) {
      dir->controllers.push_back(w.controller);
      const std::string& p = dir->path;
      if (w.controller == "memory" && limits.memoryBytes) {
        std::string bytes = std::to_string(*limits.memoryBytes);
        if (dir->v2) {
          err = writeFile(file = p + "/memory.max", bytes);
          // No swap: otherwise the workload could keep running past its limit in swap.
          if (err == 0 && access((p + "/memory.swap.max").c_str(), F_OK) == 0) {
            err = writeFile(file = p + "/memory.swap.max", "0");
          }
        } else {
          err = writeFile(file = p + "/memory.limit_in_bytes", bytes);
          if (err == 0 && access((p + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0) {
            err = writeFile(file = p + "/memory.memsw.limit_in_bytes", bytes);
          } else if (err == 0 && warnings) {
            warnings->push_back(
                "memory limit: no swap accounting (memory.memsw), swap is not "
                "counted against the limit");
          }
        }
      } else if (w.controller == "cpu") {
        if (dir->v2) {
          err = writeFile(file = p + "/cpu.max", fmtCpu(*limits.cpus, 100000) + " 100000");
        } else {
          err = writeFile(file = p + "/cpu.cfs_period_us", "100000");
          if (err == 0)
            err = writeFile(file = p + "/cpu.cfs_quota_us", fmtCpu(*limits.cpus, 100000));
        }
      } else if (w.controller == "pids") {
        err = writeFile(file = p + "/pids.max", std::to_string(*limits.pids));
      }
      if (err != 0) why = sysFailure("set " + w.controller + " limit in " + file, "write", err);
    }
    // sysFailure's "sandbox: " dropped: the warning that carries `why` says it already.
    for (size_t at; (at = why.find("sandbox: ")) != std::string::npos;) why.erase(at, 9);
    if ((dir == nullptr || err != 0) && w.required && unenforced) {
      unenforced->push_back(w.controller + ": " + why);
    } else if (dir == nullptr && warnings) {
      warnings->push_back("peak memory is not measured: " + why);
    }
  }
  return cg;
}

Cgroup::~Cgroup() {
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    const std::string& p = it->path;
    // Bounded: 300 × 10 ms. The sandbox's PID 1 has exited, so what is left is dying; the
    // kill is for anything that escaped the PID namespace teardown (it cannot, but be sure).
    for (int i = 0; i < 300; ++i) {
      if (rmdir(p.c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY) break;
      if (i % 50 == 10) {
        if (it->v2 && writeFile(p + "/cgroup.kill", "1") == 0) continue;
        for (const auto& pid : split(readFile(p + "/cgroup.procs").value_or(""), '\n')) {
          if (!pid.empty()) kill(static_cast<pid_t>(std::stol(pid)), SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

std::string Cgroup::addProcess(pid_t pid) {
  for (const auto& d : dirs_) {
    if (int err = writeFile(d.path + "/cgroup.procs", std::to_string(pid)); err != 0) {
      return sysFailure("move pid " + std::to_string(pid) + " into " + d.path, "write", err);
    }
  }
  return {};
}

const Cgroup::Dir* Cgroup::find(const std::string& controller) const {
  for (const auto& d : dirs_) {
    if (contains(d.controllers, controller)) return &d;
  }
  return nullptr;
}

CgroupStats Cgroup::stats() const {
  CgroupStats s;
  if (const Dir* m = find("memory")) {
    if (m->v2) {
      s.peakMemoryBytes = number(readFile(m->path + "/memory.peak"));
      s.oomKills = keyedValue(readFile(m->path + "/memory.events"), "oom_kill").value_or(0);
    } else {
      s.peakMemoryBytes = number(readFile(m->path + "/memory.max_usage_in_bytes"));
      s.oomKills = keyedValue(readFile(m->path + "/memory.oom_control"), "oom_kill").value_or(0);
      s.memoryFailures = number(readFile(m->path + "/memory.failcnt")).value_or(0);
    }
  }
  if (const Dir* p = find("pids")) {
    s.pidsLimitReached = keyedValue(readFile(p->path + "/pids.events"), "max").value_or(0) > 0;
  }
  return s;
}

std::vector<std::string> Cgroup::paths() const {
  std::vector<std::string> out;
  for (const auto& d : dirs_) out.push_back(d.path);
  return out;
}

}  // namespace sandgate::sandbox
