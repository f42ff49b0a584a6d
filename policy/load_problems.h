// Every problem of a config that did not load, in one pass: the loader's and those the rule
// compiler finds in what could be read. Shared by the commands that load a config (policy lint
// and check, serve and its reload, run), so that none of them shows the host-pattern and
// expression errors only after the others are fixed.
#pragma once

#include "common/result.h"
#include "config/config.h"
#include "config/load_report.h"

namespace sandgate::policy {

// What Engine::compile() finds in a config the loader could read only in part (a LoadReport
// with errors): the errors of the rules that were read (host patterns, expressions, CIDRs,
// methods, paths, ties) and the warnings. Left out: what follows from a part the loader has
// already reported (a rule whose host could not be read, a reference to a policy or
// credential that is missing), which would only say the same thing twice. Never an Engine: a
// partial config is not served. (Defined in compiler.cc, next to compile().)
struct PartialReview {
  Diagnostics errors;
  Diagnostics warnings;
};
PartialReview reviewPartial(const config::Config& partial);

// `report`'s errors, followed by the errors reviewPartial() finds in its partial config (when
// there is one); its warnings go to `warnings` when given. Empty when the report has no
// errors (compile the config: Engine::compile reports its own).
Diagnostics loadProblems(const config::LoadReport& report, Diagnostics* warnings = nullptr);

}  // namespace sandgate::policy
