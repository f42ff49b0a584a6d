// The admin socket's messages (see admin_protocol.h); its checks are in admin_checks.cc.
#include "proxy/admin/admin_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <utility>

#include "proxy/admin/admin_questions.h"

namespace sandgate::proxy {

namespace json = boost::json;

json::array trafficEntriesToJson(const std::vector<TrafficEntry>& entries) {
  json::array out;
  for (const auto& e : entries) {
    out.push_back({{"host", e.host},
                   {"port", e.port},
                   {"kind", e.kind},
                   {"verdict", e.verdict},
                   {"reason", e.reason},
                   {"count", e.count},
                   {"bytes_up", e.bytesUp},
                   {"bytes_down", e.bytesDown}});
  }
  return out;
}

namespace {

// A capture hint names one host (at most 253 bytes) and the ports that would carry it.
constexpr size_t kMaxHintBytes = 1024;

// The keys of CaptureCounts in its JSON form (one table for both directions).
constexpr std::pair<const char*, uint64_t CaptureCounts::*> kCountKeys[] = {
    {"answered", &CaptureCounts::answered},   {"nodata", &CaptureCounts::nodata},
    {"nxdomain", &CaptureCounts::nxdomain},   {"refused", &CaptureCounts::refused},
    {"notimp", &CaptureCounts::notimp},       {"pool_exhausted", &CaptureCounts::exhausted},
    {"malformed", &CaptureCounts::malformed}, {"names", &CaptureCounts::names},
};

}  // namespace

json::object captureCountsToJson(const CaptureCounts& counts) {
  json::object o;
  for (const auto& [key, member] : kCountKeys) o[key] = counts.*member;
  // The capture hints travel with the counts: with run --proxy, serve's stub (which knows the
  // policy) made them, and the launcher prints them and puts them in the run's report.
  json::array hints;
  for (const auto& h : counts.hints) hints.emplace_back(h);
  o["hints"] = std::move(hints);
  return o;
}

namespace {

Error refusal(std::string_view reason, std::string message) {
  return Error{std::string(reason), std::move(message)};
}

const char* opName(AdminOp op) {
  switch (op) {
    case AdminOp::kTaskEnv:
      return "task_env";
    case AdminOp::kTokenEnv:
      return "token_env";
    case AdminOp::kAdopt:
      return "adopt";
    case AdminOp::kAdoptCapture:
      return "adopt_capture";
    case AdminOp::kRelease:
      return "release";
    case AdminOp::kQuestions:
      return "questions";
    case AdminOp::kAnswer:
      return "answer";
  }
  return "?";
}

// Task names as config/ allows them: they end up in log lines and replies.
bool isTaskName(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

Expected<json::object> parseObject(std::string_view message) {
  if (message.size() > kMaxAdminMessage) {
    return refusal(admin_reason::kBadRequest,
                   fmt::format("message of {} bytes exceeds {}", message.size(), kMaxAdminMessage));
  }
  boost::system::error_code ec;
  json::value v = json::parse(message, ec);
  if (ec || !v.is_object()) {
    return refusal(admin_reason::kBadRequest, "expected one JSON object per message");
  }
  auto& o = v.as_object();
  const json::value* version = o.if_contains("v");
  if (!version || !version->is_int64() || version->as_int64() != kAdminProtocolVersion) {
    return refusal(
        admin_reason::kUnsupportedVersion,
        fmt::format("unsupported protocol version {} (this side speaks {})",
                    version ? json::serialize(*version) : "(none)", kAdminProtocolVersion));
  }
  return std::move(o);
}

std::string stringOf(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

uint64_t numberOf(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v && v->is_uint64()) return v->as_uint64();
  if (v && v->is_int64() && v->as_int64() >= 0) return static_cast<uint64_t>(v->as_int64());
  return 0;
}

json::object trafficToJson(const TrafficSummary& t) {
  json::array entries = trafficEntriesToJson(t.entries);
  json::array credentials;
  for (const auto& c : t.credentials) credentials.emplace_back(c);
  return {{"allowed", t.allowed},
          {"denied", t.denied},
          {"other", t.other},
          {"bytes_up", t.bytesUp},
          {"bytes_down", t.bytesDown},
          {"entries", std::move(entries)},
          {"credentials", std::move(credentials)}};
}

CaptureCounts captureCountsFromJson(const json::object& o) {
  CaptureCounts counts;
  for (const auto& [key, member] : kCountKeys) counts.*member = numberOf(o, key);
  // Bounded as the stub bounds them (kMaxHints names, each a host name and a few ports): what
  // the peer sends cannot grow the report or the terminal output without limit.
  if (const json::value* v = o.if_contains("hints"); v && v->is_array()) {
    for (const auto& h : v->as_array()) {
      if (counts.hints.size() >= CaptureCounts::kMaxHints) break;
      if (h.is_string() && h.as_string().size() <= kMaxHintBytes) {
        counts.hints.emplace_back(h.as_string());
      }
    }
  }
  return counts;
}

json::array portsToJson(const std::vector<uint16_t>& ports) {
  json::array out;
  for (uint16_t p : ports) out.emplace_back(p);
  return out;
}

// A JSON array of port numbers (1..65535, none twice); nullopt when it is anything else.
std::optional<std::vector<uint16_t>> portsFromJson(const json::value* v) {
  if (!v || !v->is_array()) return std::nullopt;
  std::vector<uint16_t> out;
  for (const auto& p : v->as_array()) {
    int64_t n = p.is_int64() ? p.as_int64() : p.is_uint64() ? 65536 : 0;
    if (n < 1 || n > 65535) return std::nullopt;
    auto port = static_cast<uint16_t>(n);
    if (std::find(out.begin(), out.end(), port) != out.end()) return std::nullopt;
    out.push_back(port);
  }
  return out;
}

TrafficSummary trafficFromJson(const json::object& o) {
  TrafficSummary t;
  t.allowed = numberOf(o, "allowed");
  t.denied = numberOf(o, "denied");
  t.other = numberOf(o, "other");
  t.bytesUp = numberOf(o, "bytes_up");
  t.bytesDown = numberOf(o, "bytes_down");
  if (const json::value* a = o.if_contains("entries"); a && a->is_array()) {
    for (const auto& v : a->as_array()) {
      if (!v.is_object()) continue;
      const auto& e = v.as_object();
      TrafficEntry entry;
      entry.host = stringOf(e, "host");
      entry.port = static_cast<uint16_t>(std::min<uint64_t>(numberOf(e, "port"), 65535));
      entry.kind = stringOf(e, "kind");
      entry.verdict = stringOf(e, "verdict");
      entry.reason = stringOf(e, "reason");
      entry.count = numberOf(e, "count");
      entry.bytesUp = numberOf(e, "bytes_up");
      entry.bytesDown = numberOf(e, "bytes_down");
      t.entries.push_back(std::move(entry));
    }
  }
  if (const json::value* a = o.if_contains("credentials"); a && a->is_array()) {
    for (const auto& v : a->as_array()) {
      if (v.is_string()) t.credentials.emplace_back(v.as_string());
    }
  }
  return t;
}

}  // namespace

std::string encodeRequest(const AdminRequest& request) {
  json::object o{{"v", kAdminProtocolVersion}, {"op", opName(request.op)}};
  if (request.op == AdminOp::kAnswer) {
    o["id"] = request.questionId;
    o["answer"] = request.answer;
  } else if (request.op != AdminOp::kRelease && request.op != AdminOp::kQuestions) {
    o["task"] = request.task;
  }
  if (request.op == AdminOp::kTaskEnv && !request.run.empty()) o["run"] = request.run;
  if (request.op == AdminOp::kAdoptCapture) {
    o["ports"] = portsToJson(request.ports);
    o["ipv6"] = request.ipv6;
  }
  return json::serialize(o);
}

Expected<AdminRequest> parseRequest(std::string_view message) {
  auto parsed = parseObject(message);
  if (!parsed) return parsed.error();
  const auto& o = parsed.value();
  AdminRequest out;
  std::string op = stringOf(o, "op");
  if (op == "task_env") {
    out.op = AdminOp::kTaskEnv;
  } else if (op == "token_env") {
    out.op = AdminOp::kTokenEnv;
  } else if (op == "adopt") {
    out.op = AdminOp::kAdopt;
  } else if (op == "adopt_capture") {
    out.op = AdminOp::kAdoptCapture;
  } else if (op == "release" || op == "questions") {
    out.op = op == "release" ? AdminOp::kRelease : AdminOp::kQuestions;
    return out;
  } else if (op == "answer") {
    out.op = AdminOp::kAnswer;
    out.questionId = numberOf(o, "id");
    out.answer = stringOf(o, "answer");
    if (out.questionId == 0 || !parseAnswerKind(out.answer)) {
      return refusal(admin_reason::kBadRequest,
                     "answer needs \"id\" (a question's id) and \"answer\" (once, run, always or "
                     "deny)");
    }
    return out;
  } else {
    return refusal(
        admin_reason::kBadRequest,
        fmt::format("unknown op '{}' (expected task_env, token_env, adopt, adopt_capture, "
                    "release, questions or answer)",
                    op.substr(0, 40)));
  }
  out.task = stringOf(o, "task");
  if (!isTaskName(out.task)) {
    return refusal(
        admin_reason::kBadRequest,
        fmt::format("op {} needs \"task\": a task name (letters, digits, '.', '_', '-')", op));
  }
  if (out.op == AdminOp::kTaskEnv) {
    if (const json::value* run = o.if_contains("run")) {
      // A label for audit lines: bounded, and nothing a log reader's terminal would act on.
      if (!run->is_string() || run->as_string().size() > kMaxRunIdBytes ||
          !isTaskName(run->as_string())) {
        return refusal(admin_reason::kBadRequest,
                       fmt::format("task_env: \"run\" must be a run id (at most {} letters, "
                                   "digits, '.', '_', '-')",
                                   kMaxRunIdBytes));
      }
      out.run = std::string(run->as_string());
    }
  }
  if (out.op != AdminOp::kAdoptCapture) return out;
  auto ports = portsFromJson(o.if_contains("ports"));
  if (!ports || ports->empty() || ports->size() > kMaxCapturePorts ||
      std::find(ports->begin(), ports->end(), 53) != ports->end()) {
    return refusal(admin_reason::kBadRequest,
                   fmt::format("adopt_capture needs \"ports\": 1 to {} distinct ports, not 53",
                               kMaxCapturePorts));
  }
  out.ports = std::move(*ports);
  const json::value* ipv6 = o.if_contains("ipv6");
  if (ipv6 && !ipv6->is_bool()) {
    return refusal(admin_reason::kBadRequest, "adopt_capture: \"ipv6\" must be true or false");
  }
  out.ipv6 = ipv6 && ipv6->as_bool();
  return out;
}

std::string encodeReply(const AdminReply& reply) {
  json::object o{{"v", kAdminProtocolVersion}, {"ok", reply.ok}};
  if (!reply.ok) {
    o["reason"] = reply.reason;
    o["error"] = reply.error;
  }
  if (reply.environment) {
    const auto& e = *reply.environment;
    o["policy"] = e.policy;
    o["ca_pem"] = e.caPem;
    json::object env;
    for (const auto& [k, v] : e.env) env[k] = v;
    o["env"] = std::move(env);
    json::array hidden;
    for (const auto& p : e.hiddenPaths) hidden.emplace_back(p);
    o["hidden_paths"] = std::move(hidden);
    if (e.sshKnownHosts) o["ssh_known_hosts"] = *e.sshKnownHosts;
    if (e.capture) {
      o["capture"] = {{"ports", portsToJson(e.capture->ports)},
                      {"ipv4_range", e.capture->ipv4Range},
                      {"ipv6_range", e.capture->ipv6Range}};
    }
  }
  if (reply.traffic) o["traffic"] = trafficToJson(*reply.traffic);
  if (reply.dns) o["dns"] = captureCountsToJson(*reply.dns);
  if (reply.questions) o["questions"] = questionsToJson(*reply.questions);
  return json::serialize(o);
}

AdminReply errorReply(std::string_view reason, std::string error) {
  AdminReply r;
  r.ok = false;
  r.reason = std::string(reason);
  r.error = std::move(error);
  return r;
}

AdminReply errorReply(const Error& error) { return errorReply(error.reason, error.message); }

Expected<AdminReply> parseReply(std::string_view message) {
  auto parsed = parseObject(message);
  if (!parsed) return parsed.error();
  const auto& o = parsed.value();
  AdminReply r;
  const json::value* ok = o.if_contains("ok");
  if (!ok || !ok->is_bool()) {
    return refusal(admin_reason::kBadRequest, "reply without a boolean \"ok\"");
  }
  r.ok = ok->as_bool();
  if (!r.ok) {
    r.reason = stringOf(o, "reason");
    r.error = stringOf(o, "error");
    return r;
  }
  if (o.contains("ca_pem") || o.contains("env")) {
    TaskEnvironment e;
    e.policy = stringOf(o, "policy");
    e.caPem = stringOf(o, "ca_pem");
    if (const json::value* env = o.if_contains("env"); env && env->is_object()) {
      for (const auto& kv : env->as_object()) {
        if (kv.value().is_string()) e.env[std::string(kv.key())] = kv.value().as_string();
      }
    }
    if (const json::value* h = o.if_contains("hidden_paths"); h && h->is_array()) {
      for (const auto& v : h->as_array()) {
        if (v.is_string()) e.hiddenPaths.emplace_back(v.as_string());
      }
    }
    if (const json::value* k = o.if_contains("ssh_known_hosts"); k && k->is_string()) {
      e.sshKnownHosts = std::string(k->as_string());
    }
    if (const json::value* c = o.if_contains("capture"); c && c->is_object()) {
      const auto& co = c->as_object();
      auto ports = portsFromJson(co.if_contains("ports"));
      CaptureOffer offer{ports.value_or(std::vector<uint16_t>{}), stringOf(co, "ipv4_range"),
                         stringOf(co, "ipv6_range")};
      if (offer.ports.empty() || offer.ipv4Range.empty()) {
        return refusal(admin_reason::kBadRequest,
                       "reply with a \"capture\" lacking ports or an IPv4 range");
      }
      e.capture = std::move(offer);
    }
    r.environment = std::move(e);
  }
  if (const json::value* t = o.if_contains("traffic"); t && t->is_object()) {
    r.traffic = trafficFromJson(t->as_object());
  }
  if (const json::value* d = o.if_contains("dns"); d && d->is_object()) {
    r.dns = captureCountsFromJson(d->as_object());
  }
  if (const json::value* q = o.if_contains("questions"); q && q->is_array()) {
    r.questions = questionsFromJson(q->as_array());
  }
  return r;
}

}  // namespace sandgate::proxy
