// The admin socket's protocol between `sandgate run --proxy unix:PATH` and `sandgate serve`:
// message encoding and decoding, the peer check and the descriptor checks. No I/O loop here.
//
// Transport: a SOCK_SEQPACKET Unix socket, one JSON object per packet (at most
// kMaxAdminMessage bytes), every message carrying "v": kAdminProtocolVersion. The launcher
// sends a request and waits for its reply; requests on one connection are answered in order.
//
//   {"v":1,"op":"task_env","task":"T"}  → {"v":1,"ok":true,"policy":"P","ca_pem":"…",
//                                          "env":{"VAR":"placeholder"},"hidden_paths":[…],
//                                          "capture":{"ports":[80,443],"ipv4_range":"…",
//                                                     "ipv6_range":"…"},
//                                          "ssh_known_hosts":"git.example.com ssh-ed25519 …\n"}
//   {"v":1,"op":"token_env","task":"T"} → {"v":1,"ok":true,"policy":"P","ca_pem":"…",
//                                          "env":{"VAR":"placeholder"}}
//   {"v":1,"op":"adopt","task":"T"} + SCM_RIGHTS listening sockets → {"v":1,"ok":true}
//   {"v":1,"op":"adopt_capture","task":"T","ports":[80,443],"ipv6":true}
//       + SCM_RIGHTS [DNS UDP, DNS TCP listening, capture listeners…] → {"v":1,"ok":true}
//   {"v":1,"op":"release"}               → {"v":1,"ok":true,"traffic":{…},"dns":{…}}
//   any failure                          → {"v":1,"ok":false,"reason":"token","error":"…"}
//
// Transparent capture: serve's config decides the synthetic ranges, and the launcher must
// route them before the sandbox exists, so task_env says which (and serve's capture ports);
// adopt_capture then hands over the sandbox's DNS stub sockets and capture listeners, served
// with the ranges that this connection's task_env named ("ports": the ports listened on, serve's
// and the launcher's own; "ipv6": whether AAAA is answered). "dns" in the release reply counts
// the stub's answers (present after an adopt_capture).
//
// Placeholders: each task_env makes the run's own, honoured only on what the same connection
// adopts after it for the same task, and gone with the run. token_env gives those of the
// task's token clients on serve's own listeners (one set per task for serve's life, which no
// run shares); it adopts nothing and offers no capture.
//
// Everything adopted belongs to the connection that handed it over: serve closes it on
// `release` or when the connection closes, whichever comes first (a launcher that dies cannot
// leave a sandbox's listeners — and with them its network namespace — open in serve).
// Nothing secret is ever sent: placeholders and the CA certificate are what the sandbox sees.
//
// Version 1 grows only by optional fields and new ops: a task_env reply without "capture"
// (an older serve) makes the launcher run without transparent capture, and an older serve
// refuses adopt_capture as an unknown op. A change that an older peer would misread needs a
// new version.
#pragma once

#include <sys/types.h>

#include <boost/json/array.hpp>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "proxy/capture_server/capture.h"
#include "proxy/observe/traffic.h"
#include "proxy/state/questions.h"

namespace sandgate::proxy {

inline constexpr int kAdminProtocolVersion = 1;
inline constexpr size_t kMaxAdminMessage = 256 * 1024;
inline constexpr size_t kMaxCapturePorts = 15;  // as sandbox::run allows
inline constexpr size_t kMaxRunIdBytes = 128;   // task_env's "run"
// Descriptors per message: adopt hands over two listeners, adopt_capture two DNS sockets and
// two listeners (IPv4, IPv6) per capture port.
inline constexpr size_t kMaxAdminFds = 2 + 2 * kMaxCapturePorts;

// The per-(host, port, kind, verdict, reason) entries as JSON objects with the keys host, port,
// kind, verdict, reason, count, bytes_up, bytes_down (the admin reply and run's --report).
boost::json::array trafficEntriesToJson(const std::vector<TrafficEntry>& entries);
// The DNS stub's counts as {answered, nodata, nxdomain, refused, notimp, pool_exhausted,
// malformed, names} (the release reply and run's --report).
boost::json::object captureCountsToJson(const CaptureCounts& counts);

// Stable reason tokens of a refused admin request.
namespace admin_reason {
inline constexpr std::string_view kBadRequest = "bad_request";
inline constexpr std::string_view kUnsupportedVersion = "unsupported_version";
inline constexpr std::string_view kPermissionDenied = "permission_denied";
inline constexpr std::string_view kUnknownTask = "unknown_task";
inline constexpr std::string_view kNotAListener = "not_a_listener";
inline constexpr std::string_view kUnavailable = "unavailable";  // shutting down, server error
// An adopted socket that a sandbox would not hand over: bound to an address other than
// loopback, living in serve's own network namespace, in another namespace than the rest of
// the connection's sockets, or in one serve cannot identify.
inline constexpr std::string_view kNotLoopback = "not_loopback";
inline constexpr std::string_view kServeNetns = "serve_netns";
inline constexpr std::string_view kMixedNetns = "mixed_netns";
inline constexpr std::string_view kNetnsUnknown = "netns_unknown";
}  // namespace admin_reason

// kQuestions and kAnswer: `sandgate approve` (admin_questions.h).
enum class AdminOp { kTaskEnv, kTokenEnv, kAdopt, kAdoptCapture, kRelease, kQuestions, kAnswer };

struct AdminRequest {
  AdminRequest(AdminOp op = AdminOp::kTaskEnv, std::string task = {})
      : op(op), task(std::move(task)) {}

