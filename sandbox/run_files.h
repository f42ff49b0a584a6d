// Files the run adds to the sandbox's view: its own /etc/passwd and /etc/group entries (so that
// the leased uid has a name and a home, which OpenSSH's client requires), files under
// /run/sandgate (the run's ssh config and known_hosts), files in the home, and the sandgate
// binary itself at kSandgateInSandbox (the sandbox's ProxyCommand).
#pragma once

#include <string>
#include <vector>

#include "sandbox/filesystem.h"

namespace sandgate::sandbox {

// Where the sandbox finds the sandgate binary (Options::showSandgate).
inline constexpr const char* kSandgateInSandbox = "/run/sandgate/bin/sandgate";
// The user name of a leased uid (a rootless run keeps the launcher's own name).
inline constexpr const char* kSandboxUserName = "sandbox";

// The host's passwd (or group) text with every line for `id` or named `name` replaced by
// `entry` (appended once). Lines are kept as they are otherwise.
std::string withEntry(const std::string& hostText, const std::string& name, unsigned id,
                      const std::string& entry, int idField);

// Launcher side, once plan->uid/gid/home are set: the passwd and group texts (the run's uid
// named, its home plan->home, so `id -un`, ssh and git find themselves), options.runFiles and
// options.homeFiles, and the binary to show when options.showSandgate (/proc/self/exe, resolved;
// a warning when it cannot be found).
void planRunFiles(const Options& options, FilesystemPlan* plan, std::vector<std::string>* warnings);

// Sandbox side, before the pivot into `newRoot` (with /run/sandgate and the home made):
// writes the files read-only (0444), binds passwd and group over /etc's, and binds the binary
// read-only (nosuid, nodev) at kSandgateInSandbox. What cannot be covered is a warning.
void installRunFiles(const std::string& newRoot, const FilesystemPlan& plan,
                     std::vector<std::string>* warnings);

}  // namespace sandgate::sandbox
