// `sandgate runs`, `show`, `diff`, `apply`, `discard` (see run_review.h).
#include "run/run_review.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <boost/json.hpp>
#include <cstdio>
#include <set>
#include <vector>

#include "common/terminal_text.h"
#include "run/changes.h"
#include "run/review_marks.h"
#include "run/run_dir.h"
#include "run/run_task.h"

namespace sandgate::run {
namespace {

int complain(const std::string& what, const Diagnostic& d) {
  fmt::print(stderr, "sandgate {}: {}\n", what, escapeText(d.message, true));
  return d.message.find(reason::kNoSuchRun) != std::string::npos ? kExitUsage : kExitSetupFailed;
}

std::optional<boost::json::object> readReport(const RunDir& dir) {
  auto text = dir.read(bundle::kReport);
  if (!text) return std::nullopt;
  boost::system::error_code ec;
  // The report names the workload's files (changes.paths), not always in UTF-8.
  boost::json::parse_options options;
  options.allow_invalid_utf8 = true;
  auto v = boost::json::parse(text.value(), ec, {}, options);
  if (ec || !v.is_object()) return std::nullopt;
  return v.as_object();
}

std::string str(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return "-";
  if (v->is_string()) return std::string(v->as_string());
  return boost::json::serialize(*v);
}

// A field as a person may see it: the report holds the workload's bytes (hosts, reasons,
// paths, the command), and a control byte printed raw would rewrite the reviewer's terminal.
std::string shown(const boost::json::object& o, std::string_view key) {
  return escapeText(str(o, key), true);
}
std::string shownName(const boost::json::object& o, std::string_view key) {
  return quoteName(str(o, key));
}

const boost::json::object* obj(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? &v->as_object() : nullptr;
}

std::string commandOf(const boost::json::object& report) {
  std::string out;
  if (const auto* c = report.if_contains("command"); c && c->is_array()) {
    for (const auto& a : c->as_array()) {
      if (a.is_string()) out += (out.empty() ? "" : " ") + quoteName(a.as_string());
    }
  }
  return out;
}

uint64_t changedFiles(const boost::json::object& report) {
  const auto* c = obj(report, "changes");
  if (c == nullptr) return 0;
  uint64_t n = 0;
  for (const char* k : {"added", "modified", "deleted", "mode"}) {
    if (const auto* v = c->if_contains(k); v && v->is_number()) n += v->to_number<uint64_t>();
  }
  return n;
}

// The change list: every .git path apart and first (never shown in the patch, never applied;
// the flagged ones are code or settings git runs), then the rest with what the patch leaves
// out. Every name quoted: a name is the workload's bytes.
void printChanges(const ChangeSet& set) {
  for (const auto& c : set.changes) {
    if (c.git && c.flagged) {
      fmt::print(
          "FLAGGED    {} {} (runs or is obeyed by git outside the sandbox; not shown, never "
          "applied)\n",
          kindName(c.kind), quoteName(c.path));
    }
  }
  for (const auto& c : set.changes) {
    if (c.git && !c.flagged) {
      fmt::print("GIT        {} {} (inside .git: not shown, never applied)\n", kindName(c.kind),
                 quoteName(c.path));
    }
  }
  for (const auto& c : set.changes) {
    if (c.git) continue;
    if (c.after && c.after->type == "dir" && c.kind == Change::Kind::kAdded) continue;
    fmt::print("  {:<8} {}{}\n", kindName(c.kind), quoteName(c.path),
               c.note.empty() ? "" : "  (" + escapeText(c.note, true) + ")");
  }
}

// What a denied request was, from its audit line: its method, its target (scheme, host, port
// and path as far as the proxy saw them) and how it came (a CONNECT's tunnel, a request inside
// intercepted TLS, or a plain forward request), every part escaped.
std::string deniedRequest(const boost::json::object& line) {
  const std::string method = str(line, "method");
  const std::string kind = str(line, "kind");
  std::string how = kind == "intercept" || kind == "websocket" ? kind
                    : method == "CONNECT"                      ? "tunnel"
                                                               : "forward";
  std::string target;
  if (const std::string scheme = str(line, "scheme"); scheme != "-") target = scheme + "://";
  target += str(line, "host") + ":" + str(line, "port");
  if (const std::string path = str(line, "path"); path != "-") target += path;
  return fmt::format("{} {} ({}) {}", escapeText(method, true), escapeText(target, true), how,
                     escapeText(str(line, "reason"), true));
}

// The run's audit copy, one object per line (lines that do not parse are left out).
std::vector<boost::json::object> auditLines(const RunDir& dir) {
  std::vector<boost::json::object> out;
  auto text = dir.read(bundle::kAudit, size_t{64} << 20);
  if (!text) return out;
  const std::string& t = text.value();
  boost::json::parse_options options;
  options.allow_invalid_utf8 = true;
  for (size_t pos = 0; pos < t.size();) {
    size_t nl = t.find('\n', pos);
    size_t end = nl == std::string::npos ? t.size() : nl;
    boost::system::error_code ec;
    auto v = boost::json::parse(std::string_view(t).substr(pos, end - pos), ec, {}, options);
    pos = end + 1;
    if (!ec && v.is_object()) out.push_back(std::move(v.as_object()));
  }
  return out;
}

// The requests of the run from its audit lines, each once: a DNS answer is not a request, and
// the CONNECT of a tunnel whose requests were intercepted is their connection, not one more
// request (its requests have their own lines, joined to it by connection_id), unless the
// tunnel itself ended as a refusal (as sandgate_requests_total counts them).
std::vector<const boost::json::object*> requestsOf(const std::vector<boost::json::object>& lines) {
  // Lines of an older sandgate have no connection_id: the client's address and port stand in.
  auto connectionOf = [](const boost::json::object& l) {
    std::string id = str(l, "connection_id");
    return id == "-" ? str(l, "client") : id;
  };
  std::set<std::string> intercepted;
  for (const auto& l : lines) {
    const std::string kind = str(l, "kind");
    if (kind == "intercept" || kind == "websocket") intercepted.insert(connectionOf(l));
  }
  std::vector<const boost::json::object*> out;
  for (const auto& l : lines) {
    const std::string kind = str(l, "kind");
    if (kind == "dns") continue;
    const std::string verdict = str(l, "verdict");
    const bool served = verdict == "allow" || verdict == "audit" || verdict == "learn";
    if (kind == "tunnel" && served && intercepted.count(connectionOf(l)) != 0) continue;
    out.push_back(&l);
  }
  return out;
}

// The network summary: the report's per-host counts, then the requests counted once each and
// every denied one on its own line (the first kMaxDenied), from the run's audit copy.
void printNetwork(const RunDir& dir, const boost::json::object& r) {
  constexpr size_t kMaxDenied = 50;
  const auto lines = auditLines(dir);
  const auto requests = requestsOf(lines);
  if (!lines.empty()) {
    size_t allowed = 0, denied = 0;
    for (const auto* q : requests) {
      const std::string v = str(*q, "verdict");
      allowed += v == "allow" || v == "audit" || v == "learn";
      denied += v == "deny";
    }
    fmt::print("network    {} requests: {} allowed, {} denied, {} other\n", requests.size(),
               allowed, denied, requests.size() - allowed - denied);
  } else if (const auto* req = obj(r, "requests")) {
    fmt::print("network    {} allowed, {} denied\n", shown(*req, "allowed"), shown(*req, "denied"));
  }
  if (const auto* hosts = r.if_contains("by_host"); hosts && hosts->is_array()) {
    for (const auto& h : hosts->as_array()) {
      if (!h.is_object()) continue;
      const auto& o = h.as_object();
      fmt::print("           {} {}:{} {} x{}\n", shown(o, "verdict"), shown(o, "host"),
                 shown(o, "port"), shown(o, "reason"), shown(o, "count"));
    }
  }
  size_t listed = 0, more = 0;
  for (const auto* q : requests) {
    if (str(*q, "verdict") != "deny") continue;
    if (listed == kMaxDenied) {
      ++more;
      continue;
    }
    fmt::print("denied     {}\n", deniedRequest(*q));
    ++listed;
  }
  if (more > 0) fmt::print("denied     and {} more ({})\n", more, bundle::kAudit);
}

// The command on one line of at most `width` bytes, cut at a character's start ("..." says it
// was): every argument quoted already (no newline or control byte in it), a long one no longer
// pushes the table apart.
std::string oneLine(const std::string& command, size_t width = 60) {
  if (command.size() <= width) return command;
  size_t cut = width - 3;
  while (cut > 0 && (static_cast<unsigned char>(command[cut]) & 0xC0) == 0x80) --cut;
  return command.substr(0, cut) + "...";
}

}  // namespace

int listRuns() {
  const char* row = "{:<24} {:<12} {:<20} {:>8} {:<16} {:>7} {:<15} {}\n";
  fmt::print(fmt::runtime(row), "ID", "TASK", "STARTED", "SECONDS", "STATUS", "CHANGED", "REVIEW",
             "COMMAND");
  for (const auto& gone : discardedRuns()) {
    fmt::print(fmt::runtime(row), quoteName(gone.id), escapeText(gone.task, true),
               escapeText(gone.startedAt, true), "-", "-", "-", "discarded",
               oneLine(escapeText(gone.command, true)));
  }
  for (const auto& id : listRunIds()) {
    auto dir = openRunDir(id);
    if (!dir) continue;
    auto report = readReport(dir.value());
    if (!report) {
      fmt::print("{:<24} (no report: still running, or it ended before it could write one)\n",
                 quoteName(id));
      continue;
    }
    const auto* run = obj(*report, "run");
    std::string status = str(*report, "end");
    if (status == "exited") status += " " + str(*report, "exit_status");
    if (status == "setup_failed") status = "setup failed";  // see `sandgate show` for why
    double secs = 0;
    if (const auto* d = report->if_contains("duration_seconds"); d && d->is_number()) {
      secs = d->to_number<double>();
    }
    fmt::print(fmt::runtime("{:<24} {:<12} {:<20} {:>8.1f} {:<16} {:>7} {:<15} {}\n"),
               quoteName(id), shown(*report, "task"), run ? shown(*run, "started_at") : "-", secs,
               escapeText(status, true), changedFiles(*report), reviewState(dir.value()),
               oneLine(commandOf(*report)));
  }
  return 0;
}

int showRun(const std::string& runArg) {
  auto dir = openRunDir(runArg);
  if (!dir) return complain("show", dir.errors().front());
  auto report = readReport(dir.value());
  if (!report) {
    fmt::print(stderr, "sandgate show: {} has no readable {}\n", quoteName(dir.value().path),
               bundle::kReport);
    return kExitSetupFailed;
  }
  const auto& r = *report;
  const auto* run = obj(r, "run");
  fmt::print("run        {}\n", quoteName(dir.value().id));
  fmt::print("directory  {}\n", quoteName(dir.value().path));
  fmt::print("task       {} (policy {})\n", shown(r, "task"), shown(r, "policy"));
  fmt::print("command    {}\n", commandOf(r));
  if (run != nullptr) {
    fmt::print("workspace  {} ({})\n", shownName(*run, "workspace"), shown(*run, "workspace_mode"));
    fmt::print("started    {}\n", shown(*run, "started_at"));
  }
  double secs = 0;
  if (const auto* d = r.if_contains("duration_seconds"); d && d->is_number()) {
    secs = d->to_number<double>();
  }
  fmt::print("ended      {} (exit status {}) after {:.2f} s\n", shown(r, "end"),
             shown(r, "exit_status"), secs);
  // What the run said as it ended (what --disk left out, a change list that is incomplete).
  if (const auto* w = r.if_contains("warnings"); w && w->is_array()) {
    for (const auto& line : w->as_array()) {
      if (line.is_string()) fmt::print("warning    {}\n", escapeText(line.as_string(), true));
    }
  }
  printNetwork(dir.value(), r);
  const auto* changes = obj(r, "changes");
  if (changes == nullptr) {
    fmt::print("changes    none recorded (bind mode writes the workspace itself)\n");
    return 0;
  }
  fmt::print("changes    {} added, {} modified, {} deleted, {} mode changes, {} inside .git\n",
             shown(*changes, "added"), shown(*changes, "modified"), shown(*changes, "deleted"),
             shown(*changes, "mode"), shown(*changes, "git"));
  auto text = dir.value().read(bundle::kChanges);
  auto set = text ? changesFromJson(text.value()) : Result<ChangeSet>(text.errors());
  if (!set) {
    // Without the list, at least the report's flagged paths.
    if (const auto* f = changes->if_contains("flagged"); f && f->is_array()) {
      for (const auto& p : f->as_array()) {
        fmt::print("FLAGGED    {} (runs or is obeyed by git outside the sandbox; never applied)\n",
                   p.is_string() ? quoteName(p.as_string()) : "?");
      }
    }
    fmt::print(stderr, "sandgate show: {}\n", escapeText(set.errors().front().message, true));
  } else {
    printChanges(set.value());
  }
  fmt::print(
      "files      {}/report.json, audit.jsonl, stdout.log, stderr.log, changes.json, "
      "changes.patch, overlay/upper/\n",
      quoteName(dir.value().path));
  return 0;
}

int diffRun(const std::string& runArg, bool raw) {
  auto dir = openRunDir(runArg);
  if (!dir) return complain("diff", dir.errors().front());
  auto patch = dir.value().read(bundle::kPatch, size_t{1} << 30);
  if (!patch) return complain("diff", patch.errors().front());
  const std::string& p = patch.value();
  if (raw) {
    std::fwrite(p.data(), 1, p.size(), stdout);
    return 0;
  }
  // Line by line, the content's control bytes escaped (the names are quoted already): a `+`
  // line with ESC or CR in it could erase itself on the reviewer's terminal, or in a pager
  // that passes them (less -R, more).
  for (size_t pos = 0; pos < p.size();) {
    size_t nl = p.find('\n', pos);
    size_t end = nl == std::string::npos ? p.size() : nl;
    const std::string line = escapeText(std::string_view(p).substr(pos, end - pos));
    std::fwrite(line.data(), 1, line.size(), stdout);
    if (nl != std::string::npos) std::fputc('\n', stdout);
    pos = end + 1;
  }
  return 0;
}

int applyRun(const ApplyRequest& req) {
  auto dir = openRunDir(req.run);
  if (!dir) return complain("apply", dir.errors().front());
  auto text = dir.value().read(bundle::kChanges);
  if (!text) return complain("apply", text.errors().front());
  auto set = changesFromJson(text.value());
  if (!set) return complain("apply", set.errors().front());
  auto report = readReport(dir.value());
  const auto* run = report ? obj(*report, "run") : nullptr;
  if (run == nullptr || str(*run, "workspace") == "-") {
    fmt::print(stderr, "sandgate apply: {} does not say which workspace it ran in\n",
               quoteName(dir.value().path));
    return kExitSetupFailed;
  }
  const std::string workspace = str(*run, "workspace");
  safe_open::UniqueFd ws(safe_open::openNoSymlinks(workspace, O_PATH | O_DIRECTORY));
  safe_open::UniqueFd upper(safe_open::openBeneath(
      dir.value().fd.get(), std::string(bundle::kOverlay) + "/upper", O_RDONLY | O_DIRECTORY));
  if (!ws.valid() || !upper.valid()) {
    fmt::print(stderr, "sandgate apply: cannot open {}: {}\n",
               ws.valid() ? "the run's upper layer" : quoteName(workspace),
               safe_open::describeError(errno));
    return kExitSetupFailed;
  }
  auto out = applyChanges(set.value(), ws.get(), upper.get(), req);
  if (!out) return complain("apply", out.errors().front());
  for (const auto& s : out.value().skipped) fmt::print("skipped  {}\n", s);
  if (!out.value().conflicts.empty()) {
    fmt::print(stderr,
               "sandgate apply: refusing to apply the run's changes to {}: these files changed "
               "since the run started [{}]\n",
               quoteName(workspace), reason::kApplyConflict);
    for (const auto& c : out.value().conflicts) fmt::print(stderr, "  conflict  {}\n", c);
    return kExitConflict;
  }
  for (const auto& d : out.value().done) fmt::print("{}{}\n", req.check ? "would: " : "", d);
  if (!req.check) {
    fmt::print("applied {} changes to {}\n", out.value().done.size(), quoteName(workspace));
    // For `runs`: the changes are in the workspace now (a failure to say so is only a warning).
    if (auto e = markApplied(dir.value(), req, out.value().done.size())) {
      fmt::print(stderr, "sandgate apply: warning: {}\n", escapeText(*e, true));
    }
  }
  return 0;
}

int discardRun(const std::string& runArg) {
  auto dir = openRunDir(runArg);
  if (!dir) return complain("discard", dir.errors().front());
  if (auto report = readReport(dir.value())) {
    const auto* run = obj(*report, "run");
    noteDiscarded(dir.value(), {dir.value().id, str(*report, "task"),
                                run ? str(*run, "started_at") : "-", commandOf(*report)});
  }
  if (auto e = removeRunDir(dir.value())) {
    fmt::print(stderr, "sandgate discard: {}\n", escapeText(*e, true));
    return kExitSetupFailed;
  }
  fmt::print("discarded {}\n", quoteName(dir.value().path));
  return 0;
}

}  // namespace sandgate::run
