// Rendering of Diagnostic and Error.
#include "common/result.h"

#include <fmt/format.h>

namespace sandgate {

std::string Diagnostic::str() const {
  std::string out;
  if (!file.empty()) {
    out += file;
    if (line > 0) out += fmt::format(":{}", line);
    if (line > 0 && col > 0) out += fmt::format(":{}", col);
    out += ": ";
  }
  if (!keyPath.empty()) out += keyPath + ": ";
  out += message;
  return out;
}

std::string joinDiagnostics(const Diagnostics& errors) {
  std::string out;
  for (const auto& e : errors) {
    if (!out.empty()) out += '\n';
    out += e.str();
  }
  return out;
}

std::string Error::str() const {
  if (reason.empty()) return message;
  return fmt::format("{} ({})", message, reason);
}

}  // namespace sandgate
