// process_* metrics from /proc/self: the names and meanings of the official client libraries,
// so the usual dashboards and alerts work on sandgate unchanged.
#include "proxy/observe/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace sandgate::proxy {
namespace {

void add(std::vector<prometheus::MetricFamily>& out, const char* name, const char* help,
         prometheus::MetricType type, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  out.push_back(std::move(f));
}

// The fields of /proc/self/stat after the command name (which may hold spaces and parentheses:
// the name ends at the last ')'). Field 3 of proc(5) is element 0.
std::optional<std::vector<std::string>> statFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  if (fields.size() < 22) return std::nullopt;
  return fields;
}

std::optional<double> bootTimeSeconds() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double t = 0;
      if (in >> t) return t;
      return std::nullopt;
    }
    in.ignore(1 << 16, '\n');
  }
  return std::nullopt;
}

std::optional<double> openFds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return std::nullopt;
  double n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

}  // namespace

void appendProcessMetrics(std::vector<prometheus::MetricFamily>& out) {
  using prometheus::MetricType;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  if (auto f = statFields(); f && ticks > 0) {
    // proc(5) fields 14 utime, 15 stime, 20 num_threads, 22 starttime, 23 vsize, 24 rss.
    const double cpu =
        (std::strtod((*f)[11].c_str(), nullptr) + std::strtod((*f)[12].c_str(), nullptr)) / ticks;
    add(out, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
        MetricType::Counter, cpu);
    add(out, "process_threads", "Number of OS threads in the process.", MetricType::Gauge,
        std::strtod((*f)[17].c_str(), nullptr));
    if (auto boot = bootTimeSeconds()) {
      add(out, "process_start_time_seconds",
          "Start time of the process since unix epoch in seconds.", MetricType::Gauge,
          *boot + std::strtod((*f)[19].c_str(), nullptr) / ticks);
    }
    add(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge,
        std::strtod((*f)[20].c_str(), nullptr));
    add(out, "process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
        std::strtod((*f)[21].c_str(), nullptr) * page);
  }
  if (auto n = openFds()) {
    add(out, "process_open_fds", "Number of open file descriptors.", MetricType::Gauge, *n);
  }
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    add(out, "process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge,
        static_cast<double>(lim.rlim_cur));
  }
}

}  // namespace sandgate::proxy
