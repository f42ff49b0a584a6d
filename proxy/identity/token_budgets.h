// The `budgets` claim of a task token: budgets the token's connections are measured against
// besides the task's (config `budgets:`), in the same shape
// ({"name", "window", "requests", "request_bytes", "response_bytes", "input_tokens",
// "output_tokens", "spend"}, spend an exact decimal string as in the config). A token may only
// narrow: a budget under a name the task already has keeps that budget's window and may only
// lower its limits (it is the same counter with a lower limit); a new name adds a budget,
// counted for the task like its own. A claim that is not exactly this shape makes the token
// malformed: refused rather than read as "no budget".
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"

namespace sandgate::proxy {

// At most this many budgets in one claim: each one is work on every request.
inline constexpr size_t kMaxTokenBudgets = 16;

// The claim's budgets; nullopt, with why, for anything else.
std::optional<std::vector<config::Budget>> parseTokenBudgets(const boost::json::value& v,
                                                             std::string* why);

// `task`'s budgets narrowed by the token's: nullopt when they only narrow (`task` is then the
// result), else why the token would widen them (token_widens).
std::optional<std::string> narrowBudgets(std::vector<config::Budget>& task,
                                         const std::vector<config::Budget>& token);

// The claim for `budgets` (sandgate token issue, describe).
boost::json::array budgetsJson(const std::vector<config::Budget>& budgets);

}  // namespace sandgate::proxy
