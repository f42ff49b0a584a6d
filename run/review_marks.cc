// Marks of what became of a run: applied, discarded (see review_marks.h).
#include "run/review_marks.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <deque>

#include "run/run_dir.h"

namespace sandgate::run {
namespace {

// The default run directory, resolved as createRunDir resolves it; "" when there is none.
std::string defaultBase() {
  const std::string base = defaultRunsDirectory();
  char real[PATH_MAX];
  if (base.empty() || ::realpath(base.c_str(), real) == nullptr) return "";
  return real;
}

std::string field(const boost::json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "-";
}

}  // namespace

std::optional<std::string> markApplied(const RunDir& dir, const ApplyRequest& req, size_t count) {
  boost::json::object o;
  o["applied_at"] = nowUtc();
  o["changes"] = count;
  boost::json::array paths;
  for (const auto& p : req.paths) paths.emplace_back(p);
  o["paths"] = std::move(paths);
  // The latest apply is the one that says what the workspace holds of the run.
  if (::unlinkat(dir.fd.get(), kAppliedMark, 0) != 0 && errno != ENOENT) {
    return std::string("cannot replace ") + kAppliedMark;
  }
  return dir.write(kAppliedMark, boost::json::serialize(o) + "\n");
}

std::string reviewState(const RunDir& dir) {
  auto text = dir.read(kAppliedMark, 1 << 20);
  if (!text) return "-";
  boost::system::error_code ec;
  auto v = boost::json::parse(text.value(), ec);
  if (ec || !v.is_object()) return "-";
  const auto* paths = v.as_object().if_contains("paths");
  bool some = paths != nullptr && paths->is_array() && !paths->as_array().empty();
  return some ? "applied (paths)" : "applied";
}

void noteDiscarded(const RunDir& dir, const DiscardedRun& run) {
  const std::string base = defaultBase();
  if (base.empty() || dir.path != base + "/" + dir.id) return;
  safe_open::UniqueFd baseFd(safe_open::openNoSymlinks(base, O_RDONLY | O_DIRECTORY));
  if (!baseFd.valid()) return;
  safe_open::UniqueFd log(::openat(baseFd.get(), kDiscardedLog,
                                   O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!log.valid()) return;
  boost::json::object o{{"id", run.id},
                        {"task", run.task},
                        {"started_at", run.startedAt},
                        {"command", run.command},
                        {"discarded_at", nowUtc()}};
  (void)safe_open::writeAll(log.get(), boost::json::serialize(o) + "\n");
}

std::vector<DiscardedRun> discardedRuns() {
  std::vector<DiscardedRun> out;
  const std::string base = defaultBase();
  if (base.empty()) return out;
  safe_open::UniqueFd baseFd(safe_open::openNoSymlinks(base, O_RDONLY | O_DIRECTORY));
  if (!baseFd.valid()) return out;
  RunDir at;  // read() beneath the base, no link followed, bounded
  at.fd = std::move(baseFd);
  auto text = at.read(kDiscardedLog, 4u << 20);
  if (!text) return out;
  std::deque<DiscardedRun> last;
  const std::string& t = text.value();
  for (size_t pos = 0; pos < t.size();) {
    size_t nl = t.find('\n', pos);
    size_t end = nl == std::string::npos ? t.size() : nl;
    boost::system::error_code ec;
    auto v = boost::json::parse(std::string_view(t).substr(pos, end - pos), ec);
    if (!ec && v.is_object()) {
      const auto& o = v.as_object();
      last.push_back(
          {field(o, "id"), field(o, "task"), field(o, "started_at"), field(o, "command")});
      if (last.size() > 1000) last.pop_front();
    }
    pos = end + 1;
  }
  out.assign(last.begin(), last.end());
  return out;
}

}  // namespace sandgate::run
