// Rendering of Diagnostic.
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

}  // namespace sandgate
