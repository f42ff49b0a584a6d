// Every reason token of the request path, in one catalogue: the X-Sandgate-Reason of a
// refusal, the `reason` of an audit line and of sandgate_requests_total. Stable: clients,
// alerts and tests match on them. The other layers keep their own: the policy's in
// policy/engine.h, the broker's in broker/store.h, task tokens' in identity/task_token.h, the
// admin socket's in admin/admin_protocol.h; decision_reasons.h gives the first three their
// status. Each token has one status (reasonStatus()). README.md's "Refusals" lists them all.
#pragma once

#include <span>
#include <string_view>

namespace sandgate::proxy {

namespace reason {
// Identity and admission.
inline constexpr std::string_view kAuthRequired = "auth_required";
inline constexpr std::string_view kAuthInvalid = "auth_invalid";
inline constexpr std::string_view kTaskMismatch = "task_mismatch";
inline constexpr std::string_view kDeniedByToken = "denied_by_token";
inline constexpr std::string_view kConnectionLimit = "connection_limit";
inline constexpr std::string_view kTunnelLimit = "tunnel_limit";
inline constexpr std::string_view kRateLimited = "rate_limited";
// state.redis holds the task's shared rate and cannot answer (fail: closed).
inline constexpr std::string_view kRateUnavailable = "rate_limit_unavailable";
// Budgets (budget/meter.h, exchange/budget_gate.h).
inline constexpr std::string_view kBudgetExceeded = "budget_exceeded";
inline constexpr std::string_view kBudgetUnavailable = "budget_unavailable";
// LLM calls under a rule's `llm:` (exchange/llm_gate.h).
inline constexpr std::string_view kModelNotAllowed = "model_not_allowed";
inline constexpr std::string_view kMaxTokensOverCap = "max_tokens_over_cap";
inline constexpr std::string_view kLlmBodyTooLarge = "llm_body_too_large";
inline constexpr std::string_view kLlmBodyUnreadable = "llm_body_unreadable";
inline constexpr std::string_view kLlmBodyEncoded = "llm_body_encoded";
// on_unknown: ask (state/questions.h): a held request that no operator approved.
inline constexpr std::string_view kApprovalTimeout = "approval_timeout";
inline constexpr std::string_view kApprovalDenied = "approval_denied";
inline constexpr std::string_view kApprovalQueueFull = "approval_queue_full";
inline constexpr std::string_view kApprovalNeedsHttp1 = "approval_needs_http1";
// The request head (http_validation.h).
inline constexpr std::string_view kBadRequestLine = "bad_request_line";
inline constexpr std::string_view kBadHeader = "bad_header";
inline constexpr std::string_view kObsFold = "obs_fold";
inline constexpr std::string_view kAmbiguousFraming = "ambiguous_framing";
inline constexpr std::string_view kBadContentLength = "bad_content_length";
inline constexpr std::string_view kBadTransferEncoding = "bad_transfer_encoding";
inline constexpr std::string_view kBadTarget = "bad_target";
inline constexpr std::string_view kBadScheme = "bad_scheme";
inline constexpr std::string_view kBadAuthority = "bad_authority";
inline constexpr std::string_view kBadPort = "bad_port";
inline constexpr std::string_view kHostMismatch = "host_mismatch";
inline constexpr std::string_view kMisdirectedRequest = "misdirected_request";
inline constexpr std::string_view kDuplicateHost = "duplicate_host";
inline constexpr std::string_view kMissingHost = "missing_host";
inline constexpr std::string_view kConnectWithBody = "connect_with_body";
inline constexpr std::string_view kDuplicateProxyAuthorization = "duplicate_proxy_authorization";
inline constexpr std::string_view kNotProxyRequest = "not_a_proxy_request";
inline constexpr std::string_view kHeaderTooLarge = "header_too_large";
inline constexpr std::string_view kUpgradeNotSupported = "upgrade_not_supported";
inline constexpr std::string_view kTraceWithCredential = "trace_with_credential";
inline constexpr std::string_view kNotSynthetic = "not_a_synthetic_address";
// The request body (chunked_framing.h).
inline constexpr std::string_view kBadChunkedBody = "bad_chunked_body";
inline constexpr std::string_view kRequestTrailers = "request_trailers";
// Upstreams.
inline constexpr std::string_view kDnsFailed = "dns_failed";
inline constexpr std::string_view kUpstreamRefused = "upstream_refused";
inline constexpr std::string_view kUpstreamReset = "upstream_reset";
inline constexpr std::string_view kUpstreamUnreachable = "upstream_unreachable";
inline constexpr std::string_view kUpstreamBadResponse = "upstream_bad_response";
inline constexpr std::string_view kUpstreamTlsFailed = "upstream_tls_failed";
inline constexpr std::string_view kUpstreamTimeout = "upstream_timeout";
inline constexpr std::string_view kResponseNotScrubbable = "response_not_scrubbable";
inline constexpr std::string_view kWebsocketExtensionSelected = "websocket_extension_selected";
inline constexpr std::string_view kProxyLoop = "proxy_loop";
inline constexpr std::string_view kInterceptionUnavailable = "interception_unavailable";
// Parent proxies (upstream_proxies): what the parent said about the upstream leg, never its body.
inline constexpr std::string_view kParentRefused = "parent_refused";
inline constexpr std::string_view kParentAuthFailed = "parent_auth_failed";
inline constexpr std::string_view kParentUnreachable = "parent_unreachable";
// Ends of tunnels and connections (audit only: the 200 has been sent, or nobody is left).
inline constexpr std::string_view kSniMismatch = "sni_mismatch";
inline constexpr std::string_view kNotTls = "not_tls";
inline constexpr std::string_view kBadClientHello = "bad_client_hello";
inline constexpr std::string_view kClientTlsFailed = "client_tls_failed";
inline constexpr std::string_view kIdleTimeout = "idle_timeout";
inline constexpr std::string_view kClientTimeout = "client_timeout";
inline constexpr std::string_view kClientClosed = "client_closed";
inline constexpr std::string_view kRevokedByReload = "revoked_by_reload";
inline constexpr std::string_view kServerStopping = "server_stopping";
// HTTP/2 (proxy/h2/).
inline constexpr std::string_view kGitNeedsHttp1 = "git_needs_http1";
inline constexpr std::string_view kLlmNeedsHttp1 = "llm_needs_http1";
inline constexpr std::string_view kGrpcNotScrubbable = "grpc_not_scrubbable";
inline constexpr std::string_view kH2ProtocolError = "h2_protocol_error";
// The SSH broker (proxy/ssh/): what it refused on the sandbox's SSH session (a message on the
// channel's stderr and an exit status, or the request's failure reply), and the upstream leg.
inline constexpr std::string_view kSshShellRefused = "ssh_shell_refused";
inline constexpr std::string_view kSshCommandRefused = "ssh_command_refused";
inline constexpr std::string_view kSshPtyRefused = "ssh_pty_refused";
inline constexpr std::string_view kSshEnvRefused = "ssh_env_refused";
inline constexpr std::string_view kSshSubsystemRefused = "ssh_subsystem_refused";
inline constexpr std::string_view kSshX11Refused = "ssh_x11_refused";
inline constexpr std::string_view kSshForwardingRefused = "ssh_forwarding_refused";
inline constexpr std::string_view kSshAgentRefused = "ssh_agent_forwarding_refused";
inline constexpr std::string_view kSshRequestRefused = "ssh_request_refused";
inline constexpr std::string_view kSshChannelLimit = "ssh_channel_limit";
inline constexpr std::string_view kSshSessionLimit = "ssh_session_limit";
inline constexpr std::string_view kSshProtocolError = "ssh_protocol_error";
inline constexpr std::string_view kUpstreamHostKeyMismatch = "upstream_host_key_mismatch";
inline constexpr std::string_view kUpstreamAuthFailed = "upstream_auth_failed";
inline constexpr std::string_view kUpstreamSshFailed = "upstream_ssh_failed";
}  // namespace reason

struct ReasonInfo {
  std::string_view token;
  int status;  // the refusal's status; 0: audit only (nothing is sent)
  std::string_view meaning;
};

// The catalogue, in the order above.
inline constexpr ReasonInfo kRequestReasons[] = {
    {reason::kAuthRequired, 407, "no Proxy-Authorization on a listener that needs one"},
    {reason::kAuthInvalid, 407, "unknown task, or a token that does not match it"},
    {reason::kTaskMismatch, 407, "a later request on the connection names another task"},
    {reason::kDeniedByToken, 403, "the host is outside the task token's `hosts`"},
    {reason::kConnectionLimit, 429, "the task has limits.max_connections open"},
    {reason::kTunnelLimit, 429, "the task has limits.max_tunnels open"},
    {reason::kRateLimited, 429, "more new connections per second than the task may open"},
    {reason::kRateUnavailable, 503,
     "the task's shared rate (state.redis) cannot be counted now (refused closed)"},
    {reason::kBudgetExceeded, 429, "one of the task's `budgets` has no room left in its window"},
    {reason::kBudgetUnavailable, 503, "the budget counters cannot answer (refused closed)"},
    {reason::kModelNotAllowed, 403,
     "an LLM call for a model outside its rule's `llm.models`, or without a price under a spend "
     "budget"},
    {reason::kMaxTokensOverCap, 403,
     "an LLM call asking for more output tokens than its rule's `llm.max_tokens`, or for none "
     "while a cap is set"},
    {reason::kLlmBodyTooLarge, 413, "an LLM call whose body is over 8 MiB (it is read whole)"},
    {reason::kLlmBodyUnreadable, 400,
     "an LLM call whose body is not one JSON object read one way (not JSON, a repeated key, a "
     "second document, a bad model or token count), or whose framing is broken"},
    {reason::kLlmBodyEncoded, 415,
     "an LLM call with a Content-Encoding (compressed bodies are not read)"},
    {reason::kApprovalTimeout, 403,
     "on_unknown: ask: no operator answered the held request within ask.timeout"},
    {reason::kApprovalDenied, 403, "on_unknown: ask: an operator denied the held request"},
    {reason::kApprovalQueueFull, 429,
     "on_unknown: ask: the task already has ask.max_pending questions waiting (or the question "
     "its maximum of requests)"},
    {reason::kApprovalNeedsHttp1, 421,
     "on_unknown: ask: an HTTP/2 request the policy does not allow (requests are held and asked "
     "about on HTTP/1.1 only)"},
    {reason::kBadRequestLine, 400, "a malformed request line, or a bare CR or LF in the head"},
    {reason::kBadHeader, 400, "a malformed header field"},
    {reason::kObsFold, 400, "a folded (obs-fold) header line"},
    {reason::kAmbiguousFraming, 400, "Content-Length and Transfer-Encoding together"},
    {reason::kBadContentLength, 400, "a Content-Length that is not one decimal number"},
    {reason::kBadTransferEncoding, 400,
     "a Transfer-Encoding that does not end in one chunked, or in HTTP/1.0"},
    {reason::kBadTarget, 400, "a request target that is not a valid URI for its method"},
    {reason::kBadScheme, 400, "an absolute-form target with a scheme other than http"},
    {reason::kBadAuthority, 400, "a target or Host authority that does not parse"},
    {reason::kBadPort, 400, "a port that is not a number from 1 to 65535"},
    {reason::kHostMismatch, 400, "Host names another target than the request line"},
    {reason::kMisdirectedRequest, 421,
     "inside an intercepted tunnel, a request for another host than the CONNECT's (its Host, or "
     "a target not in origin-form)"},
    {reason::kDuplicateHost, 400, "more than one Host field"},
    {reason::kMissingHost, 400, "an HTTP/1.1 request (other than CONNECT) without Host"},
    {reason::kConnectWithBody, 400, "a CONNECT announcing a body"},
    {reason::kDuplicateProxyAuthorization, 400, "more than one Proxy-Authorization field"},
    {reason::kNotProxyRequest, 400, "an origin-form request sent to the proxy"},
    {reason::kHeaderTooLarge, 431, "a request head over limits.max_header_bytes"},
    {reason::kUpgradeNotSupported, 400,
     "an intercepted request upgrading to another protocol "
     "than websocket"},
    {reason::kTraceWithCredential, 405,
     "TRACE or TRACK on a request that would carry a "
     "credential (they echo it back)"},
    {reason::kNotSynthetic, 0, "a captured connection to an address the DNS stub never gave"},
    {reason::kBadChunkedBody, 400,
     "a chunked request body with malformed framing (chunk size, extension, line ends)"},
    {reason::kRequestTrailers, 400, "a chunked request with trailer fields (none are relayed)"},
    {reason::kDnsFailed, 502, "the name did not resolve"},
    {reason::kUpstreamRefused, 502, "the upstream refused the connection"},
    {reason::kUpstreamReset, 502, "the upstream closed or reset the connection"},
    {reason::kUpstreamUnreachable, 502,
     "no address could be dialled (unreachable, or every address failed)"},
    {reason::kUpstreamBadResponse, 502, "the upstream's response could not be read"},
    {reason::kUpstreamTlsFailed, 502, "TLS to the upstream failed or its certificate is wrong"},
    {reason::kUpstreamTimeout, 504,
     "the name, the connection or the response did not come in time"},
    {reason::kResponseNotScrubbable, 502, "a response in a coding sandgate cannot scrub"},
    {reason::kWebsocketExtensionSelected, 502,
     "a WebSocket 101 selecting an extension sandgate did not offer"},
    {reason::kProxyLoop, 403, "the target is sandgate itself"},
    {reason::kInterceptionUnavailable, 502, "the rule needs interception, which is unavailable"},
    {reason::kParentRefused, 502,
     "the parent proxy refused the upstream leg (403, an error status, or a SOCKS5 failure)"},
    {reason::kParentAuthFailed, 502, "the parent proxy refused sandgate's credential (407)"},
    {reason::kParentUnreachable, 502,
     "no parent proxy of the chain could be reached, or it answered with something unreadable"},
    {reason::kSniMismatch, 0, "the TLS server name is not the CONNECT host"},
    {reason::kNotTls, 0, "a TLS tunnel that did not start with TLS"},
    {reason::kBadClientHello, 0, "a ClientHello that does not parse"},
    {reason::kClientTlsFailed, 0, "the TLS handshake with the client failed"},
    {reason::kIdleTimeout, 0, "a tunnel idle for limits.idle_timeout"},
    {reason::kClientTimeout, 0,
     "the client sent nothing in time (inside a request head, a body or a ClientHello; an idle "
     "keep-alive connection is closed without a line)"},
    {reason::kClientClosed, 0,
     "the client went away mid-request (inside a head, with the bytes it had sent in `error`, "
     "or a body); a close between requests is no request"},
    {reason::kRevokedByReload, 403,
     "a reload removed the task, or no longer allows the tunnel's host (a tunnel is closed)"},
    {reason::kServerStopping, 0,
     "an SSH session still open when serve stopped, after limits.shutdown_grace"},
    {reason::kGitNeedsHttp1, 421, "an HTTP/2 request under a git: rule (Git is gated on HTTP/1.1)"},
    {reason::kLlmNeedsHttp1, 421,
     "an HTTP/2 request under an llm: rule (LLM calls are read on HTTP/1.1)"},
    {reason::kGrpcNotScrubbable, 502,
     "a gRPC response whose secrets could not be scrubbed without changing its lengths"},
    {reason::kH2ProtocolError, 0,
     "an HTTP/2 stream reset, or connection ended by GOAWAY: a frame, header block or flood "
     "HTTP/2 or the limits forbid"},
    {reason::kSshShellRefused, 0,
     "an SSH shell: only git commands are served (stderr message, exit status 1)"},
    {reason::kSshCommandRefused, 0,
     "an SSH exec that is not git-upload-pack, git-receive-pack (or an allowed git-upload-archive) "
     "with a plain repository path"},
    {reason::kSshPtyRefused, 0, "an SSH pty request (refused; the session goes on)"},
    {reason::kSshEnvRefused, 0, "an SSH env request (refused; the session goes on)"},
    {reason::kSshSubsystemRefused, 0, "an SSH subsystem (sftp) request"},
    {reason::kSshX11Refused, 0, "SSH X11 forwarding"},
    {reason::kSshForwardingRefused, 0, "SSH port forwarding (direct-tcpip, tcpip-forward)"},
    {reason::kSshAgentRefused, 0, "an SSH agent channel"},
    {reason::kSshRequestRefused, 0,
     "another SSH channel request (agent forwarding's auth-agent-req among them)"},
    {reason::kSshChannelLimit, 0, "a second SSH session channel on one connection"},
    {reason::kSshSessionLimit, 0, "the task has ssh.max_sessions_per_task SSH sessions open"},
    {reason::kSshProtocolError, 0, "the sandbox's SSH handshake failed or timed out"},
    {reason::kUpstreamHostKeyMismatch, 0,
     "the upstream SSH host key is not one the credential's known_hosts pins (fails closed)"},
    {reason::kUpstreamAuthFailed, 0, "the upstream refused the credential's SSH key"},
    {reason::kUpstreamSshFailed, 0, "the upstream SSH handshake or channel failed"},
};

inline constexpr std::span<const ReasonInfo> requestReasons() { return kRequestReasons; }

// The one status of a catalogued refusal reason (this catalogue and decision_reasons.h's);
// 0 for an audit-only token, -1 for a token in neither. Every refusal is sent with it.
int reasonStatus(std::string_view token);

}  // namespace sandgate::proxy
