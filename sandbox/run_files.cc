// The run's own files in the sandbox (see run_files.h): planned on the host, written and bound
// in the new mount namespace before the pivot.
#include "sandbox/run_files.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <fstream>
#include <sstream>

#include "common/safe_open.h"
#include "sandbox/mount_ops.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {

namespace {

std::string readHostFile(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  if (in) ss << in.rdbuf();
  return ss.str();
}

void writeReadOnly(const std::string& path, const std::string& text, mode_t mode = 0444) {
  mkdirs(path.substr(0, path.rfind('/')), 0755);
  int fd = checkSys(open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, mode),
                    "create " + path, "open");
  if (!safe_open::writeAll(fd, text)) {
    int err = errno;
    close(fd);
    throwSys("write " + path, "write", err);
  }
  close(fd);
}

// Binds `source` read-only over `target` (an existing regular file in the new root).
bool bindFileReadOnly(const std::string& source, const std::string& target, unsigned long extra,
                      const std::string& what, std::vector<std::string>* warnings) {
  struct stat st {};
  if (lstat(target.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    warnings->push_back(what + ": not a file that can be covered");
    return false;
  }
  checkSys(mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr), "bind " + what,
           "mount");
  checkSys(mount(nullptr, target.c_str(), nullptr,
                 MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | extra, nullptr),
           "remount " + what + " read-only", "mount");
  return true;
}

}  // namespace

std::string withEntry(const std::string& hostText, const std::string& name, unsigned id,
                      const std::string& entry, int idField) {
  std::string out;
  std::istringstream in(hostText);
  const std::string idText = std::to_string(id);
  for (std::string line; std::getline(in, line);) {
    // name:x:id:... — a line of the same name or the same id would be found first.
    std::vector<std::string> fields;
    size_t start = 0;
    for (size_t colon; (colon = line.find(':', start)) != std::string::npos; start = colon + 1) {
      fields.push_back(line.substr(start, colon - start));
    }
    fields.push_back(line.substr(start));
    if (!fields.empty() && fields[0] == name) continue;
    if (static_cast<int>(fields.size()) > idField && fields[idField] == idText) continue;
    out += line + "\n";
  }
  return out + entry + "\n";
}

void planRunFiles(const Options& options, FilesystemPlan* plan,
                  std::vector<std::string>* warnings) {
  // A rootless run keeps the launcher's name (its files on the host are that user's); a leased
  // uid, which no host database knows, is `sandbox`. The home is the sandbox's: OpenSSH reads
  // ~/.ssh from the passwd entry, not $HOME, and refuses to run for a uid without one.
  std::string name = kSandboxUserName;
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(plan->uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr &&
      found->pw_name != nullptr && *found->pw_name != '\0') {
    name = found->pw_name;
  }
  const std::string passwdEntry = name + ":x:" + std::to_string(plan->uid) + ":" +
                                  std::to_string(plan->gid) + ":sandgate run:" + plan->home +
                                  ":/bin/sh";
  plan->passwd = withEntry(readHostFile("/etc/passwd"), name, plan->uid, passwdEntry, 2);
  std::string group = readHostFile("/etc/group");
  bool hasGroup = false;
  {
    std::istringstream in(group);
    const std::string gidText = ":" + std::to_string(plan->gid) + ":";
    for (std::string line; std::getline(in, line);) {
      auto first = line.find(':');
      auto second = first == std::string::npos ? first : line.find(':', first + 1);
      if (second != std::string::npos && line.compare(second, gidText.size(), gidText) == 0) {
        hasGroup = true;
      }
    }
  }
  plan->group = hasGroup ? group
                         : withEntry(group, name, plan->gid,
                                     name + ":x:" + std::to_string(plan->gid) + ":", 2);
  plan->runFiles = options.runFiles;
  plan->homeFiles = options.homeFiles;
  if (options.showSandgate) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    struct stat st {};
    if (n > 0 && (self[n] = '\0', stat(self, &st) == 0) && S_ISREG(st.st_mode)) {
      plan->sandgateBinary.assign(self, static_cast<size_t>(n));
    } else {
      warnings->push_back(std::string("the sandgate binary cannot be found (/proc/self/exe): ") +
                          kSandgateInSandbox + " is missing, and ssh's ProxyCommand fails");
    }
  }
}

void installRunFiles(const std::string& newRoot, const FilesystemPlan& plan,
                     std::vector<std::string>* warnings) {
  const std::string dir = newRoot + "/run/sandgate";
  for (const auto& [rel, text] : plan.runFiles) writeReadOnly(dir + "/" + rel, text);
  for (const auto& [rel, text] : plan.homeFiles) {
    const std::string path = newRoot + plan.home + "/" + rel;
    mkdirs(path.substr(0, path.rfind('/')), 0700);
    writeReadOnly(path, text, 0600);
  }
  if (!plan.passwd.empty()) {
    writeReadOnly(dir + "/passwd", plan.passwd);
    bindFileReadOnly(dir + "/passwd", newRoot + "/etc/passwd", MS_NOEXEC, "/etc/passwd", warnings);
  }
  if (!plan.group.empty()) {
    writeReadOnly(dir + "/group", plan.group);
    bindFileReadOnly(dir + "/group", newRoot + "/etc/group", MS_NOEXEC, "/etc/group", warnings);
  }
  if (!plan.sandgateBinary.empty()) {
    const std::string target = newRoot + kSandgateInSandbox;
    writeReadOnly(target, "", 0555);
    bindFileReadOnly(kOld + plan.sandgateBinary, target, 0, kSandgateInSandbox, warnings);
  }
}

}  // namespace sandgate::sandbox
