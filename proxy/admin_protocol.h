// The admin socket's protocol between `sandgate run --proxy unix:PATH` and `sandgate serve`:
// message encoding and decoding, the peer check and the listener check. No I/O loop here.
//
// Transport: a SOCK_SEQPACKET Unix socket, one JSON object per packet (at most
// kMaxAdminMessage bytes), every message carrying "v": kAdminProtocolVersion. The launcher
// sends a request and waits for its reply; requests on one connection are answered in order.
//
//   {"v":1,"op":"task_env","task":"T"}  → {"v":1,"ok":true,"policy":"P","ca_pem":"…",
//                                          "env":{"VAR":"placeholder"},"hidden_paths":[…]}
//   {"v":1,"op":"adopt","task":"T"} + SCM_RIGHTS listening sockets → {"v":1,"ok":true}
//   {"v":1,"op":"release"}               → {"v":1,"ok":true,"traffic":{…}}
//   any failure                          → {"v":1,"ok":false,"reason":"token","error":"…"}
//
// The adopted listeners belong to the connection that handed them over: serve closes them on
// `release` or when the connection closes, whichever comes first (a launcher that dies cannot
// leave a sandbox's listeners — and with them its network namespace — open in serve).
// Nothing secret is ever sent: placeholders and the CA certificate are what the sandbox sees.
#pragma once

#include <sys/types.h>

#include <boost/json/array.hpp>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "proxy/embedded.h"

namespace sandgate::proxy {

inline constexpr int kAdminProtocolVersion = 1;
inline constexpr size_t kMaxAdminMessage = 256 * 1024;
inline constexpr size_t kMaxAdminFds = 8;  // listeners per adopt (a sandbox hands over two)

// Stable reason tokens of a refused admin request.
// The per-(host, port, kind, verdict, reason) entries as JSON objects with the keys host, port,
// kind, verdict, reason, count, bytes_up, bytes_down (the admin reply and run's --report).
boost::json::array trafficEntriesToJson(const std::vector<TrafficEntry>& entries);

namespace admin_reason {
inline constexpr std::string_view kBadRequest = "bad_request";
inline constexpr std::string_view kUnsupportedVersion = "unsupported_version";
inline constexpr std::string_view kPermissionDenied = "permission_denied";
inline constexpr std::string_view kUnknownTask = "unknown_task";
inline constexpr std::string_view kNotAListener = "not_a_listener";
inline constexpr std::string_view kUnavailable = "unavailable";  // shutting down, server error
}  // namespace admin_reason

enum class AdminOp { kTaskEnv, kAdopt, kRelease };

struct AdminRequest {
  AdminOp op = AdminOp::kTaskEnv;
  std::string task;  // task_env, adopt
};

// What a sandbox of the task needs from serve: never a secret.
struct TaskEnvironment {
  std::string policy;
  std::string caPem;                       // sandgate's CA; empty without interception
  std::map<std::string, std::string> env;  // credential placeholders, VARIABLE → value
  std::vector<std::string> hiddenPaths;    // secret files, CA key, admin socket: hide them
};

struct AdminReply {
  bool ok = false;
  std::string reason;                          // admin_reason token when !ok
  std::string error;                           // human-readable, when !ok
  std::optional<TaskEnvironment> environment;  // task_env
  std::optional<TrafficSummary> traffic;       // release
};

std::string encodeRequest(const AdminRequest& request);
// Errors (message only, keyPath = reason token): not JSON, wrong version, unknown op,
// missing or invalid task name.
Result<AdminRequest> parseRequest(std::string_view message);

std::string encodeReply(const AdminReply& reply);
AdminReply errorReply(std::string_view reason, std::string error);
// A reply that is not JSON or not version 1 is a Diagnostic, not a refused AdminReply.
Result<AdminReply> parseReply(std::string_view message);

// Who is at the other end of an admin connection (SO_PEERCRED).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Root, or a member of `group` (its primary gid or one of `supplementary`). Returns the
// reason for a refusal, nullopt when allowed.
std::optional<std::string> checkPeer(const PeerCredentials& peer, std::optional<gid_t> group,
                                     const std::vector<gid_t>& supplementary);
// The groups /etc/group (or NSS) lists for `uid` (getgrouplist), empty when the uid has no
// passwd entry.
std::vector<gid_t> groupsOfUser(uid_t uid, gid_t primary);

// Why `fd` cannot be adopted (not a socket, not SOCK_STREAM, not listening, not IPv4/IPv6),
// or nullopt when it is a listening TCP socket.
std::optional<std::string> checkListenerFd(int fd);

}  // namespace sandgate::proxy
