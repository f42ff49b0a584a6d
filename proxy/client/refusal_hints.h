// What to change for each refusal reason: the `hint` of a refusal's JSON body when the code that
// refuses has nothing more precise to say. A program (or an agent) reading a refusal gets a
// next step for every reason, not an empty string.
#pragma once

#include <string_view>

namespace sandgate::proxy {

// The hint for `reason` (any layer's token: the proxy's, the policy's, git's, the broker's);
// empty only for a token no catalogue knows.
std::string_view hintFor(std::string_view reason);

}  // namespace sandgate::proxy
