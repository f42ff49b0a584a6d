// A task's approvals file: reading it into the task's policy, and appending to it (see
// approvals.h).
#include "config/approvals.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/readers.h"

namespace sandgate::config {

namespace {

constexpr size_t kMaxApprovalsBytes = 4 * 1024 * 1024;

bool isHostText(std::string_view s) {
  return !s.empty() && s.size() <= 253 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == ':';
  });
}

bool isMethodText(std::string_view s) {
  return !s.empty() && s.size() <= 32 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

// A YAML double-quoted scalar of `s` (printable ASCII is kept; anything else \x-escaped).
std::string quotedYaml(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// The rule keys an approval may use: it adds what an operator saw asked, nothing more.
constexpr std::string_view kForbidden[] = {"credential", "git", "llm", "via", "mode", "inspect"};

void readOne(Config& cfg, Task& task, const std::string& path, Diagnostics& errors) {
  auto fail = [&](int line, int col, std::string keyPath, std::string message) {
    errors.push_back(Diagnostic{path, line, col, std::move(keyPath), std::move(message)});
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return;  // no approval written yet
    fail(0, 0, "",
         fmt::format("cannot read the approvals file of task {}: {}", task.name,
                     std::strerror(errno)));
    return;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxApprovalsBytes) {
    fail(0, 0, "", fmt::format("the approvals file is larger than {} bytes", kMaxApprovalsBytes));
    return;
  }
  YAML::Node doc;
  try {
    doc = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    fail(e.mark.line + 1, e.mark.column + 1, "", fmt::format("invalid YAML: {}", e.msg));
    return;
  }
  if (doc.IsNull()) return;  // only comments: nothing approved
  detail::Reader r(path);
  detail::Field root = r.root(doc);
  if (!doc.IsMap()) {
    r.error(root.mark, "", "expected a map with `allow:` (the approved rules)");
  } else {
    for (const auto& kv : doc) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      if (key != "allow") {
        r.error(detail::toMark(kv.first.Mark()), key,
                fmt::format("an approvals file holds only `allow:` rules for its task's policy; "
                            "`{}` is not allowed here (deny rules, global rules, credentials "
                            "and the rest belong in the config)",
                            key));
      }
    }
  }
  std::vector<Rule> rules;
  if (doc.IsMap() && doc["allow"]) {
    const YAML::Node list = doc["allow"];
    detail::Field f{list, "allow", detail::toMark(list.Mark()), detail::toMark(list.Mark())};
    if (auto items = r.list(f, "a list of rules", true)) {
      for (const auto& item : *items) {
        if (item.node.IsMap()) {
          for (std::string_view k : kForbidden) {
            if (item.node[std::string(k)]) {
              r.error(item.mark, item.path,
                      fmt::format("an approved rule cannot have `{}`: an approval only admits "
                                  "a request as it was asked, without a credential",
                                  k));
            }
          }
        }
        auto rule = detail::readAllowRule(r, item);
        if (!rule) continue;
        for (const auto& c : rule->cidrs) {
          // Only the address the config's own `resolve:` pins for the rule's host: an approval
          // never opens a private range the operator did not write down.
          const ResolveEntry* pin = nullptr;
          if (rule->host) {
            for (const auto& e : cfg.resolve) {
              if (e.name == rule->host->value) pin = &e;
            }
          }
          const bool exact = pin && (c.value == pin->address || c.value == pin->address + "/32" ||
                                     c.value == pin->address + "/128");
          if (!exact) {
            r.error(c.mark, item.path + ".cidrs",
                    fmt::format("an approved rule may name cidrs only for a host the config "
                                "pins with resolve:, exactly its address ({} is not)",
                                c.value));
          }
        }
        rule->keyPath = fmt::format("approvals.{}.{}", task.name, item.path);
        rules.push_back(std::move(*rule));
      }
    }
  }
  Diagnostics found = r.take();
  if (!found.empty()) {
    errors.insert(errors.end(), found.begin(), found.end());
    return;
  }
  Policy p;
  p.name = "approvals." + task.name;
  p.mark = task.ask ? task.ask->mark : task.mark;
  p.include.push_back(task.policy);
  p.allow = std::move(rules);
  if (cfg.policies.count(p.name)) {
    errors.push_back(Diagnostic{cfg.file, p.mark.line, p.mark.col, "policies." + p.name,
                                fmt::format("the policy name {} is reserved for the approvals of "
                                            "task {}",
                                            p.name, task.name)});
    return;
  }
  task.approvalsPolicy = p.name;
  cfg.policies.emplace(p.name, std::move(p));
}

}  // namespace

std::string approvalsPath(const Config& cfg, const Task& task) {
  if (!task.ask || !task.ask->approvals) return {};
  std::filesystem::path p(task.ask->approvals->value);
  if (p.is_relative()) p = std::filesystem::path(cfg.file).parent_path() / p;
  return p.lexically_normal().string();
}

Result<void> appendApproval(const std::string& path, std::string_view task, const Approval& a) {
  auto fail = [&](std::string message) { return Diagnostic{path, 0, 0, "", std::move(message)}; };
  if (!isHostText(a.host)) return fail(fmt::format("cannot write a rule for host {}", a.host));
  const bool tunnel = a.method == "CONNECT";
  if (!tunnel && !isMethodText(a.method)) {
    return fail(fmt::format("cannot write a rule for method {}", a.method));
  }
  if (!tunnel && (a.path.empty() || a.path.front() != '/' ||
                  a.path.find_first_of("*?[{") != std::string::npos)) {
    return fail(
        "the path has glob characters or is not absolute: a rule would admit more than "
        "was asked (answer --run, or write the rule in the policy)");
  }
  std::string text;
  text +=
      fmt::format("  # {}\n  - host: {}\n    ports: [{}]\n", a.note, quotedYaml(a.host), a.port);
  if (!a.pinnedAddress.empty()) {
    if (!isHostText(a.pinnedAddress)) return fail("cannot write the pinned address");
    const bool v6 = a.pinnedAddress.find(':') != std::string::npos;
    text += fmt::format("    cidrs: [{}]\n", quotedYaml(a.pinnedAddress + (v6 ? "/128" : "/32")));
  }
  if (!tunnel) {
    text += fmt::format("    methods: [{}]\n    paths: [{}]\n", quotedYaml(a.method),
                        quotedYaml(a.path));
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) return fail(fmt::format("cannot open the approvals file: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size == 0) {
    text = fmt::format(
               "# Approvals of task {} (sandgate approve allow ID --always), loaded with its "
               "policy\n# at the next reload (SIGHUP). Review them like the policy they extend.\n"
               "allow:\n",
               task) +
           text;
  }
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      return fail(fmt::format("cannot write the approvals file: {}", std::strerror(e)));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return fail(fmt::format("cannot write the approvals file: {}", std::strerror(errno)));
  }
  return {};
}

namespace detail {

void loadApprovals(Config& cfg, Diagnostics& errors) {
  for (Task& t : cfg.tasks) {
    if (t.onUnknown != OnUnknown::kAsk || !t.ask || !t.ask->approvals) continue;
    if (!cfg.policies.count(t.policy.value)) continue;  // reported by checkReferences
    readOne(cfg, t, approvalsPath(cfg, t), errors);
  }
}

}  // namespace detail

}  // namespace sandgate::config
