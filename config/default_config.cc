// The built-in configuration of `sandgate run` (see default_config.h).
#include "config/default_config.h"

namespace sandgate::config {

const std::string& defaultConfigText() {
  static const std::string text = R"(# sandgate run's built-in config: package registries only.
policies:
  registries:
    allow:
      - host: registry.npmjs.org
      - host: pypi.org
      - host: files.pythonhosted.org
      - host: crates.io
      - host: static.crates.io
      - host: index.crates.io
      - host: proxy.golang.org
      - host: sum.golang.org
tasks:
  - name: default
    policy: registries
# The sandbox's limits (a config without this section gets the same). Raise them, or write
# `unlimited` for memory, pids, cpus, timeout or disk; --memory, --pids, --cpus, --timeout,
# --tmpfs-size, --workspace-mode and --disk override them for one run.
sandbox:
  memory: 4G            # the run's cgroup, tmpfs pages included
  pids: 1024            # processes and threads, the launcher's two helpers included
  cpus: unlimited       # e.g. 2 or 1.5 cores
  timeout: 2h           # wall clock, then SIGTERM, SIGKILL and exit 124
  tmpfs_size: 1G        # each of /tmp, /run and /dev/shm
  ro: []                # more host directories shown read-only, e.g. [/opt/toolchain]
  id_range: 2113929216-2113994751   # uids/gids of root-launched runs (0x7E000000 + 65536)
  workspace_mode: overlay   # or bind: the run writes the workspace itself
  disk: unlimited       # overlay mode: bound what a run writes to the workspace, e.g. 2G
)";
  return text;
}

Result<Config> defaultConfig() { return loadString(defaultConfigText(), "<embedded>"); }

}  // namespace sandgate::config
