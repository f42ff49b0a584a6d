// The refusal status of the reason tokens that other layers own: the policy's
// (policy/engine.h), the broker's (broker/store.h) and task tokens' (identity/task_token.h).
// With reasons.h's catalogue it gives every token sent to a client one status
// (reasonStatus()); README.md's "Refusals" lists each row as it is here
// (tests/layout/test_rooms.py).
#pragma once

#include <string_view>

#include "broker/store.h"
#include "policy/engine.h"
#include "proxy/client/reasons.h"
#include "proxy/identity/task_token.h"

namespace sandgate::proxy {

inline constexpr ReasonInfo kDecisionReasons[] = {
    // The policy's decision (403: the request is understood and not allowed).
    {policy::reason::kNoMatchingRule, 403, "no rule of the task's policy allows the host"},
    {policy::reason::kDeniedByRule, 403, "a deny rule matches the request"},
    {policy::reason::kGlobalDeny, 403, "the host is on the configuration's global deny list"},
    {policy::reason::kPortNotAllowed, 403, "the allowing rule does not list the port"},
    {policy::reason::kMethodNotAllowed, 403, "the allowing rule does not list the method"},
    {policy::reason::kPathNotAllowed, 403, "the allowing rule does not list the path"},
    {policy::reason::kPathAmbiguous, 403,
     "a path not in normal form (dot segments, `;`, `\\`, encoded `/`) where a rule has paths"},
    {policy::reason::kOverrideHeader, 403,
     "a method or URL override header (or `_method`) where a rule has methods or paths"},
    {policy::reason::kAddressDenied, 403,
     "the host is or resolves to an address sandgate never dials (private, loopback, metadata)"},
    {policy::reason::kUnknownTask, 403, "a listener's task that is not in the configuration"},
    {policy::reason::kUnknownPolicy, 403, "the task names a policy that is not in the configuration"},
    {policy::reason::kInvalidHost, 403, "a host that is not a valid name or address"},
    {policy::reason::kCredentialConflict, 403, "two rules inject different credentials here"},
    // The broker's.
    {broker::reason::kCredentialUnavailable, 502, "the credential's source could not be read"},
    {broker::reason::kCredentialHostMismatch, 403,
     "a credential's placeholder sent to a host outside the credential's hosts"},
    {broker::reason::kCredentialRequiresTls, 403,
     "a credential would be injected into plain HTTP"},
    {broker::reason::kPlaceholderMisplaced, 403,
     "a placeholder outside the one place its credential is injected, or on a rule that does "
     "not name it"},
    // Task tokens (407: what the proxy needs is a valid token; checked again before every
    // request on a kept-alive or intercepted connection).
    {token_reason::kMalformed, 407, "a task token that does not parse, or is over 8 KB"},
    {token_reason::kUnknownKey, 407, "a token signed by a key (kid) the configuration lacks"},
    {token_reason::kWrongAlgorithm, 407, "a token whose alg is not its key's"},
    {token_reason::kBadSignature, 407, "a token whose signature does not verify"},
    {token_reason::kExpired, 407, "a token past its exp (with the leeway)"},
    {token_reason::kNotYetValid, 407, "a token before its nbf or iat"},
    {token_reason::kTtlTooLong, 407, "a token living longer than tokens.max_ttl"},
    {token_reason::kRevoked, 407, "a token whose jti is revoked"},
    {token_reason::kWrongAudience, 407, "a token without the configured tokens.audience"},
    {token_reason::kWrongIssuer, 407, "a token without the configured tokens.issuer"},
    {token_reason::kUnknownTask, 407, "a token for a task that is not in the configuration"},
    {token_reason::kTaskMismatch, 407, "a token for another task than the one named"},
    {token_reason::kUnknownPolicy, 407, "a token naming a policy that is not in the configuration"},
    {token_reason::kWidens, 407, "a token whose claims widen its task's policy or limits"},
    {token_reason::kSourceMismatch, 407, "a token used from another source address than its claim"},
};

}  // namespace sandgate::proxy
