// `sandgate run [flags] -- CMD [ARG...]`: argument parsing only; the work is in run/run_task.

#include <memory>
#include <string>

#include "cli/commands.h"
#include "run/run_task.h"

namespace sandgate::cli {

void addRunCommand(CLI::App& app, Action* action) {
  auto req = std::make_shared<run::RunRequest>();
  auto* cmd = app.add_subcommand(
      "run",
      "Run a command in a sandbox whose only network is sandgate's proxy (embedded, or a "
      "running `sandgate serve` with --proxy). Exit "
      "status: the command's; 124 timeout, 125 setup failed, 2 usage or config error. Audit "
      "lines go to the run's audit.jsonl and audit.path (stderr with --audit-stderr)");
  cmd->add_option("--config,-c", req->configPath,
                  "Configuration file (default: a built-in config allowing package registries)");
  auto* task =
      cmd->add_option("--task", req->task, "Task to run as (default: the only task, or 'default')");
  cmd->add_option("--policy", req->policy, "Run under an ad-hoc task bound to this policy")
      ->excludes(task);
  cmd->add_option("--proxy", req->proxy,
                  "unix:PATH: hand the sandbox to the `sandgate serve` whose listen.admin is "
                  "PATH (needs --task; the task and its audit log are serve's)");
  cmd->add_option("--workspace", req->workspace,
                  "The command's working directory (default: the current one)");
  cmd->add_option("--workspace-mode", req->workspaceMode,
                  "overlay: the workspace is a read-only lower layer and the run writes its own "
                  "upper layer (review with sandgate show/diff, then apply or discard); bind: the "
                  "run writes the workspace itself (default: sandbox.workspace_mode, overlay)");
  cmd->add_flag("--allow-root-workspace", req->allowRootWorkspace,
                "Bind mode as root: allow a root-owned workspace (files the run writes are "
                "root's on the host; no setuid/setgid bit or file capability is ever left)");
  cmd->add_option("--disk", req->disk,
                  "Bound what the run writes to the workspace, e.g. 1G, or unlimited (overlay "
                  "mode: an upper layer on a tmpfs of that size, counted in --memory; ENOSPC "
                  "beyond it; default: sandbox.disk, unlimited)");
  auto* resume = cmd->add_option(
      "--resume", req->resume,
      "Continue an earlier run (id or directory): a new run, with new namespaces, placeholders "
      "and identity, under the current policy, whose workspace holds that run's files");
  cmd->add_option("--from", req->from,
                  "Like --resume, leaving the earlier run as it is (several runs may branch "
                  "from one)")
      ->excludes(resume);
  cmd->add_option("--run-dir", req->runDir,
                  "The run's directory, new, outside the workspace (default: "
                  "$XDG_STATE_HOME/sandgate/runs/ID, /var/lib/sandgate/runs/ID as root)");
  cmd->add_option("--memory", req->memory,
                  "Memory limit, e.g. 2G, or unlimited (default: sandbox.memory, 4G)");
  cmd->add_option("--cpus", req->cpus,
                  "CPU limit in cores, e.g. 1.5, or unlimited (default: sandbox.cpus, unlimited)");
  cmd->add_option("--pids", req->pids,
                  "Maximum number of processes, or unlimited (default: sandbox.pids, 1024)");
  cmd->add_option("--timeout", req->timeout,
                  "Wall-clock limit, e.g. 30m, or unlimited (then exit 124; default: "
                  "sandbox.timeout, 2h)");
  cmd->add_option("--tmpfs-size", req->tmpfsSize,
                  "Size of each of /tmp, /run and /dev/shm (default: sandbox.tmpfs_size, 1G)");
  // One value per occurrence: a vector option would otherwise take `--` as the end of its own
  // list, and the command's arguments after it (sh -c ...) would be read as flags.
  cmd->add_option("--ro", req->readOnly,
                  "Also show this host directory read-only (repeatable; added to sandbox.ro)")
      ->allow_extra_args(false);
  cmd->add_option("--env", req->env, "NAME=VALUE for the command (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--report", req->reportPath, "Write a JSON summary of the run here");
  cmd->add_flag("--allow-unenforced", req->allowUnenforced,
                "Run even if a requested limit cannot be enforced (a default one only warns)");
  cmd->add_flag("!--no-transparent", req->transparent,
                "Only HTTP_PROXY/HTTPS_PROXY: no DNS stub, no capture of direct connections");
  cmd->add_option("--capture-port", req->capturePorts,
                  "Also capture direct connections to this port (repeatable; 80 and 443 always)")
      ->allow_extra_args(false);
  cmd->add_flag("--learn", req->learn,
                "Learning run: allow what the policy refuses for want of a rule (never a deny "
                "rule or a private/metadata address, never with a credential), then draft "
                "policy.learned.yaml and its tests in the run's directory");
  cmd->add_flag("--ask", req->ask,
                "Hold what the policy refuses for want of a rule and ask on this terminal "
                "(/dev/tty): y allows once, a always, n (or anything else) denies");
  cmd->add_flag("--audit-stderr", req->auditStderr,
                "Also write the audit lines to stderr as they happen (whole lines, one write each; "
                "a line the command writes in pieces may be split by one). Default: only the "
                "run's audit.jsonl and audit.path, and a summary at the end");
  cmd->add_option("command", req->argv, "CMD [ARG...] (after --)")->required();
  cmd->callback([req, action] { *action = [req]() -> int { return run::runTask(*req); }; });
}

}  // namespace sandgate::cli
