// The admin HTTP API (POST /v1/tokens, GET /v1/tasks, POST /v1/revoke; see admin_api.h).
#include "proxy/admin/admin_api.h"

#include <fmt/format.h>

#include <boost/beast/http/field.hpp>
#include <boost/json.hpp>

#include "broker/secret.h"
#include "policy/ip.h"
#include "proxy/identity/task_token.h"
#include "proxy/session/token_task.h"
#include "proxy/state/snapshot.h"

namespace sandgate::proxy {

namespace http = boost::beast::http;
namespace json = boost::json;

namespace {

ApiResponse jsonResponse(const ApiRequest& req, http::status status, const json::value& body) {
  ApiResponse res{status, 11};
  res.keep_alive(req.keep_alive());
  res.set(http::field::server, "sandgate");
  res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");  // minted tokens must not be cached
  res.body() = json::serialize(body) + "\n";
  res.prepare_payload();
  return res;
}

// A refusal: {"error": a sentence, "reason": a stable token}.
ApiResponse refusal(const ApiRequest& req, http::status status, std::string_view reason,
                    std::string error) {
  ApiResponse res = jsonResponse(req, status, json::object{{"error", error}, {"reason", reason}});
  if (status == http::status::unauthorized) {
    res.set(http::field::www_authenticate, "Bearer realm=\"sandgate-admin\"");
  }
  return res;
}

ApiResponse badRequest(const ApiRequest& req, std::string error) {
  return refusal(req, http::status::bad_request, "bad_request", std::move(error));
}

// The request body as a JSON object, or why not.
std::optional<json::object> bodyObject(const ApiRequest& req, std::string* why) {
  boost::system::error_code ec;
  json::value v = json::parse(req.body(), ec);
  if (ec || !v.is_object()) {
    *why = "the body must be a JSON object";
    return std::nullopt;
  }
  return std::move(v.as_object());
}

const json::string* stringField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? &v->as_string() : nullptr;
}

ApiResponse mint(const ApiRequest& req, const Snapshot& snap, const AdminApiKeys& keys,
                 int64_t now) {
  if (!keys.mint || !snap.tokens) {
    return refusal(req, http::status::forbidden, "minting_not_configured",
                   "this replica has no key to mint with (metrics.admin_api.mint)");
  }
  std::string why;
  auto body = bodyObject(req, &why);
  if (!body) return badRequest(req, why);
  for (const auto& [key, value] : *body) {
    if (key != "task" && key != "policy" && key != "ttl" && key != "hosts" && key != "src" &&
        key != "limits" && key != "jti") {
      return badRequest(req, fmt::format("unknown field `{}` (task, policy, ttl, hosts, src, "
                                         "limits, jti)",
                                         std::string_view(key).substr(0, 64)));
    }
  }
  TokenRequest r;
  const json::string* task = stringField(*body, "task");
  if (!task || task->empty()) return badRequest(req, "`task` (a string) is required");
  r.task = std::string(*task);
  if (body->contains("policy")) {
    const json::string* p = stringField(*body, "policy");
    if (!p) return badRequest(req, "`policy` must be a string");
    r.policy = std::string(*p);
  }
  // The token must name a task this config has, or a policy for an ad-hoc task.
  if (!snap.config.findTask(r.task) && !(r.policy && snap.config.policies.count(*r.policy))) {
    return badRequest(req, r.policy ? "`policy` names no policy of this configuration"
                                    : "`task` names no task of this configuration, and no "
                                      "`policy` makes it an ad-hoc task");
  }
  if (const json::value* ttl = body->if_contains("ttl")) {
    if (!ttl->is_int64() || ttl->as_int64() <= 0) {
      return badRequest(req, "`ttl` must be a whole number of seconds above 0");
    }
    r.ttlSeconds = ttl->as_int64();
  }
  if (const json::value* hosts = body->if_contains("hosts")) {
    if (!hosts->is_array()) return badRequest(req, "`hosts` must be a list of strings");
    for (const auto& h : hosts->as_array()) {
      if (!h.is_string()) return badRequest(req, "`hosts` must be a list of strings");
      r.hosts.emplace_back(h.as_string());
    }
  }
  if (body->contains("src")) {
    const json::string* src = stringField(*body, "src");
    if (!src) return badRequest(req, "`src` must be a string (an IP address or CIDR)");
    r.src = std::string(*src);
  }
  if (body->contains("jti")) {
    const json::string* jti = stringField(*body, "jti");
    if (!jti || jti->empty()) return badRequest(req, "`jti` must be a non-empty string");
    r.jti = std::string(*jti);
  }
  if (const json::value* limits = body->if_contains("limits")) {
    auto parsed = parseTokenLimits(*limits, &why);
    if (!parsed) return badRequest(req, "`limits` " + why);
    r.limits = *parsed;
  }
  if (snap.config.tokens) {
    r.audience = snap.config.tokens->audience;
    r.issuer = snap.config.tokens->issuer;
  }
  const std::string claims = claimsFor(r, now);
  auto token = mintToken(keys.mint->algorithm, keys.mint->kid, keys.mint->key->reveal(), claims);
  if (!token) {
    return refusal(req, http::status::internal_server_error, "mint_failed",
                   token.errors().front().message);
  }
  // Checked as every replica will check it: a ttl over max_ttl is refused now, not later.
  TokenCheck check = snap.tokens->verify(token.value(), now);
  if (!check.ok()) {
    return badRequest(
        req, fmt::format("the token would be refused ({}): {}", check.reason, check.detail));
  }
  // And bound as a replica binds it (the same code): a `pol` other than a configured task's,
  // `hosts` outside its policy or `limits` above its own would be minted, then refused by
  // every replica. A `src` is judged from an address inside it.
  std::optional<policy::IpAddress> from;
  if (r.src) from = policy::parseIp(r.src->substr(0, r.src->find('/')));
  TokenTask bound = taskForToken(snap, check.claims, r.task, from, now, /*dryRun=*/true);
  if (!bound.ok()) {
    return badRequest(
        req, fmt::format("the token would be refused ({}): {}", bound.reason, bound.detail));
  }
  return jsonResponse(req, http::status::ok,
                      json::object{{"token", token.value()}, {"claims", json::parse(claims)}});
}

ApiResponse tasks(const ApiRequest& req, const Snapshot& snap) {
  json::array configured;
  for (const auto& t : snap.config.tasks) {
    const TaskEntry* e = snap.findTask(t.name);
    if (!e) continue;
    configured.push_back(json::object{{"name", t.name},
                                      {"policy", t.policy.value},
                                      {"connections", e->state->connections()},
                                      {"tunnels", e->state->tunnels()},
                                      {"max_connections", e->limits.maxConnections},
                                      {"max_tunnels", e->limits.maxTunnels}});
  }
  json::array adhoc;
  if (snap.adhocStates) {
    for (const auto& [name, state] : snap.adhocStates->list()) {
      adhoc.push_back(json::object{
          {"name", name}, {"connections", state->connections()}, {"tunnels", state->tunnels()}});
    }
  }
  return jsonResponse(req, http::status::ok,
                      json::object{{"tasks", std::move(configured)}, {"adhoc", std::move(adhoc)}});
}

ApiResponse revoke(const ApiRequest& req, const Snapshot& snap) {
  if (!snap.tokens) {
    return refusal(req, http::status::forbidden, "tokens_not_configured",
                   "this configuration has no tokens: section, so no task token to revoke");
  }
  std::string why;
  auto body = bodyObject(req, &why);
  if (!body) return badRequest(req, why);
  const json::string* jti = stringField(*body, "jti");
  if (!jti || jti->empty() || jti->size() > 256) {
    return badRequest(req, "`jti` (a string of 1 to 256 bytes) is required");
  }
  if (!snap.tokens->revoke(std::string(*jti))) {
    return refusal(req, http::status::service_unavailable, "revocations_full",
                   "too many revocations since the last reload: add them to tokens.revoked");
  }
  return jsonResponse(req, http::status::ok,
                      json::object{{"revoked", *jti}, {"until", "the next reload"}});
}

}  // namespace

