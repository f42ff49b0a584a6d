// Reading audit JSON lines (proxy/observe/audit_fields.h) back into the requests they record,
// for `policy learn` and `policy diff`. Bad lines are reported by line number, never guessed at.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <vector>

namespace sandgate::learn {

// A push command of a Git request, as the audit's "git" object lists it.
struct GitRef {
  std::string ref, oldId, newId;
};
struct GitSeen {
  std::string repository;  // "acme/widgets"
  std::string service;     // upload-pack-refs | receive-pack-refs | upload-pack | receive-pack
  std::vector<GitRef> refs;
};

// One request a line records: what the client asked for and what sandgate decided.
struct Observation {
  std::string file;  // the audit file ("-": stdin)
  int line = 0;      // 1-based line in it
  std::string kind;  // forward | tunnel | intercept | websocket | refusal
  std::string connectionId;
  std::string task;
  std::string scheme;                 // "http", "https" or empty
  std::optional<std::string> method;  // present with the path: the request was visible
  std::string host;
  uint16_t port = 0;
  std::optional<std::string> path;  // origin-form path without the query
  bool allowed = false;             // verdict allow, audit or learn
  std::string reason, rule;
  std::string credential;  // the credential used (its name), empty: none
  std::string upstream;    // the address dialled, "ip:port" or "[v6]:port"; empty: none
  std::optional<GitSeen> git;
};

struct BadLine {
  std::string file;
  int line = 0;
  std::string what;
};

// What reading gave: the requests a policy decides, the lines that were not audit lines, and
// the count of lines skipped on purpose (DNS answers, refusals before any task or host was
// known, or for reasons no policy rule can change: a malformed request is refused whatever
// the policy says).
struct AuditRead {
  std::vector<Observation> requests;
  std::vector<BadLine> bad;
  int skipped = 0;
};

// Whether a refusal with this reason is the policy's decision (so a rule could change it).
bool isPolicyReason(const std::string& reason);

// Parses one line. nullopt with `why` empty: a valid line that records no policy decision;
// nullopt with `why` set: not a valid audit line.
std::optional<Observation> parseAuditLine(const std::string& text, std::string* why);

// Reads every line of `in` (named `file` in reports) into `out`; `task`, when not empty,
// keeps only that task's requests.
void readAudit(std::istream& in, const std::string& file, const std::string& task, AuditRead& out);

}  // namespace sandgate::learn
