// parseAuditLine() and readAudit(): Boost.JSON over each line, every field type-checked.
#include "learn/audit_reader.h"

#include <boost/json.hpp>
#include <set>
#include <string_view>

namespace sandgate::learn {

namespace {

namespace json = boost::json;

// A string field that may be null; false when it is present with another type.
bool optString(const json::object& o, std::string_view key, std::string& out) {
  auto* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return true;
  if (!v->is_string()) return false;
  out = std::string(v->as_string());
  return true;
}

}  // namespace

bool isPolicyReason(const std::string& reason) {
  // policy::reason's refusals (policy/engine.h) and the one the address check adds: the rest
  // (auth_*, bad_*, limits, upstream errors) are refused whatever the rules say.
  // A `git:` block's refusals (policy/git_rules.h) are all git_*, except a protocol error.
  static const std::set<std::string> kPolicy = {
      "no_matching_rule",   "denied_by_rule",   "global_deny",    "port_not_allowed",
      "method_not_allowed", "path_not_allowed", "address_denied", "unknown_policy"};
  return kPolicy.contains(reason) || (reason.starts_with("git_") && reason != "git_protocol_error");
}

std::optional<Observation> parseAuditLine(const std::string& text, std::string* why) {
  why->clear();
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) {
    *why = "not JSON: " + ec.message();
    return std::nullopt;
  }
  if (!v.is_object()) {
    *why = "not a JSON object";
    return std::nullopt;
  }
  const json::object& o = v.as_object();
  Observation r;
  std::string verdict, method, path, port;
  for (auto [key, out] : {std::pair<std::string_view, std::string*>{"kind", &r.kind},
                          {"verdict", &verdict},
                          {"task", &r.task},
                          {"host", &r.host},
                          {"method", &method},
                          {"path", &path},
                          {"scheme", &r.scheme},
                          {"reason", &r.reason},
                          {"rule", &r.rule},
                          {"credential", &r.credential},
                          {"upstream", &r.upstream},
                          {"connection_id", &r.connectionId}}) {
    if (!optString(o, key, *out)) {
      *why = "field \"" + std::string(key) + "\" is not a string";
      return std::nullopt;
    }
  }
  if (r.kind.empty() || verdict.empty()) {
    *why = "no \"kind\" or \"verdict\": not an audit line";
    return std::nullopt;
  }
  if (auto* p = o.if_contains("port"); p != nullptr && !p->is_null()) {
    if (!p->is_int64() || p->as_int64() < 0 || p->as_int64() > 65535) {
      *why = "field \"port\" is not a port number";
      return std::nullopt;
    }
    r.port = static_cast<uint16_t>(p->as_int64());
  }
  // "learn": a learning run's admission of what its policy would refuse (policy/engine.h).
  if (verdict != "allow" && verdict != "deny" && verdict != "audit" && verdict != "learn" &&
      verdict != "error") {
    *why = "unknown verdict \"" + verdict + "\"";
    return std::nullopt;
  }
  if (auto* g = o.if_contains("git"); g != nullptr && !g->is_null()) {
    if (!g->is_object()) {
      *why = "field \"git\" is not an object";
      return std::nullopt;
    }
    GitSeen seen;
    const auto& go = g->as_object();
    if (!optString(go, "repository", seen.repository) || !optString(go, "service", seen.service)) {
      *why = "field \"git\" has a repository or service that is not a string";
      return std::nullopt;
    }
    if (auto* refs = go.if_contains("refs"); refs != nullptr && refs->is_array()) {
      for (const auto& e : refs->as_array()) {
        GitRef ref;
        if (!e.is_object() || !optString(e.as_object(), "ref", ref.ref) ||
            !optString(e.as_object(), "old", ref.oldId) ||
            !optString(e.as_object(), "new", ref.newId)) {
          *why = "field \"git.refs\" has an entry that is not {ref, old, new}";
          return std::nullopt;
        }
        seen.refs.push_back(std::move(ref));
      }
    }
    r.git = std::move(seen);
  }
  // verdict "error": something sandgate needed failed after the decision (an upstream, a
  // secret, a client that closed its tunnel early). With a rule, the policy had admitted the
  // request; without one, the line says nothing a rule decided.
  if (verdict == "error" && r.rule.empty()) return std::nullopt;
  r.allowed = verdict != "deny";
  // Lines that record no decision a rule could change: DNS answers, connections whose task
  // or target was never known, refusals for reasons of the protocol or of limits, and
  // requests that failed upstream after a refusal of another layer.
  if (r.kind == "dns" || r.task.empty() || r.host.empty() || r.port == 0) return std::nullopt;
  if (!r.allowed && !isPolicyReason(r.reason)) return std::nullopt;
  if (!path.empty()) {
    r.path = path;
    r.method = method.empty() ? "GET" : method;
  }
  return r;
}

void readAudit(std::istream& in, const std::string& file, const std::string& task, AuditRead& out) {
  std::string text;
  int line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    std::string why;
    auto obs = parseAuditLine(text, &why);
    if (!obs) {
      if (why.empty()) {
        ++out.skipped;
      } else {
        out.bad.push_back({file, line, why});
      }
      continue;
    }
    if (!task.empty() && obs->task != task) continue;
    obs->file = file;
    obs->line = line;
    out.requests.push_back(std::move(*obs));
  }
}

}  // namespace sandgate::learn
