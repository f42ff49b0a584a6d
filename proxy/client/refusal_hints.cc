// The hint table of every refusal reason (see refusal_hints.h).
#include "proxy/client/refusal_hints.h"

#include <utility>

#include "broker/store.h"
#include "policy/engine.h"
#include "policy/git_rules.h"
#include "proxy/client/reasons.h"
#include "proxy/identity/task_token.h"

namespace sandgate::proxy {
namespace {

namespace p = policy::reason;
namespace g = policy::reason;
namespace b = broker::reason;
namespace r = reason;
namespace t = token_reason;

// Said to the client, so it names configuration keys and commands, never a secret.
constexpr std::pair<std::string_view, std::string_view> kHints[] = {
    {p::kNoMatchingRule, "no rule of the task's policy allows this host: ask for a rule"},
    {p::kDeniedByRule, "a rule of the policy denies this host"},
    {p::kGlobalDeny, "the host is on the configuration's global deny list"},
    {p::kPortNotAllowed, "the rule for this host does not list this port in `ports`"},
    {p::kMethodNotAllowed, "the rule for this host does not list this method in `methods`"},
    {p::kPathNotAllowed, "the rule for this host does not list this path in `paths`"},
    {p::kPathAmbiguous,
     "send the path in normal form (no dot segments, ';', '\\' or encoded '/' or '\\')"},
    {p::kOverrideHeader, "send the request without method or URL override headers"},
    {p::kAddressDenied,
     "the host resolves to an address the policy never dials (private, "
     "loopback, link-local or denied)"},
    {p::kUnknownTask, "use a task that is in the configuration"},
    {p::kUnknownPolicy, "the task names a policy that is not in the configuration"},
    {p::kInvalidHost, "send a valid host name or address"},
    {p::kCredentialConflict, "two rules inject different credentials here: fix the policy"},
    {g::kGitRepositoryNotAllowed, "the rule's git.repositories does not list this repository"},
    {g::kGitFetchNotAllowed, "the rule has git.fetch: false"},
    {g::kGitRefNotAllowed, "push to a ref that git.push.refs allows"},
    {g::kGitRefDeleteNotAllowed, "the rule has git.push.delete false"},
    {g::kGitTagNotAllowed, "the rule has git.push.tags false"},
    {g::kGitProtocolError, "send a well-formed receive-pack command list"},
    {g::kGitArchiveNotAllowed, "the rule's git block needs archive: true for git archive"},
    {b::kCredentialUnavailable, "the credential's source could not be read: see serve's log"},
    {b::kCredentialHostMismatch, "send the credential's placeholder only to its own host"},
    {b::kCredentialRequiresTls, "use https:// for a request that carries a credential"},
    {b::kPlaceholderMisplaced,
     "send a placeholder only where its credential is injected, on a rule that names it"},
    {t::kMalformed, "send the token sandgate token issue printed, whole"},
    {t::kUnknownKey, "mint a new token with a key in the configuration's tokens.keys"},
    {t::kWrongAlgorithm, "mint the token with its key's algorithm (sandgate token issue)"},
    {t::kBadSignature, "mint a new token (sandgate token issue)"},
    {t::kExpired, "mint a new token for the task and open a new connection"},
    {t::kNotYetValid, "check the clocks of the minting host and this replica"},
    {t::kTtlTooLong, "mint a token that lives at most tokens.max_ttl"},
    {t::kRevoked, "mint a new token for the task and open a new connection"},
    {t::kWrongAudience, "mint the token with the configured tokens.audience"},
    {t::kWrongIssuer, "mint the token with the configured tokens.issuer"},
    {t::kUnknownTask, "mint a token for a task that is in the configuration"},
    {t::kTaskMismatch, "name the token's own task in Proxy-Authorization"},
    {t::kUnknownPolicy, "mint a token naming a policy that is in the configuration"},
    {t::kWidens, "mint a token whose claims stay within its task's policy and limits"},
    {t::kSourceMismatch, "use the token from the client address in its src claim"},
    {r::kAuthRequired, "use HTTPS_PROXY=http://TASK:TOKEN@host:port"},
    {r::kAuthInvalid, "check the task name and token"},
    {r::kTaskMismatch, "open a new connection for another task"},
    {r::kDeniedByToken, "mint a token whose `hosts` include this host (sandgate token issue)"},
    {r::kConnectionLimit, "raise limits.max_connections for the task, or close connections"},
    {r::kTunnelLimit, "raise limits.max_tunnels for the task, or close tunnels"},
    {r::kRateLimited, "raise limits.new_connections_per_second for the task, or slow down"},
    {r::kRateUnavailable, "state.redis is unreachable: try again later"},
    {r::kBudgetExceeded,
     "wait for the budget's window to refill (Retry-After), or raise the budget in `budgets`"},
    {r::kBudgetUnavailable, "the budget counters are unavailable: try again later"},
    {r::kModelNotAllowed, "use a model the rule's llm.models lists (and llm.prices prices)"},
    {r::kMaxTokensOverCap, "set max_tokens (or max_completion_tokens) at most the rule's cap"},
    {r::kLlmBodyTooLarge, "send a smaller request body"},
    {r::kLlmBodyUnreadable, "send one JSON object with each key once"},
    {r::kLlmBodyEncoded, "send the request body uncompressed"},
    {r::kApprovalTimeout,
     "ask the operator to answer in time (sandgate approve list), or for a policy rule"},
    {r::kApprovalDenied, "an operator refused this request: ask for a policy rule if it is needed"},
    {r::kApprovalQueueFull, "wait for the pending questions to be answered, then try again"},
    {r::kApprovalNeedsHttp1,
     "make the request over HTTP/1.1 so that it can be asked about, or ask for a policy rule"},
    {r::kBadRequestLine, "send a well-formed HTTP/1.1 request line"},
    {r::kBadHeader, "send well-formed header fields"},
    {r::kObsFold, "send each header field on one line"},
    {r::kAmbiguousFraming, "send Content-Length or Transfer-Encoding, not both"},
    {r::kBadContentLength, "send one decimal Content-Length"},
    {r::kBadTransferEncoding, "send Transfer-Encoding: chunked on HTTP/1.1 only"},
    {r::kBadTarget, "send a valid request target for the method"},
    {r::kBadScheme, "send http:// targets, or CONNECT for https"},
    {r::kBadAuthority, "send a valid host[:port]"},
    {r::kBadPort, "send a port from 1 to 65535"},
    {r::kHostMismatch, "send a Host that names the request's target"},
    {r::kMisdirectedRequest,
     "send requests for another host through a CONNECT of their own, in origin-form (/path)"},
    {r::kDuplicateHost, "send one Host field"},
    {r::kMissingHost, "send a Host field"},
    {r::kConnectWithBody, "send CONNECT without a body"},
    {r::kDuplicateProxyAuthorization, "send one Proxy-Authorization field"},
    {r::kNotProxyRequest, "set HTTP_PROXY/HTTPS_PROXY"},
    {r::kHeaderTooLarge, "send a smaller request head, or raise limits.max_header_bytes"},
    {r::kUpgradeNotSupported, "send the request without Upgrade"},
    {r::kTraceWithCredential, "send TRACE without a credential, or use another method"},
    {r::kNotSynthetic, "connect to the address the sandbox's DNS gave for the name"},
    {r::kBadChunkedBody, "send a well-formed chunked body"},
    {r::kRequestTrailers, "send the chunked body without trailer fields"},
    {r::kDnsFailed, "check the host name"},
    {r::kUpstreamRefused, "the upstream is not listening on this port"},
    {r::kUpstreamReset, "the upstream closed the connection: retry later"},
    {r::kUpstreamUnreachable, "the upstream cannot be reached from the proxy: retry later"},
    {r::kUpstreamBadResponse, "the upstream's response was malformed"},
    {r::kUpstreamTlsFailed, "the upstream's certificate did not verify (see upstream_tls)"},
    {r::kUpstreamTimeout, "the upstream did not answer in time: retry later"},
    {r::kResponseNotScrubbable, "ask with Accept-Encoding: identity (or gzip)"},
    {r::kWebsocketExtensionSelected,
     "the upstream must not select an extension the request did not offer"},
    {r::kProxyLoop, "send the request to its real host, not to the proxy"},
    {r::kInterceptionUnavailable, "the proxy has no interception CA: see serve's log"},
    {r::kParentRefused,
     "the parent proxy (upstream_proxies) refused it: ask its operator, or route the rule "
     "`via: direct`"},
    {r::kParentAuthFailed, "the parent proxy's credential is wrong or expired: see serve's config"},
    {r::kParentUnreachable, "the parent proxy is down or unreachable: see upstream_proxies"},
    {r::kSniMismatch, "send the CONNECT host as the TLS server name"},
    {r::kNotTls, "speak TLS in a tunnel to a TLS port"},
    {r::kBadClientHello, "send a valid TLS ClientHello"},
    {r::kClientTlsFailed, "trust the sandgate CA (SSL_CERT_FILE) in the client"},
    {r::kIdleTimeout, "open a new connection"},
    {r::kClientTimeout, "send the request sooner"},
    {r::kClientClosed, "keep the connection open until the response"},
    {r::kRevokedByReload, "the policy no longer allows this: open a new connection"},
    {r::kServerStopping, "connect again: this replica is stopping"},
    {r::kGitNeedsHttp1, "use HTTP/1.1 for Git (git -c http.version=HTTP/1.1)"},
    {r::kLlmNeedsHttp1, "connect again with HTTP/1.1"},
    {r::kGrpcNotScrubbable,
     "give the credential a placeholder (same-length redaction), or keep the secret out of the "
     "response"},
    {r::kH2ProtocolError, "send well-formed HTTP/2 (RFC 9113 section 8) within the limits"},
    {r::kSshShellRefused, "use git over SSH: the broker serves git commands only"},
    {r::kSshCommandRefused,
     "run git (clone, fetch, push) with a plain repository path: other commands are refused"},
    {r::kSshPtyRefused, "run git without a terminal (ssh -T)"},
    {r::kSshEnvRefused, "set no environment over SSH: the broker passes none"},
    {r::kSshSubsystemRefused, "use git over SSH: sftp and other subsystems are refused"},
    {r::kSshX11Refused, "connect without X11 forwarding (ssh -x)"},
    {r::kSshForwardingRefused, "connect without port forwarding: the broker carries git only"},
    {r::kSshAgentRefused, "connect without agent forwarding (ssh -a): the broker has the key"},
    {r::kSshRequestRefused, "send only git's exec request on the session"},
    {r::kSshChannelLimit, "open one session per connection"},
    {r::kSshSessionLimit, "close SSH sessions, or raise ssh.max_sessions_per_task"},
    {r::kSshProtocolError, "send nothing before the CONNECT's 200, then speak SSH"},
    {r::kUpstreamHostKeyMismatch,
     "pin the upstream's current host key in the credential's ssh.known_hosts, if it changed "
     "legitimately"},
    {r::kUpstreamAuthFailed, "give the upstream the credential's public key (a deploy key)"},
    {r::kUpstreamSshFailed, "check the upstream's SSH service and the credential's ssh.user"},
};

}  // namespace

std::string_view hintFor(std::string_view reason) {
  for (const auto& [token, hint] : kHints) {
    if (token == reason) return hint;
  }
  return {};
}

}  // namespace sandgate::proxy
