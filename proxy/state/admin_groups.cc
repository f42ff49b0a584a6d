// Resolving the config's group names (see admin_groups.h).
#include "proxy/state/admin_groups.h"

#include <fmt/format.h>
#include <grp.h>

#include <charconv>
#include <cstring>
#include <vector>

namespace sandgate::proxy {

Result<gid_t> resolveAdminGroup(const std::string& file, const config::Located<std::string>& g,
                                const std::string& keyPath) {
  auto fail = [&](std::string message) {
    return Diagnostic{file, g.mark.line, g.mark.col, keyPath, std::move(message)};
  };
  unsigned long number = 0;
  auto [end, ec] = std::from_chars(g.value.data(), g.value.data() + g.value.size(), number);
  if (ec == std::errc() && end == g.value.data() + g.value.size()) {
    if (number > 0xfffffffeUL) return fail(fmt::format("gid {} is out of range", g.value));
    return static_cast<gid_t>(number);
  }
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  int rc = ::getgrnam_r(g.value.c_str(), &gr, buf.data(), buf.size(), &found);
  if (rc != 0 || !found) {
    return fail(fmt::format("no group named '{}'{}", g.value,
                            rc != 0 ? fmt::format(" ({})", std::strerror(rc)) : ""));
  }
  return found->gr_gid;
}

}  // namespace sandgate::proxy
