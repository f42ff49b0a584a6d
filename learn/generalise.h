// From observed requests to draft allow rules: paths generalised conservatively (a segment
// position becomes `*` only when it took N or more distinct values; never `**`), methods and
// ports as seen, credentials as used, `cidrs` only where the address dialled needed one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "learn/audit_reader.h"

namespace sandgate::learn {

inline constexpr int kDefaultGeneralise = 3;

// Path globs covering `paths` (origin-form, each starting with '/'): a trie of segments in
// which a node whose children took `threshold` or more distinct values becomes one `*` child
// (their subtrees merged); everything else stays literal. Sorted, without duplicates.
std::vector<std::string> generalisePaths(const std::vector<std::string>& paths, int threshold);

// Whether glob `pattern` (literal segments and `*`) matches `path` segment by segment.
bool patternCovers(const std::string& pattern, const std::string& path);

// Whether `path` can be learned as a glob: in normal form (policy/path_pattern.h) and free of
// the glob's own '*'. A host with any other path gets no path rules (they would refuse it).
bool isLearnablePath(const std::string& path);

struct GitDraft {
  std::vector<std::string> repositories;  // as seen, sorted
  std::vector<std::string> pushRefs;      // refs a push created or updated
  bool pushed = false, deleted = false, tags = false;
};

struct DraftRule {
  std::string host;
  std::vector<uint16_t> ports;
  std::vector<std::string> methods;  // empty: any (a tunnel's rule)
  std::vector<std::string> paths;    // empty: any
  std::string credential;
  std::vector<std::string> cidrs;  // "127.0.0.1/32": denied ranges the upstream was in
  std::optional<GitDraft> git;
  std::vector<const Observation*> covers;  // the requests this rule was drawn from
};

struct TaskDraft {
  std::string task;
  std::vector<DraftRule> rules;  // sorted by host, then port
};

struct Draft {
  std::vector<TaskDraft> tasks;                // sorted by name
  std::map<std::string, std::string> resolve;  // name -> "ip:port" dialled in a denied range
  std::map<std::string, std::vector<std::string>> credentials;  // name -> hosts it went to
  std::vector<std::string> notes;  // what was learned less precisely, and why
};

// Draws the rules for `requests` (which must outlive the Draft).
Draft draftRules(const std::vector<Observation>& requests, int threshold);

}  // namespace sandgate::learn
