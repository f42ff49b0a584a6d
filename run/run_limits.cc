// The sandbox's limits for one `sandgate run` (see run_limits.h).
#include "run/run_limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace sandgate::run {
namespace {

using std::chrono::milliseconds;

// A flag's value: nullopt when not given; otherwise `unlimited` (reset) or parsed by `parse`.
// Returns false after writing the usage error.
template <typename T, typename Parse>
bool applyFlag(const std::optional<std::string>& flag, std::string_view name,
               std::string_view expected, Parse parse, std::optional<T>* out, bool* isDefault,
               std::string* error) {
  if (!flag) return true;
  if (isDefault != nullptr) *isDefault = false;  // asked for: refuse if it cannot be enforced
  if (*flag == config::kUnlimited) {
    out->reset();
    return true;
  }
  auto v = parse(*flag);
  if (!v) {
    *error = fmt::format("{} {}: expected {} or {}", name, *flag, expected, config::kUnlimited);
    return false;
  }
  *out = *v;
  return true;
}

std::optional<uint64_t> positiveSize(std::string_view s) {
  auto v = config::parseSize(s);
  return v && *v > 0 ? v : std::nullopt;
}

std::optional<milliseconds> positiveDuration(std::string_view s) {
  auto d = config::parseDuration(s);
  if (!d || d->count() <= 0) return std::nullopt;
  // At least 1 ms: a shorter timeout would truncate to "fire at once".
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(*d));
}

}  // namespace

RunLimits RunLimits::of(const sandbox::Options& o) {
  return RunLimits{o.memoryBytes, o.pids, o.cpus, o.timeout, o.tmpfsBytes};
}

std::string applySandboxSettings(const config::Sandbox& sb, const RunRequest& req,
                                 sandbox::Options* o) {
  o->memoryBytes = sb.memoryBytes;
  o->pids = sb.pids;
  o->cpus = sb.cpus;
  o->timeout.reset();
  if (sb.timeout) {
    o->timeout = std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(*sb.timeout));
  }
  o->memoryIsDefault = o->pidsIsDefault = o->cpusIsDefault = true;
  o->tmpfsBytes = sb.tmpfsBytes;
  o->readOnlyPaths = sb.readOnlyPaths;
  o->idRangeFirst = sb.idRangeFirst;
  o->idRangeCount = sb.idRangeCount;
  std::string mode = req.workspaceMode.value_or(sb.workspaceMode);
  if (mode != "overlay" && mode != "bind") {
    return fmt::format("--workspace-mode {}: expected overlay or bind", mode);
  }
  o->workspaceMode = mode == "overlay" ? sandbox::Options::WorkspaceMode::kOverlay
                                       : sandbox::Options::WorkspaceMode::kBind;
  // sandbox.disk is overlay mode's default: bind mode has no upper layer to bound (the config
  // may say overlay and the flag bind). --disk overrides it, `unlimited` included.
  o->diskBytes.reset();
  if (mode == "overlay") o->diskBytes = sb.diskBytes;
  if (req.disk && *req.disk == config::kUnlimited) {
    o->diskBytes.reset();
  } else if (req.disk) {
    auto v = positiveSize(*req.disk);
    if (!v) {
      return fmt::format("--disk {}: expected a size such as 512M or 2G, or {}", *req.disk,
                         config::kUnlimited);
    }
    if (mode != "overlay") {
      return "--disk bounds the overlay's upper layer: it needs --workspace-mode overlay (bind "
             "mode writes the host's directory itself)";
    }
    o->diskBytes = *v;
  }

  std::string error;
  if (!applyFlag(req.memory, "--memory", "a size such as 512M or 2G", positiveSize, &o->memoryBytes,
                 &o->memoryIsDefault, &error) ||
      !applyFlag(req.pids, "--pids", "an integer from 1 to 4294967295", config::parsePidsLimit,
                 &o->pids, &o->pidsIsDefault, &error) ||
      !applyFlag(req.cpus, "--cpus", "a number of cores greater than 0 such as 1.5",
                 config::parseCpusLimit, &o->cpus, &o->cpusIsDefault, &error) ||
      !applyFlag(req.timeout, "--timeout", "a duration such as 90s or 30m", positiveDuration,
                 &o->timeout, nullptr, &error)) {
    return error;
  }
  if (req.tmpfsSize) {
    auto v = positiveSize(*req.tmpfsSize);
    if (!v) {
      // No `unlimited`: an unsized tmpfs takes up to half of RAM, each.
      return fmt::format(
          "--tmpfs-size {}: expected a size such as 256M or 1G{}", *req.tmpfsSize,
          *req.tmpfsSize == config::kUnlimited ? " (a tmpfs cannot be unlimited)" : "");
    }
    o->tmpfsBytes = *v;
  }
  for (const auto& p : req.readOnly) {
    // A flag is typed in a shell: a relative path means the launcher's cwd, as usual.
    std::error_code ec;
    auto abs = std::filesystem::absolute(p, ec);
    if (ec) return fmt::format("--ro {}: {}", p, ec.message());
    std::string why;
    auto path = config::normaliseReadOnlyPath(abs.string(), &why);
    if (!path) return fmt::format("--ro {}: {}", p, why);
    if (std::find(o->readOnlyPaths.begin(), o->readOnlyPaths.end(), *path) ==
        o->readOnlyPaths.end()) {
      o->readOnlyPaths.push_back(std::move(*path));
    }
  }
  // Said once the cgroup is made, so that a limit this machine cannot enforce is not claimed.
  o->onLimits = [limits = RunLimits::of(*o)](const std::vector<std::string>& unenforced) {
    fmt::print(stderr, "sandgate run: limits: {}\n", describeLimits(limits, unenforced));
  };
  return {};
}

