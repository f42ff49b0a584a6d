// The audit log: one canonical JSON line per request, tunnel or refusal, appended with a
// single write(2) so that a crash loses at most the lines in flight.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "proxy/observe/outcome.h"

namespace sandgate::proxy {

// Values of AuditRecord::kind.
namespace audit_kind {
inline constexpr std::string_view kForward = "forward";
inline constexpr std::string_view kTunnel = "tunnel";
inline constexpr std::string_view kIntercept = "intercept";  // a request inside intercepted TLS
// An intercepted request that the upstream switched to WebSocket (status 101): the line is
// written when the WebSocket ends; bytes are the frames relayed each way, and an idle end has
// reason idle_timeout. Frames are not scrubbed.
inline constexpr std::string_view kWebsocket = "websocket";
inline constexpr std::string_view kRefusal = "refusal";  // refused before any upstream
inline constexpr std::string_view kDns = "dns";          // a DNS stub answer (transparent mode)
}  // namespace audit_kind

// A Git smart-HTTP request under a rule's `git:` block: the repository, the endpoint and, for
// a push, each command with its verdict ("allowed" or a git_* reason token).
struct GitRefAudit {
  std::string ref, oldId, newId, reason;
};
struct GitAudit {
  std::string repository;  // "acme/widgets"
  std::string service;     // upload-pack-refs | receive-pack-refs | upload-pack | receive-pack
  std::vector<GitRefAudit> refs;
};

// The budget a request was refused by (or measured against): its name, window, what it counts,
// what the window had used and the limit.
struct BudgetAudit {
  std::string name, window, metric;
  int64_t used = 0, limit = 0;
};

// An LLM call's accounting: the model asked for and what it was charged.
struct LlmAudit {
  std::string model;
  int64_t inputTokens = 0, outputTokens = 0;
  int64_t spendMicros = 0;  // millionths of llm.prices.currency
  // "reported": the upstream's usage; "reserve": none came (a stream cut short, a count that
  // is not one), settled at the worst case; "none": no call ran (an error status, no request).
  std::string usage = "reserve";
};

// What one audit line says. There is deliberately no field for headers, bodies, tokens or
// credentials: a secret cannot reach the audit log because the record has nowhere to put it.
// Callers must not put one in `error` or `path` either (a query string is excluded from
// `path` for that reason: it may carry an API key).
// How a held request's question was answered (field::kApproval).
struct ApprovalAudit {
  uint64_t id = 0;     // 0: no question was asked (remembered, queue_full)
  std::string answer;  // once, run, always, deny, timeout, queue_full, remembered
  std::optional<uint32_t> byUid;
  std::string byUser;
};

struct AuditRecord {
  std::chrono::system_clock::time_point time;  // start of the request/tunnel
  std::string kind;                            // a value of audit_kind
  std::string requestId, connectionId, run;    // see audit_fields.h
  std::string task, client, listener;
  std::string mode = "proxy";  // or "transparent"
  std::string method, scheme, host;
  uint16_t port = 0;
  std::string path;  // empty when not visible
  Outcome verdict = Outcome::kNone;
  std::string reason, rule;
  std::string credential;  // the credential's name (never its value), when one was involved
  bool injected = false;   // a credential was injected into the upstream request
  int status = 0;
  uint64_t bytesUp = 0, bytesDown = 0;
  double durationSeconds = 0;
  std::string upstream, error;
  std::string parent;           // the parent proxy (upstream_proxies) the upstream leg went through
  std::optional<GitAudit> git;  // the "git" field: null unless a Git request under `git:`
  std::optional<BudgetAudit> budget;  // the "budget" field: null unless a budget refused it
  // The "llm" field: null unless an LLM call was accounted (exchange/llm_gate.h).
  std::optional<LlmAudit> llm;
  // budget_fail_open: admitted although the shared budget counters (state.redis, fail: open)
  // could not count it.
  bool budgetFailOpen = false;
  // The "approval" field: null unless the request was held and asked about (on_unknown: ask).
  std::optional<ApprovalAudit> approval;
};

// Appends audit lines to a file (or stdout). Thread-safe.
//
// Line format (field names in proxy/observe/audit_fields.h, always in this order, always present):
//   {"time":"2024-05-01T12:00:00.123Z","kind":"forward","task":"demo",...,"error":null}
// Empty strings are written as null ("not known / not applicable"); duration is
// milliseconds. The output is valid JSON for any input bytes: quote, backslash, every C0
// and C1 control character, DEL, U+2028 and U+2029 are \u-escaped, and each byte that is
// not part of a well-formed UTF-8 sequence becomes U+FFFD. `path` and `error` are cut to
// kMaxFieldBytes so that no client can make a line unbounded.
class AuditLog {
 public:
  static constexpr size_t kMaxFieldBytes = 8192;
  static constexpr size_t kMaxGitRefs = 64;  // refs of one push listed in the "git" field

  // nullopt: stdout (never closed by us). Otherwise the file is opened with
  // O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC, following no symbolic link in any component
  // (common/safe_open.h: a link is refused, also on reopen()); a file we create gets mode 0640
  // regardless of the umask, an existing file keeps its mode. The parent directory is not
  // created: a missing directory is a Diagnostic naming it (keyPath "audit.path").
  static Result<std::shared_ptr<AuditLog>> open(const std::optional<std::string>& path);

  // Writes to `fd` (taken; closed with the log). reopen() is a no-op: there is no path.
  static std::shared_ptr<AuditLog> adopt(int fd);

  // Formats `r` and appends it with one write(2) (retried on EINTR; a short write is
  // completed before any other line starts). A failed write is counted in writeErrors()
  // and logged at warn (once per run of failures); it never throws.
  void write(const AuditRecord& r);

  // For log rotation (SIGHUP): opens the path again and swaps the descriptor. Returns the
  // reason when that fails, in which case the old descriptor stays in use. No-op on stdout.
  std::optional<Diagnostic> reopen();

  uint64_t writeErrors() const { return writeErrors_.load(std::memory_order_relaxed); }

  // The complete line for `r`, including the trailing '\n'.
  static std::string format(const AuditRecord& r);

  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

 private:
  AuditLog(int fd, bool ownsFd, std::optional<std::string> path);

  std::mutex mu_;  // one line at a time, and the descriptor swap in reopen()
  int fd_;
  const bool ownsFd_;
  const std::optional<std::string> path_;
  bool failing_ = false;  // guarded by mu_: the last write failed (log once per run)
  std::atomic<uint64_t> writeErrors_{0};
};

}  // namespace sandgate::proxy
