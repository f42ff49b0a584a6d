// renderConfig(): hand-written YAML with every string quoted, so that no host, path or name
// can change the document's structure.
#include "learn/render.h"

#include <fmt/format.h>

#include <boost/json.hpp>

namespace sandgate::learn {

namespace {

template <typename T>
std::string flowList(const std::vector<T>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    if constexpr (std::is_same_v<T, std::string>) {
      out += quote(items[i]);
    } else {
      out += std::to_string(items[i]);
    }
  }
  return out + "]";
}

std::string coverage(const DraftRule& r) {
  std::string where;
  std::string lastFile;
  size_t shown = 0;
  for (const auto* o : r.covers) {
    if (shown == 8) {
      where += fmt::format(", ... ({} more)", r.covers.size() - shown);
      break;
    }
    where += shown ? ", " : "";
    where += o->file != lastFile ? fmt::format("{}:{}", o->file, o->line) : std::to_string(o->line);
    lastFile = o->file;
    ++shown;
  }
  return fmt::format("covers {} request{} ({})", r.covers.size(), r.covers.size() == 1 ? "" : "s",
                     where);
}

}  // namespace

std::string quote(const std::string& s) { return boost::json::serialize(boost::json::string(s)); }

std::string placeholderEnv(const std::string& credential) {
  std::string out = "SANDGATE_LEARNED_";
  for (char c : credential) {
    out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::toupper(c)) : '_';
  }
  return out;
}

std::string renderRules(const TaskDraft& task, bool explain, int indent) {
  const std::string pad(indent, ' ');
  std::string out;
  for (const auto& r : task.rules) {
    if (explain) out += fmt::format("{}# {}\n", pad, coverage(r));
    out += fmt::format("{}- host: {}\n", pad, quote(r.host));
    out += fmt::format("{}  ports: {}\n", pad, flowList(r.ports));
    if (!r.methods.empty()) out += fmt::format("{}  methods: {}\n", pad, flowList(r.methods));
    if (!r.paths.empty()) out += fmt::format("{}  paths: {}\n", pad, flowList(r.paths));
    if (!r.cidrs.empty()) out += fmt::format("{}  cidrs: {}\n", pad, flowList(r.cidrs));
    if (!r.credential.empty()) out += fmt::format("{}  credential: {}\n", pad, quote(r.credential));
    if (r.git) {
      out += fmt::format("{}  git:\n{}    repositories: {}\n", pad, pad,
                         flowList(r.git->repositories));
      if (r.git->pushed) {
        out += fmt::format("{}    push: {{refs: {}", pad, flowList(r.git->pushRefs));
        if (r.git->deleted) out += ", delete: true";
        if (r.git->tags) out += ", tags: true";
        out += "}\n";
      }
    }
  }
  return out;
}

std::string renderConfig(const Draft& draft, const RenderOptions& options) {
  std::string out;
  for (const auto& h : options.header) out += "# " + h + "\n";
  bool anyPlaceholder = false;
  for (const auto& [name, hosts] : draft.credentials) {
    if (options.definedCredentials.contains(name)) continue;
    if (!anyPlaceholder) {
      out += "credentials:\n";
      anyPlaceholder = true;
    }
    // The audit names a credential, never its secret, its source or how it was injected:
    // these are placeholders to replace. `optional` keeps serve starting without the variable.
    out += fmt::format("  {}:\n", quote(name));
    out += "    # PLACEHOLDER (learned from the audit): set the real source and inject\n";
    out += fmt::format("    source: {{env: {}}}\n", placeholderEnv(name));
    out += "    optional: true\n";
    out += fmt::format("    hosts: {}\n", flowList(hosts));
    out += "    inject: {header: Authorization, value: \"Bearer {secret}\"}\n";
  }
  if (!draft.resolve.empty()) {
    out += "resolve:\n";
    for (const auto& [name, addr] : draft.resolve) {
      out += fmt::format("  {}: {}\n", quote(name), quote(addr));
    }
  }
  out += "policies:\n";
  for (const auto& t : draft.tasks) {
    out += fmt::format("  {}:\n", quote(options.policyPrefix + t.task));
    out +=
        t.rules.empty() ? "    allow: []\n" : "    allow:\n" + renderRules(t, options.explain, 6);
  }
  out += draft.tasks.empty() ? "tasks: []\n" : "tasks:\n";
  for (const auto& t : draft.tasks) {
    out += fmt::format("  - name: {}\n    policy: {}\n", quote(t.task),
                       quote(options.policyPrefix + t.task));
  }
  return out;
}

}  // namespace sandgate::learn
