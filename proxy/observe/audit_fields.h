// Field names of the canonical JSON audit line: the one list that the writer, the docs and
// the tests share, so that a renamed field is a compile error rather than a silent change.
#pragma once

#include <string_view>

namespace sandgate::proxy::field {

inline constexpr std::string_view kTime = "time";  // RFC 3339 UTC, milliseconds
// forward | tunnel | intercept | websocket | refusal | dns (proxy/observe/audit.h, audit_kind)
inline constexpr std::string_view kKind = "kind";
// "<connection_id>-<n>": the n-th request of its client connection (a tunnel's own line is
// the CONNECT's); the `x-request-id` of a refusal.
inline constexpr std::string_view kRequestId = "request_id";
// 16 hex digits, random per client connection: every line of one connection carries it, so a
// tunnel's line and the requests inside it join on it.
inline constexpr std::string_view kConnectionId = "connection_id";
// The run (`sandgate run`'s id) whose sandbox made the connection: null for serve's own
// listeners' clients; set on listeners a run handed to serve (`run --proxy`).
inline constexpr std::string_view kRun = "run";
inline constexpr std::string_view kTask = "task";          // null when the client is unidentified
inline constexpr std::string_view kClient = "client";      // peer "ip:port"
inline constexpr std::string_view kListener = "listener";  // local "ip:port" or listener name
// "proxy" (the client sent a proxy request) or "transparent" (a connection to a synthetic
// address, or a query to the sandbox's DNS stub).
inline constexpr std::string_view kMode = "mode";
inline constexpr std::string_view kMethod = "method";  // kind dns: the query type ("A", "AAAA")
inline constexpr std::string_view kScheme = "scheme";
inline constexpr std::string_view kHost = "host";
inline constexpr std::string_view kPort = "port";  // number; 0 when unknown
inline constexpr std::string_view kPath = "path";  // null when not visible (tunnels)
inline constexpr std::string_view kVerdict = "verdict";
inline constexpr std::string_view kReason = "reason";
inline constexpr std::string_view kRule = "rule";              // "file:line"; null for default deny
inline constexpr std::string_view kCredential = "credential";  // credential name; null: none
inline constexpr std::string_view kInjected = "injected";      // bool: a secret went upstream
inline constexpr std::string_view kStatus = "status";     // HTTP status sent to the client; 0: none
inline constexpr std::string_view kBytesUp = "bytes_up";  // client → upstream
inline constexpr std::string_view kBytesDown = "bytes_down";  // upstream → client
// Milliseconds as a number with microsecond resolution (e.g. 12.345): what a person reading
// the log expects; Prometheus histograms use seconds.
inline constexpr std::string_view kDuration = "duration_ms";
// The address dialled, "ip:port"; kind dns: the synthetic address answered (nothing is dialled).
inline constexpr std::string_view kUpstream = "upstream";
// The parent proxy (upstream_proxies[].name) the upstream leg went through, or was last tried
// when it failed; null: direct. Its address and credential are never written.
inline constexpr std::string_view kParent = "parent";
inline constexpr std::string_view kError = "error";  // null when none
// null, or {"repository", "service", "refs": [{"ref", "old", "new", "reason"}]} for a Git
// smart-HTTP request under a rule's `git:` block (proxy/exchange/git_gate.h).
inline constexpr std::string_view kGit = "git";
inline constexpr std::string_view kGitRepository = "repository";
inline constexpr std::string_view kGitService = "service";
inline constexpr std::string_view kGitRefs = "refs";
inline constexpr std::string_view kGitRef = "ref";
inline constexpr std::string_view kGitOld = "old";
inline constexpr std::string_view kGitNew = "new";
// null, or {"name", "window", "metric", "used", "limit"}: the budget that refused the request
// (reason budget_exceeded or budget_unavailable; budget/meter.h).
inline constexpr std::string_view kBudget = "budget";
inline constexpr std::string_view kBudgetName = "name";
inline constexpr std::string_view kBudgetWindow = "window";
inline constexpr std::string_view kBudgetMetric = "metric";
inline constexpr std::string_view kBudgetUsed = "used";
inline constexpr std::string_view kBudgetLimit = "limit";
// null, or {"model", "input_tokens", "output_tokens", "spend", "usage"} for an LLM call under a
// rule's `llm:` (proxy/exchange/llm_gate.h): spend is in llm.prices.currency (a decimal string,
// exact), usage "reported" (the upstream's usage), "reserve" (none came: a stream cut short,
// or unreadable usage, settled at the worst case reserved before the call) or "none" (no call
// ran: the upstream answered with an error status, or the request never reached it).
inline constexpr std::string_view kLlm = "llm";
inline constexpr std::string_view kLlmModel = "model";
inline constexpr std::string_view kLlmInputTokens = "input_tokens";
inline constexpr std::string_view kLlmOutputTokens = "output_tokens";
inline constexpr std::string_view kLlmSpend = "spend";
inline constexpr std::string_view kLlmUsage = "usage";
// bool: admitted without being counted, because the shared budget counters (state.redis with
// `fail: open`) could not answer.
inline constexpr std::string_view kBudgetFailOpen = "budget_fail_open";
// null, or {"id", "answer", "by_uid", "by_user"} for a request held under on_unknown: ask
// (proxy/state/questions.h): the question's id; the answer "once", "run", "always", "deny",
// "timeout", "queue_full" or "remembered" (an earlier run/always answer); who answered (the
// admin socket peer's uid and user name; null when nobody did).
inline constexpr std::string_view kApproval = "approval";
inline constexpr std::string_view kApprovalId = "id";
inline constexpr std::string_view kApprovalAnswer = "answer";
inline constexpr std::string_view kApprovalByUid = "by_uid";
inline constexpr std::string_view kApprovalByUser = "by_user";

}  // namespace sandgate::proxy::field