  AdminOp op;
  std::string task;  // task_env, adopt, adopt_capture
  // task_env, optional: the run's id (its directory's name). Every audit line of the
  // connections this admin connection adopts names it (`run`); letters, digits, '.', '_', '-'.
  std::string run;
  // adopt_capture: the capture ports (1 to kMaxCapturePorts, none 0, 53 or repeated) and
  // whether the sandbox listens on its IPv6 range (then AAAA queries are answered).
  std::vector<uint16_t> ports;
  bool ipv6 = false;
  // answer: the question's id and the answer (once, run, always, deny).
  uint64_t questionId = 0;
  std::string answer;
};

// What serve's config says a sandbox must set up for transparent capture.
struct CaptureOffer {
  std::vector<uint16_t> ports;  // 80, 443 and transparent.ports
  std::string ipv4Range;        // the synthetic pools, CIDR
  std::string ipv6Range;
};

// What a sandbox of the task needs from serve: never a secret.
struct TaskEnvironment {
  std::string policy;
  std::string caPem;                       // sandgate's CA; empty without interception
  std::map<std::string, std::string> env;  // credential placeholders, VARIABLE → value
  std::vector<std::string> hiddenPaths;    // secret files, CA key, admin socket: hide them
  std::optional<CaptureOffer> capture;     // absent: serve cannot capture (an older serve)
  // task_env: the known_hosts a sandbox of the task trusts, naming serve's SSH broker key (its
  // public half) for the policy's SSH hosts; absent from an older serve (no ssh setup then).
  std::optional<std::string> sshKnownHosts;
};

struct AdminReply {
  bool ok = false;
  std::string reason;                          // admin_reason token when !ok
  std::string error;                           // human-readable, when !ok
  std::optional<TaskEnvironment> environment;  // task_env, token_env
  std::optional<TrafficSummary> traffic;       // release
  std::optional<CaptureCounts> dns;            // release, after adopt_capture
  std::optional<std::vector<QuestionInfo>> questions;  // questions, answer
};

std::string encodeRequest(const AdminRequest& request);
// Errors (Error::reason an admin_reason token): not JSON, wrong version, unknown op, missing
// or invalid task name, adopt_capture without valid ports.
Expected<AdminRequest> parseRequest(std::string_view message);

std::string encodeReply(const AdminReply& reply);
AdminReply errorReply(std::string_view reason, std::string error);
// The refusal of `error` (its reason an admin_reason token).
AdminReply errorReply(const Error& error);
// A reply that is not JSON or not version 1 is an Error, not a refused AdminReply.
Expected<AdminReply> parseReply(std::string_view message);

// Who is at the other end of an admin connection, as the kernel recorded it at connect():
// never looked up by uid in /etc/group, which lists groups a process may have dropped.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // the peer's supplementary groups (SO_PEERGROUPS)
};

// SO_PEERCRED and SO_PEERGROUPS of a connected Unix socket. Errors name the option and errno.
Result<PeerCredentials> peerCredentials(int fd);

// Root, or a process that holds `group` (as its gid or a supplementary group). Returns the
// reason for a refusal, nullopt when allowed.
std::optional<std::string> checkPeer(const PeerCredentials& peer, std::optional<gid_t> group);
// For a task with admin_groups: root, or a process that holds one of `allowed`. Returns the
// reason for a refusal, nullopt when allowed.
std::optional<std::string> checkTaskPeer(const PeerCredentials& peer, const std::string& task,
                                         const std::vector<gid_t>& allowed);

// A network namespace's identity: the device and inode of its nsfs file.
struct NetnsId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const NetnsId&) const = default;
};
// The calling thread's network namespace (/proc/thread-self/ns/net).
Result<NetnsId> ownNetns();
// The network namespace a socket lives in (ioctl SIOCGSKNS; the kernel allows it to a
// process with CAP_NET_ADMIN over that namespace, such as root).
Result<NetnsId> socketNetns(int fd);

// Why a descriptor a launcher handed over is refused: a reason token (admin_reason) and a
// message.
struct FdRefusal {
  std::string_view reason;
  std::string message;
};
// Why the socket `fd` (`what`, for the message) is not bound to 127.0.0.0/8 or ::1, or
// nullopt when it is.
std::optional<FdRefusal> checkLoopback(int fd, std::string_view what);
// Everything one admin connection adopts must come from one network namespace, the sandbox's,
// and never serve's own: a listener in serve's namespace would open a task's proxy (with its
// credentials) on the host's network. `first` is the namespace of what this connection
// adopted before (set here by the first call). nullopt when `fds` are acceptable.
std::optional<FdRefusal> checkSandboxNetns(const std::vector<int>& fds, const NetnsId& serve,
                                           std::optional<NetnsId>& first);

// Why `fd` cannot be adopted (not a socket, not SOCK_STREAM, not listening, not IPv4/IPv6),
// or nullopt when it is a listening TCP socket.
std::optional<std::string> checkListenerFd(int fd);
// Same for the DNS stub's UDP socket: a SOCK_DGRAM IPv4/IPv6 socket bound to a port.
std::optional<std::string> checkDatagramFd(int fd);
// The descriptors of adopt_capture, in order: the DNS UDP socket, the DNS TCP listener, then
// at least one and at most two (IPv4, IPv6) listeners per port of `ports`, each listening on
// one of them. Why not, or nullopt.
std::optional<std::string> checkCaptureFds(const std::vector<int>& fds,
                                           const std::vector<uint16_t>& ports);

}  // namespace sandgate::proxy
