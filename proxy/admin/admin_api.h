// The admin HTTP API on the metrics listener, for an orchestrator (never a sandbox: nothing
// of it is reachable from one, and its token and mint key are hidden from sandboxes like
// credential files). Off unless the config has `metrics.admin_api`; then every /v1/ request
// must carry `Authorization: Bearer <the token in token_file>` (compared by SHA-256 in
// constant time):
//   POST /v1/tokens  {"task", "policy"?, "ttl"? (seconds; default 3600), "hosts"?, "src"?,
//                    "limits"?} -> 200 {"token", "claims"}: a task token signed with the key
//                    metrics.admin_api.mint names (403 minting_not_configured without it)
//   GET  /v1/tasks   -> 200 {"tasks": [{name, policy, connections, tunnels, max_connections,
//                    max_tunnels}], "adhoc": [{name, connections, tunnels}]}: this replica's
//   POST /v1/revoke  {"jti"} -> 200 {"revoked"}: this replica refuses tokens with that jti
//                    (token_revoked) until its next reload; tokens.revoked is what lasts
// Refusals are JSON {"error", "reason"}: 400 bad_request, 401 admin_auth_required or
// admin_auth_invalid (with WWW-Authenticate: Bearer), 403 minting_not_configured, 404
// admin_api_off or not_found, 405 method_not_allowed (with Allow).
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "config/config.h"
#include "proxy/identity/admin_api_keys.h"

namespace sandgate::proxy {

struct Snapshot;

using ApiRequest = boost::beast::http::request<boost::beast::http::string_body>;
using ApiResponse = boost::beast::http::response<boost::beast::http::string_body>;

// Answers one request whose path starts with /v1/, on `snap` at Unix time `now`.
ApiResponse handleAdminApi(const ApiRequest& req, const Snapshot& snap, int64_t now);

}  // namespace sandgate::proxy
