// learnPolicy() and diffPolicies(): the commands' flow over audit_reader, generalise, render
// and cases; --merge's re-emitted config (yaml-cpp) with the additions in policies of their own.
#include "learn/learn.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <istream>

#include "config/config.h"
#include "learn/cases.h"
#include "learn/render.h"
#include "policy/engine.h"

namespace sandgate::learn {

namespace {

struct Compiled {
  config::Config config;
  std::shared_ptr<const policy::Engine> engine;
};

std::optional<Compiled> compile(Result<config::Config> cfg, std::vector<std::string>& messages) {
  if (!cfg) {
    for (const auto& e : cfg.errors()) messages.push_back(e.str());
    return std::nullopt;
  }
  auto engine = policy::Engine::compile(*cfg);
  if (!engine) {
    for (const auto& e : engine.errors()) messages.push_back(e.str());
    return std::nullopt;
  }
  return Compiled{std::move(cfg).value(), std::move(engine).value()};
}

// Reads every audit; false (after saying why) when a file cannot be read, or a line is bad
// under --strict. Bad lines are reported with file:line either way.
bool readAll(const std::vector<std::string>& audits, const std::string& task, bool strict,
             std::istream& stdinStream, AuditRead& read, std::vector<std::string>& messages) {
  for (const auto& file : audits) {
    if (file == "-") {
      readAudit(stdinStream, "-", task, read);
      continue;
    }
    std::ifstream in(file);
    if (!in) {
      messages.push_back(fmt::format("{}: cannot read the audit file", file));
      return false;
    }
    readAudit(in, file, task, read);
  }
  for (const auto& b : read.bad) {
    messages.push_back(
        fmt::format("{}:{}: {}: {}", b.file, b.line, strict ? "error" : "skipped", b.what));
  }
  return !(strict && !read.bad.empty());
}

bool deniedOnPurpose(std::string_view reason) {
  return reason == policy::reason::kDeniedByRule || reason == policy::reason::kGlobalDeny;
}

// EXISTING's text re-emitted with the additions: for each task, policy "learned-<task>"
// holds the new rules and includes the task's own policy, and the task uses it.
std::string mergeInto(const std::string& existing, const std::string& additions) {
  YAML::Node merged = YAML::LoadFile(existing);
  YAML::Node add = YAML::Load(additions);
  for (const char* section : {"credentials", "resolve"}) {
    if (!add[section]) continue;
    for (const auto& kv : add[section]) {
      std::string key = kv.first.as<std::string>();
      if (!merged[section][key]) merged[section][key] = kv.second;
    }
  }
  // A second merge must not replace the learned policy of the first: a name EXISTING already
  // has gets a suffix (learned-demo-2), and the new policy includes the task's current one.
  auto fresh = [&](const std::string& name) {
    std::string out = name;
    for (int n = 2; merged["policies"][out]; ++n) out = name + "-" + std::to_string(n);
    return out;
  };
  for (const auto& t : add["tasks"]) {
    std::string name = t["name"].as<std::string>();
    std::string drafted = t["policy"].as<std::string>();
    std::string learned = fresh(drafted);
    merged["policies"][learned] = add["policies"][drafted];
    bool found = false;
    for (auto task : merged["tasks"]) {
      if (!task["name"] || task["name"].as<std::string>() != name) continue;
      found = true;
      merged["policies"][learned]["include"].push_back(task["policy"].as<std::string>());
      task["policy"] = learned;
    }
    if (!found) {
      YAML::Node task;
      task["name"] = name;
      task["policy"] = learned;
      merged["tasks"].push_back(task);
    }
  }
  // The proposal is a policy to enforce: a task's `mode: learn` (the run it was learned in)
  // is not carried into it.
  for (auto task : merged["tasks"]) {
    if (task["mode"]) task.remove("mode");
  }
  YAML::Emitter out;
  out << merged;
  return std::string(out.c_str()) + "\n";
}

}  // namespace

LearnOutput learnPolicy(const LearnOptions& options, std::istream& stdinStream) {
  LearnOutput out;
  AuditRead read;
  if (!readAll(options.audits, options.task, options.strict, stdinStream, read, out.messages)) {
    out.exit = kExitError;
    return out;
  }
  std::optional<Compiled> existing;
  std::vector<Observation> toLearn;
  if (options.merge) {
    existing = compile(config::loadFile(*options.merge), out.messages);
    if (!existing) {
      out.exit = kExitError;
      return out;
    }
    // Only what EXISTING refuses needs a rule; its own deny rules stay as they are (a deny
    // beats any allow), which the proposal says rather than works around.
    for (const auto& o : read.requests) {
      auto d = decideObserved(*existing->engine, existing->config, o).decision;
      // A learning run's admission is what the policy would refuse: exactly what to learn.
      if (d.allowed() && d.verdict != policy::Verdict::kLearn) continue;
      if (deniedOnPurpose(d.reason)) {
        out.messages.push_back(fmt::format(
            "{}:{}: {} stays refused: {} ({}), a deny rule of {}; not proposed", o.file, o.line,
            checkTargetOf(o), d.reason, d.rule.empty() ? "global" : d.rule, *options.merge));
        continue;
      }
      toLearn.push_back(o);
    }
  } else {
    toLearn = read.requests;
  }
  Draft draft = draftRules(toLearn, options.generalise);
  for (const auto& n : draft.notes) out.messages.push_back("note: " + n);

  RenderOptions ro;
  ro.explain = options.explain;
  ro.header = {fmt::format("Drafted by `sandgate policy learn` from {} request{} ({} line{} "
                           "skipped: no policy decision; {} bad).",
                           read.requests.size(), read.requests.size() == 1 ? "" : "s", read.skipped,
                           read.skipped == 1 ? "" : "s", read.bad.size()),
               "It allows what was seen and nothing more: review it before use."};
  if (existing) {
    for (const auto& [name, c] : existing->config.credentials) ro.definedCredentials.insert(name);
    ro.header.push_back(fmt::format(
        "Merged: {} re-emitted (its comments are not kept) with {} request{} it refused in "
        "policies learned-<task>.",
        *options.merge, toLearn.size(), toLearn.size() == 1 ? "" : "s"));
  }
  for (const auto& [name, hosts] : draft.credentials) {
    if (ro.definedCredentials.contains(name)) continue;
    out.messages.push_back(fmt::format(
        "warning: credential \"{}\" was used but is not defined here: the draft defines it with "
        "a placeholder source (env {}) and a Bearer header; set the real ones",
        name, placeholderEnv(name)));
  }
  std::string text = renderConfig(draft, ro);
  if (existing) {
    try {
      std::string header;
      for (const auto& h : ro.header) header += "# " + h + "\n";
      text = header + mergeInto(*options.merge, text);
    } catch (const YAML::Exception& e) {
      out.messages.push_back(fmt::format("{}: cannot merge: {}", *options.merge, e.what()));
      out.exit = kExitError;
      return out;
    }
  }
  out.config = text;
  // The draft must load, compile and allow every request the audit shows allowed.
  auto drafted =
      compile(config::loadString(text, existing ? *options.merge : "<learned>"), out.messages);
  if (!drafted) {
    out.messages.push_back("error: the drafted config does not compile (a bug: please report it)");
    out.exit = kExitChanged;
    return out;
  }
  std::vector<std::string> problems;
  std::string tests = renderCases(read.requests, *drafted->engine, drafted->config, &problems);
  if (options.wantTests) out.tests = std::move(tests);
  for (const auto& p : problems) out.messages.push_back("error: " + p);
  if (!problems.empty()) out.exit = kExitChanged;
  return out;
}

DiffOutput diffPolicies(const DiffOptions& options, std::istream& stdinStream) {
  DiffOutput out;
  auto before = compile(config::loadFile(options.before), out.messages);
  auto after = compile(config::loadFile(options.after), out.messages);
  if (!before || !after) {
    out.exit = kExitError;
    return out;
  }
  AuditRead read;
  if (!readAll(options.audits, options.task, options.strict, stdinStream, read, out.messages)) {
    out.exit = kExitError;
    return out;
  }
  auto result =
      diffDecisions(read.requests, *before->engine, before->config, *after->engine, after->config);
  auto show = [](const policy::Decision& d) {
    return fmt::format("{} ({}; rule {})", policy::verdictName(d.verdict), d.reason,
                       d.rule.empty() ? "none: default deny" : d.rule);
  };
  for (const auto& c : result.changes) {
    const Observation& o = *c.first;
    out.report += fmt::format("{}:{}: task {}: {}{}{}\n", o.file, o.line, o.task,
                              c.method.empty() ? "" : c.method + " ", c.target,
                              c.count > 1 ? fmt::format(" ({} requests)", c.count) : "");
    out.report += fmt::format("  before: {}\n  after:  {}\n", show(c.before), show(c.after));
  }
  out.report += fmt::format("{} of {} distinct requests change decision ({} audit lines read)\n",
                            result.changes.size(), result.decided, read.requests.size());
  out.exit = result.changes.empty() ? kExitOk : kExitChanged;
  return out;
}

}  // namespace sandgate::learn
