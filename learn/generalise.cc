// generalisePaths() and draftRules(): the trie of path segments, and rules grouped so that a
// rule never admits a method on a path that was not seen with it.
#include "learn/generalise.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "common/host_port.h"
#include "policy/address_class.h"
#include "policy/ip.h"
#include "policy/path_pattern.h"

namespace sandgate::learn {

namespace {

using Segments = std::vector<std::string>;

Segments split(const std::string& path) {
  Segments out;
  size_t start = 1;  // after the leading '/'
  while (true) {
    size_t slash = path.find('/', start);
    out.push_back(path.substr(start, slash == std::string::npos ? slash : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return out;
}

// Patterns for the segments from `pos` on of `paths` (all of one length), each as "/a/b".
std::vector<std::string> fromPosition(const std::vector<const Segments*>& paths, size_t pos,
                                      int threshold) {
  if (pos == paths.front()->size()) return {""};
  std::map<std::string, std::vector<const Segments*>> children;
  for (const auto* p : paths) children[(*p)[pos]].push_back(p);
  std::vector<std::string> out;
  // An empty segment (a trailing '/') stays literal: `*` would also match "/a/" as "/a/x".
  const bool varies = static_cast<int>(children.size()) >= threshold && !children.contains("");
  if (varies) {
    for (const auto& rest : fromPosition(paths, pos + 1, threshold)) out.push_back("/*" + rest);
    return out;
  }
  for (const auto& [segment, group] : children) {
    for (const auto& rest : fromPosition(group, pos + 1, threshold)) {
      out.push_back("/" + segment + rest);
    }
  }
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The CIDR naming exactly the address dialled, when it is in a range sandgate refuses by
// default (it was reached only because a rule named a range or `resolve:` pinned it).
std::optional<std::pair<std::string, std::string>> deniedUpstream(const std::string& upstream) {
  if (upstream.empty()) return std::nullopt;
  auto hp = parseHostPort(upstream);
  if (!hp) return std::nullopt;
  auto ip = policy::parseIp(hp->host);
  if (!ip || !policy::classify(*ip).denied()) return std::nullopt;
  return std::pair{fmt::format("{}/{}", ip->str(), ip->v6 ? 128 : 32), upstream};
}

}  // namespace

std::vector<std::string> generalisePaths(const std::vector<std::string>& paths, int threshold) {
  std::map<size_t, std::vector<Segments>> byLength;
  for (const auto& p : paths) {
    Segments s = split(p);
    byLength[s.size()].push_back(std::move(s));
  }
  std::set<std::string> out;
  for (const auto& [length, group] : byLength) {
    std::vector<const Segments*> ptrs;
    for (const auto& s : group) ptrs.push_back(&s);
    for (auto& p : fromPosition(ptrs, 0, std::max(threshold, 2))) out.insert(std::move(p));
  }
  return {out.begin(), out.end()};
}

bool patternCovers(const std::string& pattern, const std::string& path) {
  Segments a = split(pattern), b = split(path);
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && !(a[i] == "*" && !b[i].empty())) return false;
  }
  return true;
}

bool isLearnablePath(const std::string& path) {
  return path.starts_with('/') && path.find('*') == std::string::npos && policy::isNormalPath(path);
}

Draft draftRules(const std::vector<Observation>& requests, int threshold) {
  Draft draft;
  // task -> host -> its requests
  std::map<std::string, std::map<std::string, std::vector<const Observation*>>> byTask;
  for (const auto& r : requests) byTask[r.task][lower(r.host)].push_back(&r);

  for (const auto& [task, hosts] : byTask) {
    TaskDraft td{task, {}};
    for (const auto& [host, obs] : hosts) {
      for (const auto* o : obs) {
        if (o->reason != "address_denied" || o->allowed) continue;
        draft.notes.push_back(fmt::format(
            "{}:{}: {} was refused for its address (address_denied): the rule names the host, "
            "but no cidrs are learned, so serve still refuses that address",
            o->file, o->line, host));
      }
      bool pathsUsable = true;
      std::set<uint16_t> visiblePorts;
      for (const auto* o : obs) {
        if (!o->path) continue;
        visiblePorts.insert(o->port);
        if (!isLearnablePath(policy::canonicalPath(*o->path))) pathsUsable = false;
      }
      if (!pathsUsable) {
        draft.notes.push_back(fmt::format(
            "task {}, host {}: a path not in normal form was seen, so the host's rules name "
            "methods but no paths (a path rule would refuse that request)",
            task, host));
      }
      // (port, credential, method) -> canonical paths seen
      std::map<std::tuple<uint16_t, std::string, std::string>, std::vector<std::string>> seen;
      for (const auto* o : obs) {
        if (!o->path) continue;
        std::string p = pathsUsable ? policy::canonicalPath(*o->path) : "";
        seen[{o->port, o->credential, *o->method}].push_back(p);
      }
      // (port, credential, pattern) -> methods; then (port, credential, methods) -> patterns.
      std::map<std::tuple<uint16_t, std::string, std::string>, std::set<std::string>> methodsOf;
      for (const auto& [key, paths] : seen) {
        auto& [port, cred, method] = key;
        auto patterns =
            pathsUsable ? generalisePaths(paths, threshold) : std::vector<std::string>{""};
        for (const auto& pat : patterns) methodsOf[{port, cred, pat}].insert(method);
      }
      std::map<std::tuple<std::string, std::set<std::string>, uint16_t>, std::vector<std::string>>
          rulesByPort;
      for (const auto& [key, methods] : methodsOf) {
        auto& [port, cred, pat] = key;
        auto& list = rulesByPort[{cred, methods, port}];
        if (!pat.empty()) list.push_back(pat);
      }
      // Rules alike but for the port become one rule with several ports.
      std::map<std::tuple<std::string, std::set<std::string>, std::vector<std::string>>,
               std::set<uint16_t>>
          merged;
      for (const auto& [key, pats] : rulesByPort) {
        auto& [cred, methods, port] = key;
        merged[{cred, methods, pats}].insert(port);
      }
      std::vector<DraftRule> rules;
      for (const auto& [key, ports] : merged) {
        auto& [cred, methods, pats] = key;
        DraftRule r;
        r.host = host;
        r.ports = {ports.begin(), ports.end()};
        r.methods = {methods.begin(), methods.end()};
        r.paths = pats;
        r.credential = cred;
        rules.push_back(std::move(r));
      }
      // Tunnels (no path visible) on a port no visible request used: host and port only.
      std::map<std::string, std::set<uint16_t>> tunnelPorts;  // credential -> ports
      for (const auto* o : obs) {
        if (!o->path && !visiblePorts.contains(o->port)) tunnelPorts[o->credential].insert(o->port);
      }
      for (const auto& [cred, ports] : tunnelPorts) {
        DraftRule r;
        r.host = host;
        r.ports = {ports.begin(), ports.end()};
        r.credential = cred;
        rules.push_back(std::move(r));
      }
      // Attribute each request to the first rule that covers it (a tunnel on a port with
      // path rules: that port's first rule, which admits the CONNECT).
      for (const auto* o : obs) {
        for (auto& r : rules) {
          if (!std::binary_search(r.ports.begin(), r.ports.end(), o->port)) continue;
          if (o->path && !r.methods.empty()) {
            if (r.credential != o->credential) continue;
            if (!std::binary_search(r.methods.begin(), r.methods.end(), *o->method)) continue;
            if (!r.paths.empty() &&
                std::none_of(r.paths.begin(), r.paths.end(), [&](const std::string& p) {
                  return patternCovers(p, policy::canonicalPath(*o->path));
                })) {
              continue;
            }
          }
          r.covers.push_back(o);
          if (auto denied = deniedUpstream(o->upstream)) {
            if (std::find(r.cidrs.begin(), r.cidrs.end(), denied->first) == r.cidrs.end()) {
              r.cidrs.push_back(denied->first);
            }
            // A name (not an address) reached in a denied range was pinned by `resolve:`.
            if (!policy::parseIp(host)) draft.resolve.emplace(host, denied->second);
          }
          if (!o->credential.empty()) draft.credentials[o->credential].push_back(host);
          if (o->git && !o->git->repository.empty()) {
            if (!r.git) r.git.emplace();
            auto& g = *r.git;
            g.repositories.push_back(o->git->repository);
            for (const auto& ref : o->git->refs) {
              // A git block names branch refs one by one, tags only as a whole (tags: true);
              // a deletion needs its ref listed and delete: true.
              g.pushed = true;
              if (ref.newId.find_first_not_of('0') == std::string::npos) g.deleted = true;
              if (ref.ref.starts_with("refs/tags/")) {
                g.tags = true;
              } else {
                g.pushRefs.push_back(ref.ref);
              }
            }
          }
          break;
        }
      }
      // One host, one git block: git's discovery GET and its POST fall under different
      // rules (methods differ), and a push needs both to carry the push refs.
      std::optional<GitDraft> hostGit;
      for (const auto& r : rules) {
        if (!r.git) continue;
        if (!hostGit) hostGit.emplace();
        auto& g = *hostGit;
        g.repositories.insert(g.repositories.end(), r.git->repositories.begin(),
                              r.git->repositories.end());
        g.pushRefs.insert(g.pushRefs.end(), r.git->pushRefs.begin(), r.git->pushRefs.end());
        g.pushed |= r.git->pushed;
        g.deleted |= r.git->deleted;
        g.tags |= r.git->tags;
      }
      for (auto& r : rules) {
        if (r.git) r.git = hostGit;
        std::sort(r.cidrs.begin(), r.cidrs.end());
        if (r.git) {
          for (auto* v : {&r.git->repositories, &r.git->pushRefs}) {
            std::sort(v->begin(), v->end());
            v->erase(std::unique(v->begin(), v->end()), v->end());
          }
        }
        if (!r.covers.empty()) td.rules.push_back(std::move(r));
      }
    }
    draft.tasks.push_back(std::move(td));
  }
  for (auto& [name, hosts] : draft.credentials) {
    std::sort(hosts.begin(), hosts.end());
    hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  }
  return draft;
}

}  // namespace sandgate::learn
