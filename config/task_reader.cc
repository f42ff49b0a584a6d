// Reading `tasks:`: each task's name, policy, token hash, limits, admin groups, repositories,
// budgets, and how it treats what its policy would refuse for want of a rule (mode: learn,
// on_unknown: ask).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "config/readers.h"

namespace sandgate::config::detail {
namespace {

bool isHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// mode, on_unknown and ask: how a task treats what its policy would refuse for want of a rule.
void readTaskModes(Reader& r, const MapView& m, Task& t) {
  if (const Field* v = m.get("mode")) {
    t.modeMark = v->mark;
    if (auto s = r.string(*v, "enforce or learn")) {
      if (s->value == "learn") {
        t.mode = TaskMode::kLearn;
      } else if (s->value != "enforce") {
        r.error(v->mark, v->path,
                fmt::format("expected enforce or learn, got {}", quoted(s->value)));
      }
    }
  }
  std::string askPath;
  if (const Field* v = m.get("on_unknown")) {
    askPath = v->path;
    if (auto s = r.string(*v, "deny or ask")) {
      if (s->value == "ask") {
        t.onUnknown = OnUnknown::kAsk;
        t.ask.emplace();
        t.ask->mark = v->mark;
      } else if (s->value != "deny") {
        r.error(v->mark, v->path, fmt::format("expected deny or ask, got {}", quoted(s->value)));
      }
    }
  }
  if (const Field* a = m.get("ask")) {
    auto am = r.map(*a, {"timeout", "approvals", "max_pending"},
                    "a map with timeout, approvals, max_pending");
    if (!am) return;
    if (t.onUnknown != OnUnknown::kAsk) {
      // An ask block that asks nothing would read as a promise the proxy does not keep.
      r.error(a->mark, a->path, "ask: needs on_unknown: ask");
      return;
    }
    t.ask->mark = a->mark;
    if (const Field* v = am->get("timeout")) {
      if (auto d = r.duration(*v, false)) t.ask->timeout = *d;
    }
    if (const Field* v = am->get("approvals")) {
      if (auto s = r.string(*v, "a file name")) t.ask->approvals = std::move(*s);
    }
    if (const Field* v = am->get("max_pending")) {
      if (auto n = r.integer(*v, 1, 1024)) t.ask->maxPending = static_cast<uint32_t>(*n);
    }
  }
  if (t.onUnknown == OnUnknown::kAsk && t.mode == TaskMode::kLearn) {
    // Learn mode admits what ask would hold: the two together would never ask.
    r.error(t.ask->mark, askPath, "on_unknown: ask cannot be combined with mode: learn");
  }
}

}  // namespace

void readTasks(Reader& r, const Field& f, std::vector<Task>& tasks) {
  auto items = r.list(f, "a list of tasks", true);
  if (!items) return;
  std::map<std::string, int, std::less<>> seen;  // name -> line of first definition
  for (const auto& item : *items) {
    auto m = r.map(item,
                   {"name", "policy", "token_sha256", "limits", "admin_groups", "repositories",
                    "budgets", "mode", "on_unknown", "ask"},
                   "a task (a map with name, policy, token_sha256, limits, admin_groups, "
                   "repositories, budgets, mode, on_unknown, ask)");
    if (!m) continue;
    Task t;
    t.mark = item.mark;
    if (const Field* n = m->get("name")) {
      if (auto s = r.string(*n, "a task name")) {
        checkName(r, n->mark, n->path, s->value);
        if (auto [it, fresh] = seen.emplace(s->value, n->mark.line); !fresh) {
          r.error(n->mark, n->path,
                  fmt::format("duplicate task name `{}` (first defined at line {})", s->value,
                              it->second));
        }
        t.name = s->value;
      }
    } else {
      r.missing(item, "name", "the task's name");
    }
    if (const Field* p = m->get("policy")) {
      if (auto s = r.string(*p, "a policy name")) t.policy = std::move(*s);
    } else {
      r.missing(item, "policy", "the name of the policy this task runs under");
    }
    if (const Field* h = m->get("token_sha256")) {
      if (auto s = r.string(*h, "a SHA-256 as 64 hex characters")) {
        // The value is never echoed: a raw token pasted here by mistake must not reach logs.
        if (s->value.size() != 64 || !std::all_of(s->value.begin(), s->value.end(), isHex)) {
          r.error(h->mark, h->path,
                  fmt::format("expected the token's SHA-256 as 64 hex characters, got {} "
                              "characters (value not shown)",
                              s->value.size()));
        } else {
          std::string hex = s->value;
          std::transform(hex.begin(), hex.end(), hex.begin(), lower);
          t.tokenSha256 = std::move(hex);
        }
      }
    }
    if (const Field* l = m->get("limits")) readLimits(r, *l, t.limits);
    if (const Field* b = m->get("budgets")) t.budgets = readBudgets(r, *b);
    if (const Field* g = m->get("admin_groups")) {
      // Resolved to gids when serve starts (or reloads): config/ does no NSS lookups.
      if (auto groups = r.stringList(*g, "[sandgate-team-a] or [1001]")) {
        for (size_t i = 0; i < groups->size(); ++i) {
          const auto& name = (*groups)[i].value;
          if (name.size() > 256 || name.find_first_of(":, \t\n") != std::string::npos) {
            r.error((*groups)[i].mark, fmt::format("{}[{}]", g->path, i),
                    fmt::format("expected a group name or numeric gid, got {}", quoted(name)));
          }
        }
        t.adminGroups = std::move(*groups);
      }
    }
    readTaskModes(r, *m, t);
    if (const Field* rp = m->get("repositories")) {
      // Checked against the credentials' own lists by checkReferences.
      t.repositoriesMark = rp->keyMark;
      if (auto creds =
              r.namedMap(*rp, "a map of github_app credential names to repositories", false)) {
        for (const auto& [credential, list] : creds->entries()) {
          if (auto repos = r.stringList(list, "[widgets]")) t.repositories[credential] = *repos;
        }
      }
    }
    tasks.push_back(std::move(t));
  }
}

}  // namespace sandgate::config::detail
