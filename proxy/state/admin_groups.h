// Group names in the config (listen.admin_group, tasks[].admin_groups) as gids.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/result.h"
#include "config/config.h"

namespace sandgate::proxy {

// The gid of a group (a name, or a number) written in `file` at `keyPath` (listen.admin_group,
// tasks[i].admin_groups[j]); a Diagnostic at its file:line when no such group exists.
Result<gid_t> resolveAdminGroup(const std::string& file, const config::Located<std::string>& group,
                                const std::string& keyPath = "listen.admin_group");

}  // namespace sandgate::proxy
