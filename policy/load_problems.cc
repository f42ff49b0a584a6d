// loadProblems(): the loader's errors and the rule compiler's, together (see load_problems.h).
#include "policy/load_problems.h"

namespace sandgate::policy {

Diagnostics loadProblems(const config::LoadReport& report, Diagnostics* warnings) {
  if (report.errors.empty()) return {};
  Diagnostics out = report.errors;
  if (report.config) {
    auto review = reviewPartial(*report.config);
    out.insert(out.end(), review.errors.begin(), review.errors.end());
    if (warnings) warnings->insert(warnings->end(), review.warnings.begin(), review.warnings.end());
  }
  return out;
}

}  // namespace sandgate::policy