ApiResponse handleAdminApi(const ApiRequest& req, const Snapshot& snap, int64_t now) {
  if (!snap.adminApi) {
    return refusal(req, http::status::not_found, "admin_api_off",
                   "the admin API is off (metrics.admin_api in the config turns it on)");
  }
  // Authentication before anything else, so that an unauthenticated caller learns nothing
  // about which paths exist.
  std::string_view auth = req[http::field::authorization];
  if (auth.empty()) {
    return refusal(req, http::status::unauthorized, "admin_auth_required",
                   "send Authorization: Bearer <the admin token>");
  }
  constexpr std::string_view kBearer = "bearer ";
  const bool bearer = auth.size() > kBearer.size() &&
                      std::equal(kBearer.begin(), kBearer.end(), auth.begin(), [](char a, char b) {
                        return a == (b >= 'A' && b <= 'Z' ? b - 'A' + 'a' : b);
                      });
  // Hashed and compared in constant time either way.
  const bool matches = tokenMatches(bearer ? auth.substr(kBearer.size()) : std::string_view(),
                                    snap.adminApi->tokenSha256);
  if (!bearer || !matches) {
    return refusal(req, http::status::unauthorized, "admin_auth_invalid",
                   "the admin token is not the one in metrics.admin_api.token_file");
  }
  std::string_view target = req.target();
  target = target.substr(0, target.find('?'));
  struct Route {
    std::string_view path;
    http::verb method;
  };
  static constexpr Route kRoutes[] = {{"/v1/tokens", http::verb::post},
                                      {"/v1/tasks", http::verb::get},
                                      {"/v1/revoke", http::verb::post}};
  for (const auto& route : kRoutes) {
    if (target != route.path) continue;
    if (req.method() != route.method) {
      ApiResponse res =
          refusal(req, http::status::method_not_allowed, "method_not_allowed",
                  fmt::format("{} takes {} only", route.path, http::to_string(route.method)));
      res.set(http::field::allow, http::to_string(route.method));
      return res;
    }
    if (route.path == "/v1/tokens") return mint(req, snap, *snap.adminApi, now);
    if (route.path == "/v1/tasks") return tasks(req, snap);
    return revoke(req, snap);
  }
  return refusal(req, http::status::not_found, "not_found",
                 "no such admin path (/v1/tokens, /v1/tasks, /v1/revoke)");
}

}  // namespace sandgate::proxy
