// The evidence bundle of one run (see run_bundle.h).
#include "run/run_bundle.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "run/run_dir.h"
#include "sandbox/exec_watch.h"
#include "sandbox/layer_copy.h"
#include "sandbox/paths.h"

namespace sandgate::run {
namespace {

Diagnostic bundleError(const std::string& why) {
  return Diagnostic{"", 0, 0, "run directory", why};
}

// Puts the entries of the upper layer `newer` on the copy `out` of the layer below it, as
// overlayfs reads them: a whiteout or an opaque directory replaces whatever was there, a plain
// directory merges, anything else replaces.
std::optional<std::string> layerOnto(int newer, int out, const std::string& rel, int depth,
                                     sandbox::LayerCopier* copier) {
  if (depth > 256) return "layers nested deeper than 256 directories";
  std::vector<std::string> names = sandbox::listDirectory(newer);
  for (const auto& name : names) {
    struct stat nst {
    }, ost{};
    if (::fstatat(newer, name.c_str(), &nst, AT_SYMLINK_NOFOLLOW) != 0) continue;
    bool there = ::fstatat(out, name.c_str(), &ost, AT_SYMLINK_NOFOLLOW) == 0;
    if (S_ISDIR(nst.st_mode) && there && S_ISDIR(ost.st_mode)) {
      safe_open::UniqueFd sub(
          ::openat(newer, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      char v[2] = {};
      bool opaque =
          sub.valid() && ::fgetxattr(sub.get(), "user.overlay.opaque", v, 1) == 1 && v[0] == 'y';
      if (sub.valid() && !opaque) {
        safe_open::UniqueFd dst(
            ::openat(out, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!dst.valid()) return std::string("open a layer: ") + std::strerror(errno);
        if (auto e = layerOnto(sub.get(), dst.get(), rel + name + "/", depth + 1, copier)) {
          return e;
        }
        (void)::fchmod(dst.get(), nst.st_mode & 03777);
        continue;
      }
    }
    if (auto e = sandbox::removeLayerEntry(out, name); !e.empty()) return e;
    if (auto e = copier->copyEntry(newer, out, rel, name); !e.empty()) return e;
    if (S_ISDIR(nst.st_mode) && there) {
      // A directory over a whiteout (or a file) of the layer below hides what the workspace
      // holds there, as the whiteout did: in the merged layer it is opaque.
      safe_open::UniqueFd dst(
          ::openat(out, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!dst.valid() || ::fsetxattr(dst.get(), "user.overlay.opaque", "y", 1, 0) != 0) {
        return "mark " + name + " opaque in the merged layer: " + std::strerror(errno);
      }
    }
  }
  return std::nullopt;
}

// overlay/upper of `dir` becomes `earlier`'s upper layer with its own on top; its own is kept
// as overlay/own.
std::optional<std::string> mergeLayers(const RunDir& earlier, const RunDir& dir) {
  const std::string overlay = bundle::kOverlay;
  safe_open::UniqueFd below(
      safe_open::openBeneath(earlier.fd.get(), overlay + "/upper", O_RDONLY | O_DIRECTORY));
  safe_open::UniqueFd layers(safe_open::openBeneath(dir.fd.get(), overlay, O_RDONLY | O_DIRECTORY));
  if (!below.valid() || !layers.valid()) {
    return "open the earlier run's layer: " + safe_open::describeError(errno);
  }
  if (::renameat(layers.get(), "upper", layers.get(), "own") != 0 ||
      ::mkdirat(layers.get(), "upper", 0755) != 0) {
    return std::string("make the merged layer: ") + std::strerror(errno);
  }
  safe_open::UniqueFd own(
      ::openat(layers.get(), "own", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  safe_open::UniqueFd merged(
      ::openat(layers.get(), "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!own.valid() || !merged.valid())
    return std::string("open the layers: ") + std::strerror(errno);
  struct stat st {};
  if (::fstat(own.get(), &st) != 0) {
    return std::string("read the run's layer: ") + std::strerror(errno);
  }
  // Every copy is the run's (the owner of its own layer), never the launcher's: a root launcher
  // would otherwise leave root-owned copies of the workload's files; setuid and setgid bits are
  // dropped, links kept as links, holes as holes (sandbox/layer_copy.h).
  if (::fchown(merged.get(), st.st_uid, st.st_gid) != 0 ||
      ::fchmod(merged.get(), st.st_mode & 0777) != 0) {
    return std::string("make the merged layer: ") + std::strerror(errno);
  }
  sandbox::LayerCopier copier(merged.get(), sandbox::LayerCopyOptions{st.st_uid, st.st_gid, 0});
  if (auto e = copier.copyAll(below.get(), merged.get()); !e.empty()) return e;
  return layerOnto(own.get(), merged.get(), "", 0, &copier);
}

}  // namespace

Result<std::unique_ptr<RunBundle>> RunBundle::begin(
    const RunRequest& req, const WorkspaceId& workspace, sandbox::CheckedWorkspace checked,
    const std::string& policyText, sandbox::Options* options, Diagnostics* unprepared) {
  std::unique_ptr<RunBundle> b(new RunBundle);
  b->startedAt_ = nowUtc();
  b->mode_ =
      options->workspaceMode == sandbox::Options::WorkspaceMode::kOverlay ? "overlay" : "bind";
  // The workspace as it was checked, by descriptor: the lower layer the changes are read
  // against.
  b->workspace_.reset(checked.fd);
  b->workspacePath_ = checked.path;
  auto dir = createRunDir(req.runDir, workspace);
  if (!dir) return dir.errors();
  b->dir_ = std::move(dir.value());
  // From here the directory exists: whatever fails still leaves the bundle, for its report.
  if (auto prepared = b->prepare(req, policyText, options); !prepared) {
    *unprepared = prepared.errors();
  }
  return b;
}

Result<void> RunBundle::prepare(const RunRequest& req, const std::string& policyText,
                                sandbox::Options* options) {
  // The logs first: with audit.jsonl (and overlay/) a directory is a run's to `runs`, `show`
  // and `discard`, so that one whose setup fails below is listed with its report.
  auto audit = dir_.create(bundle::kAudit);
  if (!audit) return audit.errors();
  audit_ = std::make_unique<CappedLog>(std::move(audit.value()), kDefaultEvidenceLogBytes);
  auto execs = dir_.create(bundle::kExecs);
  if (!execs) return execs.errors();
  execs_ = std::make_unique<CappedLog>(std::move(execs.value()), kDefaultEvidenceLogBytes);
  if (mode_ == "overlay") options->overlayDir = dir_.path + "/" + bundle::kOverlay;
  diskBytes_ = options->diskBytes;
  if (req.resume || req.from) {
    if (mode_ != "overlay") {
      return bundleError(
          "--resume and --from need --workspace-mode overlay (an earlier run's "
          "files are a layer of the overlay)");
    }
    const std::string& which = req.resume ? *req.resume : *req.from;
    auto earlier = openRunDir(which);
    if (!earlier) return earlier.errors();
    auto report = earlier.value().read(bundle::kReport);
    boost::system::error_code ec;
    boost::json::parse_options lenient;
    lenient.allow_invalid_utf8 = true;  // the report names the workload's files as they are
    auto v = report ? boost::json::parse(report.value(), ec, {}, lenient) : boost::json::value();
    const auto* run =
        !ec && v.is_object() && v.as_object().contains("run") && v.at("run").is_object()
            ? &v.at("run").as_object()
            : nullptr;
    const auto* ws = run ? run->if_contains("workspace") : nullptr;
    if (ws == nullptr || !ws->is_string() || std::string(ws->as_string()) != workspacePath_) {
      return bundleError(fmt::format(
          "run {} did not run in the workspace {} (its report says {}): start from a run of this "
          "workspace",
          which, workspacePath_, ws && ws->is_string() ? std::string(ws->as_string()) : "nothing"));
    }
    if (req.resume) {
      // A run is continued once (its `resumed_by` is made O_EXCL); branching is --from.
      if (auto e = earlier.value().write("resumed_by", dir_.id + "\n")) {
        return bundleError(
            fmt::format("run {} cannot be resumed: {} (resumed already? branch "
                        "from it with --from)",
                        which, *e));
      }
    }
    options->earlierLayer = earlier.value().path + "/" + bundle::kOverlay + "/upper";
    earlierHow_ = req.resume ? "resumed_from" : "branched_from";
    earlier_ = std::move(earlier.value());
  }
  RunBundle* self = this;
  options->onExec = [self](const sandbox::ExecEvent& e) {
    boost::json::object o;
    o["time"] = e.time;
    o["pid"] = e.pid;
    o["ppid"] = e.ppid;
    o["host_pid"] = e.hostPid;
    o["call"] = e.execveat ? "execveat" : "execve";
    o["path"] = e.path;
    // What ran when the path does not say (fexecve, /proc/self/fd/N), and whether it was a
    // memfd: a program that exists in no file of the sandbox (exec_watch.h).
    o["target"] = e.target.empty() ? boost::json::value(nullptr) : boost::json::value(e.target);
    o["memfd"] = e.memfd;
    boost::json::array argv;
    for (const auto& a : e.argv) argv.emplace_back(a);
    o["argv"] = std::move(argv);
    o["argv_cut"] = e.argvCut;
    o["readable"] = e.readable;  // false: path and argv unknown (exec_watch.h)
    o["exit_status"] = nullptr;  // seccomp sees the call, not the exit (exec_watch.h)
    std::string line = boundedJsonLine(o);
    if (line.rfind("{\"line_cut\":true", 0) == 0) {
      // Cut after escaping: say so where a reader of argv looks too.
      boost::json::value v = boost::json::parse(line);
      v.as_object()["argv_cut"] = true;
      line = boost::json::serialize(v);
    }
    self->execs_->append(line);
    ++self->execCount_;
  };
  for (auto [stream, name, tee, fd] : {std::tuple{1, bundle::kStdout, &out_, &options->stdoutFd},
                                       std::tuple{2, bundle::kStderr, &err_, &options->stderrFd}}) {
    auto log = dir_.create(name);
    if (!log) return log.errors();
    *tee = OutputTee::create(stream, std::move(log.value()), kDefaultOutputLogBytes);
    if (*tee) *fd = (*tee)->writeEnd();
  }
  if (!policyText.empty()) {
    policySha256_ = sha256Hex(policyText);
    if (auto e = dir_.write(bundle::kPolicy, policyText)) return bundleError(*e);
  }
  return {};
}

std::function<void(std::string_view)> RunBundle::auditCopy() {
  return [log = audit_.get()](std::string_view line) {
    if (line.size() <= kMaxEvidenceLineBytes) return log->append(line);
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(line, ec);
    if (!ec && v.is_object()) return log->append(boundedJsonLine(v.as_object()));
    boost::json::object o{{"line_cut", true}, {"line_bytes", line.size()}};
    log->append(boost::json::serialize(o));
  };
}

void RunBundle::started() {
  ran_ = true;
  if (out_) out_->start();
  if (err_) err_->start();
}

boost::json::object RunBundle::finish(std::vector<std::string>* warnings,
                                      const std::string& workspaceCopy) {
  const bool copy = mode_ == "overlay" && !workspaceCopy.empty();
  if (copy) mode_ = "copy";
  boost::json::object run;
  run["id"] = dir_.id;
  run["dir"] = dir_.path;
  run["workspace"] = workspacePath_;
  run["workspace_mode"] = mode_;
  run["workspace_copy"] = copy ? boost::json::value(workspaceCopy) : boost::json::value(nullptr);
  run["started_at"] = startedAt_;
  run["execs"] = execCount_;
  // exec.jsonl and audit.jsonl stop at their limit (capped_log.h); what they left out is counted.
  // A bundle whose setup failed part way may lack its logs (begin()'s `unprepared`).
  run["exec_log_cut"] = execs_ && execs_->cut();
  run["execs_not_logged"] = execs_ ? execs_->linesLeftOut() : 0;
  run["audit_log_cut"] = audit_ && audit_->cut();
  run["audit_lines_not_logged"] = audit_ ? audit_->linesLeftOut() : 0;
  run["disk_bytes"] = diskBytes_ ? boost::json::value(*diskBytes_) : boost::json::value(nullptr);
  run["policy_sha256"] =
      policySha256_.empty() ? boost::json::value(nullptr) : boost::json::value(policySha256_);
  for (auto [tee, key] : {std::pair{&out_, "stdout_log_cut"}, std::pair{&err_, "stderr_log_cut"}}) {
    run[key] = *tee ? boost::json::value((*tee)->finish()) : boost::json::value(nullptr);
  }
  for (const char* how : {"resumed_from", "branched_from"}) {
    run[how] = earlier_ && earlierHow_ == how ? boost::json::value(earlier_->id)
                                              : boost::json::value(nullptr);
  }
  boost::json::object out;
  out["run"] = std::move(run);
  out["changes"] = nullptr;
  // A sandbox that never started changed nothing: there is nothing to read, and no warning
  // that it could not be read.
  if (!ran_) return out;
  if (mode_ != "overlay" && mode_ != "copy") return out;
  if (earlier_) {
    // The changes of a continued run count from the workspace: its upper layer becomes the
    // earlier run's with this run's on top (overlay/own keeps this run's alone).
    if (auto e = mergeLayers(*earlier_, dir_)) {
      warnings->push_back("changes: " + *e);
      return out;
    }
  }
  const std::string upperPath = dir_.path + "/" + bundle::kOverlay + "/upper";
  safe_open::UniqueFd upper(safe_open::openBeneath(
      dir_.fd.get(), std::string(bundle::kOverlay) + "/upper", O_RDONLY | O_DIRECTORY));
  if (!upper.valid() || !workspace_.valid()) {
    warnings->push_back("changes: the upper layer or the workspace cannot be opened: " +
                        safe_open::describeError(errno));
    return out;
  }
  // A copy holds every file: what it lacks was deleted (each directory reads as opaque).
  auto set = collectChanges(workspace_.get(), upper.get(), workspacePath_, copy);
  if (!set) {
    warnings->push_back("changes: " + set.errors().front().message);
    return out;
  }
  // The patch first: a file it cannot show gets its note, which changes.json must carry
  // (apply never applies what the patch does not show unless it is named).
  std::vector<std::string> skipped;
  auto patch = formatPatch(&set.value(), workspacePath_, upperPath, &skipped);
  for (const auto& s : skipped) warnings->push_back("changes.patch: left out " + s);
  if (!patch) {
    warnings->push_back("changes.patch: " + patch.errors().front().message);
    for (auto& c : set.value().changes) {
      if (c.note.empty()) c.note = "the patch could not be made: not shown";
    }
  } else if (auto e = dir_.write(bundle::kPatch, patch.value())) {
    warnings->push_back("changes.patch: " + *e);
  }
  if (auto e =
          dir_.write(bundle::kChanges, boost::json::serialize(changesToJson(set.value())) + "\n")) {
    warnings->push_back("changes: " + *e);
  }
  out["changes"] = changeSummary(set.value());
  return out;
}

}  // namespace sandgate::run
