// The evidence bundle of one run (see run_bundle.h).
#include "run/run_bundle.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <climits>
#include <ctime>

namespace sandgate::run {
namespace {

std::string nowUtc() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Diagnostic bundleError(const std::string& why) { return Diagnostic{"", 0, 0, "run directory", why}; }

}  // namespace

Result<std::unique_ptr<RunBundle>> RunBundle::begin(const RunRequest& req,
                                                    const WorkspaceId& workspace,
                                                    sandbox::CheckedWorkspace checked,
                                                    const std::string& policyText,
                                                    sandbox::Options* options) {
  std::unique_ptr<RunBundle> b(new RunBundle);
  b->startedAt_ = nowUtc();
  b->mode_ = options->workspaceMode == sandbox::Options::WorkspaceMode::kOverlay ? "overlay" : "bind";
  auto dir = createRunDir(req.runDir, workspace);
  if (!dir) return dir.errors();
  b->dir_ = std::move(dir.value());
  // The workspace as it was checked, by descriptor: the lower layer the changes are read
  // against.
  b->workspace_.reset(checked.fd);
  b->workspacePath_ = checked.path;
  if (b->mode_ == "overlay") options->overlayDir = b->dir_.path + "/" + bundle::kOverlay;
  b->diskBytes_ = options->diskBytes;
  auto audit = b->dir_.create(bundle::kAudit);
  if (!audit) return audit.errors();
  b->audit_ = std::move(audit.value());
  for (auto [stream, name, tee, fd] :
       {std::tuple{1, bundle::kStdout, &b->out_, &options->stdoutFd},
        std::tuple{2, bundle::kStderr, &b->err_, &options->stderrFd}}) {
    auto log = b->dir_.create(name);
    if (!log) return log.errors();
    *tee = OutputTee::create(stream, std::move(log.value()), kDefaultOutputLogBytes);
    if (*tee) *fd = (*tee)->writeEnd();
  }
  if (!policyText.empty()) {
    b->policySha256_ = sha256Hex(policyText);
    if (auto e = b->dir_.write(bundle::kPolicy, policyText)) return bundleError(*e);
  }
  return b;
}

void RunBundle::started() {
  if (out_) out_->start();
  if (err_) err_->start();
}

boost::json::object RunBundle::finish(std::vector<std::string>* warnings) {
  boost::json::object run;
  run["id"] = dir_.id;
  run["dir"] = dir_.path;
  run["workspace"] = workspacePath_;
  run["workspace_mode"] = mode_;
  run["started_at"] = startedAt_;
  run["disk_bytes"] = diskBytes_ ? boost::json::value(*diskBytes_) : boost::json::value(nullptr);
  run["policy_sha256"] = policySha256_.empty() ? boost::json::value(nullptr)
                                               : boost::json::value(policySha256_);
  for (auto [tee, key] : {std::pair{&out_, "stdout_log_cut"}, std::pair{&err_, "stderr_log_cut"}}) {
    run[key] = *tee ? boost::json::value((*tee)->finish()) : boost::json::value(nullptr);
  }
  boost::json::object out;
  out["run"] = std::move(run);
  out["changes"] = nullptr;
  if (mode_ != "overlay") return out;
  const std::string upperPath = dir_.path + "/" + bundle::kOverlay + "/upper";
  safe_open::UniqueFd upper(
      safe_open::openBeneath(dir_.fd.get(), std::string(bundle::kOverlay) + "/upper",
                             O_RDONLY | O_DIRECTORY));
  if (!upper.valid() || !workspace_.valid()) {
    warnings->push_back("changes: the upper layer or the workspace cannot be opened: " +
                        safe_open::describeError(errno));
    return out;
  }
  auto set = collectChanges(workspace_.get(), upper.get(), workspacePath_);
  if (!set) {
    warnings->push_back("changes: " + set.errors().front().message);
    return out;
  }
  if (auto e = dir_.write(bundle::kChanges, boost::json::serialize(changesToJson(set.value())) + "\n")) {
    warnings->push_back("changes: " + *e);
  }
  std::vector<std::string> skipped;
  auto patch = formatPatch(set.value(), workspacePath_, upperPath, &skipped);
  for (const auto& s : skipped) warnings->push_back("changes.patch: left out " + s);
  if (!patch) {
    warnings->push_back("changes.patch: " + patch.errors().front().message);
  } else if (auto e = dir_.write(bundle::kPatch, patch.value())) {
    warnings->push_back("changes.patch: " + *e);
  }
  out["changes"] = changeSummary(set.value());
  return out;
}

}  // namespace sandgate::run