std::string formatSize(uint64_t bytes) {
  // The units parseSize reads, so that the text can be pasted back as a value.
  static constexpr std::pair<uint64_t, const char*> kUnits[] = {
      {uint64_t{1} << 30, "G"}, {uint64_t{1} << 20, "M"}, {1024, "K"}};
  for (auto [factor, unit] : kUnits) {
    if (bytes != 0 && bytes % factor == 0) return fmt::format("{}{}", bytes / factor, unit);
  }
  return fmt::format("{}B", bytes);
}

std::string formatDuration(milliseconds d) {
  int64_t ms = d.count();
  std::string out;
  for (auto [factor, unit] :
       {std::pair<int64_t, const char*>{3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}}) {
    if (ms >= factor) {
      out += fmt::format("{}{}", ms / factor, unit);
      ms %= factor;
    }
  }
  return out.empty() ? "0s" : out;
}

bool isUnenforced(const std::vector<std::string>& unenforced, std::string_view controller) {
  return std::any_of(unenforced.begin(), unenforced.end(), [&](const std::string& u) {
    return u.size() > controller.size() && u.compare(0, controller.size(), controller) == 0 &&
           u[controller.size()] == ':';
  });
}

std::string describeLimits(const RunLimits& l, const std::vector<std::string>& unenforced) {
  auto limit = [&](const char* name, const char* controller, std::optional<std::string> value) {
    if (!value) return fmt::format("{} unlimited", name);
    if (controller && isUnenforced(unenforced, controller)) {
      return fmt::format("{} {} (NOT ENFORCED)", name, *value);
    }
    return fmt::format("{} {}", name, *value);
  };
  auto opt = [](const auto& v, auto f) -> std::optional<std::string> {
    if (!v) return std::nullopt;
    return f(*v);
  };
  return fmt::format(
      "{}, {}, {}, {}, tmpfs {} each (/tmp /run /dev/shm)",
      limit("memory", "memory", opt(l.memoryBytes, formatSize)),
      limit("pids", "pids", opt(l.pids, [](uint32_t n) { return std::to_string(n); })),
      limit("cpus", "cpu", opt(l.cpus, [](double c) { return fmt::format("{}", c); })),
      limit("timeout", nullptr, opt(l.timeout, formatDuration)), formatSize(l.tmpfsBytes));
}

boost::json::object limitsToJson(const RunLimits& l, const std::vector<std::string>& unenforced) {
  boost::json::object o, enforced;
  auto put = [&](const char* key, const char* name, const char* controller, bool set, auto value) {
    if (set) {
      o[key] = value;
      enforced[name] = controller == nullptr || !isUnenforced(unenforced, controller);
    } else {
      o[key] = nullptr;
      enforced[name] = nullptr;
    }
  };
  put("memory_bytes", "memory", "memory", l.memoryBytes.has_value(), l.memoryBytes.value_or(0));
  put("pids", "pids", "pids", l.pids.has_value(), l.pids.value_or(0));
  // Whole numbers as integers (boost::json writes a double 7200 as 7.2E3).
  double cpus = l.cpus.value_or(0);
  if (cpus == std::floor(cpus)) {
    put("cpus", "cpus", "cpu", l.cpus.has_value(), static_cast<int64_t>(cpus));
  } else {
    put("cpus", "cpus", "cpu", l.cpus.has_value(), cpus);
  }
  int64_t ms = l.timeout ? l.timeout->count() : 0;
  if (ms % 1000 == 0) {
    put("timeout_seconds", "timeout", nullptr, l.timeout.has_value(), ms / 1000);
  } else {
    put("timeout_seconds", "timeout", nullptr, l.timeout.has_value(),
        static_cast<double>(ms) / 1000);
  }
  put("tmpfs_bytes", "tmpfs", nullptr, true, l.tmpfsBytes);
  o["enforced"] = std::move(enforced);
  return o;
}

}  // namespace sandgate::run
